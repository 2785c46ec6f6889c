"""The docker CLI driving Podman through its API socket (`podman system service`), the set-up of machines with
Podman and the docker client only: the engine is found through the client, a container's exit status comes
back (Podman's API drops it for `run --rm`), and a failed build still names its step."""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import time

import pytest

from jobs.local.engine import BuildError, find_engine


@pytest.fixture(scope="module")
def docker_on_podman(engine, tmp_path_factory):
    if engine.name != "podman" or shutil.which("docker") is None:
        pytest.skip("needs Podman and a docker client: this machine's engine is " + engine.name)
    socket = tmp_path_factory.mktemp("podman-api") / "podman.sock"
    before = set(_build_containers(engine))
    service = subprocess.Popen(
        [*engine.command, "system", "service", "--time=0", f"unix://{socket}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not socket.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        yield find_engine({**os.environ, "DOCKER_HOST": f"unix://{socket}", "CONTAINER_ENGINE": "docker"})
    finally:
        os.killpg(service.pid, signal.SIGTERM)
        service.wait(timeout=60)
        # Podman 4.3's API keeps a failed build's working container, --force-rm or not: this module's go.
        for container in set(_build_containers(engine)) - before:
            engine.remove(container)


def _build_containers(engine) -> list[str]:
    listed = engine.call("ps", "--all", "--external", "--format", "{{.ID}} {{.Command}}").stdout.decode()
    return [line.split()[0] for line in listed.splitlines() if line.split()[1:] == ["buildah"]]


def test_the_docker_client_finds_podman_behind_it_and_gets_exit_statuses(docker_on_podman, cpu_image):
    docker = docker_on_podman
    assert docker.name == "docker" and docker.rm_loses_status
    proc = docker.run(cpu_image.ref, ["-c", "exit 3"], entrypoint="sh")
    assert proc.returncode == 3, proc.stderr.decode()
    names = docker.call("ps", "--all", "--format", "{{.Names}}").stdout.decode().split()
    assert not [n for n in names if n.startswith(f"trainer-run-{os.getpid()}-")]  # removed once it ended


def test_a_failed_build_through_the_docker_client_names_its_step(docker_on_podman, cpu_image, tmp_path):
    docker = docker_on_podman
    (tmp_path / "Dockerfile").write_text(f"FROM {cpu_image.ref}\nRUN exit 4\n")
    with pytest.raises(BuildError) as caught:
        docker.build(tmp_path, "localhost/trainer-test:failing", out=io.StringIO(), timeout=300)
    assert str(caught.value) == "Dockerfile: the build failed at step STEP 2/2: RUN exit 4 (exit status 4)"
