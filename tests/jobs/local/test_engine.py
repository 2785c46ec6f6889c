"""jobs/local/engine.py and jobs/local/base_image.py without an engine: how a missing one is reported, how a
failed build's output is read, and what turns a Debian root filesystem into the stand-in for python:slim.
The engine itself is exercised by the container tier (tests/container)."""

from __future__ import annotations

import io
import os
import stat

import pytest

from jobs.cli.build_image import main as build_image
from jobs.local.base_image import CA_BUNDLE, DPKG_UNSAFE_IO, prepare_rootfs
from jobs.local.engine import EngineError, _StepTracker, find_engine


def _bin(tmp_path, **scripts: str):
    folder = tmp_path / "bin"
    folder.mkdir()
    for name, body in scripts.items():
        path = folder / name
        path.write_text("#!/bin/sh\n" + body)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(folder)


def test_no_engine_is_one_line_saying_how_to_get_one(tmp_path):
    with pytest.raises(EngineError) as caught:
        find_engine({"PATH": _bin(tmp_path)})
    line = str(caught.value)
    assert line.startswith("container engine: none answers on this machine (no docker; no podman)"), line
    assert "apt-get install podman" in line and "Docker" in line and "\n" not in line


def test_a_docker_client_with_no_engine_behind_it_does_not_count(tmp_path):
    # What /usr/local/bin/docker does on a machine with the CLI only: the client answers, the server does not.
    client = (
        'if [ "$1" = version ]; then echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock.'
        ' Is the docker daemon running?" >&2; exit 1; fi\nexit 0\n'
    )
    with pytest.raises(EngineError) as caught:
        find_engine({"PATH": _bin(tmp_path, docker=client)})
    assert "docker: Cannot connect to the Docker daemon" in str(caught.value)
    assert "no podman" in str(caught.value)


def test_an_unknown_engine_name_is_refused(tmp_path):
    with pytest.raises(EngineError) as caught:
        find_engine({"PATH": _bin(tmp_path), "CONTAINER_ENGINE": "lxc\x1b[2J"})
    assert str(caught.value) == (
        "CONTAINER_ENGINE: CONTAINER_ENGINE='lxc\\x1b[2J' is not an engine; allowed: docker or podman"
    )


def test_build_image_local_without_an_engine_exits_2_with_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", _bin(tmp_path))
    monkeypatch.delenv("CONTAINER_ENGINE", raising=False)
    out, err = io.StringIO(), io.StringIO()
    assert build_image(["--local", "cpu"], out=out, err=err) == 2
    assert out.getvalue() == ""
    assert err.getvalue().startswith("build_image.py: container engine: none answers on this machine")
    assert err.getvalue().count("\n") == 1


# A failed build's output as each builder prints it, and the line it must become.
PODMAN = (
    "[1/2] STEP 1/3: FROM localhost/base AS base\n[1/2] STEP 2/3: RUN true\n--> abc\n"
    "[2/2] STEP 3/3: RUN pip install -r /tmp/r.txt\nERROR: No matching distribution found for numpy\n"
    'Error: error building at STEP "RUN pip install -r /tmp/r.txt": while running runtime: exit status 1\n',
    "the build failed at step [2/2] STEP 3/3: RUN pip install -r /tmp/r.txt (exit status 1)",
)
DOCKER_CLASSIC = (
    "Step 1/3 : FROM python:3.11-slim\n ---> 1234\nStep 2/3 : RUN exit 3\n ---> Running in 5678\n"
    "The command '/bin/sh -c exit 3' returned a non-zero code: 3\n",
    "the build failed at step Step 2/3 : RUN exit 3 (exit status 3)",
)
BUILDKIT = (
    "#5 [base 1/2] FROM docker.io/library/python:3.11-slim\n#5 DONE 0.1s\n#6 [cpu 2/5] RUN pip check\n"
    "#6 ERROR: process \"/bin/sh -c pip check\" did not complete successfully: exit code: 1\n"
    "#7 [tpu 2/4] COPY x /x\n#7 CANCELED\n------\n > [cpu 2/5] RUN pip check:\n------\n"
    'ERROR: failed to solve: process "/bin/sh -c pip check" did not complete successfully: exit code: 1\n',
    "the build failed at step #6 [cpu 2/5] RUN pip check (exit status 1)",
)
NO_STEP = (
    "Error: no Dockerfile found in /tmp/x\n",
    "the build failed at its start (no step was reached) (the engine exited 125): "
    "Error: no Dockerfile found in /tmp/x",
)


@pytest.mark.parametrize("output, line", [PODMAN, DOCKER_CLASSIC, BUILDKIT, NO_STEP])
def test_a_failed_build_is_one_line_naming_its_step(output, line):
    tracker = _StepTracker()
    for text in output.splitlines():
        tracker.feed(text)
    assert tracker.failure(125 if output is NO_STEP[0] else 1) == line


def test_a_bookworm_rootfs_is_made_to_look_like_python_slim(tmp_path):
    rootfs = tmp_path / "rootfs"
    for rel in ("usr/lib/python3.11/EXTERNALLY-MANAGED", "var/cache/apt/archives/python3_3.11.deb",
                "var/lib/apt/lists/deb.debian.org_dists_bookworm_InRelease", "var/lib/apt/lists/lock",
                "etc/ssl/certs/ca-certificates.crt", DPKG_UNSAFE_IO):
        (rootfs / rel).parent.mkdir(parents=True, exist_ok=True)
        (rootfs / rel).write_text("debian's\n")
    host_ca = tmp_path / "host-ca.crt"
    host_ca.write_text("-----BEGIN CERTIFICATE-----\nthe proxy's own CA\n")
    prepare_rootfs(rootfs, host_ca)
    assert not (rootfs / "usr/lib/python3.11/EXTERNALLY-MANAGED").exists()
    assert os.readlink(rootfs / "usr/local/bin/python") == "/usr/bin/python3"
    assert os.readlink(rootfs / "usr/local/bin/pip") == "/usr/bin/pip3"
    assert (rootfs / CA_BUNDLE.lstrip("/")).read_text() == host_ca.read_text()
    assert sorted(p.name for p in (rootfs / "var").rglob("*") if p.is_file()) == ["lock"]
    assert not (rootfs / DPKG_UNSAFE_IO).exists()  # the bootstrap's dpkg speed-up is not the image's
    prepare_rootfs(rootfs, host_ca)  # again, over its own result: the links are replaced, not an error
