"""Benchmark: synthesis time of every infra stack and wall time of the infra test module.

    .venv/bin/python scripts/benchmarks/bench_synth.py [--repeat 3] [--skip-tests]

Prints, for all environments in infra/environments/:
  - cold and warm wall time of `python scripts/synth.py` (what `cdktn synth` runs; warm = OS caches hot), with
    its CPU time (user + sys, Node included), which other processes on a shared machine inflate far less,
  - in-process synthesis time once the CDK is imported (the part our code controls; schedules compiled),
  - wall time of `pytest tests/infra`.
Targets (issue 3): warm synthesis of all stacks <= 8 s, infra tests <= 30 s. Machines are noisy: compare
figures from one run, and rerun before drawing conclusions.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SYNTH_TARGET_S = 8.0
TESTS_TARGET_S = 30.0
sys.path.insert(0, str(REPO_ROOT))  # run as a file, the script's own folder comes first on sys.path


def _env() -> dict[str, str]:
    venv_bin = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
            "CHECKPOINT_DISABLE": "1", "PYTHONPATH": str(REPO_ROOT)}


def _cpu_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(cmd: list[str], timeout: int, extra_env: dict[str, str] | None = None) -> tuple[float, float]:
    """(wall, CPU) seconds of one command, its descendants' CPU included."""
    cpu, start = _cpu_children(), time.perf_counter()
    subprocess.run(cmd, cwd=REPO_ROOT, env={**_env(), **(extra_env or {})}, check=True, capture_output=True,
                   timeout=timeout)
    return time.perf_counter() - start, _cpu_children() - cpu


def app_runs(repeat: int) -> list[tuple[float, float]]:
    """(wall, CPU) of `python scripts/synth.py` runs; the first run is the cold one."""
    runs = []
    for _ in range(repeat + 1):
        with tempfile.TemporaryDirectory() as out:
            runs.append(_timed([sys.executable, str(REPO_ROOT / "scripts" / "synth.py")], timeout=300,
                               extra_env={"CDKTF_OUTDIR": out}))
    return runs


def in_process(repeat: int) -> tuple[float, list[float]]:
    start = time.perf_counter()
    import infra.stack  # noqa: F401  (the CDK and provider imports)
    from infra.main import compile_schedules, selected_environments, synth
    from jobs.schedule import compile_schedules as compiler

    imported = time.perf_counter() - start
    times = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as out:
            start = time.perf_counter()
            configs = selected_environments()
            synth(configs, out, schedules=compile_schedules(configs, compiler))
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
    walls = [wall for wall, _ in runs[1:]]
    warm = statistics.median(walls)
    warm_cpu = statistics.median(cpu for _, cpu in runs[1:])
    verdict = "OK" if warm <= SYNTH_TARGET_S else "MISS"
    print(f"scripts/synth.py       cold {runs[0][0]:.2f} s   warm median {warm:.2f} s (min {min(walls):.2f}, "
          f"CPU {warm_cpu:.2f} s)   target <= {SYNTH_TARGET_S:.0f} s: {verdict}")
    print(f"load average {os.getloadavg()[0]:.1f} (wall well above CPU means a run waited for a core)")
    imported, times = in_process(args.repeat)
    print(f"in-process             CDK+provider import {imported:.2f} s   "
          f"synth median {statistics.median(times):.2f} s (min {min(times):.2f})")
    if not args.skip_tests:
        tests, tests_cpu = _timed(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/infra"], timeout=600)
        verdict = "OK" if tests <= TESTS_TARGET_S else "MISS"
        print(f"pytest tests/infra     {tests:.2f} s (CPU {tests_cpu:.2f} s)   "
              f"target <= {TESTS_TARGET_S:.0f} s: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
