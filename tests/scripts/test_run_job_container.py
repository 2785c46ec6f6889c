"""`--container` refusals that need no engine: each is one line and a non-zero exit before any container
could start (no engine on PATH, an image target this machine cannot build, a port in use, a flag without
the mode it belongs to). What runs in containers is the `container` tier
(tests/jobs/local/test_container_*.py)."""

from __future__ import annotations

import socket

import pytest

from tests.jobs.helpers import refusal, run_script


@pytest.fixture
def no_engine_env(script_env, tmp_path):
    """No docker and no podman on PATH."""
    return {**script_env, "PATH": str(tmp_path / "empty-bin")}


def test_no_engine_is_one_line_saying_how_to_get_one(no_engine_env, tmp_path):
    args = ["jobs/census_cpu.yaml", "--local", "--container", "--local-root", tmp_path / "root"]
    result = run_script(args, no_engine_env)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        "error: local run --container: container engine: none answers on this machine (no docker; no "
        "podman); allowed: install one: `apt-get install podman runc` on Debian/Ubuntu, or Docker "
        "(docs.docker.com/engine/install)"
    ]
    assert not (tmp_path / "root").exists()  # nothing staged or written


@pytest.mark.parametrize(
    "job, field, words",
    [
        ("census_gpu.yaml", "jobSpec.workerPoolSpecs.0.containerSpec.imageUri",
         "the gpu image is skipped: it is built for GPUs"),
        ("census_tpu.yaml", "jobSpec.workerPoolSpecs.0.containerSpec.imageUri",
         "the tpu image is skipped: it is built for TPUs"),
        ("census_prebuilt.yaml", "jobSpec.workerPoolSpecs.0.pythonPackageSpec.executorImageUri",
         "Vertex AI's prebuilt image, which cannot be pulled here"),
    ],
)
def test_an_image_that_cannot_be_built_here_is_refused_before_the_engine(job, field, words, no_engine_env,
                                                                          tmp_path):
    result = run_script([f"jobs/{job}", "--local", "--container", "--local-root", tmp_path], no_engine_env)
    line = refusal(result, f"jobs/{job}", field)
    assert words in line and "--local runs this job" in line


def test_a_port_in_use_is_one_line_before_anything_is_built(script_env, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "saved_model.pb").write_bytes(b"")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_script(["serve", model, "--container", "--port", port], script_env)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.splitlines() == [
        f"run_job.py serve: error: serve: --port: 127.0.0.1:{port} cannot be used (Address already in use); "
        "allowed: a free port (0: any free one)"
    ]


def test_serving_without_an_engine_is_one_line(no_engine_env, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "saved_model.pb").write_bytes(b"")
    result = run_script(["serve", model, "--container", "--port", "0"], no_engine_env)
    assert result.returncode == 2 and result.stdout == ""
    (line,) = result.stderr.splitlines()
    assert line.startswith("run_job.py serve: error: serve: container engine: none answers on this machine")


@pytest.mark.parametrize(
    "args, message",
    [
        (["jobs/census_cpu.yaml", "--container"], "--container runs a --local job's replicas in containers"),
        (["jobs/census_cpu.yaml", "--local", "--container", "--preempt-after", "5"],
         "--preempt-after rehearses a preemption of --local processes"),
        (["batch-predict", "m@production", "--input", "gs://b/x.jsonl", "--output", "gs://b/o/",
          "--container"], "--container runs a --local batch prediction's server in its container"),
    ],
)
def test_container_without_its_mode_is_a_usage_error(args, message, script_env):
    result = run_script(args, script_env)
    assert result.returncode == 2 and result.stdout == ""
    assert message in result.stderr.splitlines()[-1]

