"""The command line behind scripts/run_job.py (see its docstring for usage).

Order of work: parse flags -> load the definition strictly -> apply --set -> resolve the environment's infra
outputs -> compile -> validate -> build the plan -> print it (--dry-run), run it here (--local) or execute it.
Everything up to the plan is pure and offline; bad input anywhere there is one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TextIO

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_ENV = "dev"
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line, like every other bad input here (not usage + error)."""

    def error(self, message: str):  # noqa: D102 - argparse hook
        print(f"{self.prog}: error: {message} (see --help)", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def build_parser(description: str | None = None) -> argparse.ArgumentParser:
    p = _Parser(
        prog="run_job.py", description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "job_file", nargs="?", metavar="JOB_FILE", help="a job definition, e.g. jobs/census_cpu.yaml"
    )
    p.add_argument(
        "--env",
        default=DEFAULT_ENV,
        help=f"infra environment whose outputs fill ${{infra.*}} (default {DEFAULT_ENV})",
    )
    p.add_argument(
        "--outputs-file",
        type=Path,
        metavar="PATH",
        help="deployed outputs JSON (default .infra-outputs/<env>.json when present, else the "
        "outputs planned from infra/environments/<env>.yaml)",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="override a field by its dotted path as written in the file, e.g. maxTrialCount=2 or "
        "trialJobSpec.workerPoolSpecs.0.replicaCount=1 (repeatable; VALUE is read as YAML)",
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--dry-run",
        action="store_true",
        help="print the exact request (JSON, with its parent) and the plan; touch nothing",
    )
    mode.add_argument("--local", action="store_true", help="run the job on this machine instead of Vertex AI")
    mode.add_argument(
        "--follow",
        metavar="RESOURCE_NAME",
        help="follow an existing job, e.g. projects/p/locations/r/customJobs/123",
    )
    p.add_argument("--no-wait", action="store_true", help="submit and return without following the job")
    gcloud = p.add_argument_group("values gcloud takes as flags (for plain gcloud config files)")
    gcloud.add_argument("--display-name", help="job display name (default: the job id)")
    gcloud.add_argument("--max-trial-count", type=int, help="tuning: total trials (default 1)")
    gcloud.add_argument("--parallel-trial-count", type=int, help="tuning: trials at once (default 1)")
    gcloud.add_argument("--region", help="override the environment's region")
    local = p.add_argument_group("--local")
    local.add_argument("--resume", action="store_true", help="continue an interrupted local study")
    local.add_argument(
        "--strict-accelerators",
        action="store_true",
        help="fail instead of running on CPU when this machine lacks the job's accelerators",
    )
    local.add_argument(
        "--local-root", type=Path, metavar="DIR", help="where gs:// paths live (default .local/)"
    )
    return p


def load_outputs(env: str, outputs_file: Path | None, file: str) -> dict[str, str]:
    """The environment's infra outputs: deployed if a deploy wrote them, else planned from its config."""
    from jobs.errors import JobError

    try:
        from infra import config as infra_config
        from infra import outputs as infra_outputs
    except ImportError as exc:
        raise JobError(
            file, "--env", f"cannot read infra outputs ({exc})", "a checkout with infra/"
        ) from None
    environments = infra_config.list_environments()
    if env not in environments:
        raise JobError(
            file, "--env", f"unknown environment {env!r}", ", ".join(environments) or "(none defined)"
        )
    if outputs_file is not None and not Path(outputs_file).is_file():
        raise JobError(
            file,
            "--outputs-file",
            f"{outputs_file} does not exist",
            f"the file `cdktn deploy {env} --outputs-file` wrote",
        )
    try:
        return dict(infra_outputs.resolve_outputs(env, outputs_file=outputs_file))
    except ValueError as exc:  # infra.config.ConfigError: names its own file (config or outputs) and field
        if all(hasattr(exc, a) for a in ("path", "field", "problem")):
            raise JobError(exc.path, exc.field, exc.problem) from None
        raise JobError(file, "--env", " ".join(str(exc).split()) or type(exc).__name__) from None


def trainer_image_hash(repo_root: Path, needed: bool) -> str:
    """The build context's hash, or "" when it cannot be read and the definition does not need it."""
    from jobs.errors import JobError
    from jobs.image import ImageError, image_hash

    try:
        return image_hash(repo_root)
    except ImageError as exc:
        if needed:
            raise JobError(exc.file, exc.field, exc.problem, exc.allowed) from None
        return ""


def prepare(
    args: argparse.Namespace,
    *,
    now: datetime,
    repo_root: Path,
    outputs: Mapping[str, str],
    code_hash: str | None = None,
    image_hash: str | None = None,
):
    """JOB_FILE + flags + the environment's outputs -> a validated CompiledJob (reads files, nothing else)."""
    from jobs.compile import JobFlags
    from jobs.errors import JobError

    for name in ("max_trial_count", "parallel_trial_count"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise JobError(args.job_file, "--" + name.replace("_", "-"), f"{value}", "an integer >= 1")
    flags = JobFlags(
        display_name=args.display_name,
        max_trial_count=args.max_trial_count,
        parallel_trial_count=args.parallel_trial_count,
        region=args.region,
    )
    return compile_file(
        args.job_file,
        env=args.env,
        overrides=args.overrides,
        outputs=outputs,
        repo_root=repo_root,
        now=now,
        flags=flags,
        code_hash=code_hash,
        image_hash=image_hash,
    )


def compile_file(
    job_file: str,
    *,
    env: str,
    overrides: Sequence[str],
    outputs: Mapping[str, str],
    repo_root: Path,
    now: datetime,
    flags=None,
    code_hash: str | None = None,
    image_hash: str | None = None,
    job_id: str = "",
):
    """Load, override, compile and validate one definition: what --dry-run prints and a schedule sends."""
    from jobs.compile import Context, JobFlags, compile_job
    from jobs.loader import load_file
    from jobs.overrides import Override, apply_overrides
    from jobs.package import code_hash as hash_code
    from jobs.package import sdist_filename
    from jobs.trainer_contract import load_trainer_contract
    from jobs.validate import validate

    document = load_file(job_file)
    file = document.file
    parsed = [Override.parse(text, file) for text in overrides]
    document.data = apply_overrides(document.data, parsed, file, document.shared)
    if image_hash is None:
        image_hash = trainer_image_hash(repo_root, needed="${job.image_tag}" in json.dumps(document.data))
    context = Context(
        env=env,
        outputs=outputs,
        code_hash=code_hash or hash_code(repo_root),
        now=now,
        sdist_name=sdist_filename(repo_root),
        image_hash=image_hash,
        flags=flags or JobFlags(),
        overrides=tuple(o.text for o in parsed),
        job_id=job_id,
    )
    job = compile_job(document, context)
    validate(
        job,
        load_trainer_contract,
        trainer_image=str(outputs.get("trainer_image", "")),
        accounts=job_accounts(env, outputs, file),
    )
    return job


def job_accounts(env: str, outputs: Mapping[str, str], file: str) -> tuple[str, ...]:
    """The accounts a job of ``env`` may run as: its runtime account, then its job_service_accounts."""
    from infra.config import ConfigError, list_environments, load_environment
    from jobs.errors import JobError

    runtime = str(outputs.get("runtime_service_account", ""))
    if env not in list_environments():  # outputs given without a config (an embedding caller): runtime only
        return (runtime,)
    try:
        extra = load_environment(env).job_service_accounts
    except ConfigError as exc:
        raise JobError(exc.path, exc.field, exc.problem) from None
    return (runtime, *(a for a in extra if a != runtime))


def check_deployed(job, env: str) -> None:
    """Placeholders are fine to look at, not to submit: the TensorBoard id only exists after a deploy."""
    from infra.outputs import is_pending
    from jobs.errors import JobError

    def walk(value, path):
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{path}.{k}" if path else k)
        elif isinstance(value, list):
            for i, v in enumerate(value):
                walk(v, f"{path}.{i}")
        elif isinstance(value, str) and is_pending(value):
            raise JobError(
                job.file,
                job.file_path(path),
                f"{value} is a planned value; the infrastructure is not deployed yet",
                f"deploy first: cdktn deploy {env} --outputs-file .infra-outputs/{env}.json",
            )

    walk(job.body, "")


def main(
    argv: list[str] | None = None,
    *,
    description: str | None = None,
    factory: Callable | None = None,
    now: datetime | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
    repo_root: Path = REPO_ROOT,
    outputs: Mapping[str, str] | None = None,
    code_hash: str | None = None,
    image_hash: str | None = None,
) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["convert"]:  # a subcommand of its own: legacy AI Platform -> a definition
        from jobs import convert_cli

        return convert_cli.main(
            argv[1:],
            out=out,
            err=err,
            repo_root=repo_root,
            outputs=outputs,
            code_hash=code_hash,
            image_hash=image_hash,
            now=now,
        )
    parser = build_parser(description)
    args = parser.parse_args(argv)
    from jobs.errors import JobError

    try:
        if args.follow:
            return _follow_existing(args.follow, factory, out, err)
        if not args.job_file:
            parser.error("JOB_FILE is required (or --follow RESOURCE_NAME)")
        if outputs is None:
            outputs = load_outputs(args.env, args.outputs_file, args.job_file)
        job = prepare(
            args,
            now=now or datetime.now(timezone.utc),
            repo_root=repo_root,
            outputs=outputs,
            code_hash=code_hash,
            image_hash=image_hash,
        )
        if args.local:
            return _run_local(job, args, outputs, repo_root, out)
        from jobs.builds import job_builds
        from jobs.plan import build_plan

        plan = build_plan(job, wait=not args.no_wait, builds=job_builds(job, outputs, job.image_hash))
        if args.dry_run:
            print(json.dumps(job.request(), indent=2), file=out)
            print_plan(plan, err)
            return 0
        check_deployed(job, args.env)
        return _submit(plan, factory, repo_root, out, err)
    except JobError as exc:
        print(str(exc), file=err)
        return EXIT_BAD_INPUT


def print_plan(plan, err: TextIO) -> None:
    """The steps, then each build request in full: the job request alone is on stdout, pipeable as is."""
    print("plan (not executed):\n  " + "\n  ".join(plan.describe()), file=err)
    for build in plan.builds:
        print(f"build request for {build.image} (sent only if that tag is missing):", file=err)
        print(json.dumps(build.request, indent=2), file=err)


def _run_local(job, args, outputs, repo_root: Path, out: TextIO) -> int:
    from jobs.local import run_local

    try:
        return run_local(
            job.kind,
            job.body,
            dict(outputs),
            repo_root=repo_root,
            local_root=args.local_root,
            resume=args.resume,
            strict_accelerators=args.strict_accelerators,
            stream=out,
        )
    except KeyboardInterrupt:  # the local runner handles Ctrl-C itself; this covers its very first moments
        return EXIT_INTERRUPTED


def _clients(factory, project: str, region: str):
    from jobs.cloud import default_factory

    return (factory or default_factory)(project, region)


def _submit(plan, factory, repo_root: Path, out: TextIO, err: TextIO) -> int:
    from jobs.errors import JobError
    from jobs.plan import FollowInterrupted, FollowJob

    try:
        ex = plan.execute(_clients(factory, plan.job.project, plan.job.region), repo_root, out)
    except JobError:
        raise  # bad input found at the cloud (an image tag that does not resolve): one line, exit 2
    except FollowInterrupted as stop:
        if stop.cause is not None:
            _cloud_failure(stop.cause, err)
        return _interrupted(stop.name, err, status=1 if stop.cause is not None else EXIT_INTERRUPTED)
    except KeyboardInterrupt:
        # Before following there is no job name to give; the submission label makes a rerun safe either way.
        print(
            f"interrupted before the job could be followed; running the same command again reuses the job if "
            f"it was created (label submission_hash={plan.job.submission_hash}) and creates it otherwise",
            file=err,
        )
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - cloud/auth/packaging failures: one line, no traceback
        return _cloud_failure(exc, err)
    return _final_status(ex.remote, err, followed=any(isinstance(s, FollowJob) for s in plan.steps))


def _follow_existing(name: str, factory, out: TextIO, err: TextIO) -> int:
    import re

    from jobs.compile import CUSTOM_JOB, TUNING_JOB
    from jobs.errors import JobError
    from jobs.plan import follow

    found = re.fullmatch(
        r"projects/([^/]+)/locations/([^/]+)/(customJobs|hyperparameterTuningJobs)/([^/]+)", name
    )
    if not found:
        raise JobError(
            "--follow",
            "RESOURCE_NAME",
            f"{name!r} is not a job resource name",
            "projects/<p>/locations/<r>/customJobs/<id> or .../hyperparameterTuningJobs/<id>",
        )
    kind = CUSTOM_JOB if found.group(3) == "customJobs" else TUNING_JOB
    try:
        clients = _clients(factory, found.group(1), found.group(2))
        remote = follow(clients.jobs, kind, clients.jobs.get(kind, name), out)
    except KeyboardInterrupt:
        return _interrupted(name, err)
    except Exception as exc:  # noqa: BLE001
        return _cloud_failure(exc, err)
    return _final_status(remote, err, followed=True)


def _interrupted(name: str, err: TextIO, status: int = EXIT_INTERRUPTED) -> int:
    print(
        f"stopped following; the job keeps running. Follow it again with:\n"
        f"  python scripts/run_job.py --follow {name}",
        file=err,
    )
    return status


def _cloud_failure(exc: BaseException, err: TextIO) -> int:
    message = " ".join(str(exc).split()) or type(exc).__name__
    if type(exc).__name__ == "DefaultCredentialsError":
        message = (
            "no Google Cloud credentials found; run `gcloud auth application-default login` (or set "
            "GOOGLE_APPLICATION_CREDENTIALS) and retry"
        )
    print(f"run_job.py: {type(exc).__name__}: {message}", file=err)
    return 1


def _final_status(remote: dict, err: TextIO, *, followed: bool) -> int:
    from jobs.cloud import SUCCESS_STATE

    state = remote.get("state", "JOB_STATE_UNSPECIFIED")
    if not followed or state == SUCCESS_STATE:
        return 0
    message = (remote.get("error") or {}).get("message", "no error message")
    print(f"{remote.get('name')} ended {state}: {message}", file=err)
    return 1
