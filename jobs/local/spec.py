"""Typed view of the compiled Vertex AI REST body (camelCase), limited to what a local run needs.

The body was already validated against ``google.cloud.aiplatform_v1`` by ``jobs/``; this module reads it
through ``jobs.definition.body`` (the reader validate and compile use too) and raises :class:`LocalRunError`
(one line naming the field by its dotted body path) for what cannot run on this machine.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from jobs.definition import body as job_body
from jobs.definition.body import GOALS, TUNING_JOB, VALUE_SPECS, image_name, join, spec_field
from trainer.contract import TRAINER_MODULE, WORKER_POOLS


class LocalRunError(ValueError):
    """A job that cannot run locally; ``str()`` is one line, ``<field.path>: <problem>``, as a JobError's."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(self.__str__())

    def __str__(self) -> str:
        return " ".join(f"{self.path}: {self.problem}".split())


@dataclass(frozen=True)
class PoolSpec:
    index: int  # position in workerPoolSpecs: decides the workerpoolN name and the TF task type
    path: str  # the pool's body path (jobSpec.workerPoolSpecs.<index>), for errors
    replica_count: int
    # Exactly what runs as the replica's argv after the Python interpreter, e.g. ["-m", "trainer.task", ...].
    python_argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    machine_type: str = ""
    accelerator_type: str = ""
    accelerator_count: int = 0
    tpu_topology: str = ""
    args_path: str = ""  # the body path of the pool's args and env, for errors
    env_path: str = ""


@dataclass(frozen=True)
class JobSpec:
    pools: tuple[PoolSpec, ...]
    base_output_uri: str  # "" when the job has no baseOutputDirectory (then Vertex sets no AIP_* dirs)
    timeout_s: float | None
    raw: dict[str, Any]  # the CustomJobSpec as given: CLUSTER_SPEC's "job" field carries it

    @property
    def replica_total(self) -> int:
        return sum(p.replica_count for p in self.pools)


@dataclass(frozen=True)
class ParameterSpec:
    parameter_id: str
    kind: str  # DOUBLE | INTEGER | DISCRETE | CATEGORICAL
    scale: str = "UNIT_LINEAR_SCALE"
    low: float = 0.0
    high: float = 0.0
    values: tuple[Any, ...] = ()


@dataclass(frozen=True)
class StudyConfig:
    metric_id: str
    goal: str  # MAXIMIZE | MINIMIZE
    parameters: tuple[ParameterSpec, ...]
    algorithm: str
    measurement_selection: str  # LAST_MEASUREMENT | BEST_MEASUREMENT
    max_trials: int
    parallel_trials: int
    max_failed_trials: int  # 0: "Vertex AI decides" (see tuning.failure_budget)
    trial_job: JobSpec
    raw_study_spec: dict[str, Any] = field(default_factory=dict)


# The most trials one study holds. Vertex AI's tuning jobs run on Vizier, whose quota page documents "Maximum
# number of trials in a study: 1,000" (AI Platform Vizier: https://cloud.google.com/ai-platform/optimizer/docs/
# quotas); neither the API reference nor this repo's validation gives another bound for maxTrialCount.
MAX_TRIALS = 1000
# The most points a local GRID_SEARCH enumerates: Optuna's GridSampler lists and shuffles every point of the
# grid up front, so an INTEGER range of 1..10**9 would exhaust memory before the first trial. A local limit.
MAX_GRID_POINTS = 100_000

_PY_LAUNCHERS = re.compile(r"^(?:.*/)?python(?:3(?:\.\d+)?)?$")


def _int(value: Any, path: str) -> int:
    # int64 fields arrive as JSON strings from MessageToJson; YAML written by hand gives ints.
    try:
        return int(value)
    except (TypeError, ValueError):
        raise LocalRunError(path, f"{value!r} is not an integer") from None


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _env_pairs(items: list[Any], path: str) -> tuple[tuple[str, str], ...]:
    pairs = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or "name" not in item:
            raise LocalRunError(join(path, i), f"expected {{name, value}}, got {item!r}")
        name, value = str(item["name"]), str(item.get("value", ""))
        # What a process environment cannot hold (exec would refuse it with a traceback, mid-launch).
        if not _ENV_NAME.fullmatch(name):
            raise LocalRunError(
                join(path, i, "name"), f"{name!r}; use letters, digits and _, not first a digit"
            )
        _no_nul(value, join(path, i, "value"))
        pairs.append((name, value))
    return tuple(pairs)


def _no_nul(value: str, path: str) -> None:
    if "\0" in value:
        raise LocalRunError(path, f"{value!r} holds a NUL character, which no command line or env can carry")


def _container_argv(pool: job_body.Pool, trainer_image: str) -> tuple[str, ...]:
    """The python argv that runs a container's entrypoint here, or an error: there is no Docker engine."""
    image = pool.image
    command = [str(c) for c in pool.command]
    args = [str(a) for a in pool.args]
    if command:
        if (
            len(command) >= 3
            and _PY_LAUNCHERS.match(command[0])
            and command[1] == "-m"
            and _is_trainer(command[2])
        ):
            return ("-m", *command[2:], *args)
        raise LocalRunError(
            pool.field(pool.program_field, "command"),
            f"{' '.join(command)!r} cannot run locally (no Docker engine here); a container job runs locally "
            "only when its command is `python -m trainer.<module>` or it uses the trainer image without a "
            "command",
        )
    if trainer_image and image_name(image) == image_name(trainer_image):
        # The trainer image's entrypoint is `python -m trainer.task` (built from this repo).
        return ("-m", TRAINER_MODULE, *args)
    raise LocalRunError(
        pool.field(pool.image_field),
        f"{image!r} cannot run locally (no Docker engine here); only this repo's trainer image "
        f"({trainer_image or '${infra.trainer_image}'}) or a `python -m trainer.<module>` command can",
    )


def _is_trainer(module: str) -> bool:
    top = TRAINER_MODULE.split(".", 1)[0]
    return module == top or module.startswith(top + ".")


def parse_job_spec(spec: Any, path: str, trainer_image: str = "") -> JobSpec:
    if not isinstance(spec, dict):
        raise LocalRunError(path, "expected a CustomJobSpec object")
    pools_raw = spec.get(job_body.POOLS_FIELD)
    pools_path = join(path, job_body.POOLS_FIELD)
    if not isinstance(pools_raw, list) or not pools_raw:
        raise LocalRunError(pools_path, "at least one worker pool is required")
    if len(pools_raw) > len(WORKER_POOLS):
        raise LocalRunError(
            pools_path,
            f"{len(pools_raw)} worker pools; use at most {len(WORKER_POOLS)} ({', '.join(WORKER_POOLS)})",
        )
    pools = []
    for pool in job_body.pools(spec, path):
        if not pool.raw:  # Vertex: pools after the first may be skipped with an empty value
            if pool.index == 0:
                raise LocalRunError(pool.path, "the first worker pool (the chief) cannot be empty")
            continue
        count = _int(pool.raw.get("replicaCount", 1), pool.field("replicaCount"))
        if count < 1 or (pool.index == 0 and count != 1):
            allowed = "1" if pool.index == 0 else ">= 1"
            raise LocalRunError(pool.field("replicaCount"), f"{count} is not allowed; use {allowed}")
        if pool.is_package:
            if not pool.module:
                raise LocalRunError(
                    pool.field(pool.program_field, "pythonModule"), f"required (e.g. {TRAINER_MODULE})"
                )
            argv = ("-m", pool.module, *(str(a) for a in pool.args))
        elif pool.is_container:
            argv = _container_argv(pool, trainer_image)
        else:
            raise LocalRunError(pool.path, f"needs {' or '.join(job_body.PROGRAMS)}")
        for i, arg in enumerate(argv):
            _no_nul(arg, pool.field(pool.args_field) if i >= len(argv) - len(pool.args) else pool.path)
        env = _env_pairs(pool.env, pool.field(pool.program_field, "env"))
        machine = pool.machine
        accel = str(machine.get("acceleratorType", ""))
        pools.append(
            PoolSpec(
                index=pool.index,
                path=pool.path,
                replica_count=count,
                python_argv=argv,
                env=env,
                machine_type=str(machine.get("machineType", "")),
                accelerator_type="" if accel == "ACCELERATOR_TYPE_UNSPECIFIED" else accel,
                accelerator_count=_int(
                    machine.get("acceleratorCount", 0), pool.field("machineSpec", "acceleratorCount")
                ),
                tpu_topology=str(machine.get("tpuTopology", "")),
                args_path=pool.field(pool.args_field),
                env_path=pool.field(pool.program_field, "env"),
            )
        )
    base_dir = spec.get("baseOutputDirectory") or {}
    scheduling = spec.get("scheduling") or {}
    for name, value in (("baseOutputDirectory", base_dir), ("scheduling", scheduling)):
        if not isinstance(value, dict):
            raise LocalRunError(join(path, name), f"expected an object, got {value!r}")
    return JobSpec(
        pools=tuple(pools),
        base_output_uri=str(base_dir.get("outputUriPrefix", "") or ""),
        timeout_s=_duration(scheduling.get("timeout"), join(path, "scheduling", "timeout")),
        raw=spec,
    )


def _duration(value: Any, path: str) -> float | None:
    if value in (None, ""):
        return None
    match = re.fullmatch(r"(\d+(?:\.\d+)?)s", str(value))
    if not match:
        raise LocalRunError(path, f"{value!r} is not a duration; use seconds like '3600s'")
    return float(match.group(1)) or None


# The body's value spec field -> the ParameterSpec type it makes.
_KINDS = {spec_name: kind for kind, spec_name in VALUE_SPECS.items()}


def _parameter(raw: Any, path: str) -> ParameterSpec:
    if not isinstance(raw, dict) or not raw.get("parameterId"):
        raise LocalRunError(join(path, "parameterId"), "required")
    if raw.get("conditionalParameterSpecs"):
        raise LocalRunError(
            join(path, "conditionalParameterSpecs"), "conditional parameters are not supported locally"
        )
    kinds = [k for k in _KINDS if k in raw]
    if len(kinds) != 1:
        raise LocalRunError(path, f"needs exactly one of {', '.join(_KINDS)}")
    key = kinds[0]
    kind, body = _KINDS[key], raw[key] or {}
    if not isinstance(body, dict):
        raise LocalRunError(join(path, key), f"expected an object, got {body!r}")
    scale = str(raw.get("scaleType") or "UNIT_LINEAR_SCALE")
    if scale == "SCALE_TYPE_UNSPECIFIED":
        scale = "UNIT_LINEAR_SCALE"
    pid = str(raw["parameterId"])
    if kind in ("DOUBLE", "INTEGER"):
        conv = float if kind == "DOUBLE" else _int_value
        try:
            low, high = conv(body.get("minValue")), conv(body.get("maxValue"))
        except (TypeError, ValueError, OverflowError):
            raise LocalRunError(join(path, key), "minValue and maxValue must be numbers") from None
        if not (math.isfinite(low) and math.isfinite(high)):
            raise LocalRunError(join(path, key), f"minValue {low} and maxValue {high} must be finite numbers")
        if low > high or (kind == "DOUBLE" and low == high):
            raise LocalRunError(join(path, key), f"minValue {low} must be below maxValue {high}")
        if scale != "UNIT_LINEAR_SCALE" and low <= 0:
            raise LocalRunError(join(path, key, "minValue"), f"{scale} needs minValue > 0, got {low}")
        return ParameterSpec(pid, kind, scale, low, high)
    raw_values = body.get("values") or ()
    if not isinstance(raw_values, list | tuple):
        raise LocalRunError(join(path, key, "values"), f"expected a list, got {raw_values!r}")
    values = tuple(raw_values)
    if not values:
        raise LocalRunError(join(path, key, "values"), "at least one value is required")
    if kind == "DISCRETE":
        try:
            values = tuple(float(v) for v in values)
        except (TypeError, ValueError):
            raise LocalRunError(join(path, key, "values"), f"{list(values)} are not all numbers") from None
        if not all(math.isfinite(v) for v in values):
            raise LocalRunError(join(path, key, "values"), f"{list(values)} are not all finite numbers")
    else:
        values = tuple(str(v) for v in values)
    return ParameterSpec(pid, kind, scale, values=values)


def grid_points(params: tuple[ParameterSpec, ...]) -> int:
    """How many points GRID_SEARCH visits: every INTEGER in [min, max] times every listed value, counted."""
    return math.prod(int(p.high) - int(p.low) + 1 if p.kind == "INTEGER" else len(p.values) for p in params)


def _int_value(value: Any) -> int:
    number = float(value)
    if not number.is_integer():
        raise ValueError(value)
    return int(number)


def parse_tuning_job(body: dict[str, Any], trainer_image: str = "") -> StudyConfig:
    study_path = job_body.STUDY_FIELD
    spec = body.get(study_path)
    if not isinstance(spec, dict):
        raise LocalRunError(study_path, f"required for a {TUNING_JOB}")
    metrics = spec.get("metrics") or []
    if (
        not isinstance(metrics, list)
        or len(metrics) != 1
        or not isinstance(metrics[0], dict)
        or not metrics[0].get("metricId")
    ):
        raise LocalRunError(join(study_path, "metrics"), "exactly one metric {metricId, goal} is supported")
    goal = str(metrics[0].get("goal", ""))
    if goal not in GOALS:
        raise LocalRunError(join(study_path, "metrics", 0, "goal"), f"{goal!r}; use {' or '.join(GOALS)}")
    params_path = join(study_path, "parameters")
    raw_params = spec.get("parameters") or []
    if not isinstance(raw_params, list):
        raise LocalRunError(params_path, f"expected a list of parameters, got {raw_params!r}")
    params = tuple(_parameter(p, join(params_path, i)) for i, p in enumerate(raw_params))
    if not params:
        raise LocalRunError(params_path, "at least one parameter is required")
    ids = [p.parameter_id for p in params]
    if len(set(ids)) != len(ids):
        raise LocalRunError(params_path, f"parameterId values must be unique, got {ids}")
    algorithm = str(spec.get("algorithm") or "ALGORITHM_UNSPECIFIED")
    if algorithm not in ("ALGORITHM_UNSPECIFIED", "GRID_SEARCH", "RANDOM_SEARCH"):
        raise LocalRunError(
            join(study_path, "algorithm"),
            f"{algorithm!r}; use ALGORITHM_UNSPECIFIED, GRID_SEARCH or RANDOM_SEARCH",
        )
    if algorithm == "GRID_SEARCH":
        for i, p in enumerate(params):
            if p.kind == "DOUBLE":
                raise LocalRunError(
                    join(params_path, i),
                    "GRID_SEARCH takes INTEGER, DISCRETE or CATEGORICAL parameters, not DOUBLE "
                    f"({p.parameter_id})",
                )
        points = grid_points(params)
        if points > MAX_GRID_POINTS:
            raise LocalRunError(
                params_path,
                f"the grid has {points} points; --local enumerates at most {MAX_GRID_POINTS} (narrow the "
                "INTEGER ranges or the value lists)",
            )
    selection = str(spec.get("measurementSelectionType") or "LAST_MEASUREMENT")
    if selection == "MEASUREMENT_SELECTION_TYPE_UNSPECIFIED":
        selection = "LAST_MEASUREMENT"
    max_trials = _int(body.get("maxTrialCount", 0), "maxTrialCount")
    parallel = _int(body.get("parallelTrialCount", 1) or 1, "parallelTrialCount")
    max_failed = _int(body.get("maxFailedTrialCount", 0) or 0, "maxFailedTrialCount")
    if not 1 <= max_trials <= MAX_TRIALS:
        raise LocalRunError(
            "maxTrialCount",
            f"{max_trials}; use 1..{MAX_TRIALS} (the most trials one Vizier study of a tuning job holds)",
        )
    if not 1 <= parallel <= max_trials:
        raise LocalRunError("parallelTrialCount", f"{parallel}; use 1..maxTrialCount ({max_trials})")
    if max_failed < 0:
        raise LocalRunError("maxFailedTrialCount", f"{max_failed}; use 0 (Vertex AI decides) or more")
    trial_path = spec_field(TUNING_JOB)
    return StudyConfig(
        metric_id=str(metrics[0]["metricId"]),
        goal=goal,
        parameters=params,
        algorithm=algorithm,
        measurement_selection=selection,
        max_trials=max_trials,
        parallel_trials=parallel,
        max_failed_trials=max_failed,
        trial_job=parse_job_spec(body.get(trial_path), trial_path, trainer_image),
        raw_study_spec=spec,
    )
