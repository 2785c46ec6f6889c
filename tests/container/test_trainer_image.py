"""The cpu trainer image, built by this machine's engine from the real Dockerfile (the fixtures are in
tests/container/conftest.py): its tag, its entry point, its user and the server it also runs; and the one
line of a failed build."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time

import pytest

from jobs.cli.build_image import main as build_image
from jobs.definition.image import image_hash
from jobs.local.engine import BuildError, EngineError
from jobs.local.trainer_image import BASE_LABEL, ensure_image, local_ref
from tests.container.conftest import REPO_ROOT


def test_the_image_is_tagged_with_the_content_hash_cloud_build_uses(engine, cpu_image):
    digest = image_hash(REPO_ROOT)
    assert cpu_image.ref == local_ref("cpu", digest) == f"localhost/trainer:cpu-{digest}"
    assert engine.image_exists(cpu_image.ref)
    labels = engine.image_labels(cpu_image.ref)
    assert labels[BASE_LABEL] == cpu_image.base != ""


def test_an_unchanged_checkout_reuses_the_tag(engine, cpu_image):
    start = time.monotonic()
    again = ensure_image(engine, REPO_ROOT, "cpu", io.StringIO())
    assert (again.ref, again.built) == (cpu_image.ref, False)
    assert time.monotonic() - start < 30


def test_the_entrypoint_is_the_trainer_and_a_bad_flag_is_its_one_line(engine, cpu_image):
    argv = [sys.executable, "-m", "trainer.task", "--no-such-flag"]
    local = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True)
    proc = engine.run(cpu_image.ref, ["--no-such-flag"], timeout=300)
    err = proc.stderr.decode()
    assert proc.returncode == local.returncode == 2, err
    assert err.strip().splitlines() == local.stderr.strip().splitlines()
    assert len(err.strip().splitlines()) == 1 and err.startswith("trainer.task: error:")


def test_it_runs_as_the_unprivileged_trainer_user(engine, cpu_image):
    code = "import os; print(os.getuid(), os.getgid())"
    proc = engine.run(cpu_image.ref, ["-c", code], entrypoint="python")
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout.decode().split() == ["10001", "10001"]


def test_the_serving_module_runs_in_it(engine, cpu_image):
    # What a Model Registry entry's command runs: `python -m serving` (its --help parses every flag).
    proc = engine.run(cpu_image.ref, ["-m", "serving", "--help"], entrypoint="python", timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout.decode().startswith("usage: serving")


def test_a_failed_build_names_the_failing_step(engine, cpu_image, tmp_path):
    # The failing step comes right after FROM: no earlier step leaves a cached layer behind.
    (tmp_path / "Dockerfile").write_text(
        f"FROM {cpu_image.ref}\nRUN echo about to fail && exit 3\nRUN echo never reached\n"
    )
    log = io.StringIO()
    with pytest.raises(BuildError) as caught:
        engine.build(tmp_path, "localhost/trainer-test:failing", out=log, timeout=300)
    line = str(caught.value)
    assert len(line.splitlines()) == 1
    assert line.startswith("Dockerfile: ") and "RUN echo about to fail && exit 3" in line, line
    assert "exit status 3" in line and "never reached" not in line, line
    assert "about to fail" in log.getvalue()  # the build's own output was streamed
    assert not engine.image_exists("localhost/trainer-test:failing")


def test_the_gpu_image_is_refused_in_one_line_unless_asked_for(engine):
    if engine.image_exists(local_ref("gpu", image_hash(REPO_ROOT))):
        pytest.skip("this checkout's gpu image was built here (--allow-large): it is reused, not refused")
    out, err = io.StringIO(), io.StringIO()
    assert build_image(["--local", "gpu"], out=out, err=err) == 2
    assert out.getvalue() == ""
    assert err.getvalue() == (
        "build_image.py: variant: not building the gpu image here: its CUDA wheels are 1.9 GB to download "
        "(2.5 GB with TensorFlow); allowed: cpu and tpu; --allow-large builds gpu anyway\n"
    )


def test_a_run_past_its_time_is_one_line_and_leaves_no_container(engine, cpu_image):
    with pytest.raises(EngineError) as caught:
        name = f"trainer-test-{os.getpid()}"
        engine.run(cpu_image.ref, ["-c", "sleep 120"], entrypoint="sh", name=name, timeout=5)
    assert "did not finish within 5 s" in str(caught.value) and "\n" not in str(caught.value)
    names = engine.call("ps", "--all", "--format", "{{.Names}}").stdout.decode().split()
    assert name not in names


def test_build_image_local_exits_1_naming_the_failing_step(engine, cpu_image, tmp_path):
    # A repository of its own whose cpu target fails: the real context and tag rules, a throwaway Dockerfile.
    (tmp_path / ".dockerignore").write_text("*\n!Dockerfile\n")
    (tmp_path / "Dockerfile").write_text(
        f"ARG BASE_IMAGE={cpu_image.ref}\nFROM ${{BASE_IMAGE}} AS cpu\nRUN echo checking && exit 5\n"
    )
    out, err = io.StringIO(), io.StringIO()
    assert build_image(["--local", "cpu"], repo_root=tmp_path, out=out, err=err) == 1
    assert out.getvalue() == ""
    last = err.getvalue().splitlines()[-1]
    assert last.startswith("build_image.py: Dockerfile: the build failed at step ")
    assert last.endswith("RUN echo checking && exit 5 (exit status 5)"), last
    assert not engine.image_exists(local_ref("cpu", image_hash(tmp_path)))
