"""The container engine on this machine: Docker or Podman, whichever answers, driven as a subprocess.

``find_engine()`` returns an :class:`Engine` or raises :class:`EngineError` (one line: what is missing and how
to get it). Docker is asked first (``docker version`` must reach a server: the binary alone may be a client
with no engine behind it), then Podman (``podman info``); ``CONTAINER_ENGINE=docker|podman`` picks one.

Podman runs with flags on every call rather than edits to the user's containers.conf: ``--runtime runc`` where
runc is installed (crun refuses hosts with hybrid cgroup v1 layouts), ``--cgroup-manager cgroupfs`` (no
systemd session is needed), and ``--ulimit`` on build and run (its default ulimits can exceed what the host
lets a process raise: setrlimit EPERM). Docker without buildx builds with the classic builder
(``DOCKER_BUILDKIT=0``), which is also what its CLI needs to drive Podman's API socket (``podman system
service``; there builds go without ``--ulimit``, which Podman 4.3's API refuses, and a foreground run without
``--rm``, which loses the exit status).

Every call but a build has a bounded time; a build streams its output and, when it fails, raises
:class:`BuildError` naming the Dockerfile step that failed.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TextIO

from jobs.definition.errors import one_line, short
from jobs.local.spec import LocalRunError

ENGINES = ("docker", "podman")
ENGINE_VARIABLE = "CONTAINER_ENGINE"
# Where the docker CLI finds its daemon (a Podman API socket, a remote host).
DOCKER_VARIABLES = ("DOCKER_HOST", "DOCKER_CONTEXT", "DOCKER_CONFIG", "DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH")
HOW_TO_GET_ONE = "`apt-get install podman runc` on Debian/Ubuntu, or Docker (docs.docker.com/engine/install)"
# Within the limits this host lets a process raise; podman's own defaults (nofile 1048576) are not.
ULIMITS = ("nofile=20000:20000", "nproc=32768:32768")
# How long an engine call other than a build or a pull may take: a busy engine answers in seconds.
CALL_TIMEOUT_S = 120.0
PROBE_TIMEOUT_S = 60.0
# A build downloads the TensorFlow wheels: minutes on a slow line, never hours.
BUILD_TIMEOUT_S = 3 * 3600.0
PULL_TIMEOUT_S = 900.0
# The build's step lines: podman/buildah "[1/2] STEP 3/7: RUN ...", Docker's classic builder "Step 3/7 : RUN
# ...".
_STEP = re.compile(r"^(?:\[\d+/\d+\] )?STEP \d+/\d+: .*|^Step \d+/\d+ : .*", re.IGNORECASE)
# BuildKit runs stages in parallel: its steps are numbered ("#8 [cpu 2/5] RUN ...") and "#8 ERROR: ..." names
# the one that failed; its tty progress says "=> ERROR [cpu 2/5] RUN ...".
_BUILDKIT_STEP = re.compile(r"^#(\d+) (\[[^\]]*\d+/\d+\] .*)")
_BUILDKIT_FAILED = re.compile(r"^#(\d+) ERROR\b")
_BUILDKIT_ERROR = re.compile(r"^=> ERROR (\[[^\]]*\] .*?)(?:\s+\d+(?:\.\d+)?s)?$")
_EXIT_STATUS = re.compile(r"(?:exit status|exit code:?|returned a non-zero code:) ?(\d+)", re.IGNORECASE)


# Engine.run's container names, where the caller gives none.
_RUNS = itertools.count()


class EngineError(LocalRunError):
    """No engine, or an engine call that failed: one line, ``container engine: <problem>[; allowed: ...]``."""

    def __init__(self, problem: str, allowed: str = "", path: str = "container engine") -> None:
        super().__init__(path, problem, allowed)


class BuildError(EngineError):
    """A build that failed; ``step`` is the Dockerfile step it stopped at ("" when none was reached)."""

    def __init__(self, dockerfile: str, step: str, problem: str) -> None:
        self.step = step
        super().__init__(problem, path=dockerfile)


@dataclass(frozen=True)
class Engine:
    """A working engine: ``command`` is its argv prefix (global flags included), ``env`` what its calls add to
    the environment, ``build_flags`` / ``run_flags`` what every build / run passes."""

    name: str
    command: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    build_flags: tuple[str, ...] = ()
    run_flags: tuple[str, ...] = ()
    version: str = ""
    extra: Mapping[str, str] = field(default_factory=dict, compare=False)
    # The docker CLI on Podman's API socket loses a `run --rm` container's exit status (0 whatever it was:
    # containers/podman#18889): there, a foreground run keeps its container and removes it afterwards.
    rm_loses_status: bool = False

    def argv(self, *args: str) -> list[str]:
        return [*self.command, *args]

    def environ(self) -> dict[str, str]:
        return {**os.environ, **dict(self.env)}

    def call(
        self,
        *args: str,
        timeout: float | None = CALL_TIMEOUT_S,
        check: bool = True,
        input: bytes | None = None,
    ) -> subprocess.CompletedProcess:
        """Run one engine command, output captured; EngineError (one line, the command's last error line) when
        it fails and ``check``, or when it outlives ``timeout``."""
        argv = self.argv(*args)
        try:
            proc = subprocess.run(
                argv, capture_output=True, timeout=timeout, env=self.environ(), input=input, check=False
            )
        except subprocess.TimeoutExpired:
            raise EngineError(f"`{_shown(argv)}` did not finish within {timeout:.0f} s") from None
        except OSError as exc:
            raise EngineError(f"`{_shown(argv)}` could not start: {exc.strerror or exc}") from None
        if check and proc.returncode != 0:
            raise EngineError(f"`{_shown(argv)}` failed (exit status {proc.returncode}): {_last_line(proc)}")
        return proc

    # --- images -------------------------------------------------------------------------------------------

    def image_exists(self, ref: str) -> bool:
        return self.call("image", "inspect", "--format", "{{.Id}}", ref, check=False).returncode == 0

    def image_labels(self, ref: str) -> dict[str, str]:
        proc = self.call("image", "inspect", "--format", "{{json .Config.Labels}}", ref)
        return json.loads(proc.stdout or b"null") or {}

    def image_size(self, ref: str) -> int:
        """The image's size in bytes as the engine reports it (all layers, uncompressed)."""
        return int(self.call("image", "inspect", "--format", "{{.Size}}", ref).stdout.strip())

    def remove_image(self, ref: str) -> None:
        self.call("image", "rm", "--force", ref, check=False)

    def pull(self, ref: str, timeout: float = PULL_TIMEOUT_S) -> bool:
        """Whether ``ref`` could be pulled (False where no registry is reachable)."""
        try:
            return self.call("pull", "--quiet", ref, timeout=timeout, check=False).returncode == 0
        except EngineError:
            return False

    def import_rootfs(
        self, tar: IO[bytes], ref: str, changes: Sequence[str] = (), timeout: float = 600.0
    ) -> None:
        """``tar`` (a root filesystem as a tar stream) as the image ``ref``; ``changes`` are Dockerfile lines
        (ENV, CMD, LABEL ...) applied to its config."""
        args = ["import"]
        for change in changes:
            args += ["--change", change]
        argv = self.argv(*args, "-", ref)
        try:
            proc = subprocess.run(
                argv, stdin=tar, capture_output=True, timeout=timeout, env=self.environ(), check=False
            )
        except subprocess.TimeoutExpired:
            raise EngineError(f"`{_shown(argv)}` did not finish within {timeout:.0f} s") from None
        if proc.returncode != 0:
            raise EngineError(f"`{_shown(argv)}` failed (exit status {proc.returncode}): {_last_line(proc)}")

    def build(
        self,
        context: Path,
        tag: str,
        *,
        dockerfile: str = "Dockerfile",
        target: str | None = None,
        build_args: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
        out: TextIO | None = None,
        timeout: float = BUILD_TIMEOUT_S,
    ) -> None:
        """Build ``context`` as ``tag``, the engine's output streamed to ``out`` line by line; BuildError
        naming the failing step when the build fails or outlives ``timeout``."""
        # --force-rm: a failed step's container goes too (Docker keeps it otherwise).
        args = ["build", "--force-rm", "--file", str(Path(context) / dockerfile), "--tag", tag]
        args += self.build_flags
        if target:
            args += ["--target", target]
        for key, value in (build_args or {}).items():
            args += ["--build-arg", f"{key}={value}"]
        for key, value in (labels or {}).items():
            args += ["--label", f"{key}={value}"]
        argv = self.argv(*args, str(context))
        tracker = _StepTracker()
        try:
            proc = subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.environ(),
                start_new_session=True,  # the timeout stops the engine and whatever it started
            )
        except OSError as exc:
            raise EngineError(f"`{_shown(argv)}` could not start: {exc.strerror or exc}") from None
        expired = threading.Event()
        timer = threading.Timer(timeout, _kill_group, (proc, expired))
        timer.start()
        try:
            assert proc.stdout is not None
            for raw in proc.stdout:
                line = raw.decode("utf-8", "replace").rstrip("\n")
                tracker.feed(line)
                if out is not None:
                    out.write(line + "\n")
            status = proc.wait()
        except BaseException:
            _kill_group(proc, expired)
            proc.wait()
            raise
        finally:
            timer.cancel()
        if expired.is_set():
            raise BuildError(
                dockerfile,
                tracker.step,
                f"the build did not finish within {timeout:.0f} s at {tracker.where()}",
            )
        if status != 0:
            raise BuildError(dockerfile, tracker.step, tracker.failure(status))

    # --- containers and networks --------------------------------------------------------------------------

    def run_argv(
        self,
        image: str,
        args: Sequence[str] = (),
        *,
        name: str | None = None,
        detach: bool = False,
        remove: bool = True,
        init: bool = False,
        entrypoint: str | None = None,
        user: str | None = None,
        env: Mapping[str, str] | None = None,
        network: str | None = None,
        publish: Iterable[str] = (),
        volumes: Iterable[str] = (),
        extra: Iterable[str] = (),
    ) -> list[str]:
        """The argv of ``run`` (for a caller that streams or waits on the process itself). Where
        ``rm_loses_status``, a foreground run with ``remove`` has no ``--rm``: the caller removes the
        container (by ``name``) once it has its status, as :meth:`run` does."""
        flags = ["run", *self.run_flags]
        flags += ["--rm"] if remove and (detach or not self.rm_loses_status) else []
        flags += ["--detach"] if detach else []
        # A PID 1 that forwards signals: a Python server as PID 1 ignored SIGTERM until killed.
        flags += ["--init"] if init else []
        flags += ["--name", name] if name else []
        flags += ["--entrypoint", entrypoint] if entrypoint is not None else []
        flags += ["--user", user] if user else []
        flags += ["--network", network] if network else []
        for key, value in (env or {}).items():
            flags += ["--env", f"{key}={value}"]
        for port in publish:
            flags += ["--publish", port]
        for volume in volumes:
            flags += ["--volume", volume]
        return self.argv(*flags, *extra, image, *args)

    def run(
        self, image: str, args: Sequence[str] = (), *, timeout: float | None = CALL_TIMEOUT_S, **options
    ) -> subprocess.CompletedProcess:
        """Run a container to its end (or start it, ``detach=True``), output captured; the status is the
        caller's to judge (a trainer's exit 2 is an answer, not an engine failure)."""
        # Named, so that it can be removed when the client outlives its time (the container would not stop
        # with it) or where --rm would lose its status.
        options["name"] = options.get("name") or f"trainer-run-{os.getpid()}-{next(_RUNS)}"
        cleanup = self.rm_loses_status and options.get("remove", True) and not options.get("detach")
        argv = self.run_argv(image, args, **options)
        try:
            return subprocess.run(argv, capture_output=True, timeout=timeout, env=self.environ(), check=False)
        except subprocess.TimeoutExpired:
            cleanup = True
            raise EngineError(f"`{_shown(argv)}` did not finish within {timeout:.0f} s") from None
        finally:
            if cleanup:
                self.remove(options["name"])

    def stop(self, name: str, grace_s: int = 10) -> None:
        """Stop a container: its stop signal, then SIGKILL after ``grace_s`` seconds."""
        self.call("stop", "--time", str(grace_s), name, timeout=grace_s + CALL_TIMEOUT_S, check=False)

    def remove(self, name: str) -> None:
        """Remove a container, running or not; nothing when there is none."""
        self.call("rm", "--force", name, check=False)

    def create_network(self, name: str) -> None:
        if self.call("network", "inspect", name, check=False).returncode != 0:
            self.call("network", "create", name)

    def remove_network(self, name: str) -> None:
        self.call("network", "rm", name, check=False)


def find_engine(environ: Mapping[str, str] | None = None) -> Engine:
    """The first engine that answers (``CONTAINER_ENGINE`` names the one to use); EngineError where none
    does."""
    environ = os.environ if environ is None else environ
    wanted = environ.get(ENGINE_VARIABLE, "").strip()
    if wanted and wanted not in ENGINES:
        raise EngineError(
            f"{ENGINE_VARIABLE}={short(wanted)} is not an engine", " or ".join(ENGINES), path=ENGINE_VARIABLE
        )
    reasons = []
    for name in (wanted,) if wanted else ENGINES:
        binary = shutil.which(name, path=environ.get("PATH"))
        if binary is None:
            reasons.append(f"no {name}")
            continue
        probe = _probe_docker if name == "docker" else _probe_podman
        engine, reason = probe(binary, environ)
        if engine is not None:
            return engine
        reasons.append(reason)
    raise EngineError(
        f"none answers on this machine ({'; '.join(reasons)})", f"install one: {HOW_TO_GET_ONE}"
    )


@contextlib.contextmanager
def machine_lock(name: str) -> Iterator[None]:
    """Held by one process of this machine at a time (a file lock in the temp folder, released when the
    process ends however it ends): one build of a tag at a time, whoever asks (test workers, `make image`)."""
    with open(Path(tempfile.gettempdir()) / f"{name}.lock", "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _probe_docker(binary: str, environ: Mapping[str, str]) -> tuple[Engine | None, str]:
    # The CLI alone prints its own version and fails on the server's: only an answering daemon counts.
    proc = _quiet([binary, "version", "--format", "{{.Server.Version}}"], environ)
    if proc is None or proc.returncode != 0 or not proc.stdout.strip():
        return None, f"docker: {_last_line(proc) if proc else 'no answer'}"
    buildx = _quiet([binary, "buildx", "version"], environ)
    # The daemon it answered from stays the one every later call reaches, whatever the caller's environment.
    env = tuple((key, environ[key]) for key in DOCKER_VARIABLES if key in environ)
    env += () if buildx is not None and buildx.returncode == 0 else (("DOCKER_BUILDKIT", "0"),)
    ulimits = tuple(f for limit in ULIMITS for f in ("--ulimit", limit))
    server = _quiet([binary, "version", "--format", "{{range .Server.Components}}{{.Name}};{{end}}"], environ)
    podman = server is not None and b"Podman" in server.stdout
    version = proc.stdout.decode(errors="replace").strip()
    # Podman 4.3's API answers a build with ulimits "400 Bad Request"; its builds run without them.
    build_flags = () if podman else ulimits
    return Engine("docker", (binary,), env, build_flags, ulimits, version, rm_loses_status=podman), ""


def _probe_podman(binary: str, environ: Mapping[str, str]) -> tuple[Engine | None, str]:
    command: tuple[str, ...] = (binary,)
    if shutil.which("runc"):
        command += ("--runtime", "runc")
    elif not os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        # cgroup v1 or hybrid: crun (Debian's default runtime) refuses to create containers here.
        return None, "podman: runc is missing and crun cannot run containers on this host's cgroup v1 layout"
    command += ("--cgroup-manager", "cgroupfs")
    proc = _quiet([*command, "version", "--format", "{{.Client.Version}}"], environ)
    if proc is None or proc.returncode != 0:
        return None, f"podman: {_last_line(proc) if proc else 'no answer'}"
    info = _quiet([*command, "info", "--format", "{{.Store.GraphDriverName}}"], environ)
    if info is None or info.returncode != 0:
        return None, f"podman: {_last_line(info) if info else 'no answer'}"
    ulimits = tuple(f for limit in ULIMITS for f in ("--ulimit", limit))
    return Engine(
        "podman",
        command,
        (),
        ulimits,
        ulimits,
        proc.stdout.decode(errors="replace").strip(),
        {"storage": info.stdout.decode(errors="replace").strip()},
    ), ""


def _quiet(argv: list[str], environ: Mapping[str, str]) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(
            argv, capture_output=True, timeout=PROBE_TIMEOUT_S, env=dict(environ), check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None


class _StepTracker:
    """Follows a build's output: the last step started and, from BuildKit, the step it says failed."""

    def __init__(self) -> None:
        self.step = ""
        self.failed = False  # the step is the one the builder said failed: later lines do not move it
        self.numbered: dict[str, str] = {}  # BuildKit's step numbers
        self.tail: list[str] = []

    def feed(self, line: str) -> None:
        text = line.strip()
        if not text:
            return
        self.tail = [*self.tail[-19:], text]
        if self.failed:
            return
        step, failed = _STEP.match(text), _BUILDKIT_FAILED.match(text)
        numbered, tty = _BUILDKIT_STEP.match(text), _BUILDKIT_ERROR.match(text)
        if failed and failed[1] in self.numbered:
            self.step, self.failed = self.numbered[failed[1]], True
        elif tty:
            self.step, self.failed = tty[1], True
        elif numbered:
            self.numbered.setdefault(numbered[1], text)
            self.step = text
        elif step:
            self.step = text

    def where(self) -> str:
        return (
            f"step {short(self.step, 160, quote=False)}" if self.step else "its start (no step was reached)"
        )

    def failure(self, status: int) -> str:
        code = None
        for text in reversed(self.tail):
            found = _EXIT_STATUS.search(text)
            if found:
                code = found[1]
                break
        detail = f"exit status {code}" if code is not None else f"the engine exited {status}"
        last = next((t for t in reversed(self.tail) if t.lower().startswith(("error", "fatal"))), "")
        text = f"the build failed at {self.where()} ({detail})"
        if last and not self.step:
            text += f": {short(last, 160, quote=False)}"
        return one_line(text)


def _kill_group(proc: subprocess.Popen, expired: threading.Event) -> None:
    expired.set()
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _last_line(proc: subprocess.CompletedProcess | None) -> str:
    if proc is None:
        return "no answer"
    for stream in (proc.stderr, proc.stdout):
        text = stream.decode("utf-8", "replace") if isinstance(stream, bytes) else (stream or "")
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if lines:
            return short(lines[-1], 200, quote=False)
    return "no output"


def _shown(argv: Sequence[str]) -> str:
    return short(" ".join([Path(argv[0]).name, *argv[1:]]), 160, quote=False)
