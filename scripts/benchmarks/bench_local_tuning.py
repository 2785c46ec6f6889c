"""Benchmark the local tuning executor on the census job definitions; prints figures and both ratios.

    python scripts/benchmarks/bench_local_tuning.py                 # both measurements (~8-10 min on 2 cores)
    python scripts/benchmarks/bench_local_tuning.py --only parallel # wall time, parallelTrialCount 2 vs 1
    python scripts/benchmarks/bench_local_tuning.py --only quality  # best accuracy, Bayesian vs grid, 8 each

1. Parallelism: the same grid trials (jobs/census_tuning_grid.yaml, the seeded grid's first points) run
   with parallelTrialCount 1 and 2; ratio = wall(2) / wall(1), target <= 0.65. Each trial's TensorFlow
   thread pools get cores / parallel threads (jobs/local/environment.py), so two trials share the cores
   instead of oversubscribing them, and their single-threaded parts (start-up, parsing) overlap.
2. Quality: best accuracy of 8 trials, 2 at a time, Bayesian (ALGORITHM_UNSPECIFIED: TPE) against
   jobs/census_tuning_grid.yaml (GRID_SEARCH); target >= 1. Two Bayesian figures: the shipped
   jobs/census_tuning.yaml (its own, wider space), and the grid's definition with only the algorithm
   switched, which compares the samplers on one space.

Every study runs through the public entry point, `scripts/run_job.py FILE --local`, in a scratch local root.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def run_study(job_file: str, local_root: Path, trials: int, parallel: int,
              *overrides: str) -> tuple[float, dict]:
    cmd = [
        sys.executable,
        str(REPO_ROOT / "scripts" / "run_job.py"),
        job_file,
        "--local",
        "--local-root",
        str(local_root),
        "--set",
        f"maxTrialCount={trials}",
        "--set",
        f"parallelTrialCount={parallel}",
        *(x for override in overrides for x in ("--set", override)),
    ]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    match = re.search(r"^Results: (.+study\.json)$", proc.stdout, re.MULTILINE)
    if proc.returncode != 0 or not match:
        sys.exit(f"{job_file} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return wall, json.loads(Path(match.group(1)).read_text())


def parallel_ratio(root: Path, trials: int) -> float:
    walls = {}
    for parallel in (1, 2):
        wall, study = run_study("jobs/census_tuning_grid.yaml", root / f"p{parallel}", trials, parallel)
        walls[parallel] = wall
        points = sorted(json.dumps(t["parameters"], sort_keys=True) for t in study["trials"])
        distinct = len(set(points))
        print(f"parallelTrialCount={parallel}: {trials} trials in {wall:.1f}s ({distinct} distinct points)")
    ratio = walls[2] / walls[1]
    print(f"ratio wall(parallel=2) / wall(parallel=1) = {ratio:.2f}  (target <= 0.65)")
    return ratio


QUALITY_STUDIES = (
    # The shipped definitions as they are: different spaces (the grid is 18 hand-picked points around the
    # trainer's tuned defaults; the Bayesian study searches a 100x learning-rate range and scale-factor too).
    ("bayesian", "jobs/census_tuning.yaml", ()),
    ("grid", "jobs/census_tuning_grid.yaml", ()),
    # The sampler alone: the grid's own space and metric, only the algorithm switched.
    ("bayesian-on-grid", "jobs/census_tuning_grid.yaml", ("studySpec.algorithm=ALGORITHM_UNSPECIFIED",)),
)


def quality_ratio(root: Path, trials: int) -> float:
    best = {}
    for name, job_file, overrides in QUALITY_STUDIES:
        wall, study = run_study(job_file, root / name, trials, 2, *overrides)
        best[name] = study["best"]["metric"]
        print(
            f"{name:16s}: best accuracy {best[name]:.4f} over {len(study['trials'])} trials in {wall:.1f}s "
            f"({study['best']['parameters']})"
        )
    print(f"ratio best(bayesian) / best(grid) = {best['bayesian'] / best['grid']:.4f}  "
          "(shipped definitions; target >= 1.0)")
    ratio = best["bayesian-on-grid"] / best["grid"]
    print(f"ratio best(bayesian-on-grid) / best(grid) = {ratio:.4f}  (one space, the sampler alone; "
          "target >= 1.0)")
    return ratio


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("parallel", "quality"))
    parser.add_argument("--parallel-trials", type=int, default=4, help="trials per run of the parallel test")
    parser.add_argument("--quality-trials", type=int, default=8, help="trials per study of the quality test")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-local-tuning-") as tmp:
        root = Path(tmp)
        if args.only in (None, "parallel"):
            parallel_ratio(root, args.parallel_trials)
        if args.only in (None, "quality"):
            quality_ratio(root, args.quality_trials)
    return 0


if __name__ == "__main__":
    sys.exit(main())
