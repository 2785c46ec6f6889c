"""Fixtures of the jobs layer: fixed infra outputs, clock and code hash (so requests are reproducible) and
runners for scripts/run_job.py, in-process and as a subprocess."""

from __future__ import annotations

import io
import os
import sys
import textwrap
from datetime import datetime, timezone
from pathlib import Path

import pytest

from jobs.cli import main

REPO_ROOT = Path(__file__).resolve().parents[2]
JOBS_DIR = REPO_ROOT / "jobs"
SHIPPED = sorted(JOBS_DIR.glob("*.yaml"))
NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
CODE_HASH = "0123456789abcdef"
IMAGE_HASH = "fedcba9876543210"
OUTPUTS = {
    "project": "demo-project",
    "project_number": "123456789012",
    "region": "us-central1",
    "data_bucket": "gs://demo-project-data",
    "staging_bucket": "gs://demo-project-staging",
    "models_bucket": "gs://demo-project-models",
    "tensorboard_logs_bucket": "gs://demo-project-tensorboard",
    "runtime_service_account": "vertex-runtime@demo-project.iam.gserviceaccount.com",
    "tensorboard": "projects/demo-project/locations/us-central1/tensorboards/1234567890",
    "artifact_registry": "us-central1-docker.pkg.dev/demo-project/ml",
    "trainer_image": "us-central1-docker.pkg.dev/demo-project/ml/trainer",
    "builder_service_account": "image-builder@demo-project.iam.gserviceaccount.com",
}
PLANNED_OUTPUTS = {
    **OUTPUTS,
    "tensorboard": "projects/demo-project/locations/us-central1/tensorboards/PENDING_DEPLOY",
}


def run_cli(
    argv,
    *,
    outputs=None,
    factory=None,
    now=NOW,
    code_hash=CODE_HASH,
    image_hash=IMAGE_HASH,
    repo_root=REPO_ROOT,
):
    """Run run_job.py's main in-process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    try:
        rc = main(
            [str(a) for a in argv],
            outputs=OUTPUTS if outputs is None else outputs,
            factory=factory,
            now=now,
            code_hash=code_hash,
            image_hash=image_hash,
            repo_root=repo_root,
            out=out,
            err=err,
        )
    except SystemExit as exc:  # argparse usage errors
        rc = exc.code
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture
def write_job(tmp_path):
    """Write a definition to a temp file and return its path."""

    def write(text: str, name: str = "job.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    return write


@pytest.fixture(scope="session")
def subprocess_env():
    """Environment for running scripts/run_job.py as a subprocess, as a user would from the repo root."""
    return dict(os.environ, PYTHONPATH=str(REPO_ROOT), TF_CPP_MIN_LOG_LEVEL="2")


def run_script(args, env, cwd=REPO_ROOT, timeout=60, script="run_job.py"):
    import subprocess

    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / script), *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
