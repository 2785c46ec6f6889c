"""A legacy AI Platform training job -> a job definition of this repo: the pure mapping.

``convert(legacy, contract, options)`` returns the definition (our header + the Vertex AI resource) and two
lists a person reviews: the decisions (each legacy value and what it became, and why) and what could not be
carried over. It reads no file and touches no cloud; every refusal is a JobError that names the legacy file,
field and line (``LegacyJob.error``).

The converted job always runs this repo's trainer (``python -m trainer.task --model M``): a legacy job's own
package ran TensorFlow 1.x or a retired runtime that Vertex AI no longer offers, and its tutorial flags are
the ones this trainer keeps (``--train-files``, ``--eval-files``, ``--first-layer-size``, ...).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from common.gcs import BUCKET_URI, GS
from infra.outputs import BUCKET_OUTPUTS as INFRA_BUCKET_OUTPUTS
from jobs.definition.body import GOALS, VALUE_SPECS, is_gs
from jobs.definition.compile import CONTAINER, PYTHON_PACKAGE
from jobs.definition.errors import JobError, one_of, short
from jobs.definition.image import RUNNABLE_PREBUILT, parse_prebuilt
from jobs.definition.kinds import CUSTOM_JOB, TUNING_JOB, spec_field
from jobs.definition.machines import FAMILY_NAMES, family_of
from jobs.definition.study import ALGORITHMS, StudyError, parse_study
from jobs.definition.trainer_contract import TrainerArgsError, TrainerContract
from jobs.legacy import tables
from jobs.legacy.shell_words import Unknown, Word
from jobs.legacy.source import TRAINING_INPUT, LegacyJob, shell_values
from trainer.contract import METRIC_FLAG, TRAINER_MODULE

T = TRAINING_INPUT
# The outputs whose buckets a legacy gs:// path may turn out to be (infra's bucket outputs), in the order they
# are tried and listed: by name.
BUCKET_OUTPUTS = tuple(sorted(INFRA_BUCKET_OUTPUTS))
# variant -> the prebuilt image the trainer sdist runs on (python-package delivery): image.py's list, keyed.
PREBUILT = {parse_prebuilt(uri).variant: uri for uri in RUNNABLE_PREBUILT}
ROLES = (  # legacy role, its fields' prefix, the Vertex pool it maps to
    ("master", "master", 0),
    ("worker", "worker", 1),
    ("parameter server", "parameterServer", 2),
    ("evaluator", "evaluator", 3),
)


@dataclass(frozen=True)
class Options:
    outputs: Mapping[str, str]
    # Always named by the caller (jobs.api, whose DEFAULT_ENV is the one default): no second default here.
    env: str
    model: str | None = None
    delivery: str = CONTAINER
    extra_args: tuple[str, ...] = ()  # trainer args given to `convert` after `--`: added over the legacy ones
    accounts: tuple[str, ...] = ()  # service accounts the environment lets a job run as
    # Legacy buckets whose objects the user moves into one of the environment's: (gs://old, output key).
    bucket_map: tuple[tuple[str, str], ...] = ()


@dataclass
class Conversion:
    kind: str
    definition: dict[str, Any]
    decisions: list[str] = field(default_factory=list)
    lost: list[tuple[str, str]] = field(default_factory=list)  # (legacy job path, why it is not carried)
    # (converted file path prefix, legacy job path): to point an error in the converted job at its source.
    blame: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class Pool:
    role: str
    machine_type: str
    accelerator: str = ""
    count: int = 0
    replicas: int = 1
    disk: dict[str, Any] | None = None
    legacy_path: str = ""


def convert(legacy: LegacyJob, contract: TrainerContract, options: Options) -> Conversion:
    training = legacy.training
    _check_fields(legacy, T, training, tables.TRAINING_INPUT_FIELDS)
    tuning = training.get("hyperparameters") is not None
    out = Conversion(TUNING_JOB if tuning else CUSTOM_JOB, {})
    if legacy.config_note:
        out.decisions.append(legacy.config_note)
    pools = _pools(legacy, out)
    variant = (
        "tpu" if pools[0].machine_type == tables.TPU_MACHINE else "gpu" if pools[0].accelerator else "cpu"
    )
    buckets = _Buckets(options.outputs, out, options.bucket_map)
    args, model = _args(legacy, contract, options, out, buckets, tuning, variant)
    study = _study(legacy, contract, model, args, out) if tuning else None
    if study is not None:
        metric = study["studySpec"]["metrics"][0]["metricId"]
        if not any(a.startswith(METRIC_FLAG + "=") or a == METRIC_FLAG for a in args):
            args.append(f"{METRIC_FLAG}={metric}")
    _check_trainer_args(legacy, contract, args)
    ((program_field, program),) = _program(legacy, options, out, variant, args).items()
    spec: dict[str, Any] = {"workerPoolSpecs": []}
    for index, pool in enumerate(pools):
        machine: dict[str, Any] = {"machineType": pool.machine_type}
        if pool.accelerator:
            machine.update(acceleratorType=pool.accelerator, acceleratorCount=pool.count)
        entry: dict[str, Any] = {"machineSpec": machine, "replicaCount": pool.replicas}
        if pool.disk:
            entry["diskSpec"] = pool.disk
        entry[program_field] = program  # one object in every pool: written once, as a YAML anchor
        spec["workerPoolSpecs"].append(entry)
        pool_path = f"{spec_field(out.kind)}.workerPoolSpecs.{index}"
        out.blame.append((f"{pool_path}.machineSpec", pool.legacy_path))
        out.blame.append((f"{pool_path}.{program_field}.args", f"{T}.args"))
    spec["baseOutputDirectory"] = {"outputUriPrefix": _output_dir(legacy, out, buckets, tuning)}
    spec["serviceAccount"] = _service_account(legacy, options, out)
    spec["tensorboard"] = "${infra.tensorboard}"
    _scheduling(legacy, out, spec)
    _network(legacy, out, spec)
    # A value the job validation refuses is named by the legacy field it came from, not by the output's.
    for field_name, legacy_key in (
        ("baseOutputDirectory", "jobDir"),
        ("serviceAccount", "serviceAccount"),
        ("network", "network"),
    ):
        if legacy_key in legacy.training:
            out.blame.append((f"{spec_field(out.kind)}.{field_name}", f"{T}.{legacy_key}"))
    _runtime(legacy, out, options, variant)
    _reported(legacy, out)

    definition: dict[str, Any] = {
        "kind": out.kind,
        "trainer": {"delivery": options.delivery},
        "displayName": "${job.id}",
        "labels": _labels(legacy, out, model),
    }
    if study is not None:
        definition.update(study)
    definition[spec_field(out.kind)] = spec
    encryption = _encryption(legacy, out)
    if encryption:
        definition["encryptionSpec"] = {"kmsKeyName": encryption}
        out.blame.append(("encryptionSpec", f"{T}.encryptionConfig.kmsKeyName"))
    out.definition = definition
    # In the order the legacy file says them, so --strict names the first one a reader meets.
    out.lost.sort(key=lambda item: legacy.where(item[0]).line or 1 << 30)
    return out



# --- field checks ---------------------------------------------------------------------------------


def _check_fields(legacy: LegacyJob, path: str, value: Any, allowed: Sequence[str]) -> None:
    if not isinstance(value, dict):
        raise legacy.error(path, f"must be a mapping, not {_type(value)}", one_of(allowed))
    for key in value:
        if key not in allowed:
            raise legacy.error(f"{path}.{key}", "not a field of the legacy API here", one_of(allowed))


def _type(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "a number"
    )


def _count(legacy: LegacyJob, path: str, value: Any, minimum: int | None = 0) -> int:
    """An integer count; ``minimum=None`` leaves its range to the caller (the study's counts: study.py)."""
    # The REST API writes int64 as a JSON string ("9"); YAML configs write a number.
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
        raise legacy.error(path, f"{short(value)} is not a possible count", f"an integer >= {minimum}")
    return value


def _number(legacy: LegacyJob, path: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise legacy.error(path, f"{short(value)} is not a number", "a finite number")
    return value


def _text(legacy: LegacyJob, path: str, value: Any, allowed: str = "a string") -> str:
    if not isinstance(value, str) or not value:
        raise legacy.error(path, f"{short(value)} is not a non-empty string", allowed)
    return value


def _enum(legacy: LegacyJob, path: str, value: Any, allowed: Sequence[str]) -> str:
    if not isinstance(value, str) or value.upper() not in allowed:
        raise legacy.error(path, f"unknown value {short(value)}", one_of(allowed))
    return value.upper()


# --- machines -------------------------------------------------------------------------------------


def _pools(legacy: LegacyJob, out: Conversion) -> list[Pool]:
    training = legacy.training
    tier_path = f"{T}.scaleTier"
    tier = _enum(legacy, tier_path, training.get("scaleTier", "BASIC"), tables.ALL_TIERS)
    custom_fields = [
        f"{prefix}{suffix}" for _, prefix, _ in ROLES for suffix in ("Type", "Count") if prefix != "master"
    ] + ["masterType"]
    for _, prefix, _ in ROLES:
        if f"{prefix}Config" in training:
            config = training[f"{prefix}Config"]
            _check_fields(legacy, f"{T}.{prefix}Config", config, tables.REPLICA_CONFIG_FIELDS)
    if tier != tables.CUSTOM:
        for key in custom_fields:
            if training.get(key) not in (None, 0, "0"):
                raise legacy.error(
                    f"{T}.{key}",
                    f"is set but scaleTier is {tier}",
                    f"scaleTier: CUSTOM to set {key}, or no {key} with a predefined tier",
                )
        return _tier_pools(legacy, out, tier)
    if not training.get("masterType"):
        raise legacy.error(f"{T}.masterType", "missing: scaleTier CUSTOM needs one", _machine_names())
    roles: dict[str, tuple[str, int]] = {"master": (training["masterType"], 1)}
    for role, prefix, _ in ROLES[1:]:
        count = _count(legacy, f"{T}.{prefix}Count", training.get(f"{prefix}Count", 0))
        kind = training.get(f"{prefix}Type")
        if count and not kind:
            raise legacy.error(f"{T}.{prefix}Count", f"{count} {role}s but no {prefix}Type", _machine_names())
        if kind and not count:
            out.decisions.append(
                f"{prefix}Type {kind} with no {prefix}Count: no {role}s, as in the legacy job"
            )
        if count:
            roles[role] = (kind, count)
    return _role_pools(legacy, out, roles)


def _tier_pools(legacy: LegacyJob, out: Conversion, tier: str) -> list[Pool]:
    spec = tables.SCALE_TIERS[tier]
    where = f"scaleTier {tier}"
    if spec.tpu:
        accelerator = _tpu_type(legacy, f"{T}.workerConfig.acceleratorConfig")
        out.decisions.append(
            f"{where} (a {spec.master} VM driving a Cloud TPU) -> pool 0: {tables.TPU_MACHINE} with "
            f"{tables.TPU_CORES} x {accelerator}: Vertex AI trains on TPU VMs, the TPU attached to the host"
        )
        return [
            Pool("master", tables.TPU_MACHINE, accelerator, tables.TPU_CORES, legacy_path=f"{T}.scaleTier")
        ]
    roles: dict[str, tuple[str, int]] = {"master": (spec.master, 1)}
    if spec.workers:
        roles["worker"] = (spec.worker, spec.workers)
    if spec.parameter_servers:
        roles["parameter server"] = (spec.parameter_server, spec.parameter_servers)
    out.decisions.append(
        f"{where} -> the cluster it stood for: "
        + ", ".join(f"{n} x {kind} ({role})" for role, (kind, n) in roles.items())
    )
    return _role_pools(legacy, out, roles, tier_path=f"{T}.scaleTier")


def _role_pools(
    legacy: LegacyJob, out: Conversion, roles: dict[str, tuple[str, int]], tier_path: str = ""
) -> list[Pool]:
    training = legacy.training
    pools: list[Pool] = []
    tpu_roles = [r for r, (kind, _) in roles.items() if kind == tables.CLOUD_TPU]
    if tpu_roles:
        role = tpu_roles[0]
        prefix = next(p for r, p, _ in ROLES if r == role)
        accelerator = _tpu_type(legacy, f"{T}.{prefix}Config.acceleratorConfig")
        others = [f"{n} x {kind} ({r})" for r, (kind, n) in roles.items() if r != role]
        out.decisions.append(
            f"{prefix}Type {tables.CLOUD_TPU} -> pool 0: {tables.TPU_MACHINE} with {tables.TPU_CORES} x "
            f"{accelerator}; Vertex AI trains on the TPU VM itself, so "
            f"{', '.join(others) or 'no other machine'} is not needed"
        )
        return [
            Pool("master", tables.TPU_MACHINE, accelerator, tables.TPU_CORES, legacy_path=f"{T}.{prefix}Type")
        ]
    for role, prefix, index in ROLES:
        if role not in roles:
            continue
        kind, replicas = roles[role]
        type_path = tier_path or f"{T}.{prefix}Type"
        machine = _machine(legacy, type_path, kind, f"{T}.{prefix}Config.acceleratorConfig", out, role)
        config = training.get(f"{prefix}Config") or {}
        disk = _disk(legacy, f"{T}.{prefix}Config.diskConfig", config.get("diskConfig"))
        if index >= 2:
            why = (
                "the trainer trains with MultiWorkerMirroredStrategy (all-reduce among the chief and the "
                "workers), which ignores parameter servers; it refuses the task type ps, so a pool 2 "
                "running this trainer would fail the job"
                if index == 2
                else "the trainer evaluates on the chief after every epoch and has no evaluator role; "
                "a pool 3 would bill for work nobody uses"
            )
            out.lost.append(
                (
                    type_path if tier_path else f"{T}.{prefix}Count",
                    f"{replicas} x {kind} {role}s (pool {index}): {why}",
                )
            )
            continue
        pools.append(
            Pool(role, machine.machine_type, machine.accelerator, machine.count, replicas, disk, type_path)
        )
        gpus = f" + {machine.count} x {machine.accelerator}" if machine.accelerator else ""
        count = f"{replicas} x " if replicas > 1 else ""
        note = f" ({machine.why})" if machine.why else ""
        out.decisions.append(f"{role} {kind} -> pool {index}: {count}{machine.machine_type}{gpus}{note}")
    if len(pools) > 1:
        out.decisions.append(
            "pool 0 is the chief and pool 1 the workers; the trainer picks MultiWorkerMirroredStrategy from "
            "the CLUSTER_SPEC Vertex AI gives every replica (synchronous all-reduce, not parameter servers)"
        )
    return pools


def _machine_names() -> str:
    return ", ".join([*tables.LEGACY_CPU, *tables.LEGACY_GPU, tables.CLOUD_TPU, *FAMILY_NAMES])


def _machine(
    legacy: LegacyJob, path: str, kind: Any, accel_path: str, out: Conversion, role: str
) -> tables.Machine:
    kind = _text(legacy, path, kind, _machine_names())
    accelerator, count, why = "", 0, ""
    if kind in tables.LEGACY_CPU:
        base = tables.LEGACY_CPU[kind]
        machine_type, why = base.machine_type, base.why
    elif kind in tables.LEGACY_GPU:
        cpu, accelerator, count = tables.LEGACY_GPU[kind]
        machine_type, why = tables.LEGACY_CPU[cpu].machine_type, tables.LEGACY_CPU[cpu].why
    elif family_of(kind) is not None:
        machine_type = kind
    else:
        raise legacy.error(path, f"unknown machine type {short(kind)}", _machine_names())
    config = _get(legacy.job, accel_path)
    if config is not None:
        _check_fields(legacy, accel_path, config, ("count", "type"))
        accelerator = _enum(legacy, f"{accel_path}.type", config.get("type"), tables.LEGACY_ACCELERATORS)
        count = _count(legacy, f"{accel_path}.count", config.get("count", 1), 1)
        if accelerator in tables.TPU_TYPES:
            raise legacy.error(
                f"{accel_path}.type",
                f"{accelerator} on a {role} VM",
                f"{tables.CLOUD_TPU} as the machine type",
            )
    if accelerator in tables.RETIRED_GPUS:
        successor, most, reason = tables.RETIRED_GPUS[accelerator]
        note = f"{accelerator} -> {successor}: {reason}"
        if note not in out.decisions:
            out.decisions.append(note)
        if count > most:
            why = "; ".join(
                w for w in (why, f"{count} x {accelerator} -> {most}, the most an N1 VM takes") if w
            )
        accelerator, count = successor, min(count, most)
    return tables.Machine(machine_type, accelerator, count, why)


def _tpu_type(legacy: LegacyJob, path: str) -> str:
    config = _get(legacy.job, path) or {}
    _check_fields(legacy, path, config, ("count", "type"))
    accelerator = _enum(legacy, f"{path}.type", config.get("type", "TPU_V2"), tables.TPU_TYPES)
    count = config.get("count", tables.TPU_CORES)
    if _count(legacy, f"{path}.count", count, 1) != tables.TPU_CORES:
        raise legacy.error(f"{path}.count", f"{count} TPU cores", f"{tables.TPU_CORES} (a v2-8 or v3-8)")
    return accelerator


def _disk(legacy: LegacyJob, path: str, disk: Any) -> dict[str, Any] | None:
    if disk is None:
        return None
    _check_fields(legacy, path, disk, ("bootDiskType", "bootDiskSizeGb"))
    out: dict[str, Any] = {}
    if "bootDiskType" in disk:
        kind = str(disk["bootDiskType"]).lower().replace("_", "-")
        if kind not in ("pd-ssd", "pd-standard"):
            raise legacy.error(
                f"{path}.bootDiskType", f"unknown value {short(disk['bootDiskType'])}", "pd-ssd, pd-standard"
            )
        out["bootDiskType"] = kind
    if "bootDiskSizeGb" in disk:
        out["bootDiskSizeGb"] = _count(legacy, f"{path}.bootDiskSizeGb", disk["bootDiskSizeGb"], 10)
    return out or None


def _get(root: Any, path: str) -> Any:
    for key in path.split("."):
        if not isinstance(root, dict):
            return None
        root = root.get(key)
    return root


# --- the trainer's args ---------------------------------------------------------------------------


class _Buckets:
    """gs:// paths in buckets of this environment -> ${infra.<bucket output>} (noted once per bucket)."""

    def __init__(
        self, outputs: Mapping[str, str], out: Conversion, mapped: Sequence[tuple[str, str]] = ()
    ) -> None:
        self.refs = {
            str(outputs[k]): k for k in BUCKET_OUTPUTS if is_gs(outputs.get(k, ""))
        }
        self.mapped = dict(mapped)
        self.refs.update(self.mapped)
        self.outputs = outputs
        self.out = out
        self.seen: set[str] = set()

    def refer(self, text: str) -> str:
        def swap(found: re.Match) -> str:
            bucket = found.group(0)
            key = self.refs.get(bucket)
            if bucket not in self.seen:
                self.seen.add(bucket)
                if bucket in self.mapped:
                    target = self.outputs.get(key, key)
                    self.out.decisions.append(
                        f"{bucket} -> ${{infra.{key}}} (--map-bucket): copy its objects into {target} first "
                        f"(gcloud storage cp -r {bucket}/<path> {target}/<path>)"
                    )
                elif key:
                    self.out.decisions.append(
                        f"{bucket} is this environment's {key}: written as ${{infra.{key}}}"
                    )
                else:
                    self.out.decisions.append(
                        f"{bucket} is not a bucket of this environment: grant the runtime service account "
                        "access to it, or move the paths into the environment's buckets "
                        "(${infra.data_bucket}, ${infra.models_bucket}; convert --map-bucket writes them so)"
                    )
            return f"${{infra.{key}}}" if key else bucket

        return BUCKET_URI.sub(swap, text)


def _groups(args: list[str]) -> list[list[str]]:
    """Args as flag groups: ``--flag`` and the values up to the next ``--flag`` (positionals first)."""
    groups: list[list[str]] = [[]]
    for arg in args:
        if arg.startswith("--") and len(arg) > 2:
            groups.append([arg])
        else:
            groups[-1].append(arg)
    return groups


def _flag_name(arg: str) -> str:
    return arg.split("=", 1)[0]


def _args(
    legacy: LegacyJob,
    contract: TrainerContract,
    options: Options,
    out: Conversion,
    buckets: _Buckets,
    tuning: bool,
    variant: str,
) -> tuple[list[str], str]:
    path = f"{T}.args"
    raw = legacy.training.get("args") or []
    if not isinstance(raw, list) or not all(isinstance(a, (str, int, float)) for a in raw):
        raise legacy.error(path, "must be a list of strings", "the trainer's command-line arguments")
    legacy_args = [str(a) for a in raw]
    extra = list(options.extra_args)
    extra_flags = {_flag_name(g[0]) for g in _groups(extra)[1:]}
    model = options.model or contract.model_of([*legacy_args, *extra])
    if contract.model(model) is None:
        raise JobError(legacy.file, "--model", f"unknown model {short(model)}", one_of(contract.models))
    flags = contract.model(model).flags
    kept: list[str] = [f"--model={model}"]
    positional, *groups = _groups(legacy_args)
    if positional:
        out.lost.append(
            (path, f"positional arguments {short(' '.join(positional))}: the trainer takes flags only")
        )
    start = len(positional)
    for group in groups:
        at, start = f"{path}.{start}", start + len(group)  # the group's first arg, for its line
        name = _flag_name(group[0])
        alias = _flag_alias(name, flags)
        if alias:
            out.decisions.append(f"args {name} -> {alias}: this trainer's name for it")
            group = [alias + group[0][len(name) :], *group[1:]]
            name = alias
        if name in ("--model", "--job-dir", "--job_dir") or name in extra_flags:
            if name in ("--job-dir", "--job_dir"):
                out.decisions.append(
                    f"args {name}: dropped; Vertex AI gives the trainer AIP_MODEL_DIR, AIP_CHECKPOINT_DIR "
                    "and AIP_TENSORBOARD_LOG_DIR under baseOutputDirectory, which it prefers"
                )
            elif name in extra_flags:
                out.decisions.append(f"args {name}: replaced by the value given to `convert` after `--`")
            continue
        if name not in flags:
            shown = short(" ".join(group), quote=False)
            out.lost.append((at, f"{shown}: not a flag of the trainer's {model} model"))
            continue
        kept.extend(buckets.refer(a) for a in group)
    kept.extend(buckets.refer(a) for g in _groups(extra)[1:] for a in g if _flag_name(g[0]) != "--model")
    if variant == "tpu" and not any(_flag_name(a) == "--distribution" for a in kept):
        kept.append("--distribution=tpu")
        out.decisions.append("--distribution=tpu added: the trainer builds TPUStrategy on the TPU VM")
    return kept, model


def _check_trainer_args(legacy: LegacyJob, contract: TrainerContract, args: list[str]) -> None:
    try:
        contract.check_args(args)
    except TrainerArgsError as exc:
        missing = re.search(r"required: (.*)", str(exc))
        allowed = (
            "add them after `--` in the submit command or to trainingInput.args, or give them to convert: "
            "run_job.py convert FILE -- --train-files=gs://... --eval-files=gs://..."
        )
        problem = f"the trainer needs {missing.group(1)}" if missing else f"the trainer refuses them: {exc}"
        raise legacy.error(
            f"{T}.args", problem, allowed if missing else "the trainer's flags (--help)"
        ) from None


def _program(legacy: LegacyJob, options: Options, out: Conversion, variant: str, args: list[str]) -> dict:
    if options.delivery == PYTHON_PACKAGE:
        if variant not in PREBUILT:
            raise JobError(
                legacy.file,
                "--delivery",
                f"{options.delivery} on a TPU: no prebuilt TensorFlow image runs the trainer there",
                CONTAINER,
            )
        return {
            "pythonPackageSpec": {
                "executorImageUri": PREBUILT[variant],
                "packageUris": ["${job.package_uri}"],
                "pythonModule": TRAINER_MODULE,
                "args": args,
            }
        }
    return {
        "containerSpec": {"imageUri": f"${{infra.trainer_image}}:{variant}-${{job.image_tag}}", "args": args}
    }


# --- the study ------------------------------------------------------------------------------------


def _study(
    legacy: LegacyJob, contract: TrainerContract, model: str, args: list[str], out: Conversion
) -> dict[str, Any]:
    path = f"{T}.hyperparameters"
    spec = legacy.training["hyperparameters"]
    _check_fields(legacy, path, spec, tables.HYPERPARAMETER_FIELDS)
    model_contract = contract.model(model)
    assert model_contract is not None
    tag = spec.get("hyperparameterMetricTag")
    if tag in (None, "", tables.LEGACY_DEFAULT_METRIC):
        tag = model_contract.default_metric
        out.decisions.append(
            f"hyperparameterMetricTag unset -> {tag}, what the {model} model reports by default "
            f"(legacy read the tag {tables.LEGACY_DEFAULT_METRIC})"
        )
    elif tag not in model_contract.metric_goals and _keras_metric(tag) in model_contract.metric_goals:
        name = _keras_metric(tag)
        both = " (written for the training and the validation data alike)" if tag.startswith("epoch_") else ""
        out.decisions.append(
            f"hyperparameterMetricTag {tag}, Keras' name for {name}{both} -> {name}: the held-out {name} the "
            f"trainer reports each epoch (train_{name} is the training data's)"
        )
        tag = name
    elif tag not in model_contract.metric_goals:
        raise legacy.error(
            f"{path}.hyperparameterMetricTag",
            f"the {model} model reports no metric {short(tag)}",
            one_of(model_contract.reportable_metrics),
        )
    if "goal" not in spec:
        raise legacy.error(f"{path}.goal", "missing", one_of(GOALS))
    goal = _enum(legacy, f"{path}.goal", spec["goal"], GOALS)
    expected = model_contract.wrong_goal(tag, goal)
    if expected:
        raise legacy.error(f"{path}.goal", f"{goal} {tag} tunes toward a worse model", expected)
    algorithm = _enum(
        legacy, f"{path}.algorithm", spec.get("algorithm", "ALGORITHM_UNSPECIFIED"), ALGORITHMS
    )
    # Their ranges are the study's rules (jobs.definition.study), checked with the rest below.
    trials = _count(legacy, f"{path}.maxTrials", spec.get("maxTrials", 1), None)
    parallel = _count(legacy, f"{path}.maxParallelTrials", spec.get("maxParallelTrials", 1), None)
    failed = _count(legacy, f"{path}.maxFailedTrials", spec.get("maxFailedTrials", 0), None)
    params = spec.get("params")
    if not isinstance(params, list) or not params:
        raise legacy.error(f"{path}.params", "no parameters to tune", "one or more ParameterSpecs")
    parameters = [
        _parameter(legacy, contract, model, args, f"{path}.params.{i}", p, out, i)
        for i, p in enumerate(params)
    ]
    if spec.get("enableTrialEarlyStopping"):
        out.lost.append(
            (
                f"{path}.enableTrialEarlyStopping",
                "Vertex AI's nearest setting is studySpec.medianAutomatedStoppingSpec (stop a trial whose "
                "best intermediate value is worse than the median of completed trials, from the per-epoch "
                "values the trainer reports); not added because --local does not apply it, so a rehearsal "
                "would tune differently",
            )
        )
    if spec.get("resumePreviousJobId"):
        out.lost.append(
            (f"{path}.resumePreviousJobId", "a legacy study's trials cannot seed a Vertex AI study")
        )
    study: dict[str, Any] = {
        "maxTrialCount": trials,
        "parallelTrialCount": parallel,
    }
    if failed:
        study["maxFailedTrialCount"] = failed
    study["studySpec"] = {
        "algorithm": algorithm,
        "metrics": [{"metricId": tag, "goal": goal}],
        "parameters": parameters,
    }
    # The StudySpec rules are validation's and --local's (jobs.definition.study), said of the legacy field.
    try:
        parse_study(study)
    except StudyError as exc:
        raise legacy.error(_legacy_field(exc.path, path), exc.problem, exc.allowed) from None
    study["studySpec"]["parameters"] = [_settled(p) for p in parameters]
    out.blame.append(("studySpec.metrics", f"{path}.hyperparameterMetricTag"))
    for key, legacy_key in (
        ("maxTrialCount", "maxTrials"),
        ("parallelTrialCount", "maxParallelTrials"),
        ("maxFailedTrialCount", "maxFailedTrials"),
    ):
        out.blame.append((key, f"{path}.{legacy_key}"))
    out.decisions.append(
        f"hyperparameters -> studySpec: {algorithm}"
        + (" (Bayesian optimization, as legacy's default)" if algorithm == "ALGORITHM_UNSPECIFIED" else "")
        + f", {goal} {tag}, maxTrials {trials} -> maxTrialCount, maxParallelTrials {parallel} -> "
        "parallelTrialCount"
    )
    return study


def _parameter(
    legacy: LegacyJob,
    contract: TrainerContract,
    model: str,
    args: list[str],
    path: str,
    raw: Any,
    out: Conversion,
    index: int,
) -> dict[str, Any]:
    _check_fields(legacy, path, raw, tables.PARAMETER_FIELDS)
    name = _text(legacy, f"{path}.parameterName", raw.get("parameterName"), "a flag of the trainer")
    flags = contract.model(model).flags  # type: ignore[union-attr]
    alias = _flag_alias(f"--{name}", flags)
    if alias:
        out.decisions.append(f"params.{index} {name} -> {alias[2:]}: this trainer's name for it")
        name = alias[2:]
    if f"--{name}" not in flags:
        raise legacy.error(
            f"{path}.parameterName",
            f"--{name} is not a flag of the trainer's {model} model",
            ", ".join(sorted(f[2:] for f in flags if "_" not in f and f not in ("--help", "--model"))),
        )
    kind = _enum(legacy, f"{path}.type", raw.get("type"), tables.PARAMETER_TYPES)
    scale = _enum(legacy, f"{path}.scaleType", raw.get("scaleType", "NONE"), tables.SCALE_TYPES)
    out.blame.append((f"studySpec.parameters.{index}", path))
    spec: dict[str, Any] = {"parameterId": name}
    if kind in ("INTEGER", "DOUBLE"):
        low = _number(legacy, f"{path}.minValue", raw.get("minValue"))
        high = _number(legacy, f"{path}.maxValue", raw.get("maxValue"))
        spec[VALUE_SPECS[kind]] = {"minValue": low, "maxValue": high}
    elif kind == "DISCRETE":
        values = raw.get("discreteValues")
        if not isinstance(values, list) or not values:
            raise legacy.error(f"{path}.discreteValues", "missing or empty", "a list of numbers")
        numbers = [_number(legacy, f"{path}.discreteValues.{i}", v) for i, v in enumerate(values)]
        spec["discreteValueSpec"] = {"values": numbers}
        if numbers == sorted(set(numbers)) and _integer_flag(contract, args, name, numbers):
            out.decisions.append(
                f"params.{index} {name}: DISCRETE {numbers} -> categoricalValueSpec of the same whole "
                f"numbers: Vertex AI passes DISCRETE values as doubles (--{name}=64.0), which an integer "
                "flag refuses"
            )
            spec[_AS_CATEGORICAL] = True  # once the study passed its rules (see _settled)
    else:
        values = raw.get("categoricalValues")
        if not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values):
            raise legacy.error(f"{path}.categoricalValues", "missing or not strings", "a list of strings")
        spec["categoricalValueSpec"] = {"values": values}
        if scale != "NONE":
            out.decisions.append(f"params.{index} {name}: scaleType {scale} dropped (a CATEGORICAL has none)")
        return spec
    if scale != "NONE":
        spec["scaleType"] = scale
    return spec


# Marks a DISCRETE spec that becomes categoricalValueSpec of its whole numbers after the study's checks.
_AS_CATEGORICAL = "_as_categorical"


def _settled(spec: dict[str, Any]) -> dict[str, Any]:
    """A checked ParameterSpec as written: INTEGER bounds as ints, a marked DISCRETE as CATEGORICAL."""
    if spec.pop(_AS_CATEGORICAL, False):
        values = spec["discreteValueSpec"]["values"]
        whole = [str(int(v)) for v in values]
        return {"parameterId": spec["parameterId"], "categoricalValueSpec": {"values": whole}}
    if "integerValueSpec" in spec:
        spec["integerValueSpec"] = {k: int(v) for k, v in spec["integerValueSpec"].items()}
    return spec


# A StudySpec field -> the legacy hyperparameters field it came from.
_LEGACY_STUDY_FIELDS = {
    "maxTrialCount": "maxTrials",
    "parallelTrialCount": "maxParallelTrials",
    "maxFailedTrialCount": "maxFailedTrials",
    "studySpec.algorithm": "algorithm",
    "studySpec.metrics": "hyperparameterMetricTag",
    "studySpec.metrics.0.metricId": "hyperparameterMetricTag",
    "studySpec.metrics.0.goal": "goal",
    "studySpec.parameters": "params",
}


def _legacy_field(body_path: str, hyperparameters: str) -> str:
    """The legacy field a StudySpec body path was converted from, e.g. maxTrialCount -> <hp>.maxTrials,
    studySpec.parameters.0.doubleValueSpec.minValue -> <hp>.params.0.minValue."""
    if body_path in _LEGACY_STUDY_FIELDS:
        return f"{hyperparameters}.{_LEGACY_STUDY_FIELDS[body_path]}"
    parts = body_path.split(".")
    if parts[:2] != ["studySpec", "parameters"] or len(parts) < 3:
        return hyperparameters
    where = f"{hyperparameters}.params.{parts[2]}"
    rest = parts[3:]
    if not rest:
        return where
    if rest[0] == "parameterId":
        return f"{where}.parameterName"
    if len(rest) == 1:  # the value spec as a whole: what its type chose
        return f"{where}.type"
    if rest[1] == "values":
        values = "discreteValues" if rest[0] == "discreteValueSpec" else "categoricalValues"
        return ".".join([where + "." + values, *rest[2:]])
    return f"{where}.{rest[1]}"


def _keras_metric(tag: str) -> str:
    """The metric a Keras tag names: epoch_accuracy, val_acc -> accuracy."""
    for prefix in tables.KERAS_TAG_PREFIXES:
        tag = tag.removeprefix(prefix)
    return tables.KERAS_METRIC_NAMES.get(tag, tag)


def _flag_alias(flag: str, flags: frozenset[str]) -> str | None:
    """This trainer's flag for a legacy sample's flag it lacks (--batch-size -> --train-batch-size)."""
    alias = tables.FLAG_ALIASES.get(flag.removeprefix("--").replace("_", "-"))
    return f"--{alias}" if alias and flag not in flags and f"--{alias}" in flags else None


def _integer_flag(contract: TrainerContract, args: list[str], name: str, numbers: list[float]) -> bool:
    """Whether the trainer refuses the values as Vertex AI writes DISCRETE ones but takes them as integers."""
    if not all(v == int(v) for v in numbers):
        return False
    try:
        contract.check_args([*args, f"--{name}={float(numbers[0])}"])
        return False
    except TrainerArgsError:
        pass
    try:
        contract.check_args([*args, f"--{name}={int(numbers[0])}"])
    except TrainerArgsError:
        return False
    return True


# --- the rest of the job --------------------------------------------------------------------------


def _output_dir(legacy: LegacyJob, out: Conversion, buckets: _Buckets, tuning: bool) -> str:
    path = f"{T}.jobDir"
    raw = legacy.training.get("jobDir")
    per_trial = " (trial N under <prefix>/N)" if tuning else ""
    if raw is None:
        default = "${infra.models_bucket}/${job.name}/${job.id}"
        out.decisions.append(f"no jobDir -> baseOutputDirectory {default}{per_trial}")
        return default
    word = raw if isinstance(raw, Word) else Word((_text(legacy, path, raw, "gs://bucket/path"),))
    text = word.show()
    if word.parts and isinstance(word.parts[0], Unknown):
        first = word.parts[0]
        raise legacy.error(path, f"{text}: {first.source} is {first.reason}", shell_values([first]))
    if not is_gs(text):
        raise legacy.error(path, f"{short(text)} is not a gs:// URI", "gs://<bucket>/<path>")
    job_id = legacy.job.get("jobId")
    segments = _segments(word)
    if segments[0][1]:
        unknown = word.unknowns[0]
        raise legacy.error(
            path, f"{text}: {unknown.source} (in the bucket) is {unknown.reason}", shell_values([unknown])
        )
    # A per-run folder (the job name, or anything only the shell knew, like $(date ...)) becomes ${job.id}:
    # Vertex AI job ids are unique per submission, so each run keeps its own outputs.
    cut = next(
        (
            i
            for i, (seg, dynamic) in enumerate(segments)
            if i >= 1 and (dynamic or (job_id and seg == job_id))
        ),
        None,
    )
    if cut is not None:
        prefix = "/".join(seg for seg, _ in segments[:cut])
        converted = buckets.refer(f"{GS}{prefix}") + "/${job.id}"
        out.decisions.append(
            f"jobDir {text} -> baseOutputDirectory {converted}: the per-run folder is the Vertex AI job id"
            + per_trial
        )
        return converted
    converted = buckets.refer(text.rstrip("/")) + "/${job.id}"
    out.decisions.append(
        f"jobDir {text} -> baseOutputDirectory {converted}: a folder per run, so a rerun never overwrites "
        f"the last model{per_trial}"
    )
    return converted


def _segments(word: Word) -> list[tuple[str, bool]]:
    """The segments after gs:// (bucket first), each with whether it holds a part only the shell knew."""
    segments = word.segments()
    while len(segments) > 3 and not segments[-1].parts:  # a trailing slash
        segments.pop()
    return [(s.show(), bool(s.unknowns)) for s in segments[2:]]  # "gs:", "" before the bucket


def _service_account(legacy: LegacyJob, options: Options, out: Conversion) -> str:
    reference = "${infra.runtime_service_account}"
    account = legacy.training.get("serviceAccount")
    runtime = str(options.outputs.get("runtime_service_account", ""))
    if account is None:
        out.decisions.append(
            f"no serviceAccount (legacy ran as AI Platform's service agent) -> {reference}, the "
            "environment's least-privilege runtime account"
        )
        return reference
    account = _text(legacy, f"{T}.serviceAccount", account, "a service account email")
    if account == runtime:
        return reference
    if account in options.accounts:
        out.decisions.append(
            f"serviceAccount {account}: kept (listed in the environment's job_service_accounts)"
        )
        return account
    out.lost.append(
        (
            f"{T}.serviceAccount",
            f"{short(account, quote=False)} is not an account jobs of environment {options.env} may run as; "
            f"the job runs as {reference}. To keep it, add it to job_service_accounts in "
            f"infra/environments/{options.env}.yaml",
        )
    )
    return reference


def _scheduling(legacy: LegacyJob, out: Conversion, spec: dict[str, Any]) -> None:
    path = f"{T}.scheduling"
    raw = legacy.training.get("scheduling")
    if raw is None:
        return
    _check_fields(legacy, path, raw, ("maxRunningTime", "maxWaitTime", "priority"))
    scheduling: dict[str, Any] = {}
    for legacy_key, key in (("maxRunningTime", "timeout"), ("maxWaitTime", "maxWaitDuration")):
        if legacy_key in raw:
            value = _text(legacy, f"{path}.{legacy_key}", raw[legacy_key], "a duration such as 7200s")
            if not re.fullmatch(r"\d+(\.\d+)?s", value):
                raise legacy.error(
                    f"{path}.{legacy_key}", f"{short(value)} is not a duration", "seconds, e.g. 7200s"
                )
            scheduling[key] = value
            out.decisions.append(f"scheduling.{legacy_key} {value} -> scheduling.{key}")
            out.blame.append((f"{spec_field(out.kind)}.scheduling.{key}", f"{path}.{legacy_key}"))
    if "priority" in raw:
        out.lost.append((f"{path}.priority", "Vertex AI custom jobs have no queue priority"))
    if scheduling:
        spec["scheduling"] = scheduling


def _network(legacy: LegacyJob, out: Conversion, spec: dict[str, Any]) -> None:
    training = legacy.training
    if training.get("network"):
        spec["network"] = _text(
            legacy, f"{T}.network", training["network"], "projects/<number>/global/networks/<name>"
        )
        out.decisions.append(
            f"network {spec['network']}: kept; the VPC must be peered with Vertex AI (private services "
            "access)"
        )
    if training.get("enableWebAccess"):
        spec["enableWebAccess"] = True
        out.decisions.append("enableWebAccess: kept (interactive shell into the training containers)")


def _encryption(legacy: LegacyJob, out: Conversion) -> str:
    path = f"{T}.encryptionConfig"
    raw = legacy.training.get("encryptionConfig")
    if raw is None:
        return ""
    _check_fields(legacy, path, raw, ("kmsKeyName", "kmsKeyring", "kmsLocation", "kmsProject"))
    key = _text(
        legacy, f"{path}.kmsKeyName", raw.get("kmsKeyName"), "projects/<p>/locations/<r>/keyRings/..."
    )
    if not key.startswith("projects/"):
        parts = [raw.get("kmsProject"), raw.get("kmsLocation"), raw.get("kmsKeyring")]
        if not all(parts):
            raise legacy.error(
                f"{path}.kmsKeyName",
                f"{short(key)} is not a full key name",
                "projects/<p>/locations/<r>/keyRings/<k>/cryptoKeys/<key>",
            )
        key = f"projects/{parts[0]}/locations/{parts[1]}/keyRings/{parts[2]}/cryptoKeys/{key}"
    out.decisions.append(
        f"encryptionConfig -> encryptionSpec.kmsKeyName {key}: the key must be in the job's region and the "
        "Vertex AI service agent must hold roles/cloudkms.cryptoKeyEncrypterDecrypter on it"
    )
    return key


def _runtime(legacy: LegacyJob, out: Conversion, options: Options, variant: str) -> None:
    training = legacy.training
    image = (
        f"this repo's trainer image (${{infra.trainer_image}}:{variant}-..., TensorFlow 2.21, Keras 3, "
        "Python 3.11)"
        if options.delivery == CONTAINER
        else f"{PREBUILT.get(variant, '')} with the trainer sdist (TensorFlow 2.17, Keras 3, Python 3.10)"
    )
    version = training.get("runtimeVersion")
    if version is not None:
        text = str(version)
        found = re.fullmatch(r"(\d+)\.(\d+)", text)
        if not found:
            raise legacy.error(
                f"{T}.runtimeVersion", f"{short(text)} is not a runtime version", "such as 1.15 or 2.11"
            )
        if int(found.group(1)) == tables.TF1_RUNTIME_MAJOR:
            out.lost.append(
                (
                    f"{T}.runtimeVersion",
                    f"runtime {short(text, quote=False)} ran TensorFlow 1.x: graph-mode sessions, "
                    "tf.estimator and tf.contrib code does not run on TensorFlow 2; the job runs this repo's "
                    "Keras 3 trainer instead",
                )
            )
    out.decisions.append(f"runtimeVersion {version or '(unset)'} -> {image}")
    python = training.get("pythonVersion")
    if python is not None and str(python).startswith("2"):
        out.lost.append(
            (f"{T}.pythonVersion", f"Python {short(python, quote=False)}: no Vertex AI image runs Python 2")
        )
    elif python is not None:
        out.decisions.append(f"pythonVersion {python} -> the Python of {image.split(' (')[0]}")
    module = training.get("pythonModule")
    packages = training.get("packageUris")
    if module is not None and module != TRAINER_MODULE:
        out.lost.append(
            (
                f"{T}.pythonModule",
                f"{short(module, quote=False)}: the job runs this repo's trainer (python -m "
                f"{TRAINER_MODULE}), not the legacy package",
            )
        )
    if packages:
        shown = packages if isinstance(packages, str) else ", ".join(map(str, packages))
        out.decisions.append(
            f"packageUris {shown} -> this repo's trainer"
            + (" (the image)" if options.delivery == CONTAINER else " (${job.package_uri}, its sdist)")
        )
    region = training.get("region")
    own = str(options.outputs.get("region", ""))
    if region and region != own:
        out.decisions.append(
            f"region {region} -> the environment's region {own}; `run_job.py --region {region}` keeps it "
            "(with a TensorBoard in that region)"
        )


def _labels(legacy: LegacyJob, out: Conversion, model: str) -> dict[str, str]:
    raw = legacy.job.get("labels") or {}
    if not isinstance(raw, dict):
        raise legacy.error("labels", "must be a mapping", "key: value pairs")
    labels = {str(k): str(v) for k, v in raw.items()}
    labels.setdefault("app", model.replace("_", "-"))
    labels.setdefault("migrated-from", "ai-platform")
    for key in labels:
        out.blame.append((f"labels.{key}", f"labels.{key}"))
    return labels


def _reported(legacy: LegacyJob, out: Conversion) -> None:
    """Legacy settings with no Vertex AI counterpart for this trainer: reported, never dropped silently."""
    training = legacy.training
    for _, prefix, _ in ROLES:
        config = training.get(f"{prefix}Config") or {}
        base = f"{T}.{prefix}Config"
        if config.get("imageUri"):
            registry = (
                " (Container Registry, gcr.io, is shut down)" if "gcr.io/" in config["imageUri"] else ""
            )
            out.lost.append(
                (
                    f"{base}.imageUri",
                    f"{short(config['imageUri'], quote=False)}{registry}: the job runs this repo's trainer "
                    "image",
                )
            )
        for key in ("containerCommand", "containerArgs"):
            if config.get(key):
                out.lost.append((f"{base}.{key}", "belonged to the custom container the job no longer runs"))
        if config.get("tpuTfVersion"):
            out.lost.append(
                (
                    f"{base}.tpuTfVersion",
                    "a TPU VM runs the trainer image's TensorFlow; there is no TPU runtime to pick",
                )
            )
    if "useChiefInTfConfig" in training:
        out.lost.append(
            (
                f"{T}.useChiefInTfConfig",
                "no Vertex AI setting: Vertex AI always names pool 0 `chief` in TF_CONFIG (this repo's "
                "trainer reads `chief` and `master` alike)",
            )
        )
    for flag in legacy.ignored_flags:
        out.decisions.append(f"{flag}: not part of the job")
