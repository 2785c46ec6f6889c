"""Fixtures of the jobs layer; the fixed outputs, clock and hashes and the run_job.py runners they use live
in tests/jobs/helpers.py."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.helpers import subprocess_env
from tests.jobs.helpers import run_cli


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
def script_env():
    """Environment for running scripts/*.py as a subprocess, as a user would from the repo root."""
    return subprocess_env()
