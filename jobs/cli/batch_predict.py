"""`run_job.py batch-predict MODEL@ALIAS --input gs://.../*.jsonl --output gs://.../`: a Vertex AI
BatchPredictionJob of a Model Registry version, in that version's serving container; ``--dry-run`` prints
the exact request, and the job is followed to its end like a training job. With ``--local``, MODEL is an
exported SavedModel folder: its server runs here and the JSONL streams through it, written in Vertex AI's
output layout under the local root. A retry reuses the live job of the same request (its submission_hash
label) instead of creating a second one; ``--follow NAME`` follows an existing job.

    python scripts/run_job.py batch-predict recommender@production --input gs://b/users/*.jsonl \\
        --output gs://b/predictions/ --signature top_k --dry-run
    python scripts/run_job.py batch-predict --follow projects/p/locations/r/batchPredictionJobs/123
    python scripts/run_job.py batch-predict .local/gs/<models bucket>/recommender/<job id>/model --local \\
        --input gs://b/users/*.jsonl --output gs://b/predictions/ --signature top_k

Imports no TensorFlow: a local run's server is a child process (run_job.py serve's).
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import TextIO

from jobs.api import DEFAULT_ENV, JobError
from jobs.cli.common import EXIT_BAD_INPUT, EXIT_INTERRUPTED, Parser, cloud_failure


def _count(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer {text[:40]!r}") from None


def build_parser() -> argparse.ArgumentParser:
    from jobs.api import DEFAULT_BATCH_SIZE, DEFAULT_MACHINE

    p = Parser(prog="run_job.py batch-predict", description=__doc__.split("\n\n")[0])
    p.add_argument("model", metavar="MODEL@ALIAS", nargs="?",
                   help="a registry version, e.g. recommender@production "
                   "(or @<version id>); with --local, an exported SavedModel folder (a job's .../model)")
    p.add_argument("--input", action="append", default=[], metavar="URI",
                   help="JSONL instances, one per line: gs://<bucket>/<path>.jsonl, * wildcards in the file "
                   "name (repeatable)")
    p.add_argument("--output", metavar="URI",
                   help="a gs:// folder; the job writes prediction-<model>-<time>/ in it")
    p.add_argument("--signature", default="", help="the SavedModel signature every instance goes through "
                   "(Vertex AI's modelParameters; default: the server's serving_default), e.g. top_k")
    p.add_argument("--batch-size", type=_count, default=DEFAULT_BATCH_SIZE,
                   help="instances in one request to the server (default %(default)s)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="print the exact request; send nothing")
    mode.add_argument("--local", action="store_true",
                      help="run it here: MODEL is a SavedModel folder, gs:// lives under --local-root")
    mode.add_argument("--no-wait", action="store_true", help="create the job and return without following")
    mode.add_argument("--follow", metavar="NAME", help="follow an existing job to its end instead, e.g. "
                      "projects/p/locations/r/batchPredictionJobs/123 (no MODEL@ALIAS, --input, --output)")
    cloud = p.add_argument_group("on Vertex AI")
    cloud.add_argument("--env", default=DEFAULT_ENV, help="infra environment: project, region, runtime "
                       "account (default %(default)s)")
    cloud.add_argument("--outputs-file", type=Path, metavar="PATH", help="deployed outputs JSON (default "
                       ".infra-outputs/<env>.json when present, else the planned outputs)")
    cloud.add_argument("--machine-type", help=f"default {DEFAULT_MACHINE}")
    cloud.add_argument("--starting-replica-count", type=_count, default=1, help="default %(default)s")
    cloud.add_argument("--max-replica-count", type=_count, default=None,
                       help="default: --starting-replica-count")
    local = p.add_argument_group("--local")
    local.add_argument("--local-root", type=Path, metavar="DIR", help="where gs:// lives (default .local/)")
    local.add_argument("--container", action="store_true",
                       help="run the server in the trainer's cpu image built from this checkout, as Vertex "
                       "AI runs the version's serving container (docker or podman)")
    return p


# Flags of the job on Vertex AI (its machines and environment) that a --local run has no use for.
_CLOUD_ONLY = (
    ("--machine-type", "machine_type", None),
    ("--starting-replica-count", "starting_replica_count", 1),
    ("--max-replica-count", "max_replica_count", None),
    ("--env", "env", DEFAULT_ENV),
    ("--outputs-file", "outputs_file", None),
)


def main(argv: list[str], *, factory, out: TextIO, err: TextIO, repo_root: Path, outputs=None,
         now: datetime | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    cloud_only = [flag for flag, value, default in _CLOUD_ONLY if getattr(args, value) != default]
    if args.local and cloud_only:
        parser.error(f"{cloud_only[0]} is for a job on Vertex AI, not with --local")
    if args.local_root is not None and not args.local:
        parser.error("--local-root is for --local")
    if args.container and not args.local:
        parser.error("--container runs a --local batch prediction's server in its container; add --local")
    from jobs import api

    if args.follow is not None:
        return _follow(args, parser, factory, out, err, cloud_only)
    missing = [flag for flag, value in _new_job(args) if not value]
    if missing:
        parser.error(f"the following arguments are required: {', '.join(missing)}")
    try:
        if args.local:
            return _local(args, out, err, repo_root)
        if outputs is None:
            outputs = api.load_outputs(args.env, args.outputs_file, api.BATCH_VERB)
        request = api.batch_request(
            args.model, args.input, args.output, outputs=outputs, now=now or datetime.now(timezone.utc),
            machine_type=args.machine_type or api.DEFAULT_MACHINE,
            starting_replicas=args.starting_replica_count, max_replicas=args.max_replica_count,
            batch_size=args.batch_size, signature=args.signature,
        )
    except JobError as exc:
        print(str(exc), file=err)
        return EXIT_BAD_INPUT
    if args.dry_run:
        print(json.dumps(request, indent=2), file=out)
        print("plan (not executed):", *api.batch_plan(request, wait=not args.no_wait), sep="\n  ", file=err)
        return 0
    try:
        remote = api.submit_batch(request, factory, out, wait=not args.no_wait)
    except KeyboardInterrupt:
        print("stopped following; the job keeps running (see its console link; the same command again, or "
              "--follow NAME, follows it)", file=err)
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - cloud/auth failures: one line, no traceback
        return cloud_failure(exc, err)
    return 0 if args.no_wait else _ended(remote, err)


def _new_job(args) -> list[tuple[str, object]]:
    """What names a new job: required without --follow, refused with it."""
    return [("MODEL@ALIAS", args.model), ("--input", args.input), ("--output", args.output)]


def _follow(args, parser, factory, out: TextIO, err: TextIO, cloud_only: list[str]) -> int:
    """--follow NAME: an existing job to its end, where its output went."""
    from jobs.api import DEFAULT_BATCH_SIZE

    # NAME says the project and region; the job's flags were the creator's.
    shaping = [("--signature", args.signature), ("--batch-size", args.batch_size != DEFAULT_BATCH_SIZE)]
    given = [flag for flag, value in [*_new_job(args), *shaping] if value] + cloud_only
    if given:
        parser.error(f"{given[0]} is for a new job, not with --follow")
    from jobs import api

    try:
        api.parse_batch_name(args.follow)  # one line and exit 2, before any client exists
    except JobError as exc:
        print(str(exc), file=err)
        return EXIT_BAD_INPUT
    try:
        remote = api.follow_batch(args.follow, factory, out)
    except KeyboardInterrupt:
        print(f"stopped following; the job keeps running (--follow {args.follow} follows it again)", file=err)
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - cloud/auth failures: one line, no traceback
        return cloud_failure(exc, err)
    return _ended(remote, err)


def _ended(remote: dict, err: TextIO) -> int:
    """0 for a job that succeeded; else its end on ``err``, 1."""
    state = remote.get("state", "")
    if state == "JOB_STATE_SUCCEEDED":
        return 0
    print(f"{remote.get('name')} ended {state}: {(remote.get('error') or {}).get('message', '')}", file=err)
    return 1


def _local(args, out: TextIO, err: TextIO, repo_root: Path) -> int:
    from jobs import api

    local_root = args.local_root or repo_root / ".local"
    files, folder, count, parameters = api.prepare_local_batch(
        args.model, args.input, args.output, local_root=local_root, batch_size=args.batch_size,
        signature=args.signature,
    )
    print(f"{count} instances in {len(files)} file(s); starting the server on {args.model}", file=out,
          flush=True)
    try:
        with api.sigterm_as_interrupt():  # a supervisor's stop ends the batch as Ctrl-C does, server included
            summary = api.run_local_batch(args.model, files, folder, parameters=parameters,
                                          batch_size=args.batch_size, repo_root=repo_root, out=out,
                                          container=args.container)
    except (api.BatchFailed, api.BuildError) as exc:
        print(f"run_job.py batch-predict: {exc}", file=err)
        return 1
    except KeyboardInterrupt:
        print(f"run_job.py batch-predict: interrupted; the server is stopped and what was written so far "
              f"stays in its prediction-* folder under {folder} (a new run writes a new folder)", file=err)
        return EXIT_INTERRUPTED
    print(summary.line(), file=out)
    return 0
