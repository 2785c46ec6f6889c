"""Shared by the quality benchmarks (bench_trainer_quality.py, bench_image_quality.py, bench_recommender.py):
one ``python -m trainer.task`` run exactly as a user runs it, timed, and the report it saved.

Not a command: the benchmarks import it (they run as ``python scripts/<name>.py``, so this folder is on
``sys.path``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


class TrainerFailed(Exception):
    """The trainer exited non-zero; ``str()`` is the tail of its stderr."""

    def __init__(self, returncode: int, stderr: str) -> None:
        super().__init__(stderr[-3000:])
        self.returncode = returncode


@dataclass(frozen=True)
class Run:
    report: dict  # the model's metrics.json
    wall: float  # the whole process: TensorFlow import, data scan, training and export
    load: float  # the 1-minute load average when it started


def train(model: str, flags: list[str], seed: int, job_dir: str) -> Run:
    """Train ``--model model`` with ``flags`` and ``--seed seed`` into ``job_dir``, quietly."""
    pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": pythonpath, "TF_CPP_MIN_LOG_LEVEL": "2"}
    # ``flags`` last: a benchmark's extra trainer flags (after ``--``) win, as argparse keeps the last value.
    cmd = [sys.executable, "-m", "trainer.task", "--model", model, "--job-dir", job_dir, "--seed", str(seed),
           "--verbosity", "WARNING", *flags]
    load = os.getloadavg()[0]
    start = time.perf_counter()
    out = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if out.returncode != 0:
        raise TrainerFailed(out.returncode, out.stderr)
    return Run(json.loads(Path(job_dir, "model", "metrics.json").read_text()), wall, load)
