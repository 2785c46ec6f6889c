#!/usr/bin/env python3
"""Benchmark: how fast run_job.py answers --help and --dry-run, relative to importing TensorFlow.

    python scripts/benchmarks/bench_run_job.py [--repeat 5] [--job jobs/census_tuning.yaml] [--check]

Each round runs the three commands back to back in fresh interpreters (interleaved, so machine noise hits all
of them alike) and the medians are compared. Targets (issue 5): --help <= 0.2x and --dry-run <= 0.6x of
`python -c "import tensorflow"`. With --check the exit status is 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TARGETS = {"--help": 0.2, "--dry-run": 0.6}


def wall(cmd: list[str]) -> float:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    start = time.perf_counter()
    result = subprocess.run(cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"bench_run_job.py: {' '.join(cmd)} failed: {result.stderr.decode().strip()[-300:]}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=5, help="rounds (default 5)")
    parser.add_argument("--job", default="jobs/census_tuning.yaml", help="definition for --dry-run")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    args = parser.parse_args()

    run_job = [sys.executable, "scripts/run_job.py"]
    commands = {
        "import tensorflow": [sys.executable, "-c", "import tensorflow"],
        "--help": [*run_job, "--help"],
        "--dry-run": [*run_job, args.job, "--dry-run"],
    }
    for cmd in commands.values():  # warm the page cache and bytecode caches once
        wall(cmd)
    samples: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(args.repeat):
        for name, cmd in commands.items():
            samples[name].append(wall(cmd))

    baseline = statistics.median(samples["import tensorflow"])
    print(f"{'command':<48}{'median s':>10}{'min s':>9}{'ratio':>8}{'target':>8}")
    label = 'python -c "import tensorflow"'
    print(f"{label:<48}{baseline:>10.3f}{min(samples['import tensorflow']):>9.3f}{1.0:>8.2f}")
    missed = []
    for name, target in TARGETS.items():
        median = statistics.median(samples[name])
        ratio = median / baseline
        label = f"run_job.py {name}" + (f" {args.job}" if name == "--dry-run" else "")
        print(
            f"{label:<48}{median:>10.3f}{min(samples[name]):>9.3f}{ratio:>8.2f}{'<=' + str(target):>8}"
            f"  {'ok' if ratio <= target else 'MISSED'}"
        )
        if ratio > target:
            missed.append(name)
    print(f"({args.repeat} interleaved rounds, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs)")
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
