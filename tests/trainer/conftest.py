"""Fixtures for the trainer tests: small slices of the real census files and a subprocess runner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
CENSUS = REPO_ROOT / "data" / "census"
TRAIN_ROWS = 2000
EVAL_ROWS = 1000


def write_slice(src: Path, dst: Path, rows: int, *, keep_banner: bool = False) -> Path:
    """The first ``rows`` data lines of ``src``, keeping the file's quirks (banner, blank last line)."""
    lines = src.read_bytes().split(b"\n")
    head = lines[:1] if keep_banner else []
    body = lines[1:][:rows] if keep_banner else lines[:rows]
    dst.write_bytes(b"\n".join(head + body) + b"\n\n")
    return dst


@pytest.fixture(scope="session")
def census_slice(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("census")
    return {
        "train": write_slice(CENSUS / "adult.data", root / "adult.data", TRAIN_ROWS),
        "eval": write_slice(CENSUS / "adult.test", root / "adult.test", EVAL_ROWS, keep_banner=True),
    }


def subprocess_env(**extra: str) -> dict[str, str]:
    """The parent's environment with the repo importable and Vertex AI's variables cleared."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AIP_", "CLOUD_ML_", "TF_CONFIG", "CLUSTER_SPEC"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH")) if p)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.setdefault("CUDA_VISIBLE_DEVICES", "")
    env.update(extra)
    return env


def trainer_args(slice_: dict[str, Path], job_dir: Path | None, *extra: str) -> list[str]:
    args = [sys.executable, "-m", "trainer.task", "--train-files", str(slice_["train"]),
            "--eval-files", str(slice_["eval"]), "--num-epochs", "2", "--train-batch-size", "128"]
    if job_dir is not None:
        args += ["--job-dir", str(job_dir)]
    return args + list(extra)


def run_trainer(args: list[str], *, env: dict[str, str] | None = None, timeout: float = 120):
    return subprocess.run(args, cwd=REPO_ROOT, env=env or subprocess_env(), capture_output=True, text=True,
                          timeout=timeout)


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("trainer.task: error:")]
