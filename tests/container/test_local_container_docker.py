"""`--local --container` through the docker client on Podman's API socket (the set-up of machines with the
docker client only; the socket fixture is tests/container/test_docker_on_podman.py's): a replica's exit
status comes back although that API loses it for `run --rm`, nothing of the run is left, and what a killed
command left behind is found by Docker's own template."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from jobs.local import container
from jobs.local.container_plan import OWNER_LABEL, RUN_LABEL
from tests.container.conftest import REPO_ROOT
from tests.container.test_docker_on_podman import docker_on_podman  # noqa: F401 - the fixture
from tests.container.test_local_container import left_of, stage_slice
from tests.helpers import subprocess_env

pytestmark = pytest.mark.training


def test_a_failing_replica_fails_the_job_with_its_own_status(docker_on_podman, cpu_image, tmp_path):  # noqa: F811
    docker = docker_on_podman
    root = stage_slice(tmp_path, train_rows=200, eval_rows=100)
    data = next((root / "gs").glob("*/census/adult.data"))
    data.write_text(data.read_text() + "not, a, census, row\n" * 50)  # malformed rows: the trainer exits 2
    env = {**subprocess_env(), **dict(docker.env), "CONTAINER_ENGINE": "docker"}
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / "run_job.py"), "jobs/census_cpu.yaml", "--local",
         "--container", "--local-root", str(root)],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    assert "failed after" in result.stdout and "workerpool0-0 exited with status 2" in result.stdout
    name = next(line.split("'")[1] for line in result.stdout.splitlines() if "': running" in line)
    assert left_of(docker, name) == []


def test_what_a_killed_command_left_is_found_through_the_docker_client(docker_on_podman, cpu_image):  # noqa: F811
    docker = docker_on_podman
    run = f"docker-orphan-{os.getpid()}"
    owner = f"{socket.gethostname()}:{2**22 + 1}"  # above pid_max's default: no such process
    docker.call("run", "--detach", "--init", "--name", run, "--label", f"{RUN_LABEL}={run}", "--label",
                f"{OWNER_LABEL}={owner}", *docker.run_flags, "--entrypoint", "sleep", cpu_image.ref, "300")
    assert run in container.sweep(docker)
    assert left_of(docker, run) == []
