"""A definition's Model Registry block, and the pure rules of registering a job's model as a version.

    registry:
      model: recommender                              # the registry Model's id and display name
      aliases: [production]                           # moved only by the evaluation gate
      labels: {team: ml}
      metric: {metricId: recall_at_k, goal: MAXIMIZE} # a tuning job's default: its studySpec metric
      serving: trainer                                # the cpu trainer image running python -m serving

``compile_job`` parses it into ``CompiledJob.registry`` (a RegistrySpec); ``jobs.cloud.register`` executes it
after the job ends and the scheduled workflow (infra/) reads the same spec. The registry rule itself (the
version's identity and metric labels, the gate's rules, `default`) is common.model_registry's, which the
workflow's generator follows too. Everything here is pure and table-tested: the block's rules (Vertex AI's
model id, alias and label rules), where a job's model lands, the best trial of a study, the version's labels,
the UploadModelRequest body (--dry-run prints it with placeholders), reading a metric out of metrics.json,
and the evaluation gate's decision in words.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

# The rule both registry writers follow (this executor and the scheduled workflow): one spelling of it.
from common.model_registry import (
    ALIAS,
    ALIAS_RULE,
    DEFAULT_ALIAS,
    JOB_LABEL,
    MAX_ALIASES,
    MAX_LABELS,
    MOVED,
    TRIAL_LABEL,
    decide,
    metric_label_key,
    writer_labels,
)

# Label rules are the Google Cloud ones infra's config already checks: one spelling of them.
from infra.config import LABEL_KEY, LABEL_VALUE
from jobs.definition.body import GOALS, final_metric, job_spec, join
from jobs.definition.errors import FieldError, one_of, short
from trainer.contract import HEALTH_ROUTE as HEALTH_ROUTE_VAR
from trainer.contract import HTTP_PORT, METRICS_FILE, SERVE_MODULE, SERVING_DEFAULTS
from trainer.contract import PREDICT_ROUTE as PREDICT_ROUTE_VAR

REGISTRY_FIELD = "registry"
FIELDS = ("model", "aliases", "labels", "metric", "serving")
# UploadModelRequest.model_id: up to 63 characters of [a-z0-9_-], not starting with a digit or a hyphen.
MODEL_ID = re.compile(r"[a-z_][a-z0-9_-]{0,62}")
MODEL_ID_RULE = "1-63 lowercase letters, digits, _ or -, starting with a letter or _"
LABEL_RULE = "lowercase letters, digits, _ and -, at most 63"
# The serving container `serving: trainer` names: the trainer image's cpu variant running the repo's server.
SERVING_TRAINER = "trainer"
TRAINER_SERVING_IMAGE = "${infra.trainer_image}:cpu-${job.image_tag}"
# The server and its defaults are the trainer's contract (serving listens where these say).
SERVER_COMMAND = ("python", "-m", SERVE_MODULE)
SERVING_PORT = int(SERVING_DEFAULTS[HTTP_PORT])
PREDICT_ROUTE = SERVING_DEFAULTS[PREDICT_ROUTE_VAR]
HEALTH_ROUTE = SERVING_DEFAULTS[HEALTH_ROUTE_VAR]
# Vertex AI's prebuilt prediction images, e.g. us-docker.pkg.dev/vertex-ai/prediction/tf2-cpu.2-15:latest.
PREBUILT_PREDICTION = re.compile(
    r"(?:[a-z]+-docker\.pkg\.dev/vertex-ai/prediction|gcr\.io/cloud-aiplatform/prediction)/"
    r"(?P<framework>[a-z0-9]+?)(?:-(?:cpu|gpu|tpu))?\.(?P<major>\d+)-(?P<minor>\d+)(?::[\w.-]+)?"
)
# metrics.json holds the history and the data scans' report too; a file far over this is not the trainer's.
MAX_METRICS_BYTES = 4 << 20
# What --dry-run prints where only the finished job knows the value.
JOB_ID_PLACEHOLDER = "<job id>"
TRIAL_PLACEHOLDER = "<best trial id>"
VALUE_PLACEHOLDER = "<metrics.json value, e.g. 0_8712>"


class RegistryError(FieldError):
    """A registry block the rules refuse, at its path in the file (registry.aliases.0, ...)."""


@dataclass(frozen=True)
class RegistrySpec:
    """What registering a job's model means: the registry model, the gate's metric, the serving container."""

    model_id: str
    display_name: str
    aliases: tuple[str, ...]
    labels: dict[str, str]
    metric: str
    goal: str  # MAXIMIZE | MINIMIZE
    container_spec: dict[str, Any]  # a ModelContainerSpec in its REST JSON form
    serving: str = SERVING_TRAINER

    def model_name(self, parent: str) -> str:
        """projects/<p>/locations/<r>/models/<model id>: the registry model every version goes under."""
        return f"{parent}/models/{self.model_id}"

    @property
    def serving_image(self) -> str:
        return str(self.container_spec.get("imageUri", ""))

    def describe(self) -> str:
        """The plan's words for the gate: 'gate alias production on recall_at_k MAXIMIZE'."""
        if not self.aliases:
            return f"no alias to move (metric {self.metric} {self.goal} labels the version)"
        return (
            f"gate alias {', '.join(self.aliases)} on {self.metric} {self.goal} ({DEFAULT_ALIAS} moves with "
            f"{self.aliases[0]})"
        )


def trainer_container_spec(image: str) -> dict[str, Any]:
    """The ModelContainerSpec of ``serving: trainer`` on ``image`` (the resolved cpu trainer image)."""
    return {
        "imageUri": image,
        "command": list(SERVER_COMMAND),
        "ports": [{"containerPort": SERVING_PORT}],
        "predictRoute": PREDICT_ROUTE,
        "healthRoute": HEALTH_ROUTE,
    }


def parse_registry(
    raw: Any, *, study_metric: tuple[str, str] | None, runs_study: bool, serving_image: str
) -> RegistrySpec:
    """The block as written (references resolved) -> RegistrySpec; RegistryError names the field.

    ``study_metric``: a tuning job's (metricId, goal), when its studySpec names one; ``serving_image``: the
    resolved ``${infra.trainer_image}:cpu-${job.image_tag}``.
    """
    if not isinstance(raw, dict):
        raise RegistryError(
            REGISTRY_FIELD, "must be a mapping", f"{{model: <id>, ...}} with fields {one_of(FIELDS)}"
        )
    for key in raw:
        if key not in FIELDS:
            raise RegistryError(join(REGISTRY_FIELD, key), f"unknown field {short(key)}", one_of(FIELDS))
    model_id = _model_id(raw.get("model"))
    aliases = _aliases(raw.get("aliases", []))
    metric, goal = _metric(raw.get("metric"), study_metric, runs_study)
    labels = _labels(raw.get("labels", {}), metric)
    serving = _serving(raw.get("serving", SERVING_TRAINER))
    return RegistrySpec(
        model_id=model_id,
        display_name=model_id,
        aliases=aliases,
        labels=labels,
        metric=metric,
        goal=goal,
        container_spec=trainer_container_spec(serving_image),
        serving=serving,
    )


def _model_id(value: Any) -> str:
    path = join(REGISTRY_FIELD, "model")
    if value is None:
        raise RegistryError(path, "missing", f"the registry model's id: {MODEL_ID_RULE}")
    if not isinstance(value, str) or not MODEL_ID.fullmatch(value):
        raise RegistryError(path, f"invalid model id {short(value)}", MODEL_ID_RULE)
    return value


def _aliases(value: Any) -> tuple[str, ...]:
    path = join(REGISTRY_FIELD, "aliases")
    if not isinstance(value, list):
        raise RegistryError(path, "must be a list", "[production], or leave it out")
    if len(value) > MAX_ALIASES:
        raise RegistryError(path, f"{len(value)} aliases", f"at most {MAX_ALIASES}")
    seen: list[str] = []
    for i, alias in enumerate(value):
        where = join(path, i)
        if alias == DEFAULT_ALIAS:
            raise RegistryError(
                where,
                f"{short(alias)} is the alias Vertex AI keeps on exactly one version; it moves with the "
                "first alias listed, never on its own",
                "another alias, e.g. production",
            )
        if not isinstance(alias, str) or not ALIAS.fullmatch(alias):
            raise RegistryError(where, f"{short(alias)} is not a version alias", ALIAS_RULE)
        if alias in seen:
            raise RegistryError(where, f"{short(alias)} is listed twice", "each alias once")
        seen.append(alias)
    return tuple(seen)


def _metric(value: Any, study_metric: tuple[str, str] | None, runs_study: bool) -> tuple[str, str]:
    path = join(REGISTRY_FIELD, "metric")
    if value is None:
        if runs_study:
            # A malformed studySpec leaves it empty; validation reports the studySpec itself.
            return study_metric or ("", "")
        raise RegistryError(
            path,
            "missing: a CustomJob's versions are compared by a metric the trainer writes to metrics.json",
            "{metricId: <metric>, goal: MAXIMIZE|MINIMIZE}",
        )
    if not isinstance(value, dict) or set(value) - {"metricId", "goal"}:
        raise RegistryError(
            path, "must be a mapping of metricId and goal", "{metricId: <metric>, goal: MAXIMIZE}"
        )
    metric, goal = value.get("metricId"), value.get("goal")
    if not isinstance(metric, str) or not metric:
        raise RegistryError(join(path, "metricId"), "missing", "a metric the trainer writes to metrics.json")
    if goal not in GOALS:
        raise RegistryError(join(path, "goal"), f"goal is {short(goal)}", one_of(GOALS))
    if runs_study and study_metric and (metric, goal) != study_metric:
        raise RegistryError(
            join(path, "metricId") if metric != study_metric[0] else join(path, "goal"),
            f"{metric} {goal} differs from the study's {study_metric[0]} {study_metric[1]}: a tuning job "
            "registers its best trial by the metric the study optimized",
            f"metricId: {study_metric[0]}, goal: {study_metric[1]}, or leave metric out",
        )
    return metric, goal


def _labels(value: Any, metric: str) -> dict[str, str]:
    path = join(REGISTRY_FIELD, "labels")
    if not isinstance(value, dict):
        raise RegistryError(path, "must be a mapping", "key: value pairs")
    reserved = writer_labels(metric)
    room = MAX_LABELS - len(reserved)
    if len(value) > room:
        raise RegistryError(
            path, f"{len(value)} labels", f"at most {room} (every version also gets {', '.join(reserved)})"
        )
    labels = {}
    for key, item in value.items():
        where = join(path, key)
        if key in reserved:
            raise RegistryError(where, f"{short(key)} is set on every version by the writers", "another key")
        if not isinstance(key, str) or not LABEL_KEY.fullmatch(key):
            raise RegistryError(where, "invalid label key", f"{LABEL_RULE}, starting with a letter")
        if isinstance(item, bool) or not isinstance(item, str | int) or not LABEL_VALUE.fullmatch(str(item)):
            raise RegistryError(where, f"invalid label value {short(item)}", LABEL_RULE)
        labels[key] = str(item)
    return labels


def _serving(value: Any) -> str:
    path = join(REGISTRY_FIELD, "serving")
    allowed = (
        f"{SERVING_TRAINER} (the trainer image's cpu variant running python -m serving, on the "
        "TensorFlow and Keras the model was trained with)"
    )
    if value == SERVING_TRAINER:
        return value
    found = PREBUILT_PREDICTION.fullmatch(value) if isinstance(value, str) else None
    if found and found["framework"] in ("tf", "tf2"):
        version = f"{found['major']}.{found['minor']}"
        raise RegistryError(
            path,
            f"Vertex AI's prebuilt TensorFlow {version} prediction image (the line ends at 2.15 and is no "
            "longer updated) serves serving_default only, on a TensorFlow this trainer (2.21) is not "
            "tested on",
            allowed,
        )
    if found:
        framework = found["framework"]
        raise RegistryError(
            path, f"a prebuilt {framework} prediction image cannot load a TensorFlow SavedModel", allowed
        )
    raise RegistryError(
        path,
        f"{short(value)}: only the trainer's own server is known to serve its export (the signatures, "
        "TensorFlow 2.21, Keras 3); another image is not accepted",
        allowed,
    )


# --- a finished job's model -------------------------------------------------------------------------------


def output_prefix(body: Mapping[str, Any], kind: str) -> str:
    """The job's baseOutputDirectory.outputUriPrefix without a trailing /; "" when it has none."""
    spec = job_spec(dict(body), kind) or {}
    prefix = (spec.get("baseOutputDirectory") or {}).get("outputUriPrefix") or ""
    return str(prefix).rstrip("/")


def model_dir(prefix: str, trial_id: str | None = None) -> str:
    """Where Vertex AI's AIP_MODEL_DIR points: <prefix>/model, or <prefix>/<trial id>/model for a trial."""
    return f"{prefix}/{trial_id}/model" if trial_id is not None else f"{prefix}/model"


def metrics_uri(artifact_uri: str) -> str:
    return f"{artifact_uri.rstrip('/')}/{METRICS_FILE}"


def best_trial(
    trials: Any, metric: str, goal: str, *, succeeded_only: bool = True
) -> tuple[str, float] | None:
    """(trial id, value) of the best trial by its final measurement of ``metric`` (ties: the earliest)."""
    sign = -1.0 if goal == "MINIMIZE" else 1.0
    best: tuple[float, int, str, float] | None = None
    for order, trial in enumerate(trials or []):
        if not isinstance(trial, dict) or (succeeded_only and trial.get("state") != "SUCCEEDED"):
            continue
        value = final_metric(trial, metric)
        if value is not None and math.isfinite(value):
            key = (sign * value, -order, str(trial.get("id", "?")), value)
            best = key if best is None or key > best else best
    return None if best is None else (best[2], best[3])


# --- the version ------------------------------------------------------------------------------------------


def version_labels(
    spec: RegistrySpec, job_id: str, *, trial_id: str | None = None, metric_value: str | None = None
) -> dict[str, str]:
    """The block's labels, the job (and trial) the version came from, and its metric as a label value."""
    labels = {**spec.labels, JOB_LABEL: job_id}
    if trial_id is not None:
        labels[TRIAL_LABEL] = trial_id
    if metric_value is not None:
        labels[metric_label_key(spec.metric)] = metric_value
    return labels


def upload_request(
    spec: RegistrySpec,
    parent: str,
    *,
    artifact_uri: str,
    labels: Mapping[str, str],
    description: str,
    model_exists: bool,
    encryption: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """UploadModelRequest in its JSON form: a new model (modelId) or a new version of it (parentModel).

    Never any versionAliases: an alias moves only after the gate (MergeVersionAliases), so no version holds
    one it has not earned, whatever happens between the upload and the gate.
    """
    request: dict[str, Any] = {"parent": parent}
    if model_exists:
        request["parentModel"] = spec.model_name(parent)
    else:
        request["modelId"] = spec.model_id
    request["model"] = {
        "displayName": spec.display_name,
        "versionDescription": description,
        "artifactUri": artifact_uri,
        "containerSpec": json.loads(json.dumps(spec.container_spec)),
        "labels": dict(labels),
    }
    if encryption:  # encrypted like the job that trained it
        request["model"]["encryptionSpec"] = dict(encryption)
    return request


# --- the evaluation gate ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reading:
    """A version's metric as read from its metrics.json: the value, or why there is none."""

    value: float | None  # as metrics.json has it: an integer stays one (its label is its digits)
    problem: str = ""


def read_metric(data: bytes | None, uri: str, metric: str) -> Reading:
    """``metrics.json["eval"][metric]`` of the bytes read from ``uri`` (None: the file does not exist)."""
    if data is None:
        return Reading(None, f"{uri} does not exist")
    if len(data) > MAX_METRICS_BYTES:
        return Reading(None, f"{uri} is over {MAX_METRICS_BYTES >> 20} MiB")
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return Reading(None, f"{uri} is not JSON")
    evaluation = document.get("eval") if isinstance(document, dict) else None
    if not isinstance(evaluation, dict):
        return Reading(None, f"{uri} has no eval mapping")
    value = evaluation.get(metric)
    if value is None:
        return Reading(None, f"{uri} has no eval.{metric} (it has {one_of(sorted(evaluation)) or 'none'})")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return Reading(None, f"{uri} has eval.{metric} = {short(value)}, not a finite number")
    return Reading(value)


@dataclass(frozen=True)
class Decision:
    rule: str  # the common.model_registry.GATE rule that decided
    move: bool
    why: str


def gate(
    metric: str,
    goal: str,
    version_id: str,
    new: Reading,
    holder_id: str | None,
    holder: Callable[[], Reading],
) -> Decision:
    """Whether an alias moves to version ``version_id`` (``new`` its metric) from ``holder_id`` (None: no
    version holds it), by the GATE rules both registry writers share; ``holder`` reads the holder's metric,
    only when a rule needs it."""
    held: list[Reading] = []

    def holder_value() -> float | None:
        held.append(holder())
        return held[0].value

    rule = decide(goal, version_id, new.value, holder_id, holder_value)
    match rule.name:
        case "already_held":
            why = f"version {version_id} holds it already"
        case "unknown_value":
            why = f"the new version's metric is unknown: {new.problem}"
        case "first_holder":
            why = f"{metric} {new.value:g}; no version held it"
        case "newer_holder":
            why = f"version {holder_id}, newer, holds it"
        case "unknown_holder_value":
            why = f"the holder's metric is unknown: {held[0].problem}"
        case _:
            relation = "no worse than" if rule.outcome == MOVED else "worse than"
            why = f"{metric} {new.value:g} is {relation} the holder's {held[0].value:g} ({goal})"
    return Decision(rule.name, rule.outcome == MOVED, why)
