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
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from jobs.definition.kinds import runs_study, spec_field
from jobs.local import container_plan, environment, launcher, spec
from jobs.local.container_plan import CPU, OWNER_LABEL, RUN_LABEL, Identity
from jobs.local.engine import CALL_TIMEOUT_S, BuildError, Engine, EngineError, find_engine
from jobs.local.launcher import GRACE_S, JobRun, Replica, Stopped
from jobs.local.spec import JobSpec, LocalRunError
from jobs.local.trainer_image import ensure_image


def run_stem(name: str) -> str:
    """What the run id of a job named ``name`` starts with (its display name, as a container name may be)."""
    return environment.slug(name).lower().strip("-._")[:40].rstrip("-._") or "job"


def run_id(name: str) -> str:
    """A run's id: its containers' and network's prefix and label value (lowercase, unique per run)."""
    return f"{run_stem(name)}-{secrets.token_hex(3)}"


def identity(engine: Engine) -> Identity:
    """Who the containers run as: this user (container_plan says why); rootless podman maps it."""
    rootless = os.getuid() != 0 and engine.name == "podman"
    return Identity(f"{os.getuid()}:{os.getgid()}", "keep-id" if rootless else "")


def owner() -> str:
    """This command, as the OWNER_LABEL of what it starts."""
    return f"{socket.gethostname()}:{os.getpid()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def sweep(engine: Engine) -> list[str]:
    """Remove the containers and networks of runs whose command died without removing them (SIGKILL, a
    crash): those of this machine whose owner process is gone. The ids of those runs."""
    # A label's value: Docker's template has .Label, Podman's only the .Labels map.
    value = '{{{{.Label "{}"}}}}' if engine.name == "docker" else '{{{{index .Labels "{}"}}}}'
    listed = engine.call("ps", "--all", "--filter", f"label={OWNER_LABEL}", "--format",
                         f"{value.format(OWNER_LABEL)} {value.format(RUN_LABEL)}", check=False)
    host, dead = socket.gethostname(), set()
    for line in listed.stdout.decode().splitlines():
        who, _, run = line.partition(" ")
        name, _, pid = who.rpartition(":")
        if run and name == host and pid.isdigit() and not _alive(int(pid)):
            dead.add(run)
    for run in sorted(dead):
        clean(engine, run)
    return sorted(dead)


def labelled(engine: Engine, run: str) -> list[str]:
    """The names of every container (running or not) carrying run label ``run``."""
    listed = engine.call("ps", "--all", "--filter", f"label={RUN_LABEL}={run}", "--format", "{{.Names}}")
    return listed.stdout.decode().split()


def remove(engine: Engine, names: list[str]) -> None:
    """Remove these containers, running or not (SIGKILL); a name already gone is fine."""
    if names:
        engine.call("rm", "--force", *names, check=False)


def clean(engine: Engine, run: str) -> None:
    """Every container and network of run ``run``, removed."""
    remove(engine, labelled(engine, run))
    listed = engine.call("network", "ls", "--filter", f"label={RUN_LABEL}={run}", "--format", "{{.Name}}")
    for network in listed.stdout.decode().split():
        engine.remove_network(network)


def run_args(engine: Engine, container: container_plan.Container) -> list[str]:
    """``run``'s arguments for this engine: its own run flags, and no --rm where --rm would lose the exit
    status (the docker client on Podman's API): there the run's end removes the container."""
    return container.run_args(tuple(engine.run_flags), remove=not engine.rm_loses_status)


@contextmanager
def session(engine: Engine, run: str) -> Iterator[None]:
    """SIGTERM as Ctrl-C while the run lasts (on the main thread), and the run's containers and networks
    removed at its end, however it ends."""
    with launcher.sigterm_as_interrupt():
        try:
            swept = sweep(engine)
            if swept:
                print(f"removed what {len(swept)} earlier run(s) left behind when their command was killed: "
                      f"{', '.join(swept)}", file=sys.stderr)
            yield
        finally:
            try:
                clean(engine, run)
            except EngineError as exc:  # said, not raised: the run's own outcome stands
                print(f"warning: the containers of run {run} may not all be removed ({exc}); list them with: "
                      f"{engine.name} ps --all --filter label={RUN_LABEL}={run}", file=sys.stderr)


@dataclass
class ContainerRun(JobRun):
    """A JobRun whose replicas are containers: stopped and removed through the engine; its network goes
    once the run has ended."""

    engine: Engine | None = None
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
        if names:  # one stop for all: their grace periods run together
            grace = max(0, round(grace_s))
            self.engine.call("stop", "--time", str(grace), *names, timeout=grace + CALL_TIMEOUT_S,
                             check=False)
        stopped = []
        for rep in live:
            try:
                rep.proc.wait(CALL_TIMEOUT_S)
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
        """The run's containers and network removed (the containers are gone already, by --rm or terminate,
        except where the engine's --rm would lose their exit status)."""
        if self.closed or self.plan is None:
            return
        self.closed = True
        if self.engine.rm_loses_status:
            remove(self.engine, [r.container.name for r in self.plan.replicas])
        if self.plan.network:
            self.engine.remove_network(self.plan.network)

    def _container(self, rep: Replica) -> container_plan.Container:
        return next(r.container for r in self.plan.replicas if r.name == rep.name)


@dataclass(frozen=True)
class Starter:
    """``launcher.start_job`` for containers: the same arguments, one container per replica."""

    engine: Engine
    images: dict[int, str]
    run: str
    who: Identity
    owner: str = ""

    def __call__(self, job: JobSpec, *, local_root: Path, field: str = "baseOutputDirectory",
                 repo_root: Path | None = None, **planned) -> ContainerRun:
        """``planned``: the rest of start_job's arguments (run_dir, base_local, trial_id, extra_env, ...), as
        ``container_plan.plan_job`` takes them; the image has its own trainer, so repo_root is unused."""
        plan = container_plan.plan_job(job, images=self.images, run_id=self.run, identity=self.who,
                                       local_root=local_root, owner=self.owner, **planned)
        run_dir = plan.replicas[0].log_path.parent
        for path in plan.writes:
            environment.inside(path, local_root, field)
        for folder in plan.folders:
            folder.mkdir(parents=True, exist_ok=True)
        run = ContainerRun(replicas=[], started=time.monotonic(), timeout_s=job.timeout_s, engine=self.engine,
                           plan=plan)
        try:
            if plan.network:
                self.engine.call("network", "create", "--label", f"{RUN_LABEL}={self.run}", "--label",
                                 f"{OWNER_LABEL}={self.owner}", plan.network)
            for rep in plan.replicas:
                argv = self.engine.argv(*run_args(self.engine, rep.container))
                env = {**self.engine.environ(), **rep.container.client_env()}
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

    engine: Engine
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
            self.engine.call("kill", "--signal", signal.Signals(signum).name, self.name, check=False)

    def kill(self) -> None:
        remove(self.engine, [self.name])
        self.proc.kill()


def start_server(engine: Engine, image: str, model: str, *, host: str, port: int, name: str, run: str,
                 popen: Callable[..., subprocess.Popen] = subprocess.Popen, **kwargs) -> ServerProcess:
    """The serving container ``name`` on ``model``, its port 8080 published on ``host``:``port``."""
    spec = container_plan.plan_server(
        Path(model), image=image, name=name, identity=identity(engine), address=host, host_port=port,
        labels={RUN_LABEL: run, OWNER_LABEL: owner()},
    )
    argv = engine.argv(*run_args(engine, spec))
    proc = popen(argv, env={**engine.environ(), **spec.client_env()}, start_new_session=True,
                 stdin=subprocess.DEVNULL, **kwargs)
    return ServerProcess(engine, name, proc)


# --- the entry points: a job, a server ---------------------------------------------------------------------


def job_images(kind: str, body: dict, outputs: dict[str, str], image_hash: str) -> dict[int, str]:
    """Each pool's image as the definition names it, when --container can build it (LocalRunError naming
    the field otherwise: see ``container_plan.pool_images``); nothing is asked of an engine."""
    image = outputs.get("trainer_image", "")
    field = spec_field(kind)
    if runs_study(kind):
        job = spec.parse_tuning_job(body, image).trial_job
    else:
        job = spec.parse_job_spec(body.get(field), field, image)
    return container_plan.pool_images(job, field, image, image_hash)


def run_job(kind: str, body: dict, outputs: dict[str, str], *, repo_root: Path, image_hash: str,
            stream: TextIO, **local) -> int:
    """``run_local`` (``local``: its other arguments) with every replica in a container of the trainer's
    cpu image, built from this checkout first when the engine lacks it; the exit status. No engine, or a
    build that fails, is one line (exit 2, exit 1 naming the failing step)."""
    from jobs.local.run import run_local

    try:
        engine = find_engine()
        run = run_id(str(body.get("displayName") or "local-job"))
        with session(engine, run):
            image = ensure_image(engine, repo_root, CPU, stream).ref
            images = {i: image for i in job_images(kind, body, outputs, image_hash)}
            starter = Starter(engine, images, run, identity(engine), owner())
            return run_local(kind, body, outputs, repo_root=repo_root, stream=stream, start_job=starter,
                             **local)
    except BuildError as exc:
        print(f"error: local run --container: {exc}", file=sys.stderr)
        return 1
    except LocalRunError as exc:
        print(f"error: local run --container: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before the runner took over (while building): nothing was started
        return 130


@contextmanager
def serving(repo_root: Path, out: TextIO, name: str = "serve") -> Iterator[Callable[..., ServerProcess]]:
    """``server.start_server`` for the serving container: yields a function of (model, host, port) that
    starts it (the image built first when the engine lacks it), every container it started removed when
    the block ends (``name``: what their names start with). LocalRunError: no engine, a port in use
    (``--port``); BuildError: the build failed."""
    engine = find_engine()
    run = run_id(name)
    with session(engine, run):
        image = ensure_image(engine, repo_root, CPU, out).ref
        count = iter(range(1, 1 << 30))

        def start(model: str, *, host: str, port: int, repo_root: Path | None = None,
                  **popen) -> ServerProcess:
            name = f"{run}-server-{next(count)}"
            return start_server(engine, image, model, host=host, port=host_port(host, port), name=name,
                                run=run, **popen)

        yield start


def host_port(host: str, port: int) -> int:
    """``port`` when it is free on ``host`` (any free one for 0): what the server's port 8080 is published
    on. LocalRunError naming --port when it is taken: the engine would fail only after creating the
    container."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((host, port))
            return probe.getsockname()[1]
    except OSError as exc:
        raise LocalRunError("--port", f"{host}:{port} cannot be used ({exc.strerror})",
                            "a free port (0: any free one)") from None
