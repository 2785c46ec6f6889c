"""Benchmark: synthesis time of every infra stack and wall time of the infra test module.

    pipenv run python scripts/bench_synth.py [--repeat 3] [--skip-tests]

Prints, for all environments in infra/environments/:
  - cold and warm wall time of `python -m infra.main` (what `cdktn synth` runs; warm = OS caches hot),
  - in-process synthesis time once the CDK is imported (the part our code controls),
  - wall time of `pytest tests/infra`.
Targets (issue 3): warm synthesis of all stacks <= 8 s, infra tests <= 30 s. Machines are noisy: compare
figures from one run, and rerun before drawing conclusions.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SYNTH_TARGET_S = 8.0
TESTS_TARGET_S = 30.0
sys.path.insert(0, str(REPO_ROOT))  # run as a file, the script's own folder comes first on sys.path


def _env() -> dict[str, str]:
    venv_bin = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
            "CHECKPOINT_DISABLE": "1", "PYTHONPATH": str(REPO_ROOT)}


def _timed(cmd: list[str], timeout: int, extra_env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=REPO_ROOT, env={**_env(), **(extra_env or {})}, check=True, capture_output=True,
                   timeout=timeout)
    return time.perf_counter() - start


def app_runs(repeat: int) -> list[float]:
    """Wall times of `python -m infra.main`; the first run is the cold one."""
    times = []
    for _ in range(repeat + 1):
        with tempfile.TemporaryDirectory() as out:
            times.append(_timed([sys.executable, "-m", "infra.main"], timeout=300,
                                extra_env={"CDKTF_OUTDIR": out}))
    return times


def in_process(repeat: int) -> tuple[float, list[float]]:
    start = time.perf_counter()
    import infra.stack  # noqa: F401  (the CDK and provider imports)
    from infra.main import selected_environments, synth
    imported = time.perf_counter() - start
    times = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as out:
            start = time.perf_counter()
            synth(selected_environments(), out)
            times.append(time.perf_counter() - start)
    return imported, times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-tests", action="store_true")
    args = parser.parse_args()

    from infra.config import list_environments

    print(f"stacks: {', '.join(list_environments())}; cpus: {os.cpu_count()}")
    runs = app_runs(args.repeat)
    warm = statistics.median(runs[1:])
    verdict = "OK" if warm <= SYNTH_TARGET_S else "MISS"
    print(f"python -m infra.main   cold {runs[0]:.2f} s   warm median {warm:.2f} s "
          f"(min {min(runs[1:]):.2f})   target <= {SYNTH_TARGET_S:.0f} s: {verdict}")
    imported, times = in_process(args.repeat)
    print(f"in-process             CDK+provider import {imported:.2f} s   "
          f"synth median {statistics.median(times):.2f} s (min {min(times):.2f})")
    if not args.skip_tests:
        tests = _timed([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/infra"],
                       timeout=600)
        print(f"pytest tests/infra     {tests:.2f} s   target <= {TESTS_TARGET_S:.0f} s: "
              f"{'OK' if tests <= TESTS_TARGET_S else 'MISS'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
