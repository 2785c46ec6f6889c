"""Start the replicas of one CustomJob (or one tuning trial) as processes, watch them, stop them.

Every replica runs in its own session (process group): Ctrl-C in the terminal reaches only the runner, which
then stops each group with SIGTERM (what Vertex sends on preemption) and SIGKILL after a grace period, so no
process is left behind. On Linux the replicas also get PR_SET_PDEATHSIG so they die if the runner is killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from jobs.local import environment
from jobs.local.spec import JobSpec
from trainer.contract import HP_METRIC_FILE, WORKER_POOLS

GRACE_S = 10.0
# What Compute Engine gives a Spot VM it preempts: SIGTERM (ACPI soft off), then 30 s before it is stopped.
SPOT_GRACE_S = 30.0


def _load_prctl():
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()  # resolved in the parent: the child between fork and exec should only call it


def _die_with_parent() -> None:
    _PRCTL(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@dataclass
class Replica:
    name: str  # workerpool0-0
    proc: subprocess.Popen
    log_path: Path
    returncode: int | None = None
    # What started it, so that a preempted replica restarts exactly as it started (same AIP_* dirs and ports).
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    log_offset: int = 0  # where the current attempt's lines start in its log


@dataclass(frozen=True)
class Stopped:
    """How one replica ended when it was stopped: its exit status, and whether SIGKILL had to end it."""

    name: str
    returncode: int | None
    killed: bool
    seconds: float


@dataclass
class JobRun:
    """One running job: its replicas, their logs, and how it ended."""

    replicas: list[Replica]
    started: float
    timeout_s: float | None
    failure: str = ""  # one line: which replica failed and where its log is
    failed_log: Path | None = None
    returncode: int | None = None

    @property
    def chief_log(self) -> Path:
        return self.replicas[0].log_path

    def poll(self) -> int | None:
        """None while running; else 0 when every replica succeeded, or the first failing replica's status."""
        if self.returncode is not None:
            return self.returncode
        for rep in self.replicas:
            if rep.returncode is None:
                rep.returncode = rep.proc.poll()
            if rep.returncode not in (None, 0):
                # One failed replica fails the job, as on Vertex: the others are stopped.
                self.failure = f"{rep.name} exited with status {rep.returncode}; log: {rep.log_path}"
                self.failed_log = rep.log_path
                self.terminate()
                self.returncode = rep.returncode if rep.returncode > 0 else 128 - rep.returncode
                return self.returncode
        if self.timeout_s and time.monotonic() - self.started > self.timeout_s:
            self.failure = f"exceeded scheduling.timeout of {self.timeout_s:.0f}s; log: {self.chief_log}"
            self.terminate()
            self.returncode = 124
            return self.returncode
        if all(rep.returncode == 0 for rep in self.replicas):
            self.returncode = 0
        return self.returncode

    def terminate(self, grace_s: float = GRACE_S) -> list[Stopped]:
        """SIGTERM every live replica's group, SIGKILL those still running after ``grace_s``; how each of
        them ended."""
        live = [r for r in self.replicas if r.proc.poll() is None]
        started = time.monotonic()
        for rep in live:
            _signal_group(rep.proc, signal.SIGTERM)
        deadline = started + grace_s
        stopped = []
        for rep in live:
            killed = False
            try:
                rep.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(rep.proc, signal.SIGKILL)
                rep.proc.wait()
                killed = True
            stopped.append(Stopped(rep.name, rep.proc.returncode, killed, time.monotonic() - started))
        for rep in self.replicas:
            # Stray grandchildren of a finished replica share its group; make sure they go too.
            _signal_group(rep.proc, signal.SIGKILL)
            if rep.returncode is None:
                rep.returncode = rep.proc.poll()
        return stopped

    def preempt(self, grace_s: float = SPOT_GRACE_S) -> list[Stopped]:
        """Stop every replica as Compute Engine stops a preempted Spot VM (``terminate`` with its grace
        period), then start each again with the same argv and environment, its log continued: a restarted
        trainer finds its BackupAndRestore backup in the same AIP_CHECKPOINT_DIR. The job's clock runs on."""
        stopped = self.terminate(grace_s)
        for rep in self.replicas:
            rep.proc, rep.log_offset = _spawn(rep.name, rep.argv, rep.env, rep.log_path, rep.cwd, append=True)
            rep.returncode = None
        return stopped

    def wait(self, interval: float = 0.2) -> int:
        while (rc := self.poll()) is None:
            time.sleep(interval)
        return rc


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def start_job(
    job: JobSpec,
    *,
    run_dir: Path,
    base_local: Path | None,
    local_root: Path,
    repo_root: Path,
    trial_id: str | None = None,
    extra_env: dict[str, str] | None = None,
    extra_args: tuple[str, ...] = (),
    threads: int = 1,
    cpu_only: bool = True,
    field: str = "baseOutputDirectory",
) -> JobRun:
    """Launch one process per replica of each worker pool; logs go to ``run_dir/<workerpoolN>-<i>.log``.

    Every path is checked (``environment.inside``/``to_local``, naming ``field`` for the output folders) and
    every replica's argv and env built before the first folder is made or process started.
    """
    extra_env = extra_env or {}
    dirs = environment.output_dirs(base_local, trial_id)
    folders = [run_dir, *(Path(d) for d in dirs.values())]
    writes = list(folders)
    if HP_METRIC_FILE in extra_env:  # cloudml-hypertune makes its folder and writes the file
        metric = Path(extra_env[HP_METRIC_FILE])
        writes += [metric.parent, metric]
    clusters = environment.cluster_envs(job, trial_id)
    launches = []
    for pool in job.pools:
        argv = [
            sys.executable,
            *(environment.to_local(a, local_root, pool.args_path) for a in pool.python_argv),
        ]
        argv += [environment.to_local(a, local_root, "studySpec.parameters") for a in extra_args]
        for i in range(pool.replica_count):
            name = f"{WORKER_POOLS[pool.index]}-{i}"
            log_path = run_dir / f"{name}.log"
            writes.append(log_path)
            env = environment.replica_env(
                pool,
                base_env=dict(os.environ),
                local_root=local_root,
                repo_root=repo_root,
                dirs=dirs,
                cluster=clusters.get((pool.index, i), {}),
                extra=extra_env,
                threads=threads,
                cpu_only=cpu_only,
            )
            launches.append((name, argv, env, log_path))
    for path in writes:
        environment.inside(path, local_root, field)
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
    run = JobRun(replicas=[], started=time.monotonic(), timeout_s=job.timeout_s)
    for name, argv, env, log_path in launches:
        try:
            proc, _ = _spawn(name, argv, env, log_path, run_dir)
        except RuntimeError:
            run.terminate()
            raise
        run.replicas.append(Replica(name=name, proc=proc, log_path=log_path, argv=argv, env=env, cwd=run_dir))
    return run


def _spawn(name: str, argv: list[str], env: dict[str, str], log_path: Path, cwd: Path | None,
           append: bool = False) -> tuple[subprocess.Popen, int]:
    """Start one replica in its own session, its output to ``log_path`` (continued when ``append``); the
    process and where its lines start in the log."""
    with open(log_path, "ab" if append else "wb") as log:
        offset = log.tell()
        try:
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent if _PRCTL else None,
            )
        except (OSError, ValueError) as exc:  # ValueError: what exec cannot pass (spec.py refuses it)
            raise RuntimeError(f"cannot start {name}: {exc}") from exc
    return proc, offset


def tail(path: Path, lines: int = 5) -> list[str]:
    try:
        text = path.read_text(errors="replace").rstrip().splitlines()
    except OSError:
        return []
    return text[-lines:]


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While it lasts, SIGTERM raises KeyboardInterrupt (on the main thread; elsewhere it changes nothing): a
    supervisor's stop ends a command the way Ctrl-C does, with its one line, its status and its cleanup,
    not with Python's silent default exit 143."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _interrupt) if main else None
    try:
        yield
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)
