"""The container tier's cpu image built in the background from collection on (tests/container/background.py):
the tier is scheduled last, the build's status reaches whoever waits for it, a failed build is the waiting
test's failure with the log's tail, and no build outlives the pytest process that started it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.container import background
from tests.container.background import ImageBuild, launch, wait_for

ROOT = Path(__file__).resolve().parent.parent


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie has ended: only its parent has not collected it yet.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ", 1)[1][0] != "Z"


def test_the_container_tier_is_scheduled_after_every_other_module():
    listed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/container",
            "tests/test_repo.py",
            "tests/test_layers.py",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    ).stdout.splitlines()
    files = [line.split("::", 1)[0] for line in listed if "::" in line]
    container = [i for i, path in enumerate(files) if path.startswith("tests/container/")]
    others = [i for i, path in enumerate(files) if not path.startswith("tests/container/")]
    assert container and others, listed[-5:]
    assert max(others) < min(container)


def test_the_status_reaches_a_waiter_in_another_process(tmp_path):
    launch(ImageBuild(tmp_path), ["sh", "-c", "echo building; exit 3"])
    elsewhere = ImageBuild(tmp_path)  # a worker: no process handle, only the folder
    assert elsewhere.started()
    assert elsewhere.wait(timeout=60) == 3
    assert elsewhere.tail() == "building"


def test_a_failed_build_fails_the_waiting_test_with_the_log_tail(tmp_path):
    build = launch(ImageBuild(tmp_path), ["sh", "-c", "echo STEP 2/5: RUN pip install; echo boom; exit 1"])
    with pytest.raises(pytest.fail.Exception) as caught:
        wait_for(build)
    assert "failed (exit status 1)" in str(caught.value)
    assert str(caught.value).endswith("STEP 2/5: RUN pip install\nboom")


def test_no_engine_or_a_refused_variant_skips_with_the_scripts_line(tmp_path):
    build = launch(ImageBuild(tmp_path), ["sh", "-c", "echo 'build_image.py: no engine'; exit 2"])
    with pytest.raises(pytest.skip.Exception, match=r"^container tier: build_image.py: no engine$"):
        wait_for(build)


def test_a_build_past_its_time_fails_instead_of_waiting_on(tmp_path, monkeypatch):
    monkeypatch.setattr(background, "WAIT_S", 1.0)
    build = launch(ImageBuild(tmp_path), ["sleep", "60"])
    try:
        with pytest.raises(pytest.fail.Exception, match=r"none within 1 s"):
            wait_for(build)
    finally:
        build.stop()


def test_stop_interrupts_the_whole_build_like_ctrl_c(tmp_path):
    # The "build" records that it was interrupted (build_image.py removes what it started then) and leaves a
    # child of its own, as podman and debootstrap are.
    script = tmp_path / "build.py"
    script.write_text(
        textwrap.dedent("""
        import subprocess, sys, time
        child = subprocess.Popen(["sleep", "600"])
        print(child.pid, flush=True)
        try:
            time.sleep(600)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(130)
    """)
    )
    build = launch(ImageBuild(tmp_path), [sys.executable, str(script)])
    child = _first_line(build)
    build.stop()
    assert build.wait(timeout=10) == 130
    assert build.tail(1) == "interrupted"
    assert not _alive(child)


def test_a_build_does_not_outlive_a_killed_pytest(tmp_path):
    # The starter is killed outright (SIGKILL: no cleanup of its own runs); the supervisor stops the build.
    starter = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from tests.container.background import *;"
            "launch(ImageBuild(Path(sys.argv[1])), ['sh', '-c', 'sleep 600 & echo $!; wait']);"
            "time.sleep(600)",
            str(tmp_path),
        ],
        cwd=ROOT,
    )
    build = ImageBuild(tmp_path)
    try:
        child = _first_line(build)
    finally:
        starter.kill()
        starter.wait()
    deadline = time.monotonic() + 30
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(child)


def _first_line(build: ImageBuild) -> int:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if build.log.exists() and build.log.read_text().strip():
            return int(build.log.read_text().split()[0])
        time.sleep(0.1)
    raise AssertionError(f"no output from the build in {build.root}")
