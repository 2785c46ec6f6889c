"""A legacy job's machines -> Vertex AI worker pools: a scale tier stands for the cluster it meant, a CUSTOM
tier's master/worker/parameter server/evaluator types map onto pools 0-3 (legacy machine names and retired
GPUs onto today's), and a Cloud TPU becomes a TPU VM."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jobs.definition.errors import short
from jobs.definition.machines import FAMILY_NAMES, family_of
from jobs.legacy import tables
from jobs.legacy.convert_fields import check_fields, read_count, read_enum, read_text
from jobs.legacy.convert_types import Conversion
from jobs.legacy.source import TRAINING_INPUT as T
from jobs.legacy.source import LegacyJob

ROLES = (  # legacy role, its fields' prefix, the Vertex pool it maps to
    ("master", "master", 0),
    ("worker", "worker", 1),
    ("parameter server", "parameterServer", 2),
    ("evaluator", "evaluator", 3),
)


@dataclass(frozen=True)
class Pool:
    role: str
    machine_type: str
    accelerator: str = ""
    count: int = 0
    replicas: int = 1
    disk: dict[str, Any] | None = None
    legacy_path: str = ""


def worker_pools(legacy: LegacyJob, out: Conversion) -> list[Pool]:
    training = legacy.training
    tier_path = f"{T}.scaleTier"
    tier = read_enum(legacy, tier_path, training.get("scaleTier", "BASIC"), tables.ALL_TIERS)
    custom_fields = [
        f"{prefix}{suffix}" for _, prefix, _ in ROLES for suffix in ("Type", "Count") if prefix != "master"
    ] + ["masterType"]
    for _, prefix, _ in ROLES:
        if f"{prefix}Config" in training:
            config = training[f"{prefix}Config"]
            check_fields(legacy, f"{T}.{prefix}Config", config, tables.REPLICA_CONFIG_FIELDS)
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
        count = read_count(legacy, f"{T}.{prefix}Count", training.get(f"{prefix}Count", 0))
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
    kind = read_text(legacy, path, kind, _machine_names())
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
        check_fields(legacy, accel_path, config, ("count", "type"))
        accelerator = read_enum(legacy, f"{accel_path}.type", config.get("type"), tables.LEGACY_ACCELERATORS)
        count = read_count(legacy, f"{accel_path}.count", config.get("count", 1), 1)
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
    check_fields(legacy, path, config, ("count", "type"))
    accelerator = read_enum(legacy, f"{path}.type", config.get("type", "TPU_V2"), tables.TPU_TYPES)
    count = config.get("count", tables.TPU_CORES)
    if read_count(legacy, f"{path}.count", count, 1) != tables.TPU_CORES:
        raise legacy.error(f"{path}.count", f"{count} TPU cores", f"{tables.TPU_CORES} (a v2-8 or v3-8)")
    return accelerator


def _disk(legacy: LegacyJob, path: str, disk: Any) -> dict[str, Any] | None:
    if disk is None:
        return None
    check_fields(legacy, path, disk, ("bootDiskType", "bootDiskSizeGb"))
    out: dict[str, Any] = {}
    if "bootDiskType" in disk:
        kind = str(disk["bootDiskType"]).lower().replace("_", "-")
        if kind not in ("pd-ssd", "pd-standard"):
            raise legacy.error(
                f"{path}.bootDiskType", f"unknown value {short(disk['bootDiskType'])}", "pd-ssd, pd-standard"
            )
        out["bootDiskType"] = kind
    if "bootDiskSizeGb" in disk:
        out["bootDiskSizeGb"] = read_count(legacy, f"{path}.bootDiskSizeGb", disk["bootDiskSizeGb"], 10)
    return out or None


def _get(root: Any, path: str) -> Any:
    for key in path.split("."):
        if not isinstance(root, dict):
            return None
        root = root.get(key)
    return root
