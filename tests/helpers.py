"""Helpers several layers' tests share (fixtures stay in the conftest files; this module defines none)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
# Variables Vertex AI (or run_job.py --local) sets in a job's containers: a child process under test must not
# inherit a stray one.
RUNTIME_PREFIXES = ("AIP_", "CLOUD_ML_", "TF_CONFIG", "CLUSTER_SPEC", "TRAINER_CPU_")


def subprocess_env(**extra: str) -> dict[str, str]:
    """The parent's environment for a child Python process as a user runs it from the repo root: the repo
    importable, Vertex AI's variables cleared, TensorFlow's C++ logging quiet and no GPU, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(RUNTIME_PREFIXES)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.setdefault("CUDA_VISIBLE_DEVICES", "")
    env.update(extra)
    return env


# Lines a test adds to the end-of-run summary, {section title: {key: line}}, kept in the session's stash;
# tests/conftest.py prints them, gathering them from pytest-xdist workers when the suite runs on several.
SUMMARY = pytest.StashKey[dict]()


def summary_section(config, title: str) -> dict[str, str]:
    """The (mutable) lines of the summary section ``title``: assign ``section[key] = line``."""
    return config.stash.setdefault(SUMMARY, {}).setdefault(title, {})
