"""`run_job.py runs JOB_FILE`: the runs of a definition, from Vertex AI Experiments or the local store.

  python scripts/run_job.py runs jobs/census_cpu.yaml --local
  python scripts/run_job.py runs jobs/census_cpu.yaml --env dev
  python scripts/run_job.py runs jobs/census_cpu.yaml --local --compare RUN RUN

Every run of a definition, --local or on Vertex AI, is recorded as a run of the experiment named after its
file (census_cpu.yaml -> census-cpu) once it has ended: its parameters (the trainer's resolved flags), its
eval metrics (metrics.json) and its lineage (code, data files and their checksums, job, model folder,
registry version). This lists them best first by the definition's metric (a study's own; else its registry
block's; else its model's primary one), with the metrics and the parameters that differ between runs;
--compare shows what differs between two.

Bad input (no run recorded there, a run name the experiment does not have, --compare without two runs, a
store file that is not a run) is one line and exit status 2; a cloud or credentials failure is one line and
exit status 1.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import TextIO

from jobs.api import DEFAULT_ENV
from jobs.cli.common import Parser, guarded


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="run_job.py runs", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("job_file", metavar="JOB_FILE", help="the definition, e.g. jobs/census_cpu.yaml")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--local", action="store_true", help="the runs of --local, from the local store")
    where.add_argument(
        "--env", help=f"the environment whose Vertex AI Experiments holds the runs (default {DEFAULT_ENV})"
    )
    p.add_argument(
        "--local-root", type=Path, metavar="DIR", help="with --local: where the runs ran (default .local/)"
    )
    p.add_argument("--outputs-file", type=Path, metavar="PATH", help="deployed outputs JSON, as for a submit")
    p.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE",
        help="the --set overrides the runs were made with, if they change the metric",
    )
    p.add_argument(
        "--compare", nargs=2, metavar="RUN", help="show what differs between two runs (ids as listed)"
    )
    return p


def main(argv: list[str], *, factory: Callable | None, out: TextIO, err: TextIO, repo_root: Path,
         outputs: Mapping[str, str] | None, now: datetime | None) -> int:
    from jobs import api

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.local_root is not None and not args.local:
        parser.error("--local-root is where --local runs ran; add --local")
    env = args.env or DEFAULT_ENV

    def listed() -> tuple[str, list[str]]:
        known = outputs if outputs is not None else api.load_outputs(env, args.outputs_file, args.job_file)
        experiment, metric, goal, runs = api.list_runs(
            args.job_file, env=env, overrides=args.overrides, outputs=known, repo_root=repo_root,
            local_root=args.local_root, local=args.local, factory=factory,
            now=now or datetime.now(timezone.utc),
        )
        return experiment, (_compare(runs, args.compare, args.job_file, experiment) if args.compare else
                            api.runs_table(runs, metric, goal))

    status, result = guarded(listed, err)
    if status:
        return status
    experiment, lines = result
    print(f"experiment {experiment}:", file=out)
    for line in lines:
        print(line, file=out)
    return 0


def _compare(runs, names: list[str], file: str, experiment: str) -> list[str]:
    from jobs.api import JobError, runs_comparison, short

    by_id = {run.id: run for run in runs}
    for name in names:
        if name not in by_id:
            raise JobError(
                file, "--compare", f"experiment {experiment} has no run {short(name)}",
                "two run ids as `run_job.py runs` lists them: " + ", ".join(sorted(by_id)[:5])
                + (", ..." if len(by_id) > 5 else ""),
            )
    return runs_comparison(by_id[names[0]], by_id[names[1]])
