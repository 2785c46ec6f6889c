"""The Model Registry rule both registry writers follow, written once: `run_job.py` (jobs/cloud/register.py,
with jobs/definition/model_registry.py) and the scheduled workflow (infra/schedules.py generates its Cloud
Workflows program). Pure data and stdlib: which labels identify a version, how a metric becomes a label, the
evaluation gate's ordered rules, and which alias carries `default` along.

- Identity: a version is labelled ``vertex_job=<job id>``, the last part of the resource name of the job that
  trained it (customJobs/<id>, hyperparameterTuningJobs/<id>): both writers know the job, so either finds
  the other's version (a `--follow` of a scheduled run reuses the workflow's version, and the reverse). The
  key needs no quoting in ListModelVersions' filter (a hyphen might parse as a minus).
- Metric: ``<metric id as a label key>=<value as a label value>``; the value is the number's text as
  Workflows' ``string()`` writes it (a double's shortest round-trip form, an integer's digits), lowercased,
  with each other character than [a-z0-9_-] as ``_`` (0.8712 -> 0_8712); no label when that is over 63.
- The gate (`GATE`): the first rule that holds decides. A tie moves the alias to the newer version; a newer
  holder keeps it whatever the metric (a late registration never takes an alias back).
- `default`: the alias Vertex AI gives a model's first version and requires on exactly one version. It moves
  with the first of the definition's aliases, in the same call, so a reference without ``@alias`` serves the
  gated best.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

# --- limits (Vertex AI's) ---------------------------------------------------------------------------------

# Model.labels: at most 64 per resource (Google Cloud's label rules), keys and values at most 63 characters.
MAX_LABELS = 64
MAX_LABEL_CHARS = 63
# Model.version_aliases: "[a-z][a-zA-Z0-9-]{0,126}[a-z0-9]" (so never a version id, a number).
ALIAS = re.compile(r"[a-z][a-zA-Z0-9-]{0,126}[a-z0-9]")
ALIAS_RULE = "2-128 letters, digits or -, starting with a lowercase letter and ending with one or a digit"
# Vertex AI documents no count of aliases; each is one gate, one lookup and maybe one call per registration.
MAX_ALIASES = 10
DEFAULT_ALIAS = "default"

# --- a version's identity ---------------------------------------------------------------------------------

JOB_LABEL = "vertex_job"
TRIAL_LABEL = "vertex_trial"  # a study's version: the trial it came from
# A job's resource name with this removed (Python's re and Workflows' RE2 alike) is its id.
JOB_NAME_PREFIX = "^.*/"
# ListModelVersions' filter for a label (keys here need no quoting; the value is quoted).
LABEL_FILTER = 'labels.{key}="{value}"'
# Characters a label key or value may not hold, each written as "_".
NOT_LABEL_CHARS = "[^a-z0-9_-]"


def job_label_value(resource_name: str) -> str:
    """The vertex_job label of a job: its resource name's last part, lowercased."""
    return re.sub(JOB_NAME_PREFIX, "", resource_name).lower()


def version_filter(job_id: str) -> str:
    return LABEL_FILTER.format(key=JOB_LABEL, value=job_id)


def writer_labels(metric: str) -> tuple[str, ...]:
    """The label keys the writers set on a version: a definition's own labels may not use them."""
    return (JOB_LABEL, TRIAL_LABEL, metric_label_key(metric))


def metric_label_key(metric: str) -> str:
    """A metric id as a label key: lowercase, other characters as _, a letter first, at most 63."""
    key = re.sub(NOT_LABEL_CHARS, "_", metric.lower())
    return (key if key[:1].isalpha() else f"m_{key}")[:MAX_LABEL_CHARS]


def number_text(value: int | float) -> str:
    """Workflows' string() of a number read from JSON: an integer's digits, a double's shortest form."""
    return str(value) if isinstance(value, int) else repr(float(value))


def metric_label_value(value: int | float) -> str | None:
    """The metric's label value (0.8712 -> 0_8712, 1e-05 -> 1e-05), or None when it would be over 63."""
    text = re.sub(NOT_LABEL_CHARS, "_", number_text(value).lower())
    return text if len(text) <= MAX_LABEL_CHARS else None


# What a version's description says; the writers fill in the job (a study's adds ", trial <id>").
DESCRIPTION = "trained by {display_name} ({job_name}{trial})"


def version_description(job_name: str, display_name: str, trial_id: str | None = None) -> str:
    trial = f", trial {trial_id}" if trial_id is not None else ""
    return DESCRIPTION.format(display_name=display_name, job_name=job_name, trial=trial)


# --- the evaluation gate ----------------------------------------------------------------------------------

MOVED, KEPT, HELD = "moved", "kept", "held"


@dataclass(frozen=True)
class GateRule:
    name: str  # also the workflow's step name
    outcome: str  # MOVED, KEPT or HELD
    reads_holder: bool  # needs the holder's metric (read from its metrics.json only then)
    when: str


GATE = (
    GateRule("already_held", HELD, False, "the version holds the alias already"),
    GateRule("unknown_value", KEPT, False, "the version's metric is unknown (not even a free alias)"),
    GateRule("first_holder", MOVED, False, "no version holds the alias"),
    GateRule("newer_holder", KEPT, False, "a newer version holds it, whatever the metrics"),
    GateRule("unknown_holder_value", KEPT, True, "the holder's metric is unknown"),
    GateRule("no_worse", MOVED, True, "the metric is no worse than the holder's by the goal (a tie moves)"),
    GateRule("worse", KEPT, True, "otherwise: the metric is worse than the holder's"),
)


def no_worse(goal: str, value: float, holder_value: float) -> bool:
    return value >= holder_value if goal == "MAXIMIZE" else value <= holder_value


def decide(
    goal: str,
    version_id: str,
    value: float | None,
    holder_id: str | None,
    holder_value: Callable[[], float | None],
) -> GateRule:
    """The GATE rule for an alias: ``holder_id`` holds it now (None: nobody), ``holder_value`` reads the
    holder's metric (called at most once, and only when a rule needs it)."""
    read: list[float | None] = []

    def held() -> float | None:
        if not read:
            read.append(holder_value())
        return read[0]

    tests = {
        "already_held": lambda: holder_id == version_id,
        "unknown_value": lambda: value is None,
        "first_holder": lambda: holder_id is None,
        "newer_holder": lambda: int(holder_id) > int(version_id),
        "unknown_holder_value": lambda: held() is None,
        "no_worse": lambda: no_worse(goal, value, held()),
        "worse": lambda: True,
    }
    return next(rule for rule in GATE if tests[rule.name]())


def aliases_to_merge(alias: str, aliases: tuple[str, ...]) -> list[str]:
    """What MergeVersionAliases sends when ``alias`` moves: the first alias takes `default` along."""
    return [alias, DEFAULT_ALIAS] if aliases and alias == aliases[0] else [alias]
