"""`run_job.py convert`: a legacy AI Platform Training job -> a job definition of this repo.

  python scripts/run_job.py convert legacy/hptuning_config.yaml -o jobs/census_legacy.yaml \\
      -- --train-files=gs://<data bucket>/census/adult.data --eval-files=gs://<data bucket>/census/adult.test
  python scripts/run_job.py convert legacy/train.sh -o jobs/census_legacy.yaml --strict

LEGACY_FILE is a legacy config (YAML or JSON: a TrainingInput, {trainingInput: ...}, or the whole job as
`gcloud ai-platform jobs describe --format=json` printed it) or a shell script (*.sh, or a #! first line) with
one `gcloud ai-platform|ml-engine jobs submit training` command. Trainer arguments after `--` are added to the
legacy ones (a flag given in both takes this value). The converted file is validated and compiled exactly as
`run_job.py FILE --dry-run` would before anything is written; without -o it goes to stdout. Decisions and
what could not be carried over head the file; --strict turns the latter into an error.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import TextIO

from jobs.api import DEFAULT_ENV, REPO_ROOT
from jobs.cli.common import EXIT_BAD_INPUT, Parser

COMMAND = "convert"
SUFFIXES = (".yaml", ".yml")


def build_parser() -> Parser:
    from jobs.api import CONTAINER, DELIVERIES

    p = Parser(
        prog=f"run_job.py {COMMAND}",
        usage=f"run_job.py {COMMAND} LEGACY_FILE [-o OUT] [options] [-- TRAINER_ARGS ...]",
        description=__doc__.split("\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("legacy_file", metavar="LEGACY_FILE", help="legacy config (YAML/JSON) or submit script")
    p.add_argument(
        "-o", "--output", metavar="OUT", help="where to write the definition (*.yaml); default stdout"
    )
    p.add_argument("--force", action="store_true", help="replace OUT if it exists")
    p.add_argument("--strict", action="store_true", help="refuse if anything cannot be carried over")
    p.add_argument(
        "--env",
        default=DEFAULT_ENV,
        help=f"environment whose buckets become ${{infra.*}} (default {DEFAULT_ENV})",
    )
    p.add_argument("--outputs-file", type=Path, metavar="PATH", help="deployed outputs JSON (as run_job.py)")
    p.add_argument(
        "--model", help="the trainer model the job trains (default: --model in its args, else wide_deep)"
    )
    p.add_argument(
        "--delivery",
        choices=DELIVERIES,
        default=CONTAINER,
        help=f"the trainer image (default {CONTAINER}) or the sdist on a prebuilt TF 2.17 image",
    )
    p.add_argument(
        "--map-bucket",
        action="append",
        default=[],
        metavar="gs://OLD=OUTPUT",
        help="write paths in legacy bucket OLD as ${infra.OUTPUT}/..., e.g. gs://my-ml=data_bucket "
        "(repeatable; copy the objects over first)",
    )
    p.add_argument(
        "--var",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="the value of a variable the script uses: one from its environment, or one it computes "
        "(PROJECT_ID=$(gcloud ...)); it wins over the script's own assignments (repeatable)",
    )
    return p


def main(
    argv: list[str],
    *,
    out: TextIO | None = None,
    err: TextIO | None = None,
    repo_root: Path = REPO_ROOT,
    outputs: Mapping[str, str] | None = None,
    code_hash: str | None = None,
    image_hash: str | None = None,
    now: datetime | None = None,
) -> int:
    from jobs.api import JobError, one_line, write_definition

    out = out or sys.stdout
    err = err or sys.stderr
    own, extra = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    args = build_parser().parse_args(own)
    try:
        text, conversion, legacy = _convert(args, argv, extra, repo_root, outputs, code_hash, image_hash, now)
        if args.output:
            write_definition(args.output, text, args.force)
        else:
            out.write(text)
    except JobError as exc:
        print(str(exc), file=err)
        return EXIT_BAD_INPUT
    where = args.output or "stdout"
    print(
        f"converted {args.legacy_file} -> {where}: {len(conversion.decisions)} decisions, "
        f"{len(conversion.lost)} not carried over (listed at the top of the file)",
        file=err,
    )
    for path, why in conversion.lost:
        print(f"  not carried over: {one_line(f'{legacy.describe(path)}: {why}')}", file=err)
    return 0


def _convert(args, argv, extra, repo_root, outputs, code_hash, image_hash, now):
    from jobs import api

    file = args.legacy_file
    if args.output and not args.output.endswith(SUFFIXES):
        raise api.JobError(
            args.output, "-o", "not a .yaml file name", "jobs/<name>.yaml (the name makes the job id)"
        )
    variables = api.legacy_variables(args.var, file)
    bucket_map = api.legacy_bucket_map(args.map_bucket, file)
    if outputs is None:
        outputs = api.load_outputs(args.env, args.outputs_file, file)
    return api.convert_legacy(
        file,
        variables=variables,
        env=args.env,
        outputs=outputs,
        model=args.model,
        delivery=args.delivery,
        extra_args=tuple(extra),
        bucket_map=bucket_map,
        strict=args.strict,
        output=args.output or f"jobs/{Path(file).stem}.yaml",
        command=shlex.join(["python", "scripts/run_job.py", COMMAND, *argv]),  # to convert it again
        repo_root=repo_root,
        code_hash=code_hash,
        image_hash=image_hash,
        now=now or datetime.now(timezone.utc),
    )
