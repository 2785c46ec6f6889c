"""Typed view of the compiled Vertex AI REST body (camelCase), limited to what a local run needs.

The body was already validated against ``google.cloud.aiplatform_v1`` by ``jobs/``; this module reads it
through ``jobs.definition.body`` (the reader validate and compile use too) and raises :class:`LocalRunError`
(one line naming the field by its dotted body path) for what cannot run on this machine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from jobs.definition import body as job_body
from jobs.definition.body import STUDY_FIELD, image_name, join
from jobs.definition.errors import FieldError, short
from jobs.definition.kinds import TUNING_JOB, spec_field
from jobs.definition.study import Study, StudyError, grid_points, parse_study
from jobs.definition.validate_pools import ENV_NAME
from trainer.contract import TRAINER_MODULE, WORKER_POOLS


class LocalRunError(FieldError):
    """A job that cannot run locally; ``str()`` is one line, ``<field.path>: <problem>``, as a JobError's."""


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
class TuningJob:
    """A HyperparameterTuningJob as --local runs it: its study, read as validation reads it, and the
    CustomJobSpec every trial runs."""

    study: Study
    trial_job: JobSpec


# The most points a local GRID_SEARCH enumerates: Optuna's GridSampler lists and shuffles every point of the
# grid up front, so an INTEGER range of 1..10**9 would exhaust memory before the first trial. A local limit.
MAX_GRID_POINTS = 100_000

_PY_LAUNCHERS = re.compile(r"^(?:.*/)?python(?:3(?:\.\d+)?)?$")


def _int(value: Any, path: str) -> int:
    # int64 fields arrive as JSON strings from MessageToJson; YAML written by hand gives ints.
    try:
        return int(value)
    except (TypeError, ValueError):
        raise LocalRunError(path, f"{short(value)} is not an integer") from None


def _env_pairs(items: list[Any], path: str) -> tuple[tuple[str, str], ...]:
    pairs = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or "name" not in item:
            raise LocalRunError(join(path, i), f"expected {{name, value}}, got {short(item)}")
        name, value = str(item["name"]), str(item.get("value", ""))
        # What a process environment cannot hold (exec would refuse it with a traceback, mid-launch).
        if not ENV_NAME.fullmatch(name):
            raise LocalRunError(
                join(path, i, "name"), f"{short(name)}; use letters, digits and _, not first a digit"
            )
        _no_nul(value, join(path, i, "value"))
        pairs.append((name, value))
    return tuple(pairs)


def _no_nul(value: str, path: str) -> None:
    if "\0" in value:
        raise LocalRunError(
            path, f"{short(value)} holds a NUL character, which no command line or env can carry"
        )


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
            f"{short(' '.join(command))} cannot run locally (no Docker engine here); a container job runs "
            "locally only when its command is `python -m trainer.<module>` or it uses the trainer image "
            "without a command",
        )
    if trainer_image and image_name(image) == image_name(trainer_image):
        # The trainer image's entrypoint is `python -m trainer.task` (built from this repo).
        return ("-m", TRAINER_MODULE, *args)
    raise LocalRunError(
        pool.field(pool.image_field),
        f"{short(image)} cannot run locally (no Docker engine here); only this repo's trainer image "
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
            raise LocalRunError(join(path, name), f"expected an object, got {short(value)}")
    return JobSpec(
        pools=tuple(pools),
        base_output_uri=str(base_dir.get("outputUriPrefix", "") or ""),
        timeout_s=_duration(scheduling.get("timeout"), join(path, "scheduling", "timeout")),
        raw=spec,
    )


def _duration(value: Any, path: str) -> float | None:
    if value in (None, ""):
        return None
    seconds = job_body.duration_seconds(str(value))
    if seconds is None or seconds < 0:
        raise LocalRunError(path, f"{short(value)} is not a duration; use seconds like '3600s'")
    return seconds or None


def parse_tuning_job(body: dict[str, Any], trainer_image: str = "") -> TuningJob:
    """The study (by the rules of jobs.definition.study, as validation applies them) and what runs its trials,
    refusing what this machine cannot do: conditional parameters, a grid too big to enumerate."""
    try:
        study = parse_study(body)
    except StudyError as exc:
        raise LocalRunError(exc.path, exc.problem, exc.allowed) from None
    for p in study.parameters:
        if p.has_children:
            raise LocalRunError(
                join(p.path, "conditionalParameterSpecs"), "conditional parameters are not supported locally"
            )
    if study.algorithm == "GRID_SEARCH":
        points = grid_points(study.parameters)
        if points > MAX_GRID_POINTS:
            raise LocalRunError(
                join(STUDY_FIELD, "parameters"),
                f"the grid has {points} points; --local enumerates at most {MAX_GRID_POINTS} (narrow the "
                "INTEGER ranges or the value lists)",
            )
    trial_path = spec_field(TUNING_JOB)
    return TuningJob(study, parse_job_spec(body.get(trial_path), trial_path, trainer_image))
