"""The cpu image built in the background while the rest of the suite runs.

On a fresh machine the tier's first fixture bootstraps the local base (debootstrap) and builds the cpu image:
minutes of downloads and unpacking, which used to hold one pytest-xdist worker while the other ran out of
work. So the root conftest.py starts ``scripts/build_image.py --local cpu`` at collection, where container
tests were collected and an engine answers, and schedules tests/container last; the ``cpu_image`` fixture
waits for that build (bounded) and then finds its tag. Under pytest-xdist the controller starts it once and
the workers wait for its status file, as for tests/user_copy.py. Without a background build (tests/container
alone in one process: nothing to overlap with) the fixture builds the image itself.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from jobs.local.engine import EngineError, find_engine

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "tests/container/"
# Where pytest-xdist's controller keeps the build (its log and status), for the workers that wait for it.
BUILD_ROOT = "TESTS_CPU_IMAGE_BUILD"
# A cold build (base and image, downloads included) took 430 s alone and 466 s beside the tests on a loaded
# two-core machine; a slow line may take several times that, but not this long.
WAIT_S = 2400.0
# Interrupted like Ctrl-C (the build removes what it started), then killed if it takes longer than this.
STOP_GRACE_S = 30.0
# Runs the build (argv[2:]) and writes its exit status to a file (argv[1], atomically): any process can wait
# for it. It leads the build's process group, and stops the group as ImageBuild.stop does when the pytest
# process that started it ends without stopping it (killed, or SIGTERM: no cleanup runs then).
_SUPERVISE = f"""
import os, signal, subprocess, sys, time
parent = os.getppid()
signal.signal(signal.SIGINT, signal.SIG_IGN)
build = subprocess.Popen(sys.argv[2:], preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
while build.poll() is None:
    if os.getppid() != parent:
        os.killpg(0, signal.SIGINT)
        try:
            build.wait(timeout={STOP_GRACE_S})
        finally:
            os.killpg(0, signal.SIGKILL)  # what is left of the group, this process too
    time.sleep(1)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(build.returncode))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
"""


@dataclass
class ImageBuild:
    """``build_image.py --local cpu`` running in root: its log, and its status file once it is done;
    ``process`` in the one process that started it, which alone stops it."""

    root: Path
    process: subprocess.Popen | None = None

    @property
    def log(self) -> Path:
        return self.root / "build-image.log"

    @property
    def status(self) -> Path:
        return self.root / "returncode"

    def started(self) -> bool:
        return self.log.exists()

    def wait(self, timeout: float = WAIT_S) -> int | None:
        """Its exit status; None when it did not end within ``timeout`` or ended without recording one."""
        deadline = time.monotonic() + timeout
        while not self.status.exists() and time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None and not self.status.exists():
                return None
            time.sleep(0.5)
        return int(self.status.read_text()) if self.status.exists() else None

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """Interrupt the build like Ctrl-C (it removes what it started), then kill what is left of it."""
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(self.process.pid, signal.SIGINT)  # its own session: podman and debootstrap too
            self.process.wait(timeout=STOP_GRACE_S)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


# Where the process that started the build (the only pytest process, or pytest-xdist's controller) keeps it;
# None once it was asked and no engine answered.
IMAGE_BUILD = pytest.StashKey["ImageBuild | None"]()


def wanted(nodeids) -> bool:
    return any(nodeid.startswith(PREFIX) for nodeid in nodeids)


def start(config: pytest.Config, root: Path) -> None:
    """Start the build in ``root`` where an engine answers (nothing starts where none does: the tier skips
    with its one line); it is stopped when the session ends, however it ends."""
    config.stash[IMAGE_BUILD] = None  # asked once, whatever the answer
    try:
        find_engine()
    except EngineError:
        return
    build = launch(
        ImageBuild(root), [sys.executable, str(ROOT / "scripts" / "build_image.py"), "--local", "cpu"]
    )
    config.stash[IMAGE_BUILD] = build
    config.add_cleanup(build.stop)


def launch(build: ImageBuild, argv: list[str]) -> ImageBuild:
    """``argv`` started in ``build.root``, supervised (its status recorded, stopped with its starter)."""
    build.root.mkdir(parents=True, exist_ok=True)
    with open(build.log, "w") as out:
        build.process = subprocess.Popen(
            [sys.executable, "-c", _SUPERVISE, str(build.status), *argv],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return build


def started_build(config: pytest.Config) -> ImageBuild | None:
    """The build this session started in the background, if any (in this process or in the controller)."""
    build = config.stash.get(IMAGE_BUILD, None)
    if build is None and os.environ.get(BUILD_ROOT):
        build = ImageBuild(Path(os.environ[BUILD_ROOT]))
    return build if build is not None and build.started() else None


def wait_for(build: ImageBuild) -> None:
    """Wait for the background build: the test fails with its log's last lines when it failed or ran past
    WAIT_S, and is skipped with its one line where it found no engine or a refused variant (exit status 2)."""
    status = build.wait(WAIT_S)
    if status == 0:
        return
    if status == 2:
        pytest.skip(f"container tier: {build.tail(1)}")
    what = f"exit status {status}" if status is not None else f"none within {WAIT_S:.0f} s"
    pytest.fail(
        f"the cpu image build started at collection failed ({what}); {build.log}:\n{build.tail()}",
        pytrace=False,
    )
