"""Run what ``container_plan`` planned with docker or podman: ``run_job.py JOB --local --container``, and
the server of ``serve``/``batch-predict --local --container``.

A replica is the engine client's ``run`` (attached, ``--rm``) as a child process: its output goes to the
replica's log as a --local replica's does, and its exit status is the container's, so ``launcher.JobRun``
watches containers as it watches processes. What differs is stopping: signalling a client does not stop its
container, so :class:`ContainerRun` stops containers through the engine (``stop --time GRACE``: SIGTERM, then
SIGKILL) and removes them. :func:`session` holds a run together: SIGTERM to the command becomes a Ctrl-C (the
runner stops its replicas), and whatever happens, every container and network carrying the run's label is
removed before it returns, so none outlives the command.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobs.local import container_plan, environment, launcher
from jobs.local.container_plan import RUN_LABEL, Identity
from jobs.local.launcher import GRACE_S, JobRun, Replica, Stopped
from jobs.local.spec import JobSpec

ENGINE_TIMEOUT_S = 60.0  # one engine command that is not a run (stop, rm, network)


class EngineError(RuntimeError):
    """An engine command failed: one line, what it was doing and what the engine said."""


def run_id(name: str) -> str:
    """A run's id: its containers' and network's prefix and label value (lowercase, unique per run)."""
    stem = environment.slug(name).lower().strip("-._")[:40].rstrip("-._") or "job"
    return f"{stem}-{secrets.token_hex(3)}"


def identity(engine) -> Identity:
    """Who the containers run as: this user (container_plan says why); rootless podman maps it."""
    rootless = os.getuid() != 0 and engine.name == "podman"
    return Identity(f"{os.getuid()}:{os.getgid()}", "keep-id" if rootless else "")


def _call(engine, *args: str, what: str, timeout: float = ENGINE_TIMEOUT_S) -> str:
    try:
        done = subprocess.run(
            engine.argv(*args), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        raise EngineError(f"{engine.name} {what}: no answer in {timeout:.0f}s") from None
    if done.returncode != 0:
        said = " ".join(done.stderr.split())[-300:] or f"exit status {done.returncode}"
        raise EngineError(f"{engine.name} {what} failed: {said}")
    return done.stdout


def labelled(engine, run: str) -> list[str]:
    """The names of every container (running or not) carrying run label ``run``."""
    out = _call(engine, "ps", "--all", "--filter", f"label={RUN_LABEL}={run}", "--format", "{{.Names}}",
                what="listing containers")
    return out.split()


def labelled_networks(engine, run: str) -> list[str]:
    out = _call(engine, "network", "ls", "--filter", f"label={RUN_LABEL}={run}", "--format", "{{.Name}}",
                what="listing networks")
    return out.split()


def remove(engine, names: list[str]) -> None:
    """Remove these containers, running or not (SIGKILL); a name already gone is fine."""
    if names:
        subprocess.run(engine.argv("rm", "--force", *names), capture_output=True, timeout=ENGINE_TIMEOUT_S,
                       stdin=subprocess.DEVNULL)


def clean(engine, run: str) -> None:
    """Every container and network of run ``run``, removed."""
    remove(engine, labelled(engine, run))
    for network in labelled_networks(engine, run):
        subprocess.run(engine.argv("network", "rm", network), capture_output=True,
                       timeout=ENGINE_TIMEOUT_S, stdin=subprocess.DEVNULL)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


@contextmanager
def session(engine, run: str) -> Iterator[None]:
    """SIGTERM as Ctrl-C while the run lasts (on the main thread), and the run's containers and networks
    removed at its end, however it ends."""
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _interrupt) if main else None
    try:
        yield
    finally:
        try:
            clean(engine, run)
        finally:
            if main:
                signal.signal(signal.SIGTERM, previous)


@dataclass
class ContainerRun(JobRun):
    """A JobRun whose replicas are containers: stopped and removed through the engine; its network goes
    once the run has ended."""

    engine: Any = None
    plan: container_plan.JobPlan | None = None
    closed: bool = field(default=False)

    def poll(self) -> int | None:
        rc = super().poll()
        if rc is not None:
            self.close()
        return rc

    def terminate(self, grace_s: float = GRACE_S) -> list[Stopped]:
        """``stop --time grace_s`` every live container (SIGTERM, SIGKILL after the grace period), then
        remove them all (a client killed outright leaves its container behind): how each ended."""
        live = [r for r in self.replicas if r.proc.poll() is None]
        started = time.monotonic()
        names = [self._container(r).name for r in live]
        if names:
            subprocess.run(
                self.engine.argv("stop", "--time", str(max(0, round(grace_s))), *names),
                capture_output=True, timeout=grace_s + ENGINE_TIMEOUT_S, stdin=subprocess.DEVNULL,
            )
        stopped = []
        for rep in live:
            try:
                rep.proc.wait(ENGINE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                launcher._signal_group(rep.proc, signal.SIGKILL)
                rep.proc.wait()
            # The engine's stop ends with SIGKILL (status 137) what SIGTERM did not end in the grace period.
            killed = rep.proc.returncode == 128 + signal.SIGKILL
            stopped.append(Stopped(rep.name, rep.proc.returncode, killed, time.monotonic() - started))
        remove(self.engine, [self._container(r).name for r in self.replicas])
        for rep in self.replicas:
            if rep.returncode is None:
                rep.returncode = rep.proc.poll()
        return stopped

    def close(self) -> None:
        """The run's network removed (its containers are gone: --rm, or terminate)."""
        if self.closed or self.plan is None:
            return
        self.closed = True
        if self.plan.network:
            subprocess.run(self.engine.argv("network", "rm", "--force", self.plan.network),
                           capture_output=True, timeout=ENGINE_TIMEOUT_S, stdin=subprocess.DEVNULL)

    def _container(self, rep: Replica) -> container_plan.Container:
        return next(r.container for r in self.plan.replicas if r.name == rep.name)


@dataclass(frozen=True)
class Starter:
    """``launcher.start_job`` for containers: the same arguments, one container per replica."""

    engine: Any
    images: dict[int, str]
    run: str
    who: Identity

    def __call__(
        self,
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
    ) -> ContainerRun:
        plan = container_plan.plan_job(
            job, images=self.images, run_id=self.run, identity=self.who, run_dir=run_dir,
            base_local=base_local, local_root=local_root, trial_id=trial_id, extra_env=extra_env,
            extra_args=extra_args, threads=threads, cpu_only=cpu_only,
        )
        for path in plan.writes:
            environment.inside(path, local_root, field)
        for folder in plan.folders:
            folder.mkdir(parents=True, exist_ok=True)
        run = ContainerRun(replicas=[], started=time.monotonic(), timeout_s=job.timeout_s, engine=self.engine,
                           plan=plan)
        try:
            if plan.network:
                _call(self.engine, "network", "create", "--label", f"{RUN_LABEL}={self.run}", plan.network,
                      what=f"creating network {plan.network}")
            for rep in plan.replicas:
                argv = self.engine.argv(*rep.container.run_args(tuple(self.engine.run_flags)))
                env = {**os.environ, **rep.container.client_env()}
                proc, _ = launcher._spawn(rep.name, argv, env, rep.log_path, run_dir)
                run.replicas.append(Replica(rep.name, proc, rep.log_path, argv=argv, env=env, cwd=run_dir))
        except (RuntimeError, KeyboardInterrupt):
            run.terminate()
            run.close()
            raise
        return run


@dataclass(frozen=True)
class ServerProcess:
    """The serving container's client as ``server.start_server``'s Popen is used: a signal to it reaches
    the container (``kill --signal``), and killing it removes the container."""

    engine: Any
    name: str
    proc: subprocess.Popen

    def poll(self) -> int | None:
        return self.proc.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self.proc.wait(timeout)

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def send_signal(self, signum: int) -> None:
        if self.proc.poll() is None:
            subprocess.run(self.engine.argv("kill", "--signal", signal.Signals(signum).name, self.name),
                           capture_output=True, timeout=ENGINE_TIMEOUT_S, stdin=subprocess.DEVNULL)

    def kill(self) -> None:
        remove(self.engine, [self.name])
        self.proc.kill()


def start_server(engine, image: str, model: str, *, host: str, port: int, run: str,
                 popen: Callable[..., subprocess.Popen] = subprocess.Popen, **kwargs) -> ServerProcess:
    """The serving container on ``model``, its port 8080 published on ``host``:``port``."""
    name = f"{run}-server"
    spec = container_plan.plan_server(
        Path(model), image=image, name=name, identity=identity(engine), address=host, host_port=port,
        labels={RUN_LABEL: run},
    )
    argv = engine.argv(*spec.run_args(tuple(engine.run_flags)))
    proc = popen(argv, env={**os.environ, **spec.client_env()}, start_new_session=True,
                 stdin=subprocess.DEVNULL, **kwargs)
    return ServerProcess(engine, name, proc)
