"""Shared by the trainer tests: slices of the real census files and running `python -m trainer.task` as
Vertex AI does (fixtures stay in conftest.py)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

from tests.helpers import subprocess_env

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


# A test-only task (tests/trainer/test_tasks_registry.py) registered for the duration of a `with` block.
TINY_MODEL = "tiny"
TINY_MODULE = "tests.trainer.test_tasks_registry"


@contextlib.contextmanager
def tiny_task_registered():
    """Register the test-only ``tiny`` task beside the real ones, as one registry line would."""
    import pytest

    from jobs.definition.trainer_contract import load_trainer_contract
    from trainer import registry

    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(registry.TASK_MODULES, TINY_MODEL, TINY_MODULE)
        load_trainer_contract.cache_clear()  # the job tooling's contract is read once per process
        try:
            yield
        finally:
            load_trainer_contract.cache_clear()
