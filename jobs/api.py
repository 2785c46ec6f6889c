"""The jobs layer as a library: the one entry point the command lines, synthesis and the tests call.

Each function takes plain values (a job file, an environment name, infra outputs, a clock) and returns data or
raises ``JobError`` (one line: file, field, problem, allowed); none parses flags, prints, or exits. What they
compose lives in the layers below, each a folder: ``definition/`` (load, overrides, references, compile,
validate), ``cloud/`` (the plan and the SDK clients), ``local/`` (this machine), ``legacy/`` (AI Platform
Training -> a definition). ``jobs/cli/`` (the command lines) and ``jobs/schedule.py`` (synthesis) build on
this; nothing below imports it.

    from datetime import datetime, timezone
    from pathlib import Path
    from jobs import api
    outputs = api.load_outputs("dev", None, "jobs/census_cpu.yaml")
    job = api.compile_file("jobs/census_cpu.yaml", env="dev", overrides=(), outputs=outputs,
                           repo_root=Path("."), now=datetime.now(timezone.utc))
    print(job.request())

Importing this module imports nothing heavy: each function imports what it uses, and the names the command
lines take from the layers below (``REEXPORTED``) are imported on first use.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import TextIO

# The refusal every function raises, and how a command line shortens a value it repeats: re-exported, so the
# command lines import nothing below this module (tests/jobs/test_layers.py).
from jobs.definition.errors import SHORT_NAME as SHORT_NAME
from jobs.definition.errors import JobError as JobError
from jobs.definition.errors import one_line as one_line
from jobs.definition.errors import short as short

REPO_ROOT = Path(__file__).resolve().parent.parent
# The environment a command uses when none is named (run_job.py, build_image.py, convert, job_images.py).
DEFAULT_ENV = "dev"
# Names of the layers below that the command lines use (flag tables, choices, what a submission can end with),
# by the module that defines them; ``from jobs.api import FLAGS`` imports that module then (PEP 562), not
# when this one is imported.
REEXPORTED = {
    "FLAGS": "jobs.definition.gcloud_flags",  # gcloud's flags: run_job.py's options
    "CUSTOM": "jobs.definition.gcloud_flags",
    "STUDY": "jobs.definition.gcloud_flags",
    "job_flags": "jobs.definition.gcloud_flags",
    "CONTAINER": "jobs.definition.compile",  # the trainer deliveries: convert --delivery
    "DELIVERIES": "jobs.definition.compile",
    "VARIANTS": "jobs.definition.image",  # the trainer image variants: build_image.py --variant
    "SUCCESS_STATE": "jobs.cloud.client",
    "FollowInterrupted": "jobs.cloud.plan",  # what executing a plan can end with besides its job
    "FollowJob": "jobs.cloud.plan",
    "RegistrationFailed": "jobs.cloud.register",
    "sigterm_as_interrupt": "jobs.local.launcher",  # SIGTERM ends a local command as Ctrl-C does
    "start_server": "jobs.local.server",  # the prediction server as a child process (serve, batch-predict)
    "model_problem": "jobs.local.server",
    "kill_server": "jobs.local.server",
    "STOP_WAIT_S": "jobs.local.server",
    "HEALTH": "jobs.local.server",
    "PREDICT": "jobs.local.server",
    "BatchFailed": "jobs.local.batch_predict",  # a local batch prediction that could not go on
    "DEFAULT_BATCH_SIZE": "jobs.definition.batch_prediction",
    "DEFAULT_MACHINE": "jobs.definition.batch_prediction",
    "check_cap": "jobs.definition.cost",  # a submit's ceiling against its cap (run_job.py)
    "SmokeFailed": "jobs.cloud.deploy",
    "runs_table": "jobs.definition.experiments",  # run_job.py runs: the table, and --compare's lines
    "runs_comparison": "jobs.definition.experiments",
    "find_engine": "jobs.local.engine",  # this machine's container engine (build_image.py --local)
    "EngineError": "jobs.local.engine",
    "BuildError": "jobs.local.engine",
    "ensure_image": "jobs.local.trainer_image",  # the trainer image built here, reused by its tag
}


def __getattr__(name: str):
    module = REEXPORTED.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


def load_outputs(env: str, outputs_file: Path | None, file: str) -> dict[str, str]:
    """The environment's infra outputs: deployed if a deploy wrote them, else planned from its config."""
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
            file, "--env", f"unknown environment {short(env)}", ", ".join(environments) or "(none defined)"
        )
    if outputs_file is not None and not _is_file(outputs_file):
        raise JobError(
            file,
            "--outputs-file",
            f"{short(str(outputs_file), SHORT_NAME, quote=False)} does not exist",
            f"the file `cdktn deploy {env} --outputs-file` wrote",
        )
    try:
        return dict(infra_outputs.resolve_outputs(env, outputs_file=outputs_file))
    except infra_config.ConfigError as exc:  # names its own file (config or outputs) and field
        raise JobError(exc.path, exc.field, exc.problem) from None
    except ValueError as exc:
        raise JobError(file, "--env", " ".join(str(exc).split()) or type(exc).__name__) from None


def _is_file(path: Path) -> bool:
    try:
        return Path(path).is_file()
    except OSError:  # a name too long for the system (ENAMETOOLONG): no such file either
        return False


def trainer_image_hash(repo_root: Path, needed: bool) -> str:
    """The build context's hash, or "" when it cannot be read and the definition does not need it."""
    from jobs.definition.image import ImageError, image_hash

    try:
        return image_hash(repo_root)
    except ImageError as exc:
        if needed:
            raise exc.to_job_error() from None
        return ""


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
    from jobs.definition.compile import Context, JobFlags, compile_job
    from jobs.definition.loader import load_file
    from jobs.definition.overrides import Override, apply_overrides
    from jobs.definition.package import code_hash as hash_code
    from jobs.definition.package import sdist_filename
    from jobs.definition.trainer_spec import load_trainer_spec
    from jobs.definition.validate import validate

    document = load_file(job_file)
    file = document.file
    parsed = [Override.parse(text, file) for text in overrides]
    document.data = apply_overrides(document.data, parsed, file, document.shared)
    if image_hash is None:
        # A registry block serves the model on the trainer image (model_registry.py): it needs the tag.
        needed = "${job.image_tag}" in json.dumps(document.data) or "registry" in document.data
        image_hash = trainer_image_hash(repo_root, needed=needed)
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
        load_trainer_spec,
        trainer_image=str(outputs.get("trainer_image", "")),
        accounts=job_accounts(env, outputs, file),
    )
    if job.deploy is not None:
        job = _with_endpoint(job, env)
    return job


def _with_endpoint(job, env: str):
    """The job with its deploy block's endpoint resolved in ``env`` (an unknown name lists the known ones)."""
    import dataclasses

    line = job.document.line_of("deploy.endpoint")
    where = f" (line {line})" if line else ""
    resource = endpoint_resource(env, job.deploy.spec.endpoint, job.file, "deploy.endpoint", where)
    return dataclasses.replace(job, deploy=dataclasses.replace(job.deploy, resource=resource))


def job_accounts(env: str, outputs: Mapping[str, str], file: str) -> tuple[str, ...]:
    """The accounts a job of ``env`` may run as: its runtime account, then its job_service_accounts."""
    from infra.config import ConfigError, list_environments, load_environment

    runtime = str(outputs.get("runtime_service_account", ""))
    if env not in list_environments():  # outputs given without a config (an embedding caller): runtime only
        return (runtime,)
    try:
        extra = load_environment(env).job_service_accounts
    except ConfigError as exc:
        raise JobError(exc.path, exc.field, exc.problem) from None
    return (runtime, *(a for a in extra if a != runtime))


def job_cost(job, env: str, repo_root: Path = REPO_ROOT, max_cost: str | None = None):
    """(Estimate, Cap or None) of a compiled job: its pools priced by common/vertex_ai_prices.yaml with the
    environment's ``prices:`` over it, the expected cost from an earlier run's report under ``repo_root``,
    and the cap a submit is checked against (``max_cost``, the --max-cost text, wins over the config's)."""
    from infra.config import ConfigError, list_environments, load_environment
    from jobs.definition.cost import parse_cap

    flag = parse_cap(max_cost, job.file) if max_cost is not None else None
    cfg = None
    if env in list_environments():  # outputs given without a config (an embedding caller): the table alone
        try:
            cfg = load_environment(env)
        except ConfigError as exc:
            raise JobError(exc.path, exc.field, exc.problem) from None
    return priced(job, cfg, repo_root, flag)


def priced(job, cfg, repo_root: Path = REPO_ROOT, flag: float | None = None):
    """``job_cost`` with the environment's config ``cfg`` (None: the table alone) and the --max-cost value."""
    from common.prices import load_table
    from jobs.cloud.report import REPORTS, earlier_run
    from jobs.definition.cost import estimate, pick_cap
    from jobs.definition.kinds import runs_study

    source = cfg and _in_repo(cfg.source, repo_root)
    table = load_table() if cfg is None else load_table().with_overrides(cfg.price_overrides, source)
    earlier = earlier_run(repo_root / REPORTS, job.kind, job.body, job.job_id)
    cost = estimate(job.kind, job.body, job.region, table, earlier)
    if cfg is None:
        return cost, pick_cap(runs_study(job.kind), flag, None, None, "")
    return cost, pick_cap(runs_study(job.kind), flag, cfg.max_job_cost, cfg.max_study_cost, source)


def _in_repo(path: str, repo_root: Path) -> str:
    """A config's path as the repository names it (infra/environments/dev.yaml), else as given."""
    try:
        return str(Path(path).resolve().relative_to(repo_root.resolve()))
    except (ValueError, OSError):
        return path


def check_deployed(job, env: str) -> None:
    """Placeholders are fine to look at, not to submit: the TensorBoard id only exists after a deploy."""
    from infra.outputs import is_pending

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


def plan_job(
    job,
    outputs: Mapping[str, str],
    *,
    wait: bool = True,
    follow: str | None = None,
    logs: bool = True,
    report_dir: Path | None = None,
    cost=None,
):
    """The submission plan of a compiled job: its missing trainer images built, then create and follow (with
    ``logs``, printing its log entries as they arrive), then a tuning job's study report written to
    ``report_dir`` (default .local/reports/<job id>) and its model registered when the definition has a
    registry block.

    ``cost``: the job's ``(Estimate, Cap)`` (``job_cost``), printed with the plan.

    ``follow``: the resource name of a job submitted from this definition earlier (``--no-wait``, or a
    follow that stopped): picked up and followed instead of submitted, then reported and registered.
    """
    from jobs.cloud.builds import job_builds, serving_builds
    from jobs.cloud.plan import build_plan

    serving = serving_builds(job, outputs, job.image_hash)
    board = str(outputs.get("tensorboard", ""))  # the backing TensorBoard of the definition's experiment
    if follow is not None:
        project, region, kind = parse_job_name(follow)
        if (project, region, kind) != (job.project, job.region, job.kind):
            raise JobError(
                job.file,
                "--follow",
                f"{follow} is a {kind} in projects/{project}/locations/{region}, and {job.file} defines a "
                f"{job.kind} in {short(job.parent, quote=False)}",
                "a job submitted from this JOB_FILE with the same --env (and --region)",
            )
        return build_plan(job, builds=serving, follow=follow, logs=logs, report_dir=report_dir,
                          tensorboard=board)
    builds = job_builds(job, outputs, job.image_hash)
    builds += [b for b in serving if b.image not in {known.image for known in builds}]
    return build_plan(job, wait=wait, builds=builds, logs=logs, report_dir=report_dir, cost=cost,
                      tensorboard=board)


def plan_image_builds(outputs: Mapping[str, str], variants: Sequence[str], digest: str):
    """The plan that builds the trainer image ``variants`` at ``digest`` unless their tags exist."""
    from jobs.cloud.builds import image_build, variant_image
    from jobs.cloud.plan import build_only_plan

    builds = [image_build(variant_image(outputs, v, digest), outputs, digest) for v in variants]
    return build_only_plan(builds)


def clients(factory: Callable | None, project: str, region: str):
    """The cloud clients of ``project``/``region``: ``factory``'s (tests' fake endpoint) or the SDK's."""
    from jobs.cloud.client import default_factory

    return (factory or default_factory)(project, region)


# The longest job resource name taken: project ids are at most 30 characters (domain-scoped ones a few more),
# regions about 25, job ids 19 digits; a longer argument is a mistake, and is not echoed back whole.
MAX_JOB_NAME = 256


def _job_name_match(name: str, collections: str) -> re.Match | None:
    """``name`` as projects/<p>/locations/<r>/<one of collections>/<numeric id>, or None."""
    # Each segment starts with a letter or digit (no "." or ".." climbs the REST path); job ids are numbers.
    pattern = rf"projects/([a-z0-9][a-z0-9.:-]*)/locations/([a-z0-9][a-z0-9-]*)/({collections})/([0-9]+)"
    return re.fullmatch(pattern, name) if len(name) <= MAX_JOB_NAME else None


def parse_job_name(name: str, where: str = "--follow") -> tuple[str, str, str]:
    """(project, region, kind) of a job resource name, e.g. projects/p/locations/r/customJobs/123; a JobError
    addressed to ``where`` (the flag or verb that took it) for anything else."""
    from jobs.definition.kinds import KIND_BY_COLLECTION

    found = _job_name_match(name, "|".join(KIND_BY_COLLECTION))
    if not found:
        raise JobError(
            where,
            "RESOURCE_NAME",
            f"{short(name)} is not a job resource name",
            "projects/<project>/locations/<region>/customJobs/<numeric id> or "
            ".../hyperparameterTuningJobs/<numeric id>",
        )
    return found.group(1), found.group(2), KIND_BY_COLLECTION[found.group(3)].name


def follow_job(
    name: str,
    factory: Callable | None,
    out: TextIO,
    *,
    logs: bool = True,
    report_dir: Path | None = None,
    repo_root: Path = REPO_ROOT,
) -> dict:
    """Follow an existing job until it ends (with ``logs``, printing its log entries from its start on);
    returns it as the API last returned it. A tuning job's study report is then written to ``report_dir``
    (default .local/reports/<job id> under ``repo_root``)."""
    from jobs.cloud import report
    from jobs.cloud.plan import follow, job_logs
    from jobs.definition.kinds import runs_study

    project, region, kind = parse_job_name(name)
    folder = report.report_folder(repo_root, name, report_dir)
    report.check_report_dir(kind, report_dir, folder)  # before following for hours
    cloud = clients(factory, project, region)
    remote = cloud.jobs.get(kind, name)
    stream = job_logs(cloud, project, kind, remote, out) if logs else None
    remote = follow(cloud.jobs, kind, remote, out, stream)
    if runs_study(kind):
        report.write_study_report(remote, folder, cloud.storage, out)
    return remote


def check_report_dir(kind: str, report_dir: Path | None, repo_root: Path = REPO_ROOT) -> None:
    """A JobError unless the study report of a job of ``kind`` can go to ``report_dir`` (None: the default
    folder under ``repo_root``): checked before a submission, not after hours of following."""
    from jobs.cloud.report import REPORTS
    from jobs.cloud.report import check_report_dir as check

    check(kind, report_dir, repo_root / REPORTS)


def run_local(
    job,
    outputs: Mapping[str, str],
    *,
    repo_root: Path,
    local_root: Path | None,
    resume: bool,
    strict_accelerators: bool,
    stream: TextIO,
    preempt_after: float | None = None,
    container: bool = False,
) -> int:
    """Run a compiled job on this machine (``run_job.py --local``); returns its exit status.

    ``preempt_after``: preempt a Spot job's replicas that many seconds after they start, then restart them
    (``jobs.local.preemption``); JobError for a job that is not on Spot capacity. ``container``: each
    replica in a container of the trainer image built from this checkout (``jobs.local.container``);
    JobError for a pool whose image cannot be built here."""
    from jobs.local.run import run_local as run

    if container:
        from jobs.local.container import job_images, run_job
        from jobs.local.spec import LocalRunError

        try:
            job_images(job.kind, job.body, dict(outputs), job.image_hash)
        except LocalRunError as exc:
            raise job.error(exc.path, exc.problem, exc.allowed) from None
        return run_job(job.kind, job.body, dict(outputs), repo_root=repo_root, image_hash=job.image_hash,
                       stream=stream, local_root=local_root, resume=resume,
                       strict_accelerators=strict_accelerators)

    preemption = None
    if preempt_after is not None:
        from jobs.definition.kinds import spec_field
        from jobs.local.preemption import Preemption, check
        from jobs.local.spec import LocalRunError

        try:
            check(job.kind, job.body.get(spec_field(job.kind)) or {})
        except LocalRunError as exc:
            raise job.error(exc.path, exc.problem, exc.allowed) from None
        preemption = Preemption(preempt_after)
    status = run(
        job.kind,
        job.body,
        dict(outputs),
        repo_root=repo_root,
        local_root=local_root,
        resume=resume,
        strict_accelerators=strict_accelerators,
        stream=stream,
        preemption=preemption,
    )
    if status in (0, 1, 130):  # a run that ended, failed or was stopped (2: refused before it began)
        from datetime import timezone

        from jobs.local.experiments import record_run

        root = (Path(local_root) if local_root else Path(repo_root) / ".local").resolve()
        record_run(job, root, status, datetime.now(timezone.utc).isoformat(timespec="seconds"), stream)
    return status


def list_runs(
    job_file: str,
    *,
    env: str,
    overrides: Sequence[str],
    outputs: Mapping[str, str],
    repo_root: Path,
    local_root: Path | None,
    local: bool,
    factory: Callable | None,
    now: datetime,
):
    """(the definition's experiment, its metric and goal, its runs): from the local store under
    ``local_root`` (``local``), else from the environment's Vertex AI Experiments. A JobError when there is
    no run (or the store holds something that is not one)."""
    from jobs.definition import experiments
    from jobs.definition.trainer_spec import load_trainer_spec

    job = compile_file(job_file, env=env, overrides=overrides, outputs=outputs, repo_root=repo_root, now=now)
    experiment = experiments.experiment_id(job.file)
    metric, goal = experiments.definition_metric(job, load_trainer_spec)
    if local:
        from jobs.local.experiments import read_runs

        root = (Path(local_root) if local_root else Path(repo_root) / ".local").resolve()
        return experiment, metric, goal, read_runs(root, experiment, job.file)
    from jobs.cloud.experiments import list_runs as vertex_runs

    made = clients(factory, job.project, job.region)
    runs = vertex_runs(made.metadata, job.parent, experiment)
    if not runs:
        raise JobError(job.file, "--env", f"no run of experiment {experiment} in {job.parent}",
                       f"an environment where `run_job.py {job.file}` ran and ended")
    return experiment, metric, goal, runs


def report_job(
    name: str,
    factory: Callable | None,
    out: TextIO,
    *,
    report_dir: Path | None = None,
    repo_root: Path = REPO_ROOT,
) -> dict:
    """The report of a job as it stands (``run_job.py report``): a tuning job's study report, or a CustomJob's
    state, times, model folder and metrics.json, written to ``report_dir`` (default .local/reports/<job id>).

    Bad input is a JobError before anything is asked or written: a name that is not a job's, a report folder
    that cannot be written; a job Vertex AI does not have (404) is one too.
    """
    from jobs.cloud import report

    if name and not name.startswith("projects/"):  # a local run's or study's folder (./projects/... for one)
        return report_local(Path(name), out, report_dir=report_dir, repo_root=repo_root)
    project, region, kind = parse_job_name(name, "report")
    folder = report.report_folder(repo_root, name, report_dir)
    report.check_folder(folder)
    from google.api_core.exceptions import NotFound  # only now: bad input is refused without the SDK

    made = clients(factory, project, region)
    try:
        remote = made.jobs.get(kind, name)
    except NotFound:
        raise JobError(
            "report",
            "RESOURCE_NAME",
            f"Vertex AI has no job {name} (404)",
            "the name of an existing job, as `gcloud ai custom-jobs list` or `gcloud ai hp-tuning-jobs list` "
            "print it",
        ) from None
    return report.write_report(remote, kind, folder, made.storage, out)


def report_local(
    path: Path, out: TextIO, *, report_dir: Path | None = None, repo_root: Path = REPO_ROOT
) -> dict:
    """``run_job.py report PATH``: the report of a ``--local`` run's folder (job.json) or a ``--local``
    study's (study.json, study.png), the same lines a cloud job's report prints, written to ``report_dir``
    (default .local/reports/<folder name>). A JobError, before anything is written, for a path holding no
    run."""
    from jobs import console, study_report
    from jobs.cloud.report import REPORTS, check_folder
    from jobs.local import report

    kind = report.run_kind(path)
    name = Path(os.path.abspath(path)).name
    folder = Path(report_dir) if report_dir is not None else repo_root / REPORTS / name
    check_folder(folder)
    if kind == "study":
        summary = report.study_summary_of(path)
        print(f"Study of {path}:", file=out)
        study_report.publish(summary, folder, out)
        return summary
    found, note = report.job_report(path)
    console.publish_job_report(found, note, folder, out)
    return found


def legacy_variables(items: Sequence[str], file: str) -> dict[str, str]:
    """``convert --var NAME=VALUE`` items as {name: value}."""
    variables = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise JobError(file, "--var", short(item), "NAME=VALUE with a shell variable name")
        variables[name] = value
    return variables


def legacy_bucket_map(items: Sequence[str], file: str) -> tuple[tuple[str, str], ...]:
    """``convert --map-bucket gs://OLD=OUTPUT`` items as (gs://OLD, infra output) pairs."""
    from common.gcs import GS, is_bucket_name
    from jobs.legacy.convert_paths import BUCKET_OUTPUTS

    pairs = []
    for item in items:
        old, eq, key = item.partition("=")
        if (
            not eq
            or not (old.startswith(GS) and is_bucket_name(old.removeprefix(GS)))
            or key not in BUCKET_OUTPUTS
        ):
            raise JobError(file, "--map-bucket", short(item), f"gs://<bucket>=<{'|'.join(BUCKET_OUTPUTS)}>")
        pairs.append((old, key))
    return tuple(pairs)


def write_definition(output: str, text: str, force: bool) -> None:
    """Write a converted definition to ``output`` atomically: a new file, or (``force``) a regular file
    replaced whole; never through a symbolic link."""
    import stat

    from common.reader import file_kind

    target = Path(output)
    if os.path.lexists(target):
        info = os.lstat(target)
        if stat.S_ISLNK(info.st_mode):
            # Writing through a link would put the definition wherever it points, outside what -o names.
            raise JobError(
                output, "-o", "is a symbolic link, and -o never writes through one (not even with --force)",
                "a new .yaml file, or a regular file with --force",
            )
        if not stat.S_ISREG(info.st_mode):
            raise JobError(output, "-o", f"exists and is {file_kind(info.st_mode)}", "a new .yaml file")
        if not force:
            raise JobError(output, "-o", "exists", "a new file, or --force to replace it")
    folder = target.parent
    if not folder.is_dir():
        shown = short(str(folder), SHORT_NAME, quote=False)
        raise JobError(output, "-o", f"no such folder {shown}", "a path in an existing folder")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def convert_legacy(
    file: str,
    *,
    variables: Mapping[str, str],
    env: str,
    outputs: Mapping[str, str],
    model: str | None,
    delivery: str,
    extra_args: tuple[str, ...],
    bucket_map: tuple[tuple[str, str], ...],
    strict: bool,
    output: str,
    command: str,
    repo_root: Path,
    code_hash: str | None,
    image_hash: str | None,
    now: datetime,
):
    """A legacy AI Platform Training config or submit script -> (definition text, Conversion, LegacyJob).

    The text is validated and compiled as ``run_job.py OUTPUT --dry-run`` would; its errors name the legacy
    source. ``strict`` refuses what cannot be carried over; ``output`` and ``command`` head the text.
    """
    from jobs.definition.trainer_spec import load_trainer_spec
    from jobs.legacy import source
    from jobs.legacy.convert import convert
    from jobs.legacy.convert_types import Options
    from jobs.legacy.render import render

    legacy = source.read(file, dict(variables))
    options = Options(
        outputs=outputs,
        env=env,
        model=model,
        delivery=delivery,
        extra_args=extra_args,
        accounts=job_accounts(env, outputs, file),
        bucket_map=bucket_map,
    )
    conversion = convert(legacy, load_trainer_spec(), options)
    if strict and conversion.lost:
        path, why = conversion.lost[0]
        more = f" (and {len(conversion.lost) - 1} more)" if len(conversion.lost) > 1 else ""
        raise legacy.error(
            path,
            f"cannot be carried over: {why}{more}",
            "remove it from the legacy job, or convert without --strict",
        )
    text = render(conversion, legacy, source=file, output=output, command=command)
    _verify(text, Path(output).name, conversion, legacy, env, outputs, repo_root, code_hash, image_hash, now)
    return text, conversion, legacy


def _verify(text, name, conversion, legacy, env, outputs, repo_root, code_hash, image_hash, now) -> None:
    """Compile and validate the converted file as --dry-run would; its errors point at the legacy source."""
    with tempfile.TemporaryDirectory(prefix="convert-") as folder:
        path = Path(folder) / name
        path.write_text(text, encoding="utf-8")
        try:
            compile_file(
                str(path),
                env=env,
                overrides=(),
                outputs=outputs,
                repo_root=repo_root,
                now=now,
                code_hash=code_hash,
                image_hash=image_hash,
            )
        except JobError as exc:
            problem = re.sub(r" \(line \d+\)", "", exc.problem)
            if exc.path == "(file)":  # the converted file is over the size cap: its biggest value's doing
                exc = exc.at(path=_largest(conversion))
                problem = f"the converted definition would be {problem}"
            source = next(
                (
                    s
                    for prefix, s in sorted(conversion.blame, key=lambda b: -len(b[0]))
                    if exc.path.startswith(prefix)
                ),
                None,
            )
            if source is None:
                raise JobError(legacy.file, f"(converted job) {exc.path}", problem, exc.allowed) from None
            converted = short(exc.path, SHORT_NAME, quote=False)
            raise legacy.error(source, f"{problem} (converted: {converted})", exc.allowed) from None


def _largest(conversion) -> str:
    """The blamed path of the converted definition whose value is the longest, to say which legacy value made
    the converted file too big (a 1 MB label is `--labels`' doing, not the file's)."""

    def size(path: str) -> int:
        value = conversion.definition
        for key in path.split("."):
            if isinstance(value, dict) and key in value:
                value = value[key]
            elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
                value = value[int(key)]
            else:
                return 0
        return len(json.dumps(value, default=str))

    return max((prefix for prefix, _ in conversion.blame), key=size, default="(file)")


# --- batch prediction (run_job.py batch-predict) --------------------------------------------------------

BATCH_VERB = "batch-predict"  # the file part of a batch prediction's refusals


def _batch_error(exc) -> JobError:
    return JobError(BATCH_VERB, exc.path, exc.problem, exc.allowed)


def batch_request(
    model_ref: str,
    inputs: Sequence[str],
    output: str,
    *,
    outputs: Mapping[str, str],
    now: datetime,
    machine_type: str,
    starting_replicas: int,
    max_replicas: int | None,
    batch_size: int,
    signature: str,
    stamp: str | None = None,
) -> dict:
    """The CreateBatchPredictionJobRequest (JSON form) of a registry version in ``outputs``' project and
    region, run as the environment's runtime account: what --dry-run prints and the submit sends. ``stamp``
    is the display name's time (default: ``now``'s); a schedule's is a placeholder each run fills in
    (jobs.schedule)."""
    from jobs.definition.batch_prediction import BatchError, batch_spec
    from jobs.definition.batch_prediction import batch_request as request
    from jobs.definition.schema import SchemaError

    try:
        spec = batch_spec(model_ref, list(inputs), output, machine_type=machine_type,
                          starting_replicas=starting_replicas, max_replicas=max_replicas,
                          batch_size=batch_size, signature=signature)
        parent = f"projects/{outputs['project']}/locations/{outputs['region']}"
        return request(
            spec,
            parent=parent,
            display_name=f"{spec.model}-{spec.alias}-batch-{stamp or now.strftime('%Y%m%d-%H%M%S')}",
            service_account=str(outputs.get("runtime_service_account", "")),
            labels={"model": spec.model},
        )
    except (BatchError, SchemaError) as exc:
        raise _batch_error(exc) from None


def submit_batch(request: dict, factory: Callable | None, out: TextIO, *, wait: bool) -> dict:
    """Create the batch prediction job (or take the live one of the same submission) and, with ``wait``,
    follow it to its end; returns it as last read."""
    from jobs.cloud.batch import submit_batch as submit

    project, region = request["parent"].split("/")[1::2]
    return submit(clients(factory, project, region), request, out, wait=wait)


def batch_plan(request: dict, *, wait: bool) -> list[str]:
    """The steps a submit of ``request`` takes, as --dry-run prints them."""
    from jobs.cloud.batch import reuse_line
    from jobs.definition.kinds import BATCH_PREDICTION_JOB, RESOURCE_KINDS

    body = request[RESOURCE_KINDS[BATCH_PREDICTION_JOB].request_field]
    return [reuse_line(body), "otherwise create the BatchPredictionJob (the model version's own serving "
            "container)", *([] if not wait else ["follow it until it ends"])]


def parse_batch_name(name: str) -> tuple[str, str]:
    """(project, region) of a batch prediction job's resource name; a JobError naming --follow otherwise."""
    from jobs.definition.kinds import BATCH_PREDICTION_JOB, RESOURCE_KINDS

    found = _job_name_match(name, RESOURCE_KINDS[BATCH_PREDICTION_JOB].collection)
    if not found:
        raise JobError(BATCH_VERB, "--follow", f"{short(name)} is not a batch prediction job's resource name",
                       "projects/<project>/locations/<region>/batchPredictionJobs/<numeric id>")
    return found.group(1), found.group(2)


def follow_batch(name: str, factory: Callable | None, out: TextIO) -> dict:
    """Follow an existing batch prediction job to its end, then say where its output went; returns it as
    last read."""
    from jobs.cloud.batch import console_url
    from jobs.cloud.batch import follow_batch as follow
    from jobs.definition.kinds import BATCH_PREDICTION_JOB

    project, region = parse_batch_name(name)
    jobs = clients(factory, project, region)
    remote = jobs.jobs.get(BATCH_PREDICTION_JOB, name)
    print(f"following {name}\n  console: {console_url(name)}", file=out, flush=True)
    return follow(jobs, remote, out)


def prepare_local_batch(
    model_dir: str,
    inputs: Sequence[str],
    output: str,
    *,
    local_root: Path,
    batch_size: int,
    signature: str,
):
    """Everything a local batch prediction checks before it starts the server or writes anything:
    (input files, output folder, instance count, request parameters); JobError names the flag."""
    from jobs.definition.batch_prediction import (
        BatchError,
        check_batch_size,
        check_inputs,
        check_output,
        check_signature,
    )
    from jobs.local.batch_predict import prepare
    from jobs.local.server import model_problem
    from jobs.local.spec import LocalRunError

    try:
        problem = model_problem(model_dir)
        if problem:
            raise JobError(BATCH_VERB, "MODEL_DIR", problem,
                           "an exported SavedModel folder (a job's .../model) with --local")
        parameters = {"signature": check_signature(signature)} if signature else None
        check_batch_size(batch_size)
        files, folder, count = prepare(check_inputs(list(inputs)), check_output(output), local_root,
                                       parameters)
    except (BatchError, LocalRunError) as exc:
        raise _batch_error(exc) from None
    return files, folder, count, parameters


def run_local_batch(model_dir: str, files, folder: Path, *, parameters, batch_size: int, repo_root: Path,
                    out: TextIO, container: bool = False):
    """Serve ``model_dir`` here and stream ``files`` through it (see jobs.local.batch_predict): a Summary.
    ``container``: the server in its container (``container_serving``)."""
    from contextlib import nullcontext

    from jobs.local.batch_predict import run_batch
    from jobs.local.engine import BuildError
    from jobs.local.server import start_server
    from jobs.local.spec import LocalRunError

    serving = container_serving(repo_root, out, BATCH_VERB) if container else nullcontext(start_server)
    try:
        with serving as start:
            return run_batch(model_dir, files, folder, parameters=parameters, batch_size=batch_size,
                             repo_root=repo_root, out=out, start=start)
    except BuildError:
        raise
    except LocalRunError as exc:  # a line that changed since the first pass: the run stops at it
        raise _batch_error(exc) from None


SERVE_VERB = "serve"  # the file part of serve's refusals


@contextmanager
def container_serving(repo_root: Path, out: TextIO, verb: str = SERVE_VERB):
    """A function that starts the server in its container as ``start_server`` starts it here (the trainer's
    cpu image of this checkout, built first when missing), every container it started removed when the
    block ends. JobError (``verb``: its file part): no container engine, a port in use; ``BuildError``: the
    image build failed (naming the Dockerfile step)."""
    from jobs.local.container import serving
    from jobs.local.engine import BuildError
    from jobs.local.spec import LocalRunError

    try:
        with serving(repo_root, out, verb) as start:
            yield start
    except BuildError:
        raise
    except LocalRunError as exc:
        raise JobError(verb, exc.path, exc.problem, exc.allowed) from None


def container_port(host: str, port: int, verb: str = SERVE_VERB) -> int:
    """The host port the serving container's 8080 will be published on: ``port`` when it is free (JobError
    when it is taken), a free one for 0."""
    from jobs.local.container import host_port
    from jobs.local.spec import LocalRunError

    try:
        return host_port(host, port)
    except LocalRunError as exc:
        raise JobError(verb, exc.path, exc.problem, exc.allowed) from None
# --- deploying a registered version (run_job.py deploy, undeploy, rollback) ------------------------------

DEPLOY_VERBS = ("deploy", "undeploy", "rollback")


def endpoint_names(env: str) -> dict[str, str]:
    """The environment's endpoints, name -> resource name (infra's ``endpoints:`` map)."""
    from infra.config import ConfigError, load_environment
    from infra.outputs import endpoint_resource_names

    try:
        return dict(endpoint_resource_names(load_environment(env)))
    except ConfigError as exc:
        raise JobError(exc.path, exc.field, exc.problem) from None


def endpoint_resource(env: str, name: str, file: str, path: str, where: str = "") -> str:
    """The resource name of endpoint ``name`` of ``env``; a JobError at ``file``/``path`` listing the known
    ones for any other name (``where``: the line it was written on)."""
    known = endpoint_names(env)
    if name not in known:
        raise JobError(
            file, path, f"{short(name)} is not an endpoint of environment {env}{where}",
            ", ".join(sorted(known)) or f"(none: add one to infra/environments/{env}.yaml's endpoints)",
        )
    return known[name]


def deploy_target(env: str, outputs: Mapping[str, str], endpoint: str, verb: str = "deploy"):
    """The Target of ``--endpoint NAME`` in ``env``."""
    from jobs.cloud.deploy import Target

    parent = f"projects/{outputs['project']}/locations/{outputs['region']}"
    return Target(parent, endpoint, endpoint_resource(env, endpoint, verb, "--endpoint"))


def deploy_settings(ref_text: str, settings: Mapping[str, object], names: Mapping[str, str],
                    verb: str = "deploy"):
    """``MODEL@ALIAS`` and the deploy settings (block fields, or flags named by ``names``) -> (ref, spec)."""
    from jobs.definition.deployment import DeployError, parse_ref, parse_settings

    try:
        return parse_ref(ref_text), parse_settings(settings, names)
    except DeployError as exc:
        raise exc.to_job_error(verb) from None


def smoke_instance(text: str | None, verb: str = "deploy"):
    """``--instance JSON``: the instance the smoke prediction sends (None: the model's example request's)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        example = 'one instance, e.g. {"user": "1", "k": 10}'
        raise JobError(verb, "--instance", f"not JSON ({exc})", example) from None


def preview_deploy(ref, spec, target) -> dict:
    """The DeployModelRequest ``deploy --dry-run`` prints (jobs.cloud.deploy.preview_request)."""
    from jobs.cloud.deploy import preview_request

    return preview_request(ref, spec, target)


def run_deploy(verb: str, factory: Callable | None, target, out: TextIO, *, ref=None, spec=None,
               instance=None, dry_run: bool = False):
    """Deploy (``ref`` as ``spec`` says, then smoke-test with ``instance``), undeploy ``ref``, or roll back
    the endpoint; bad input found at the cloud (no such version or endpoint) is a JobError. ``dry_run``
    (undeploy, rollback): read the endpoint and print the request, change nothing."""
    from jobs.cloud import deploy
    from jobs.definition.deployment import DeployError

    project, region = target.parent.split("/")[1], target.parent.split("/")[3]
    made = clients(factory, project, region)
    try:
        if verb == "deploy":
            return deploy.deploy(made, ref, spec, target, instance, out)
        if verb == "undeploy":
            return deploy.undeploy(made, ref, target, out, dry_run=dry_run)
        return deploy.rollback(made, target, out, dry_run=dry_run)
    except DeployError as exc:
        raise exc.to_job_error(verb) from None
