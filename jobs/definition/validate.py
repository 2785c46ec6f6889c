"""Everything checked before any money is spent: the real message schema, then what the API would only reject
after submission (or never): machine/accelerator combinations, pool shapes, study parameter ranges, trial
counts, and the contract with this repo's trainer (its flags and the metrics it reports).

``validate(job, trainer)`` is pure: it reads the compiled job and the trainer's contract and raises a JobError
whose path is the field as written in the definition file.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Collection, Iterator
from typing import Any

# Job labels follow the Google Cloud label rules the infra config already checks: one spelling of them.
from common.gcs import is_bucket_name
from infra.config import LABEL_KEY, LABEL_VALUE
from jobs.definition import image, machines
from jobs.definition.body import (
    CONTAINER_SPEC,
    PROGRAMS,
    PYTHON_PACKAGE_SPEC,
    STUDY_FIELD,
    Pool,
    gs_uris,
    is_gs,
    join,
    pools,
    split_image,
)
from jobs.definition.compile import CONTAINER, PYTHON_PACKAGE, CompiledJob
from jobs.definition.errors import JobError, one_of, short
from jobs.definition.kinds import runs_study, spec_field
from jobs.definition.registry import output_prefix
from jobs.definition.study import Parameter, Study, StudyError, parse_study
from jobs.definition.trainer_contract import TrainerArgsError, TrainerContract
from trainer.contract import METRIC_FLAG, REPLICA_VARIABLES, TRAINER_MODULE, WORKER_POOLS

SERVICE_ACCOUNT = re.compile(
    r"[a-z0-9-]+@[a-z0-9.-]+\.iam\.gserviceaccount\.com|[0-9]+-compute@developer\.gserviceaccount\.com"
)
TENSORBOARD = re.compile(r"projects/[^/]+/locations/([^/]+)/tensorboards/[^/]+")
# CustomJobSpec.network: "projects/{project}/global/networks/{network}, where {project} is a project number".
NETWORK = re.compile(r"projects/[0-9]+/global/networks/[^/]+")
# EncryptionSpec.kmsKeyName: the key "needs to be in the same region as where the compute resource is created"
KMS_KEY = re.compile(r"projects/[^/]+/locations/([^/]+)/keyRings/[^/]+/cryptoKeys/[^/]+")
# Vertex AI's EnvVar.name: "a valid C identifier".
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Set by Vertex AI (and by --local) for each replica: a job's own value would fight the runtime contract.
RESERVED_ENV_PREFIXES = ("AIP_", "CLOUD_ML_")
# Unicode's explicit bidirectional formatting characters: text that reads differently than it runs
# ("Trojan Source", CVE-2021-42574).
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
# Fields that are names people read in the console, logs and billing: plain printable text only.
NAME_FIELDS = frozenset({"displayName", "parameterId", "metricId", "name"})


def validate(
    job: CompiledJob,
    trainer: TrainerContract | Callable[[], TrainerContract] | None = None,
    trainer_image: str = "",
    *,
    accounts: Collection[str],
) -> None:
    """Raise JobError for the first problem; ``trainer`` may be a loader, called only if the trainer runs.

    ``accounts``: the service accounts a job may run as (the environment's runtime account first, then those
    its config lists in ``job_service_accounts``).
    """
    from jobs.definition.schema import SchemaError, check_message
    from jobs.definition.vertex_types import job_message_class

    try:
        check_message(job.body, job_message_class(job.kind))
    except SchemaError as exc:
        raise job.error(exc.path, exc.problem, exc.allowed) from None

    _check_text(job)
    _check_top(job)
    _check_job_spec(job, spec_field(job.kind), accounts)
    study = _check_study(job) if runs_study(job.kind) else None
    if job.registry is not None:
        _check_registered_output(job)
    trainer_pools = [pool for pool in job.pools() if _runs_repo_trainer(pool, trainer_image)]
    for pool in trainer_pools:
        _check_image(job, pool, trainer_image)
    _check_replicas_run_the_chiefs_program(job, trainer_pools)
    if trainer_pools and trainer is not None:
        try:
            contract = trainer if isinstance(trainer, TrainerContract) else trainer()
        except Exception as exc:  # noqa: BLE001 - a broken trainer/config.py is bad input, not a crash
            raise JobError(
                "trainer/config.py",
                "build_parser",
                f"cannot read the trainer's flags ({type(exc).__name__}: {exc})",
                "an importable trainer.config that does not import TensorFlow",
            ) from None
        _check_trainer_contract(job, contract, trainer_pools, study)
        if job.registry is not None and study is None:
            _check_registry_metric(job, contract, trainer_pools[0])


def _check_top(job: CompiledJob) -> None:
    name = job.body.get("displayName", "")
    if not name or len(name) > 128:
        raise job.error("displayName", f"must be 1-128 characters, got {len(name)}", "a shorter display name")
    key = (job.body.get("encryptionSpec") or {}).get("kmsKeyName")
    if key is not None:
        found = KMS_KEY.fullmatch(key)
        if not found:
            raise job.error(
                "encryptionSpec.kmsKeyName",
                f"{short(key)} is not a Cloud KMS key name",
                "projects/<p>/locations/<r>/keyRings/<ring>/cryptoKeys/<key>",
            )
        if found.group(1) != job.region:
            raise job.error(
                "encryptionSpec.kmsKeyName",
                f"the key is in {found.group(1)}, the job in {short(job.region, quote=False)}",
                f"a key in {short(job.region, quote=False)}",
            )
    labels = job.body.get("labels", {})
    if len(labels) > 64:
        raise job.error("labels", f"{len(labels)} labels", "at most 64 (one is used for submission_hash)")
    for key, value in labels.items():
        if not LABEL_KEY.fullmatch(key):
            raise job.error(
                join("labels", key),
                "invalid label key",
                "lowercase letters, digits, _ and -, starting with a letter, at most 63",
            )
        if not LABEL_VALUE.fullmatch(str(value)):
            raise job.error(
                join("labels", key),
                f"invalid label value {short(value)}",
                "lowercase letters, digits, _ and -, at most 63",
            )


def _strings(value: Any, path: str = "") -> Iterator[tuple[str, str, str]]:
    """(path, key, text) of every key and string value in a body: what a hostile file can put text into."""
    if isinstance(value, dict):
        for key, item in value.items():
            where = join(path, key)
            yield where, str(key), str(key)
            yield from _strings(item, where)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _strings(item, join(path, i))
    elif isinstance(value, str):
        yield path, path.rsplit(".", 1)[-1], value


def _check_text(job: CompiledJob) -> None:
    """No control or bidirectional characters: names and labels are printable text; args, commands and env
    values may span lines (a `sh -c` script) but carry no NUL (no process can receive it) and no other
    control code or direction override (a console or log would show something other than what runs)."""
    for path, key, text in _strings(job.body):
        strict = key in NAME_FIELDS or path.startswith("labels")
        for char in text:
            if char in BIDI_CONTROLS or (
                unicodedata.category(char) == "Cc" and (strict or char not in "\n\t")
            ):
                raise job.error(
                    path,
                    f"contains the control character U+{ord(char):04X}",
                    "printable text" if strict else "printable text, newlines and tabs",
                )
            if strict and unicodedata.category(char) in ("Cf", "Zl", "Zp"):
                raise job.error(path, f"contains the format character U+{ord(char):04X}", "printable text")
    _check_gs_uris(job)


def _check_gs_uris(job: CompiledJob) -> None:
    """Every gs:// URI names a bucket and plain path segments. Cloud Storage would take `..` as an object name
    literally, but anything that maps URIs onto a filesystem (gcsfuse in the job, `--local` here) resolves it
    upward, out of the bucket: so no `.`, `..` or empty segment (a trailing `/` is fine)."""
    for path, _, text in _strings(job.body):
        for uri, bucket, name in gs_uris(text):
            segments = name.removesuffix("/").split("/") if name else []
            bad = next((s for s in segments if s in ("", ".", "..")), None)
            if not is_bucket_name(bucket):
                raise job.error(path, f"{short(uri)} names no valid bucket", "gs://<bucket>/<path>")
            if bad is not None:
                raise job.error(
                    path,
                    f"{short(uri)} has " + (f"a {bad!r} path segment" if bad else "an empty path segment"),
                    "gs://<bucket>/<path> with plain segments: no '.', '..' or '//'",
                )


def _check_service_account(job: CompiledJob, spec_path: str, accounts: Collection[str]) -> None:
    """A job runs as the environment's runtime account (or one its config lists): without one it would run as
    the Vertex AI Custom Code Service Agent, which the per-bucket grants of infra/ do not fence in."""
    where = join(spec_path, "serviceAccount")
    account = (job.body.get(spec_path) or {}).get("serviceAccount")
    runtime = next(iter(accounts), "")
    allowed = "${infra.runtime_service_account}" + (f" ({runtime})" if runtime else "")
    others = [a for a in accounts if a != runtime]
    if others:
        allowed += f", or one of job_service_accounts in the environment config: {one_of(others)}"
    if not account:
        raise job.error(
            where,
            "missing: the job would run as the Vertex AI Custom Code Service Agent",
            f"{allowed}; in the file or as --service-account EMAIL",
        )
    if not isinstance(account, str) or not SERVICE_ACCOUNT.fullmatch(account):
        raise job.error(where, f"{short(account)} is not a service account email", allowed)
    if account not in accounts:
        raise job.error(where, f"{short(account)} is not an account this environment runs jobs as", allowed)


def _check_job_spec(job: CompiledJob, spec_path: str, accounts: Collection[str]) -> None:
    spec = job.body.get(spec_path)
    if not isinstance(spec, dict):
        raise job.error(spec_path, "missing", "a CustomJobSpec with workerPoolSpecs")
    raw_pools = spec.get("workerPoolSpecs")
    if not raw_pools:
        raise job.error(
            join(spec_path, "workerPoolSpecs"),
            "no worker pools",
            f"1-{len(WORKER_POOLS)} pools: chief, workers, parameter servers, evaluators",
        )
    if len(raw_pools) > len(WORKER_POOLS):
        raise job.error(
            join(spec_path, "workerPoolSpecs"),
            f"{len(raw_pools)} worker pools",
            f"at most {len(WORKER_POOLS)}: chief, workers, parameter servers, evaluators",
        )
    for pool in pools(spec, spec_path):
        _check_pool(job, pool)
        _check_env(job, pool)

    prefix = (spec.get("baseOutputDirectory") or {}).get("outputUriPrefix")
    if prefix is not None and not is_gs(prefix):
        raise job.error(
            join(spec_path, "baseOutputDirectory.outputUriPrefix"),
            f"{short(prefix)} is not a gs:// URI",
            "gs://<bucket>/<path>, e.g. ${infra.models_bucket}/<name>/${job.id}",
        )
    _check_service_account(job, spec_path, accounts)
    network = spec.get("network")
    if network is not None and not NETWORK.fullmatch(network):
        raise job.error(
            join(spec_path, "network"),
            f"{short(network)} is not a VPC network name",
            "projects/<project number>/global/networks/<name>",
        )
    tensorboard = spec.get("tensorboard")
    if tensorboard:
        found = TENSORBOARD.fullmatch(tensorboard)
        if not found:
            raise job.error(
                join(spec_path, "tensorboard"),
                f"{short(tensorboard)} is not a TensorBoard resource name",
                "projects/<p>/locations/<r>/tensorboards/<id>, i.e. ${infra.tensorboard}",
            )
        if found.group(1) != job.region:
            raise job.error(
                join(spec_path, "tensorboard"),
                f"TensorBoard is in {found.group(1)}, the job in {short(job.region, quote=False)}",
                f"a TensorBoard instance in {short(job.region, quote=False)}",
            )
        if prefix is None:
            raise job.error(
                join(spec_path, "baseOutputDirectory"),
                "TensorBoard upload needs an output directory",
                "baseOutputDirectory: {outputUriPrefix: gs://...}",
            )


def _check_env(job: CompiledJob, pool: Pool) -> None:
    seen: dict[str, int] = {}
    for i, variable in enumerate(pool.env):
        where = pool.field(pool.program_field, "env", i)
        name = variable.get("name") if isinstance(variable, dict) else None
        if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
            raise job.error(
                join(where, "name"),
                f"{short(name)} is not an environment variable name",
                "a C identifier: [A-Za-z_][A-Za-z0-9_]*",
            )
        if name in REPLICA_VARIABLES or name.startswith(RESERVED_ENV_PREFIXES):
            raise job.error(
                join(where, "name"),
                f"{name} is set by Vertex AI for each replica",
                f"a name outside {', '.join(p + '*' for p in RESERVED_ENV_PREFIXES)} "
                f"and {one_of(REPLICA_VARIABLES)}",
            )
        if name in seen:
            raise job.error(
                join(where, "name"),
                f"{name} is set twice (first at env.{seen[name]})",
                "each name once per pool",
            )
        seen[name] = i


def _check_pool(job: CompiledJob, pool: Pool) -> None:
    path, index = pool.path, pool.index
    if not pool.raw:
        if index == 0:
            raise job.error(
                path,
                "the first pool (the chief) cannot be empty",
                "machineSpec, replicaCount, and pythonPackageSpec or containerSpec",
            )
        return  # an empty placeholder pool keeps later pools at their positions (e.g. no parameter servers)
    replicas = int(pool.raw.get("replicaCount", 0) or 0)
    if replicas < 1:
        raise job.error(join(path, "replicaCount"), f"replicaCount is {replicas}", "an integer >= 1")
    if index == 0 and replicas != 1:
        raise job.error(
            join(path, "replicaCount"),
            f"the first pool is the chief and has {replicas} replicas",
            "1; put further replicas in pool 1 (workers)",
        )
    programs = pool.programs
    if len(programs) != 1:
        raise job.error(
            path,
            f"has {' and '.join(programs) or 'neither'} of {'/'.join(PROGRAMS)}",
            f"exactly one of {', '.join(PROGRAMS)}",
        )
    wanted = PYTHON_PACKAGE_SPEC if job.delivery == PYTHON_PACKAGE else CONTAINER_SPEC
    if programs[0] != wanted:
        raise job.error(
            join(path, programs[0]),
            f"the header says trainer.delivery: {job.delivery}",
            f"{wanted} in every pool, or trainer.delivery: "
            f"{CONTAINER if job.delivery == PYTHON_PACKAGE else PYTHON_PACKAGE}",
        )
    if pool.is_package:
        package = pool.program
        for key in ("executorImageUri", "pythonModule"):
            if not package.get(key):
                raise job.error(
                    join(path, f"pythonPackageSpec.{key}"),
                    "missing",
                    "a prebuilt training image URI" if key == "executorImageUri" else TRAINER_MODULE,
                )
        for i, uri in enumerate(package.get("packageUris") or []):
            if not is_gs(uri):
                raise job.error(
                    join(path, f"pythonPackageSpec.packageUris.{i}"),
                    f"{short(uri)} is not a gs:// URI",
                    "${job.package_uri} (the trainer sdist run_job.py uploads)",
                )
    elif not pool.image:
        allowed = "${infra.trainer_image}:<variant>-${job.image_tag}"
        raise job.error(pool.field(pool.image_field), "missing", allowed)
    machine = pool.raw.get("machineSpec")
    if not machine:
        raise job.error(join(path, "machineSpec"), "missing", "machineSpec: {machineType: n1-standard-4}")
    _check_machine(job, join(path, "machineSpec"), machine)


def _check_machine(job: CompiledJob, path: str, machine: dict[str, Any]) -> None:
    machine_type = machine.get("machineType", "")
    family = machines.family_of(machine_type)
    if family is None:
        raise job.error(
            join(path, "machineType"),
            f"unknown machine type {short(machine_type)}",
            machines.allowed_types(machine_type),
        )
    accelerator = machine.get("acceleratorType", "ACCELERATOR_TYPE_UNSPECIFIED")
    count = int(machine.get("acceleratorCount", 0) or 0)
    has_accelerator = accelerator != "ACCELERATOR_TYPE_UNSPECIFIED"
    if has_accelerator and count == 0:
        raise job.error(
            join(path, "acceleratorCount"),
            f"acceleratorType {accelerator} without a count",
            one_of(family.allowed_counts(machine_type, accelerator)) or "an acceleratorCount",
        )
    if count and not has_accelerator:
        raise job.error(
            join(path, "acceleratorType"),
            f"acceleratorCount {count} without a type",
            one_of(family.accelerators) or f"no accelerators on {machine_type}",
        )
    if has_accelerator and accelerator not in family.accelerators:
        raise job.error(
            join(path, "acceleratorType"),
            f"{machine_type} does not take {accelerator}",
            one_of(family.accelerators) if family.accelerators else f"none: {family.name} is CPU-only",
        )
    if not has_accelerator and family.accelerator_required:
        raise job.error(
            join(path, "acceleratorType"),
            f"{machine_type} comes with accelerators; none given",
            one_of(family.accelerators),
        )
    if has_accelerator and count not in family.allowed_counts(machine_type, accelerator):
        raise job.error(
            join(path, "acceleratorCount"),
            f"{count} x {accelerator} on {machine_type}",
            one_of(family.allowed_counts(machine_type, accelerator)),
        )
    topology = machine.get("tpuTopology")
    allowed_topologies = family.allowed_topologies(machine_type)
    if topology and not allowed_topologies:
        raise job.error(
            join(path, "tpuTopology"),
            f"{machine_type} takes no tpuTopology",
            "ct5lp-hightpu-* (TPU v5e) machine types only",
        )
    if allowed_topologies and topology not in allowed_topologies:
        raise job.error(
            join(path, "tpuTopology"),
            f"topology {short(topology)} on {machine_type}",
            one_of(allowed_topologies),
        )


def _check_study(job: CompiledJob) -> Study:
    """The study, by the StudySpec rules of jobs.definition.study, a refusal addressed to the definition's
    field."""
    try:
        return parse_study(job.body)
    except StudyError as exc:
        raise job.error(exc.path, exc.problem, exc.allowed) from None


def _check_image(job: CompiledJob, pool: Pool, trainer_image: str) -> None:
    """The image a pool runs the trainer in must be one the trainer runs on, built for the pool's machine."""
    wanted = image.variant_for_machine(pool.machine)
    machine = pool.machine.get("acceleratorType") or "no accelerator"
    where, uri = pool.field(pool.image_field), pool.image
    if pool.is_package:
        prebuilt = image.parse_prebuilt(uri)
        runnable = (
            f"{one_of(image.RUNNABLE_PREBUILT)} (TensorFlow >= "
            f"{'.'.join(map(str, image.PREBUILT_TF_FLOOR))} with Keras 3), or trainer.delivery: container "
            "with ${infra.trainer_image}"
        )
        if prebuilt is None or prebuilt.framework != "tf":
            raise job.error(where, f"{short(uri)} is not a prebuilt TensorFlow training image", runnable)
        if prebuilt.version < image.PREBUILT_TF_FLOOR:
            keras = " (Keras 2)" if prebuilt.version < (2, 16) else ""
            raise job.error(
                where,
                f"the trainer cannot run on TensorFlow {prebuilt.version[0]}.{prebuilt.version[1]}{keras}",
                runnable,
            )
        if prebuilt.variant != wanted:
            fitting = [u for u in image.RUNNABLE_PREBUILT if f"/tf-{wanted}." in u]
            raise job.error(
                where,
                f"a tf-{prebuilt.variant} image on a machine with {machine}",
                one_of(fitting)
                if fitting
                else f"${{infra.trainer_image}}:{wanted}-${{job.image_tag}} "
                f"(no prebuilt {wanted} image runs the trainer)",
            )
        return
    name, tag = split_image(uri)
    if name != trainer_image:
        return  # a `python -m trainer...` command in another image: that image is the user's business
    found = image.TAG.fullmatch(tag)
    if not found:
        raise job.error(
            where,
            f"the trainer image tag {short(tag or '(none)')} cannot be resolved to a build",
            f"${{infra.trainer_image}}:{wanted}-${{job.image_tag}} (built from this checkout), or "
            f"{wanted}-<hash> of an earlier build",
        )
    if found.group(1) != wanted:
        raise job.error(
            where,
            f"the {found.group(1)} trainer image on a machine with {machine}",
            f"the {wanted} image: ${{infra.trainer_image}}:{wanted}-${{job.image_tag}}",
        )


def _runs_repo_trainer(pool: Pool, trainer_image: str) -> bool:
    if pool.is_package:
        return pool.module == TRAINER_MODULE
    command = " ".join(pool.command)
    return bool(trainer_image and split_image(pool.image)[0] == trainer_image) or TRAINER_MODULE in command


def _metric_arg(args: list) -> tuple[int, str] | None:
    for i, arg in enumerate(args):
        if arg == METRIC_FLAG and i + 1 < len(args):
            return i + 1, str(args[i + 1])
        if str(arg).startswith(METRIC_FLAG + "="):
            return i, str(arg).split("=", 1)[1]
    return None


MODEL_PARAMETER = "model"  # a tuned --model: its conditional parameters belong to the model values above them


def _tuned_with_models(
    study: Study, args_model: str
) -> tuple[list[tuple[Parameter, tuple[str, ...]]], tuple[str, ...] | None]:
    """(parameter, the --model values its trials run) of every tuned parameter, and the values of a tuned
    --model (None when --model is not tuned).

    Without a tuned --model every trial runs the model the pool args select. With one, a top-level
    parameter runs with each of its values, and a conditional parameter under it with the values of the
    parent that enable it.
    """
    tuned_model = next((p for p in study.parameters if p.parameter_id == MODEL_PARAMETER), None)
    categorical = tuned_model is not None and tuned_model.kind == "CATEGORICAL"
    base = tuned_model.values if categorical else (args_model,)
    models_of: dict[str, tuple[str, ...]] = {}  # parameterId -> the models its trials run
    found: list[tuple[Parameter, tuple[str, ...]]] = []
    for parameter in study.tuned:  # depth first: a parent comes before its children
        models = models_of[parameter.parent] if parameter.parent else base
        if parameter.parent == MODEL_PARAMETER:
            models = tuple(m for m in models if m in set(parameter.parent_values))
        models_of[parameter.parameter_id] = models
        found.append((parameter, models))
    return found, (base if tuned_model is not None else None)


def _check_trainer_contract(
    job: CompiledJob, trainer: TrainerContract, trainer_pools: list[Pool], study: Study | None
) -> None:
    # Every trainer pool runs the model its args select (--model, else the default model); a tuning study's
    # parameters and metric must be that model's, or those of each model value a tuned --model tries.
    tuned: list[tuple[Parameter, tuple[str, ...]]] = []
    tuned_models = None
    if study is not None:
        chief_model = trainer.model_of([str(a) for a in trainer_pools[0].args])
        tuned, tuned_models = _tuned_with_models(study, chief_model)
        for parameter, models in tuned:
            _check_tuned_flag(job, trainer, parameter.path, "--" + parameter.parameter_id, models)
    _check_replicas_agree(job, trainer_pools)
    for pool in trainer_pools:
        path, args_path = pool.path, pool.args_field
        args = [str(a) for a in pool.args]
        try:
            # With a tuned --model no trial runs these args alone: the tuned parameter's check below runs them
            # with each model value.
            if tuned_models is None:
                trainer.check_args(args)
        except TrainerArgsError as exc:
            raise job.error(
                join(path, args_path),
                f"the trainer rejects these args: {exc}",
                f"python -m {TRAINER_MODULE} --help",
            ) from None
        # A trial runs the pool's args plus --<parameterId>=<value>, the value formatted as Vertex AI does.
        for parameter, models in tuned:
            if tuned_models is not None and parameter.parameter_id != MODEL_PARAMETER:
                for model in (m for m in models if trainer.model(m)):
                    _check_trial_values(job, trainer, [*args, f"--{MODEL_PARAMETER}={model}"], parameter)
            else:
                _check_trial_values(job, trainer, args, parameter)
        if study is not None:
            models = tuned_models if tuned_models is not None else (trainer.model_of(args),)
            _check_metrics(job, study, trainer, args, join(path, args_path), models)


def _check_tuned_flag(job: CompiledJob, trainer: TrainerContract, where: str, flag: str, models) -> None:
    for name in models:
        model = trainer.model(name)
        if model is None:
            continue  # an unknown --model: the trainer's parser reports it
        if flag not in model.flags:
            others = [m for m in trainer.models_with_flag(flag) if m != name]
            raise job.error(
                f"{where}.parameterId",
                f"the trainer has no flag {short(flag, quote=False)}"
                + (f" for --model {name} (a flag of --model {', '.join(others)})" if others else ""),
                ", ".join(sorted(f[2:] for f in model.flags if "_" not in f and f != "--help")),
            )


def _check_metrics(
    job: CompiledJob, study: Study, trainer: TrainerContract, args: list[str], args_path: str, models
) -> None:
    """The study's metric must be one the model reports, the one its trials report, and pursued in the
    direction that improves it (MINIMIZE accuracy would search for the worst model)."""
    found = _metric_arg(args)
    wanted, goal = study.metric_id, study.goal
    metric_path = join(STUDY_FIELD, "metrics", 0)  # the study's one metric
    for name in models:
        model = trainer.model(name)
        if model is None:
            continue
        if wanted not in model.metric_goals:
            others = [m for m in trainer.models_reporting(wanted) if m != name]
            raise job.error(
                join(metric_path, "metricId"),
                f"the trainer cannot report {short(wanted)}"
                + (f" for --model {name} (--model {', '.join(others)} can)" if others else ""),
                one_of(model.reportable_metrics),
            )
        metric = found[1] if found else model.default_metric
        if wanted != metric:
            source = f"{METRIC_FLAG} {metric}" if found else f"the default {METRIC_FLAG} ({metric})"
            raise job.error(
                join(metric_path, "metricId"),
                f"trials report {metric!r} ({source} in {args_path}), not {wanted!r}",
                f"metricId: {metric}, or {METRIC_FLAG} {wanted} in the args",
            )
        expected = model.wrong_goal(wanted, goal)
        if expected:
            raise job.error(
                join(metric_path, "goal"),
                f"{goal} {wanted!r}, which is better {_better(expected)}: the study would look for the worst "
                "trials",
                f"goal: {expected}",
            )


def _better(goal: str) -> str:
    """Which values of a metric are better, in words, for the goal that improves it."""
    return "higher" if goal == "MAXIMIZE" else "lower"


def _check_registered_output(job: CompiledJob) -> None:
    """A registered version is the model in AIP_MODEL_DIR, which Vertex AI sets from baseOutputDirectory."""
    path = join(spec_field(job.kind), "baseOutputDirectory", "outputUriPrefix")
    if not is_gs(output_prefix(job.body, job.kind)):
        raise job.error(
            path,
            "missing: the registry block registers the model Vertex AI writes under it (AIP_MODEL_DIR)",
            "a gs:// prefix with ${job.id}, e.g. ${infra.models_bucket}/<name>/${job.id}",
        )


def _check_registry_metric(job: CompiledJob, trainer: TrainerContract, chief: Pool) -> None:
    """A CustomJob's versions are compared by a metric its model writes to metrics.json, in the direction
    that improves it (MINIMIZE accuracy would move the alias to the worst model)."""
    name = trainer.model_of([str(a) for a in chief.args])
    model = trainer.model(name)
    if model is None:
        return  # an unknown --model: the trainer's parser reported it
    spec = job.registry
    if spec.metric not in model.metric_goals:
        raise job.error(
            "registry.metric.metricId",
            f"--model {name} writes no {spec.metric!r} to metrics.json",
            one_of(model.reportable_metrics),
        )
    expected = model.wrong_goal(spec.metric, spec.goal)
    if expected:
        raise job.error(
            "registry.metric.goal",
            f"{spec.goal} {spec.metric!r}, which is better {_better(expected)}: "
            "the gate would keep the worse version",
            f"goal: {expected}",
        )


def _check_replicas_run_the_chiefs_program(job: CompiledJob, trainer_pools: list[Pool]) -> None:
    """Chief, workers and parameter servers of a trainer job run one image and module: a pool on another
    image (a --set on one pool, an edited anchor) joins no cluster, and the others wait for it forever."""
    if not any(pool.index in (0, 1, 2) for pool in trainer_pools):
        return
    replicas = [pool for pool in job.pools() if pool.raw and pool.index in (0, 1, 2)]
    chief = replicas[0]
    for pool in replicas[1:]:
        if (pool.program_field, pool.image, pool.module) != (chief.program_field, chief.image, chief.module):
            raise job.error(
                pool.field(pool.image_field),
                f"worker pool {pool.index} runs another program than the chief (pool 0)",
                f"the chief's image {short(chief.image)}: pools 0-2 are replicas of one multi-worker program",
            )


def _check_replicas_agree(job: CompiledJob, trainer_pools: list[Pool]) -> None:
    """Chief, workers and parameter servers are replicas of one distributed program: with different args (say
    a --set that changed the chief's epochs only) the cluster waits forever in its first collective op."""
    chief = next((pool for pool in trainer_pools if pool.index == 0), None)
    if chief is None:
        return
    chief_args = chief.args
    for pool in trainer_pools:
        index, path, args_path, args = pool.index, pool.path, pool.args_field, pool.args
        if index in (1, 2) and args != chief_args:
            differs = next(
                (i for i, (a, b) in enumerate(zip(args, chief_args, strict=False)) if a != b),
                min(len(args), len(chief_args)),
            )
            raise job.error(
                join(path, f"{args_path}.{differs}") if differs < len(args) else join(path, args_path),
                f"worker pool {index} runs the trainer with other args than the chief (pool 0)",
                "the same args in pools 0-2: they are replicas of one multi-worker program",
            )


def _check_trial_values(
    job: CompiledJob, trainer: TrainerContract, args: list[str], parameter: Parameter
) -> None:
    spec_name, where = parameter.spec_field, parameter.path
    pid = parameter.parameter_id
    for value in trial_values(parameter):
        try:
            trainer.check_args([*args, f"--{pid}={value}"])
        except TrainerArgsError as exc:
            integral = spec_name == "discreteValueSpec" and value.endswith(".0")
            raise job.error(
                f"{where}.{spec_name}",
                f"trials would run the trainer with --{pid}={value}, which it rejects ({exc})",
                "integerValueSpec, or categoricalValueSpec with the values as strings, or a trainer flag "
                f"that accepts {value}"
                if integral
                else f"values the trainer's --{pid} accepts",
            ) from None


def format_trial_value(value: Any) -> str:
    """A parameter value as Vertex AI writes it into a trial's ``--<parameterId>=<value>``.

    Trial parameter values travel as ``google.protobuf.Value`` numbers, i.e. doubles: a DISCRETE value 64
    arrives as ``64.0``, which an ``int`` flag rejects (googleapis/python-aiplatform#866; observed in
    kuds/mesozoic-labs#127). INTEGER values arrive as integers. Pass DOUBLE and DISCRETE values as floats,
    INTEGER values as ints and CATEGORICAL values as strings. The local tuner formats its trials with this.
    """
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value) if isinstance(value, float) else str(value)


def trial_values(parameter: Parameter) -> list[str]:
    """Values of a parameter as trials receive them (the range ends stand for the whole range)."""
    if parameter.kind == "DOUBLE":
        values = [float(parameter.low), float(parameter.high)]
    elif parameter.kind == "INTEGER":
        values = [int(parameter.low), int(parameter.high)]
    else:  # DISCRETE values are floats, CATEGORICAL ones strings, as parse_study reads them
        values = list(parameter.values)
    return [format_trial_value(v) for v in values]
