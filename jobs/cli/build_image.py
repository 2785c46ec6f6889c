"""The command line behind scripts/build_image.py (see its docstring for usage).

The same steps run_job.py runs before a submission (jobs.cloud.plan: look up each tag in Artifact Registry,
build the missing ones with Cloud Build), for the variants asked for rather than those a job uses: the deploy
workflow runs it after the apply, so merged code is ready to run under exactly the tag run_job.py computes.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TextIO

from jobs.api import DEFAULT_ENV, REPO_ROOT
from jobs.cli.common import EXIT_BAD_INPUT, EXIT_INTERRUPTED, Parser, cloud_failure, print_plan


def build_parser(description: str | None = None) -> Parser:
    from jobs.api import VARIANTS

    p = Parser(
        prog="build_image.py", description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--env", default=DEFAULT_ENV, help=f"infra environment (default {DEFAULT_ENV})")
    p.add_argument("--outputs-file", type=Path, metavar="PATH", help="deployed outputs JSON (as run_job.py)")
    p.add_argument(
        "--variant",
        action="append",
        choices=VARIANTS,
        help="image variant to build (repeatable; default: all of " + ", ".join(VARIANTS) + ")",
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--dry-run", action="store_true", help="print the plan and build requests; touch nothing"
    )
    mode.add_argument(
        "--print-tag", action="store_true", help="print the image tags of this checkout and exit"
    )
    mode.add_argument(
        "--local",
        action="append",
        choices=VARIANTS,
        metavar="VARIANT",
        help="build VARIANT (cpu, gpu, tpu; repeatable) with this machine's container engine as "
        "localhost/trainer:<variant>-<hash>, unless that tag exists; prints the image",
    )
    p.add_argument(
        "--allow-large", action="store_true", help="with --local: build gpu too (1.9 GB of CUDA wheels)"
    )
    return p


def main(
    argv: list[str] | None = None,
    *,
    description: str | None = None,
    factory: Callable | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
    repo_root: Path = REPO_ROOT,
    outputs: Mapping[str, str] | None = None,
) -> int:
    from jobs import api
    from jobs.api import JobError

    out = out or sys.stdout
    err = err or sys.stderr
    args = build_parser(description).parse_args(argv)
    variants = tuple(dict.fromkeys(args.variant or ("cpu", "gpu", "tpu")))
    if args.local:
        return build_local(
            tuple(dict.fromkeys(args.local)), repo_root, out, err, allow_large=args.allow_large
        )
    try:
        digest = api.trainer_image_hash(repo_root, needed=True)
        if args.print_tag:
            print(json.dumps({v: f"{v}-{digest}" for v in variants}), file=out)
            return 0
        if outputs is None:
            outputs = api.load_outputs(args.env, args.outputs_file, "build_image.py")
        plan = api.plan_image_builds(outputs, variants, digest)
        if args.dry_run:
            print_plan(plan, err)
            return 0
        try:
            plan.execute(api.clients(factory, outputs["project"], outputs["region"]), repo_root, out)
        except JobError:
            raise
        except KeyboardInterrupt:
            print(
                "interrupted; the builds keep running, and running the same command again follows them",
                file=err,
            )
            return EXIT_INTERRUPTED
        except Exception as exc:  # noqa: BLE001 - a failed build or a cloud error: one line, exit 1
            return cloud_failure(exc, err)
        return 0
    except JobError as exc:
        print(str(exc), file=err)
        return EXIT_BAD_INPUT


def build_local(
    variants: tuple[str, ...], repo_root: Path, out: TextIO, err: TextIO, *, allow_large: bool
) -> int:
    """``--local``: each variant's image, reused by tag or built here (the engine's output on ``err``); the
    image names on ``out``, one a line."""
    import time

    from jobs.api import BuildError, EngineError, JobError, ensure_image, find_engine, trainer_image_hash

    try:
        trainer_image_hash(repo_root, needed=True)  # a bad .dockerignore: its one line before any engine call
        engine = find_engine()
        for variant in variants:
            start = time.monotonic()
            image = ensure_image(engine, repo_root, variant, err, allow_large=allow_large)
            took = time.monotonic() - start
            what = f"built in {took:.0f} s" if image.built else "already built"
            print(f"{image.ref}: {what} ({engine.name}, base {image.base or 'unknown'})", file=err)
            print(image.ref, file=out)
    except KeyboardInterrupt:
        print("interrupted; nothing was tagged, and running the same command again rebuilds", file=err)
        return EXIT_INTERRUPTED
    except BuildError as exc:
        print(f"build_image.py: {exc}", file=err)
        return 1
    except (EngineError, JobError) as exc:
        print(f"build_image.py: {exc}", file=err)
        return EXIT_BAD_INPUT
    return 0
