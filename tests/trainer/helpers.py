"""Shared by the trainer tests: slices of the real census files and running `python -m trainer.task` as
Vertex AI does (fixtures stay in conftest.py)."""

from __future__ import annotations

import contextlib
import json
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


def damaged(whole: bytes) -> list[bytes]:
    """Ways a cached file goes bad: foreign bytes, empty (a power loss after the rename), truncated, one bit
    flipped in the middle."""
    flipped = bytearray(whole)
    flipped[len(whole) // 2] ^= 0x10
    return [b"not a cached file", b"", whole[:len(whole) // 2], bytes(flipped)]


def trainer_args(slice_: dict[str, Path], job_dir: Path | None, *extra: str) -> list[str]:
    args = [sys.executable, "-m", "trainer.task", "--train-files", str(slice_["train"]),
            "--eval-files", str(slice_["eval"]), "--num-epochs", "2", "--train-batch-size", "128"]
    if job_dir is not None:
        args += ["--job-dir", str(job_dir)]
    return args + list(extra)


def run_trainer(args: list[str], *, env: dict[str, str] | None = None, timeout: float = 120):
    return subprocess.run(args, cwd=REPO_ROOT, env=env or subprocess_env(), capture_output=True, text=True,
                          timeout=timeout)


def run_trainers(commands: dict[str, list[str]], work: Path, *, timeout: float = 600
                 ) -> dict[str, subprocess.CompletedProcess]:
    """What :func:`run_trainer` returns for each of ``commands`` (``python -m trainer.task`` command lines),
    all run in ONE fresh interpreter, one after another (tests/trainer/cli_batch.py): TensorFlow is imported
    once, not once per command line. For runs that stop before or early in training, and short runs whose
    test reads only what they wrote (not the process's own start-up). Not for two runs under a
    tf.distribute strategy with collectives (MirroredStrategy over several devices): the second one's
    collectives fail in a process whose first run used them."""
    for name, args in commands.items():
        assert args[:3] == [sys.executable, "-m", "trainer.task"], (name, args[:3])
    runs, out = work / "runs.json", work / "results.json"
    runs.write_text(json.dumps({name: [str(a) for a in args[3:]] for name, args in commands.items()}))
    runner = run_trainer([sys.executable, "-m", "tests.trainer.cli_batch", str(runs), str(out)],
                         timeout=timeout)
    results = json.loads(out.read_text()) if out.exists() else {}
    died = f"the batch runner exited with status {runner.returncode} before this run finished:\n"
    died += runner.stderr
    return {name: subprocess.CompletedProcess(args, results[name]["status"], results[name]["stdout"],
                                              results[name]["stderr"]) if name in results
            else subprocess.CompletedProcess(args, runner.returncode, runner.stdout, died)
            for name, args in commands.items()}


def run_cases(cases: list[str], make, tmp_path_factory) -> dict[str, tuple]:
    """Each case's command line, ``make(case, folder) -> (command line, expected)`` with its files in a
    folder of its own (job dir folder/job), all run by :func:`run_trainers`: {case: (job dir, expected,
    CompletedProcess)}."""
    made = {}
    for case in cases:
        folder = tmp_path_factory.mktemp(case)
        made[case] = (folder / "job", *make(case, folder))
    outs = run_trainers({case: args for case, (_, args, _) in made.items()}, tmp_path_factory.mktemp("runs"))
    return {case: (job, expected, outs[case]) for case, (job, _, expected) in made.items()}


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("trainer.task: error:")]


# A test-only task (tests/trainer/test_models_registry.py) registered for the duration of a `with` block.
TINY_MODEL = "tiny"
TINY_MODULE = "tests.trainer.test_models_registry"


@contextlib.contextmanager
def tiny_task_registered():
    """Register the test-only ``tiny`` task beside the real ones, as one registry line would."""
    import pytest

    from jobs.definition.trainer_spec import load_trainer_spec
    from trainer import models as tasks

    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(tasks.TASK_MODULES, TINY_MODEL, TINY_MODULE)
        load_trainer_spec.cache_clear()  # the job tooling's contract is read once per process
        try:
            yield
        finally:
            load_trainer_spec.cache_clear()
