"""Fixtures of the jobs layer; the fixed outputs, clock and hashes and the run_job.py runners they use live
in tests/jobs/helpers.py. ``owner_permissions`` makes permission checks behave as for a normal user when the
tests run as root."""

from __future__ import annotations

import os
import stat
import textwrap
from pathlib import Path

import pytest

import jobs.cloud.plan
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


@pytest.fixture
def no_poll_sleep(monkeypatch):
    """Follow jobs and builds without waiting between polls."""
    monkeypatch.setattr(jobs.cloud.plan, "POLL_SECONDS", 0)


@pytest.fixture(scope="session")
def script_env():
    """Environment for running scripts/*.py as a subprocess, as a user would from the repo root."""
    return subprocess_env()


@pytest.fixture
def owner_permissions(monkeypatch):
    """os.access decided by the owner's mode bits, as for a non-root owner: root may write anywhere, which
    would hide a read-only --local-root. A no-op when the tests do not run as root."""
    if os.geteuid() != 0:
        return
    bits = {os.R_OK: stat.S_IRUSR, os.W_OK: stat.S_IWUSR, os.X_OK: stat.S_IXUSR}

    def access(path, mode, *args, **kwargs):
        try:
            st_mode = os.stat(path).st_mode
        except OSError:
            return False
        return all(st_mode & bit for flag, bit in bits.items() if mode & flag)

    monkeypatch.setattr(os, "access", access)
