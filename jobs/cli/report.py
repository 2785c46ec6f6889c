"""`run_job.py report RESOURCE_NAME|PATH [--report-dir DIR]`: the report of a job on Vertex AI, ended or
running, or of a --local run or study from its folder.

  python scripts/run_job.py report projects/P/locations/R/hyperparameterTuningJobs/ID
  python scripts/run_job.py report projects/P/locations/R/customJobs/ID --report-dir reports/census
  python scripts/run_job.py report .local/gs/BUCKET/census-cpu/JOB_ID        # a --local run's folder

A HyperparameterTuningJob gets the report --local writes for its studies: a table of every trial, the best
trial and its SavedModel, parameter importance (PED-ANOVA, from 3 succeeded trials), study.json and study.png.
A CustomJob gets its state, times, model folder and the eval figures (and the task's baselines) of the
metrics.json the trainer wrote there, in job.json. Either goes to DIR, default .local/reports/<job id>/ in the
checkout. A PATH (anything not starting with projects/; ./projects/... for such a folder) is a --local run's
base folder (model/metrics.json, replica-logs/), reported as a CustomJob, or a --local study's (study.db),
reported as a tuning job; the report goes to .local/reports/<folder name>/.

Bad input (a name that is not a job's, a job Vertex AI does not have, a PATH that holds no run, a report
folder that cannot be written, a response that is not a job's) is one line and exit status 2, with nothing
written; a cloud or credentials failure is one line and exit status 1.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from jobs.cli.common import Parser, guarded


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="run_job.py report", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "resource_name",
        metavar="RESOURCE_NAME|PATH",
        help="the job: projects/P/locations/R/hyperparameterTuningJobs/ID or .../customJobs/ID, or the "
        "folder of a --local run or study",
    )
    p.add_argument(
        "--report-dir",
        type=Path,
        metavar="DIR",
        help="where the report goes (default .local/reports/<job id>/; created if missing)",
    )
    return p


def main(argv: list[str], *, factory: Callable | None, out: TextIO, err: TextIO, repo_root: Path) -> int:
    args = build_parser().parse_args(argv)
    from jobs import api

    status, _ = guarded(lambda: api.report_job(args.resource_name, factory, out, report_dir=args.report_dir,
                                               repo_root=repo_root), err)
    return status
