"""The command line behind scripts/run_job.py (see its docstring for usage).

``--help`` is one screen: the docstring's summary and examples, the verbs, and where the rest is;
``--help-all`` is every option and the whole docstring (as ``python --help`` and ``--help-all``), and each
verb has its own ``--help``.

Verbs (``VERBS``) come first: ``convert``, ``report`` and ``serve`` take the rest of the arguments with
parsers of their own. Otherwise, order of work: parse flags -> load the definition strictly -> apply --set ->
resolve the environment's infra outputs -> compile -> validate -> build the plan -> print it (--dry-run), run
it here (--local) or execute it.
Everything up to the plan is pure and offline; bad input anywhere there is one line on stderr and exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TextIO

from jobs.api import DEFAULT_ENV, DEPLOY_VERBS, REPO_ROOT
from jobs.cli.common import EXIT_BAD_INPUT, EXIT_INTERRUPTED, Parser, cloud_failure, print_plan

HELP_ALL = "--help-all"
USAGE = """\
usage: run_job.py JOB_FILE [--dry-run | --local | --no-wait] [--env ENV] [--set PATH=VALUE] [options]
       run_job.py [JOB_FILE] --follow RESOURCE_NAME [options]
       run_job.py {verbs} ..."""


class _Help(argparse.Action):
    """-h/--help: one screen (``short_help``); --help-all: argparse's whole help, every option."""

    def __init__(self, option_strings, dest, full: bool = False, help: str | None = None):  # noqa: A002
        super().__init__(option_strings, argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0, help=help)
        self.full = full

    def __call__(self, parser, namespace, values, option_string=None):
        sys.stdout.write(parser.format_help() if self.full else short_help(parser))
        parser.exit()


def short_help(parser: argparse.ArgumentParser) -> str:
    """What --help prints: the usage, the docstring's first two paragraphs (what it does, the examples), the
    verbs, and where every option is described."""
    lines = [USAGE.format(verbs="{" + ",".join(VERBS) + "}"), ""]
    if parser.description:
        lines += ["\n\n".join(parser.description.strip().split("\n\n")[:2]), ""]
    width = max(len(usage) for usage, _ in VERB_HELP.values()) + 2
    lines.append("verbs, given first (a job file named like one is given as a path: ./report):")
    lines += [f"  {usage:<{width}}{about}" for usage, about in VERB_HELP.values()]
    lines += [
        "",
        "Every option (gcloud's flags, --local's, --no-logs, --report-dir, ...) and how definitions,",
        f"submitting, following and the Model Registry work: run_job.py {HELP_ALL}.",
        "A verb's options: run_job.py VERB --help. More in jobs/README.md.",
    ]
    return "\n".join(lines) + "\n"


def build_parser(description: str | None = None) -> argparse.ArgumentParser:
    p = Parser(
        prog="run_job.py",
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=False,
    )
    p.add_argument("-h", "--help", action=_Help, help="show the common use and exit")
    p.add_argument(HELP_ALL, action=_Help, full=True, help="show this help, every option, and exit")
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
        help="follow an existing job, e.g. projects/p/locations/r/customJobs/123; with the JOB_FILE (and "
        "flags) it was submitted with, also register its model as that file's registry block says",
    )
    p.add_argument(
        "--max-cost",
        metavar="USD",
        help="allow this run a cost ceiling up to USD (or `off`), instead of the environment's "
        "max_job_cost / max_study_cost; a submit whose ceiling is over the cap is refused before anything "
        "is sent",
    )
    p.add_argument("--no-wait", action="store_true", help="submit and return without following the job")
    p.add_argument(
        "--no-logs",
        action="store_true",
        help="follow the job's state only, without streaming its log entries from Cloud Logging",
    )
    p.add_argument(
        "--report-dir",
        type=Path,
        metavar="DIR",
        help="a tuning job followed to its end (submitted or --follow): where its study report goes, "
        "study.json and study.png (default .local/reports/<job id>/)",
    )
    add_gcloud_flags(p)
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
    local.add_argument(
        "--container",
        action="store_true",
        help="run each replica in a container of the trainer image built from this checkout (built first "
        "when missing), as Vertex AI runs it: docker or podman, whichever is present",
    )
    local.add_argument(
        "--preempt-after",
        type=_seconds,
        metavar="SECONDS",
        help="a SPOT job: preempt its replicas once, SECONDS after they start, as Compute Engine preempts a "
        "Spot VM (SIGTERM, SIGKILL 30 s later), then restart them to resume from their backup",
    )
    return p


def _seconds(text: str) -> float:
    """--preempt-after's value: a positive number of seconds."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0")
    return value


def add_gcloud_flags(p: argparse.ArgumentParser) -> None:
    """The flags of `gcloud ai custom-jobs|hp-tuning-jobs create` that set fields of a definition (the table
    in jobs.definition.gcloud_flags), and --region."""
    import textwrap

    from jobs.api import CUSTOM, FLAGS, STUDY

    def only(kinds) -> str:
        return ", ".join(f.flag for f in FLAGS if f.kinds == kinds)

    about = (
        "They set their fields in either form of definition (a plain gcloud config or one with a kind: "
        "header), checked like the file's own, and override the file's value as gcloud does (--args and "
        "--command replace every pool's), each override one line on stderr. custom-jobs only: "
        f"{only(CUSTOM)}; hp-tuning-jobs only: {only(STUDY)}."
    )
    gcloud = p.add_argument_group(
        "values gcloud takes as flags", "\n".join(textwrap.wrap(about, 78, break_on_hyphens=False))
    )
    for flag in FLAGS:
        if flag.switch:
            gcloud.add_argument(flag.flag, action="store_true", help=flag.help)
        else:
            gcloud.add_argument(
                flag.flag,
                type=flag.type,
                metavar=flag.metavar,
                action="append" if flag.repeatable else "store",
                help=flag.help,
            )
    gcloud.add_argument("--region", help="override the environment's region")


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
    from jobs.api import compile_file, job_flags

    flags = job_flags(vars(args), args.job_file)

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
    if argv[:1] and argv[0] in VERBS:
        call = Call(out, err, repo_root, factory, outputs, now, code_hash, image_hash)
        return VERBS[argv[0]](argv[1:], call)
    parser = build_parser(description)
    args = parser.parse_args(argv)
    if args.preempt_after is not None and not args.local:
        parser.error("--preempt-after preempts the replicas of a --local run; add --local")
    if args.container and not args.local:
        parser.error("--container runs a --local job's replicas in containers; add --local")
    if args.container and args.preempt_after is not None:
        parser.error("--preempt-after rehearses a preemption of --local processes, not of --container runs")
    if args.report_dir is not None and (args.local or args.no_wait):
        parser.error(
            "--report-dir is for a tuning job followed to its end on Vertex AI: not with --no-wait, nor with "
            "--local (a local study writes its report in its base output directory)"
        )
    from jobs import api

    try:
        if args.follow and not args.job_file:
            return _follow_existing(args.follow, factory, out, err, args.report_dir, repo_root,
                                    logs=not args.no_logs)
        if not args.job_file:
            parser.error(
                "JOB_FILE is required (or --follow RESOURCE_NAME, or a verb: " + ", ".join(VERBS) + ")"
            )
        if outputs is None:
            outputs = api.load_outputs(args.env, args.outputs_file, args.job_file)
        job = prepare(
            args,
            now=now or datetime.now(timezone.utc),
            repo_root=repo_root,
            outputs=outputs,
            code_hash=code_hash,
            image_hash=image_hash,
        )
        for override in job.flag_overrides:  # stderr: `--dry-run > plan.json` stays the request alone
            print(override.note(job.file), file=err)
        if args.local:
            return _run_local(job, args, outputs, repo_root, out)
        if not args.no_wait and (args.report_dir is not None or not args.dry_run):
            api.check_report_dir(job.kind, args.report_dir, repo_root)
        cost = api.job_cost(job, args.env, repo_root, args.max_cost)
        plan = api.plan_job(job, outputs, wait=not args.no_wait, follow=args.follow, logs=not args.no_logs,
                            report_dir=args.report_dir, cost=cost)
        if args.dry_run:
            print(json.dumps(job.request(), indent=2), file=out)
            print_plan(plan, err)
            return 0
        if args.follow is None:  # the cap before any credentials are looked for, the cost before a submit
            api.check_cap(*cost, job.file)
            for line in plan.cost_lines():  # with what the submit prints as it goes
                print(line, file=out)
        api.check_deployed(job, args.env)
        return _submit(plan, factory, repo_root, out, err, again=lambda name: _follow_command(args, name))
    except api.JobError as exc:
        print(str(exc), file=err)
        return EXIT_BAD_INPUT


def _run_local(job, args, outputs, repo_root: Path, out: TextIO) -> int:
    from jobs.api import run_local

    try:
        return run_local(
            job,
            outputs,
            repo_root=repo_root,
            local_root=args.local_root,
            resume=args.resume,
            strict_accelerators=args.strict_accelerators,
            stream=out,
            preempt_after=args.preempt_after,
            container=args.container,
        )
    except KeyboardInterrupt:  # the local runner handles Ctrl-C itself; this covers its very first moments
        return EXIT_INTERRUPTED


def _submit(plan, factory, repo_root: Path, out: TextIO, err: TextIO, again: Callable[[str], str]) -> int:
    """Execute the plan; ``again(name)`` is the command that follows job ``name`` with this definition (it
    finishes a registration that did not)."""
    from jobs.api import FollowInterrupted, FollowJob, JobError, RegistrationFailed, clients

    try:
        ex = plan.execute(clients(factory, plan.job.project, plan.job.region), repo_root, out)
    except JobError:
        raise  # bad input found at the cloud (an image tag that does not resolve): one line, exit 2
    except RegistrationFailed as failed:
        return _registration_failed(failed, again(failed.job_name), err)
    except FollowInterrupted as stop:
        if stop.cause is not None:
            cloud_failure(stop.cause, err)
        # With a registry block, following again with the definition also registers the model.
        command = again(stop.name) if plan.job.registry is not None else None
        status = 1 if stop.cause is not None else EXIT_INTERRUPTED
        return _interrupted(stop.name, err, status=status, command=command)
    except KeyboardInterrupt:
        # Before following there is no job name to give; the submission label makes a rerun safe either way.
        print(
            f"interrupted before the job could be followed; running the same command again reuses the job if "
            f"it was created (label submission_hash={plan.job.submission_hash}) and creates it otherwise",
            file=err,
        )
        return EXIT_INTERRUPTED
    except Exception as exc:  # noqa: BLE001 - cloud/auth/packaging failures: one line, no traceback
        return cloud_failure(exc, err)
    followed = any(isinstance(s, FollowJob) for s in plan.steps)
    if plan.job.registry is not None and not followed:
        print(
            f"registry: not following, so model {plan.job.registry.model_id} is not registered yet; once the "
            f"job ends, register it with: {again(ex.remote['name'])}",
            file=out,
        )
    return _final_status(ex.remote, err, followed=followed)


def _registration_failed(failed, command: str, err: TextIO) -> int:
    """One line: what failed, that no alias moved without its gate, and the command that finishes it."""
    if failed.cause is None:
        what, status = "was interrupted", EXIT_INTERRUPTED
    else:
        cause = " ".join(str(failed.cause).split()) or type(failed.cause).__name__
        what, status = f"failed ({type(failed.cause).__name__}: {cause})", 1
    print(
        f"run_job.py: registering model {failed.model} {what}; the job's model folder is untouched and no "
        "alias moved without its gate. To finish (a version already uploaded is found by its job label, not "
        f"uploaded again): {command}",
        file=err,
    )
    return status


def _follow_command(args: argparse.Namespace, name: str) -> str:
    """This command line as ``--follow name``: the same file and the flags that shape the submission."""
    import shlex

    words = ["python", "scripts/run_job.py", str(args.job_file), "--env", args.env]
    if args.outputs_file is not None:
        words += ["--outputs-file", str(args.outputs_file)]
    for override in args.overrides:
        words += ["--set", override]
    from jobs.api import FLAGS

    for flag in FLAGS:
        value = getattr(args, flag.dest)
        if flag.switch:
            words += [flag.flag] if value else []
        elif flag.repeatable:
            for item in value or ():
                words += [flag.flag, item]
        elif value is not None:
            words += [flag.flag, str(value)]
    if args.region is not None:
        words += ["--region", args.region]
    if args.report_dir is not None:
        words += ["--report-dir", str(args.report_dir)]
    return shlex.join([*words, "--follow", name])


def _follow_existing(name: str, factory, out: TextIO, err: TextIO, report_dir, repo_root: Path, *,
                     logs: bool) -> int:
    from jobs.api import JobError, follow_job, parse_job_name

    parse_job_name(name)  # bad input is one line and exit 2, before any client exists
    try:
        remote = follow_job(name, factory, out, logs=logs, report_dir=report_dir, repo_root=repo_root)
    except JobError:
        raise  # a report folder that cannot be written, a response that is not a job's: one line, exit 2
    except KeyboardInterrupt:
        return _interrupted(name, err)
    except Exception as exc:  # noqa: BLE001
        return cloud_failure(exc, err)
    return _final_status(remote, err, followed=True)


def _interrupted(name: str, err: TextIO, status: int = EXIT_INTERRUPTED, command: str | None = None) -> int:
    print(
        f"stopped following; the job keeps running. Follow it again with:\n"
        f"  {command or f'python scripts/run_job.py --follow {name}'}",
        file=err,
    )
    return status


def _final_status(remote: dict, err: TextIO, *, followed: bool) -> int:
    from jobs.api import SUCCESS_STATE

    state = remote.get("state", "JOB_STATE_UNSPECIFIED")
    if not followed or state == SUCCESS_STATE:
        return 0
    message = (remote.get("error") or {}).get("message", "no error message")
    print(f"{remote.get('name')} ended {state}: {message}", file=err)
    return 1


@dataclass(frozen=True)
class Call:
    """What main() was given, handed on to a verb (each takes what it needs)."""

    out: TextIO
    err: TextIO
    repo_root: Path
    factory: Callable | None
    outputs: Mapping[str, str] | None
    now: datetime | None
    code_hash: str | None
    image_hash: str | None


def _convert(argv: list[str], call: Call) -> int:
    """Legacy AI Platform Training config or script -> a definition (jobs/cli/convert.py)."""
    from jobs.cli import convert

    return convert.main(
        argv,
        out=call.out,
        err=call.err,
        repo_root=call.repo_root,
        outputs=call.outputs,
        code_hash=call.code_hash,
        image_hash=call.image_hash,
        now=call.now,
    )


def _report(argv: list[str], call: Call) -> int:
    """The report of a job on Vertex AI (jobs/cli/report.py)."""
    from jobs.cli import report

    return report.main(argv, factory=call.factory, out=call.out, err=call.err, repo_root=call.repo_root)


def _serve(argv: list[str], call: Call) -> int:
    """An exported SavedModel served on this machine as its Model Registry entry is (jobs/cli/serve.py)."""
    from jobs.cli import serve

    return serve.main(argv, out=call.out, err=call.err, repo_root=call.repo_root)


def _batch_predict(argv: list[str], call: Call) -> int:
    """A batch prediction on Vertex AI, or here with --local (jobs/cli/batch_predict.py)."""
    from jobs.cli import batch_predict

    return batch_predict.main(
        argv, factory=call.factory, out=call.out, err=call.err, repo_root=call.repo_root,
        outputs=call.outputs, now=call.now,
    )
def _runs(argv: list[str], call: Call) -> int:
    """A definition's runs in Vertex AI Experiments or the local store (jobs/cli/runs.py)."""
    from jobs.cli import runs

    return runs.main(argv, factory=call.factory, out=call.out, err=call.err, repo_root=call.repo_root,
                     outputs=call.outputs, now=call.now)


def _deploy_verb(verb: str) -> Callable[[list[str], Call], int]:
    """deploy, undeploy, rollback: a registered version on an endpoint (jobs/cli/deploy.py)."""

    def run(argv: list[str], call: Call) -> int:
        from jobs.cli import deploy

        return deploy.main(verb, argv, call)

    return run


# The verbs, checked on the first argument before JOB_FILE is parsed: each gets the arguments after it and has
# its own parser and --help. A job file named like a verb is given as a path: ./report.
VERBS: dict[str, Callable[[list[str], Call], int]] = {
    "convert": _convert,
    "report": _report,
    "serve": _serve,
    "batch-predict": _batch_predict,
    "runs": _runs,
    **{verb: _deploy_verb(verb) for verb in DEPLOY_VERBS},
}
# Each verb as --help lists it; written here, as importing the verbs' modules would be heavier than the help.
VERB_HELP = {
    "convert": ("convert LEGACY_FILE", "a legacy AI Platform Training config or script -> a definition"),
    "report": ("report RESOURCE_NAME", "an earlier job's report: a study's trials, a CustomJob's metrics"),
    "serve": ("serve MODEL_DIR", "serve an exported SavedModel here as its Model Registry entry serves it"),
    "batch-predict": ("batch-predict MODEL@ALIAS", "JSONL through a registry version on Vertex AI, or here"),
    "runs": ("runs JOB_FILE [--local | --env ENV]", "a definition's runs, best first; --compare RUN RUN"),
    "deploy": ("deploy MODEL@ALIAS --endpoint NAME", "a registered version to an endpoint, or a canary"),
    "undeploy": ("undeploy MODEL@ALIAS --endpoint NAME", "take a version off an endpoint"),
    "rollback": ("rollback --endpoint NAME", "undo the last deploy: its traffic back where it was"),
}
