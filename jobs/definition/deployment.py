"""Deploying a registered model version to a Vertex AI endpoint: the pure rules (``run_job.py deploy``,
``undeploy``, ``rollback``).

    run_job.py deploy census@production --endpoint census --traffic 10 --machine-type n1-standard-4

Everything here is offline and table-tested: ``MODEL@ALIAS``, the deploy settings (a serving machine from
Vertex AI's prediction catalogue, replicas, the autoscaling target, the new version's share of traffic or a
whole split), the traffic split Vertex AI is sent (``"0"`` is the model being deployed), the
DeployModelRequest body in its REST JSON form, and the record of the previous split that ``rollback``
restores.

The record travels in the DeployedModel's ``displayName`` (``census@production; previous traffic
1234=90,5678=10``): it is written by the very request that deploys, so no failure between two calls can leave
a deployment without it, and the console shows it. ``rollback`` undeploys the newest deployed model carrying
a record with that split as the UndeployModelRequest's ``trafficSplit``: one call, so traffic is never left
on a model being taken away.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from jobs.definition.errors import FieldError, one_of, short
from jobs.definition.machines import FAMILIES, Family, example_types
from jobs.definition.model_registry import MODEL_REF, RegistryError, parse_model_ref

# DeployModelRequest.traffic_split's key for the model the request deploys (Vertex AI fills in its id).
NEW = "0"
# Vertex AI's autoscaling metric for CPU-served models; its target is a utilisation percentage.
CPU_METRIC = "aiplatform.googleapis.com/prediction/online/cpu/utilization"
DEFAULT_MACHINE = "n1-standard-4"
# A deployment's replicas: Vertex AI bills each one by the hour, and scales between min and max.
MAX_REPLICAS = 100
# DeployedModel.display_name is at most 128 characters.
MAX_DISPLAY_NAME = 128
RECORD = "; previous traffic "
RECORD_NONE = "none"

# Vertex AI's prediction machines are training's but for smaller sizes (n1-standard-2, e2-standard-2, the
# n1-highcpu-2/4/8 training lacks) and no cloud-tpu (v2/v3): family -> its prediction sizes where they differ.
_SERVING_SIZES = {
    "n1-standard": r"n1-standard-(2|4|8|16|32|64|96)",
    "n1-highcpu": r"n1-highcpu-(2|4|8|16|32|64|96)",
    "e2-standard": r"e2-standard-(2|4|8|16|32)",
    "e2-highcpu": r"e2-highcpu-(2|4|8|16|32)",
    "n2-standard": r"n2-standard-(2|4|8|16|32|48|64|80)",
    "n2-highcpu": r"n2-highcpu-(2|4|8|16|32|48|64|80|96)",
}
SERVING_FAMILIES: tuple[Family, ...] = tuple(
    replace(f, pattern=_SERVING_SIZES.get(f.name, f.pattern)) for f in FAMILIES if f.name != "cloud-tpu"
)
SERVING_FAMILY_NAMES = tuple(f"{f.name}-*" for f in SERVING_FAMILIES)

# Fields of a definition's deploy block, and the flags that give the same values.
FIELDS = ("endpoint", "machineType", "acceleratorType", "acceleratorCount", "minReplicaCount",
          "maxReplicaCount", "cpuUtilizationTarget", "traffic", "trafficSplit")


class DeployError(FieldError):
    """A deploy setting the rules refuse, at its flag or field."""


@dataclass(frozen=True)
class VersionRef:
    """``MODEL@ALIAS``: a registry model and one of its aliases (or a version id)."""

    model_id: str
    alias: str

    def model_name(self, parent: str) -> str:
        return f"{parent}/models/{self.model_id}"

    def version_name(self, parent: str) -> str:
        return f"{self.model_name(parent)}@{self.alias}"

    def __str__(self) -> str:
        return f"{self.model_id}@{self.alias}"


def parse_ref(text: str, where: str = MODEL_REF) -> VersionRef:
    """``census@production`` or ``census@3`` -> VersionRef (the registry's one rule, as batch-predict reads
    it); DeployError names ``where``."""
    try:
        model, alias = parse_model_ref(text)
    except RegistryError as exc:
        raise DeployError(where, exc.problem, exc.allowed) from None
    return VersionRef(model, alias)


@dataclass(frozen=True)
class DeploySpec:
    """How a version is served: its machines, replicas, autoscaling and share of the endpoint's traffic."""

    endpoint: str  # the environment's endpoint name (infra's endpoints map)
    machine_type: str = DEFAULT_MACHINE
    accelerator_type: str = ""
    accelerator_count: int = 0
    min_replicas: int = 1
    max_replicas: int = 1
    cpu_target: int | None = None  # autoscaling target, percent utilisation
    traffic: int = 100  # the new version's share; the rest is shared as it is now
    split: tuple[tuple[str, int], ...] | None = None  # a whole split instead ("0": the new version)

    def describe(self) -> str:
        machine = self.machine_type + (
            f" + {self.accelerator_count} x {self.accelerator_type}" if self.accelerator_type else ""
        )
        share = f"split {dict(self.split)}" if self.split is not None else f"{self.traffic}% of traffic"
        return f"{machine}, {self.min_replicas}-{self.max_replicas} replicas, {share}"


def parse_settings(raw: Mapping[str, Any], names: Mapping[str, str] | None = None) -> DeploySpec:
    """The deploy block (or the flags, as the same fields) -> DeploySpec. ``names`` maps a field to what the
    user wrote (a flag, or ``deploy.<field>``) for the error line."""

    def where(key: str) -> str:
        return (names or {}).get(key, key)

    for key in raw:
        if key not in FIELDS:
            raise DeployError(where(key), f"unknown field {short(key)}", one_of(FIELDS))
    endpoint = raw.get("endpoint")
    if not isinstance(endpoint, str) or not endpoint:
        raise DeployError(where("endpoint"), "missing", "the name of one of the environment's endpoints")
    machine = raw.get("machineType", DEFAULT_MACHINE)
    accelerator = raw.get("acceleratorType", "") or ""
    count = _integer(raw, "acceleratorCount", where, 1 if accelerator else 0, 0, 16)
    _check_machine(machine, accelerator, count, where)
    low = _integer(raw, "minReplicaCount", where, 1, 1, MAX_REPLICAS)
    high = _integer(raw, "maxReplicaCount", where, low, 1, MAX_REPLICAS)
    if high < low:
        raise DeployError(where("maxReplicaCount"), f"{high} is below minReplicaCount {low}",
                          f"an integer from {low} to {MAX_REPLICAS}")
    target = raw.get("cpuUtilizationTarget")
    if target is not None:
        target = _integer(raw, "cpuUtilizationTarget", where, 60, 1, 100)
    traffic = _integer(raw, "traffic", where, 100, 1, 100)
    split = raw.get("trafficSplit")
    if split is not None:
        if "traffic" in raw:
            raise DeployError(where("trafficSplit"), "given with traffic", "one of traffic or trafficSplit")
        split = parse_split(split, where("trafficSplit"))
    return DeploySpec(str(endpoint), str(machine), str(accelerator), count, low, high, target, traffic, split)


def _integer(raw: Mapping[str, Any], key: str, where, default: int, low: int, high: int) -> int:
    value = raw.get(key, default)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise DeployError(where(key), f"{short(value)} is not a whole number in range",
                          f"an integer from {low} to {high}")
    return value


def _check_machine(machine: Any, accelerator: str, count: int, where) -> None:
    family = next((f for f in SERVING_FAMILIES if isinstance(machine, str) and f.matches(machine)), None)
    if family is None:
        known = next((f for f in SERVING_FAMILIES if str(machine).startswith(f.name)), None)
        allowed = example_types(known) if known else ", ".join(SERVING_FAMILY_NAMES)
        raise DeployError(where("machineType"), f"{short(machine)} is not a Vertex AI prediction machine",
                          allowed)
    if not accelerator:
        if family.accelerator_required:
            raise DeployError(where("acceleratorType"), f"{machine} comes with accelerators",
                              one_of(family.accelerators))
        return
    if accelerator not in family.accelerators:
        raise DeployError(where("acceleratorType"), f"{short(accelerator)} does not fit {machine}",
                          one_of(family.accelerators) or "none (a CPU-only machine)")
    counts = family.allowed_counts(machine, accelerator)
    if count not in counts:
        raise DeployError(where("acceleratorCount"), f"{count} x {accelerator} does not fit {machine}",
                          one_of(counts))


def parse_split(value: Any, where: str) -> tuple[tuple[str, int], ...]:
    """``0=10,1234=90`` (or a mapping) -> ((id, percent), ...): deployed model ids ("0": the new one), whole
    percentages summing to 100."""
    allowed = "<deployed model id>=<percent>,... summing to 100, 0 for the version being deployed"
    if isinstance(value, str):
        pairs = [item.partition("=") for item in value.split(",")]
        if any(not eq for _, eq, _ in pairs):
            raise DeployError(where, f"{short(value)} is not a traffic split", allowed)
        value = {k.strip(): v.strip() for k, _, v in pairs}
    if not isinstance(value, Mapping) or not value:
        raise DeployError(where, f"{short(value)} is not a traffic split", allowed)
    split = []
    for key, pct in value.items():
        key = str(key)
        if isinstance(pct, str) and pct.isdigit():
            pct = int(pct)
        if not key.isdigit() or len(key) > 20 or isinstance(pct, bool) or not isinstance(pct, int) \
                or not 0 <= pct <= 100:
            raise DeployError(where, f"{short(key)}={short(pct)} is not a share of traffic", allowed)
        split.append((key, pct))
    total = sum(p for _, p in split)
    if total != 100:
        raise DeployError(where, f"the shares sum to {total}", allowed)
    if NEW not in dict(split):
        raise DeployError(where, "gives the version being deployed no share (key 0)", allowed)
    return tuple(split)


# --- traffic ----------------------------------------------------------------------------------------------


def scaled(split: Mapping[str, int], total: int) -> dict[str, int]:
    """``split``'s shares scaled to sum to ``total`` (largest remainders; ties to the lower id), keeping
    every key. All-zero shares go to the newest-looking id (the largest), so the result always sums."""
    current = {k: int(v) for k, v in split.items()}
    if not current or total <= 0:
        return {k: 0 for k in current}
    whole = sum(current.values())
    if whole == 0:
        last = max(current, key=lambda k: (len(k), k))
        return {k: (total if k == last else 0) for k in current}
    exact = {k: v * total / whole for k, v in current.items()}
    result = {k: math.floor(v) for k, v in exact.items()}
    rest = total - sum(result.values())
    for k in sorted(exact, key=lambda k: (-(exact[k] - result[k]), k))[:rest]:
        result[k] += 1
    return result


def deploy_split(spec: DeploySpec, current: Mapping[str, int], deployed: list[str]) -> dict[str, int]:
    """The trafficSplit a DeployModelRequest sends: the new version ("0") gets ``spec.traffic`` and the
    others keep their shares of the rest, in proportion; or the spec's whole split, whose ids must be
    deployed on the endpoint."""
    if spec.split is not None:
        unknown = [k for k, _ in spec.split if k != NEW and k not in deployed]
        if unknown:
            raise DeployError("--traffic-split", f"{short(unknown[0])} is not deployed on the endpoint",
                              one_of(deployed) or "0=100 only (nothing is deployed there)")
        return dict(spec.split)
    others = {k: int(current.get(k, 0)) for k in deployed}
    if spec.traffic < 100 and not others:
        raise DeployError("--traffic", f"{spec.traffic}%: the endpoint serves nothing else to keep the rest",
                          "100 (the first version on an endpoint takes all its traffic)")
    return {**scaled(others, 100 - spec.traffic), NEW: spec.traffic}


def without(split: Mapping[str, int], deployed_id: str) -> dict[str, int]:
    """The split once ``deployed_id`` is undeployed: its share goes to the others in proportion."""
    rest = {k: int(v) for k, v in split.items() if k != deployed_id}
    return scaled(rest, 100) if rest else {}


# --- the record rollback reads ------------------------------------------------------------------------


def display_name(ref: VersionRef, previous: Mapping[str, int]) -> str:
    """The DeployedModel's display name: the version asked for and the split before this deploy."""
    shares = ",".join(f"{k}={v}" for k, v in sorted(previous.items())) or RECORD_NONE
    name = f"{ref}{RECORD}{shares}"
    if len(name) > MAX_DISPLAY_NAME:
        raise DeployError(
            "--endpoint",
            f"{len(previous)} deployed models share its traffic: the split rollback restores does not fit "
            f"the deployed model's display name ({MAX_DISPLAY_NAME} characters)",
            "undeploy the models that no longer take traffic first",
        )
    return name


def recorded_split(name: str) -> dict[str, int] | None:
    """The previous split a display name records ({} when nothing served before), or None without one."""
    head, found, shares = str(name).partition(RECORD)
    if not found:
        return None
    if shares == RECORD_NONE:
        return {}
    pairs = [item.partition("=") for item in shares.split(",")]
    if not all(eq and k.isdigit() and v.isdigit() for k, eq, v in pairs):
        return None
    return {k: int(v) for k, _, v in pairs}


def rollback_split(record: Mapping[str, int], remaining: list[str]) -> dict[str, int]:
    """The recorded split, limited to the models still deployed, scaled back to 100."""
    kept = {k: v for k, v in record.items() if k in remaining}
    return scaled(kept, 100) if kept else {}


# --- the request ------------------------------------------------------------------------------------------


def deploy_request(
    spec: DeploySpec, ref: VersionRef, parent: str, endpoint: str, split: Mapping[str, int],
    previous: Mapping[str, int],
) -> dict[str, Any]:
    """DeployModelRequest in its REST JSON form (google.cloud.aiplatform_v1.DeployModelRequest)."""
    machine: dict[str, Any] = {"machineType": spec.machine_type}
    if spec.accelerator_type:
        machine.update(acceleratorType=spec.accelerator_type, acceleratorCount=spec.accelerator_count)
    resources: dict[str, Any] = {
        "machineSpec": machine,
        "minReplicaCount": spec.min_replicas,
        "maxReplicaCount": spec.max_replicas,
    }
    if spec.cpu_target is not None:
        resources["autoscalingMetricSpecs"] = [{"metricName": CPU_METRIC, "target": spec.cpu_target}]
    return {
        "endpoint": endpoint,
        "deployedModel": {
            "model": ref.version_name(parent),
            "displayName": display_name(ref, previous),
            "dedicatedResources": resources,
        },
        "trafficSplit": dict(split),
    }


# --- what an endpoint serves ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Serving:
    """One DeployedModel of an endpoint, as read from Endpoint.deployedModels."""

    id: str
    model: str  # the model's resource name, without a version
    version: str
    display_name: str
    create_time: str


def serving(endpoint: Mapping[str, Any]) -> list[Serving]:
    """The endpoint's deployed models, oldest first."""
    found = []
    for d in endpoint.get("deployedModels") or []:
        model = str(d.get("model", ""))
        found.append(Serving(str(d.get("id", "")), re.sub(r"@.*$", "", model),
                             str(d.get("modelVersionId", "")), str(d.get("displayName", "")),
                             str(d.get("createTime", ""))))
    return sorted(found, key=lambda s: (s.create_time, s.id))


def traffic(endpoint: Mapping[str, Any]) -> dict[str, int]:
    return {str(k): int(v) for k, v in (endpoint.get("trafficSplit") or {}).items()}


# --- a definition's deploy block: after the registry gate, the gated alias -------------------------------

DEPLOY_FIELD = "deploy"
BLOCK_ONLY = ("alias", "instance")


@dataclass(frozen=True)
class DeployPlan:
    """What a definition's deploy block asks for once its model is registered: ``ref`` (the registry
    model at the gated alias) served as ``spec``, smoke-tested with ``instance`` (None: no smoke prediction).
    ``resource`` is the endpoint's resource name, from the environment's endpoints (jobs.api)."""

    ref: VersionRef
    spec: DeploySpec
    instance: Any = None
    resource: str = ""


def parse_block(raw: Any, model_id: str, aliases: tuple[str, ...]) -> DeployPlan:
    """The deploy block (references resolved) -> DeployPlan; DeployError names ``deploy.<field>``."""
    if not isinstance(raw, dict):
        raise DeployError(DEPLOY_FIELD, "must be a mapping", f"{{endpoint: <name>, ...}} with fields "
                                                            f"{one_of(BLOCK_ONLY + FIELDS)}")
    if not aliases:
        raise DeployError(DEPLOY_FIELD, "the registry block gates no alias to name the version to serve",
                          "registry.aliases: [production] beside it")
    alias = raw.get("alias", aliases[0])
    if alias not in aliases:
        raise DeployError(f"{DEPLOY_FIELD}.alias", f"{short(alias)} is not an alias the registry gate moves",
                          one_of(aliases))
    settings = {k: v for k, v in raw.items() if k not in BLOCK_ONLY}
    spec = parse_settings(settings, {k: f"{DEPLOY_FIELD}.{k}" for k in (*settings, *FIELDS)})
    return DeployPlan(VersionRef(model_id, alias), spec, raw.get("instance"))
