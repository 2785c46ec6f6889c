"""Shared by the quality benchmarks (bench_trainer_quality.py, bench_image_quality.py, bench_recommender.py):
one ``python -m trainer.task`` run exactly as a user runs it, timed, and the report it saved. The scale
benchmark (bench_data_scale.py) builds its runs from the same command line and environment, run from any
checkout.

Not a command: the benchmarks import it (they run as ``python scripts/benchmarks/<name>.py``, so this folder
is on ``sys.path``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


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


def trainer_command(model: str, flags: list[str], seed: int, job_dir: str,
                    verbosity: str = "WARNING") -> list[str]:
    """The ``python -m trainer.task`` command line of one run."""
    # ``flags`` last: a benchmark's extra trainer flags (after ``--``) win, as argparse keeps the last value.
    return [sys.executable, "-m", "trainer.task", "--model", model, "--job-dir", job_dir, "--seed", str(seed),
            "--verbosity", verbosity, *flags]


def trainer_env(repo: Path = REPO, **extra: str) -> dict[str, str]:
    """The environment of a trainer run from checkout ``repo``, whose ``trainer`` package it imports."""
    pythonpath = os.pathsep.join(filter(None, [str(repo), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": pythonpath, "TF_CPP_MIN_LOG_LEVEL": "2", **extra}


def train(model: str, flags: list[str], seed: int, job_dir: str) -> Run:
    """Train ``--model model`` with ``flags`` and ``--seed seed`` into ``job_dir``, quietly."""
    cmd = trainer_command(model, flags, seed, job_dir)
    load = os.getloadavg()[0]
    start = time.perf_counter()
    out = subprocess.run(cmd, cwd=REPO, env=trainer_env(), capture_output=True, text=True)
    wall = time.perf_counter() - start
    if out.returncode != 0:
        raise TrainerFailed(out.returncode, out.stderr)
    return Run(json.loads(Path(job_dir, "model", "metrics.json").read_text()), wall, load)


def free_ports(n: int) -> list[int]:
    """``n`` loopback ports free right now, for a local multi-worker cluster's TF_CONFIG."""
    import socket

    socks = [socket.socket() for _ in range(n)]
    for sock in socks:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in socks]
    for sock in socks:
        sock.close()
    return ports
