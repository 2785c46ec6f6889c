"""A tuning job's study, parsed once into typed values: the one home of the StudySpec rules.

Three doors read a study, and all three apply these rules and no others of their own: validation
(``run_job.py --dry-run``, via ``validate``), the local runner's planning (``local.spec.parse_tuning_job``)
and the legacy converter (``legacy.convert``, after mapping a legacy ``hyperparameters`` onto a StudySpec).
A refusal is a ``StudyError`` addressed by its body path (``studySpec.parameters.0.doubleValueSpec.minValue``,
``maxTrialCount``), with the same problem and allowed text whichever door met it; each door names the field
in its own terms (the definition's line, the local body path, the legacy field).

Where the copies this replaced disagreed, the rule kept is:
- an INTEGER range needs minValue < maxValue (validation and legacy refused min == max, --local ran a
  one-value study): a range of one value tunes nothing, and the trial count would be spent on one point;
- maxTrialCount is 1..1000 everywhere (only --local capped it): one Vizier study holds at most 1,000 trials,
  so a bigger study passed --dry-run only to fail once submitted;
- maxFailedTrialCount is 0..maxTrialCount everywhere (--local and legacy took any count >= 0): more allowed
  failures than trials says nothing;
- exactly one metric (validation took several, which a HyperparameterTuningJob does not optimize together);
- DISCRETE values on a log scale must be > 0 and CATEGORICAL values distinct (only validation checked).

Pure and cheap to import: no I/O, no SDK.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from jobs.definition.body import GOALS, STUDY_FIELD, VALUE_SPECS, join
from jobs.definition.errors import FieldError, one_of, short

# The most trials one study holds. Vertex AI's tuning jobs run on Vizier, whose quota page documents "Maximum
# number of trials in a study: 1,000" (AI Platform Vizier: https://cloud.google.com/ai-platform/optimizer/docs/
# quotas); the API reference gives no other bound for maxTrialCount.
MAX_TRIALS = 1000
ALGORITHMS = ("ALGORITHM_UNSPECIFIED", "GRID_SEARCH", "RANDOM_SEARCH")
LINEAR = "UNIT_LINEAR_SCALE"
LOG_SCALES = ("UNIT_LOG_SCALE", "UNIT_REVERSE_LOG_SCALE")
SELECTIONS = ("LAST_MEASUREMENT", "BEST_MEASUREMENT")
# The body's value spec field -> the ParameterSpec type it makes.
TYPE_OF_SPEC = {spec_name: kind for kind, spec_name in VALUE_SPECS.items()}


class StudyError(FieldError):
    """A study refused: ``path`` is the body path of the field, ``problem`` and ``allowed`` the words."""


@dataclass(frozen=True)
class Parameter:
    parameter_id: str
    kind: str  # DOUBLE | INTEGER | DISCRETE | CATEGORICAL
    scale: str = LINEAR
    low: float = 0.0
    high: float = 0.0
    values: tuple[Any, ...] = ()
    path: str = ""  # the ParameterSpec's body path
    parent: str = ""  # a conditional parameter's parent (its parameterId); "" at the top level
    parent_values: tuple[str, ...] = ()  # the parent's values that enable it (parent*Values), as strings
    has_children: bool = False  # has conditionalParameterSpecs of its own

    @property
    def spec_field(self) -> str:
        return VALUE_SPECS[self.kind]


@dataclass(frozen=True)
class Study:
    metric_id: str
    goal: str  # MAXIMIZE | MINIMIZE
    parameters: tuple[Parameter, ...]  # top level, in order
    tuned: tuple[Parameter, ...]  # every tuned parameter, conditional ones included (each becomes a flag)
    algorithm: str
    measurement_selection: str  # LAST_MEASUREMENT | BEST_MEASUREMENT
    max_trials: int
    parallel_trials: int
    max_failed_trials: int  # 0: "Vertex AI decides"
    raw: dict[str, Any] = field(default_factory=dict)  # the studySpec as given


def parse_study(body: dict[str, Any]) -> Study:
    """The study of a HyperparameterTuningJob body (camelCase REST), or a StudyError."""
    max_trials = _count(body, "maxTrialCount", 1)
    parallel = _count(body, "parallelTrialCount", 1)
    failures = _count(body, "maxFailedTrialCount", 0)
    if not 1 <= max_trials <= MAX_TRIALS:
        most = f"1..{MAX_TRIALS} (the most trials one Vizier study holds)"
        allowed = "an integer >= 1" if max_trials < 1 else most
        raise StudyError("maxTrialCount", f"maxTrialCount is {max_trials}", allowed)
    if parallel < 1:
        raise StudyError("parallelTrialCount", f"parallelTrialCount is {parallel}", "an integer >= 1")
    if parallel > max_trials:
        raise StudyError(
            "parallelTrialCount",
            f"{parallel} parallel trials but maxTrialCount is {max_trials}",
            f"1..{max_trials}",
        )
    if failures < 0 or failures > max_trials:
        raise StudyError("maxFailedTrialCount", f"maxFailedTrialCount is {failures}", f"0..{max_trials}")
    spec = body.get(STUDY_FIELD)
    if not isinstance(spec, dict):
        raise StudyError(STUDY_FIELD, "missing", "a StudySpec with metrics and parameters")
    metric_id, goal = _metric(spec)
    algorithm = _enum(spec, "algorithm", ALGORITHMS, "ALGORITHM_UNSPECIFIED", "ALGORITHM_UNSPECIFIED")
    selection = _enum(
        spec,
        "measurementSelectionType",
        SELECTIONS,
        "LAST_MEASUREMENT",
        "MEASUREMENT_SELECTION_TYPE_UNSPECIFIED",
    )
    raw_parameters = spec.get("parameters") or []
    where = join(STUDY_FIELD, "parameters")
    if not isinstance(raw_parameters, list) or not raw_parameters:
        raise StudyError(where, "no parameters to tune", "one or more ParameterSpecs")
    tuned: list[Parameter] = []
    top = tuple(_collect(raw, join(where, i), tuned) for i, raw in enumerate(raw_parameters))
    seen: set[str] = set()
    for p in tuned:
        if p.parameter_id in seen:
            raise StudyError(
                join(p.path, "parameterId"),
                f"parameter {short(p.parameter_id)} is tuned twice",
                "unique parameterIds",
            )
        seen.add(p.parameter_id)
        if algorithm == "GRID_SEARCH" and p.kind == "DOUBLE":
            raise StudyError(
                join(p.path, p.spec_field),
                f"GRID_SEARCH cannot enumerate the DOUBLE parameter {short(p.parameter_id)}",
                "integerValueSpec, discreteValueSpec or categoricalValueSpec with GRID_SEARCH",
            )
    return Study(
        metric_id=metric_id,
        goal=goal,
        parameters=top,
        tuned=tuple(tuned),
        algorithm=algorithm,
        measurement_selection=selection,
        max_trials=max_trials,
        parallel_trials=parallel,
        max_failed_trials=failures,
        raw=spec,
    )


def grid_points(params: tuple[Parameter, ...]) -> int:
    """How many points GRID_SEARCH visits: every INTEGER in [min, max] times every listed value, counted."""
    return math.prod(int(p.high) - int(p.low) + 1 if p.kind == "INTEGER" else len(p.values) for p in params)


def _count(body: dict[str, Any], key: str, default: int) -> int:
    value = body.get(key, default)
    # int64 fields arrive as JSON strings (MessageToJson, legacy configs); YAML written by hand gives ints.
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise StudyError(key, f"{key} is {short(value)}", "an integer")
    return value


def _enum(spec: dict[str, Any], key: str, allowed: tuple[str, ...], default: str, unspecified: str) -> str:
    value = spec.get(key) or default
    value = default if value == unspecified else value
    if value not in allowed:
        raise StudyError(join(STUDY_FIELD, key), f"{key} is {short(value)}", one_of(allowed))
    return str(value)


def _metric(spec: dict[str, Any]) -> tuple[str, str]:
    metrics = spec.get("metrics") or []
    path = join(STUDY_FIELD, "metrics")
    if not isinstance(metrics, list) or len(metrics) != 1:
        problem = "no metric to optimize" if not metrics else f"{len(metrics)} metrics to optimize"
        raise StudyError(path, problem, "one metric: {metricId, goal}")
    metric = metrics[0] if isinstance(metrics[0], dict) else {}
    if not metric.get("metricId"):
        raise StudyError(join(path, 0, "metricId"), "missing", "a metric tag the trainer reports")
    if metric.get("goal") not in GOALS:
        raise StudyError(join(path, 0, "goal"), f"goal is {metric.get('goal', 'unset')}", one_of(GOALS))
    return str(metric["metricId"]), str(metric["goal"])


# A ConditionalParameterSpec's fields naming the parent's values that enable it, one per parent type.
PARENT_VALUES = ("parentCategoricalValues", "parentDiscreteValues", "parentIntValues")


def _collect(raw: Any, path: str, tuned: list[Parameter], parent: str = "", parent_values=()) -> Parameter:
    """The parameter at ``path`` (appended to ``tuned``, then its conditional children, depth first)."""
    parameter = _parameter(raw, path, parent, parent_values)
    tuned.append(parameter)
    for j, child in enumerate(raw.get("conditionalParameterSpecs") or []):
        if isinstance(child, dict):
            child_path = join(path, "conditionalParameterSpecs", j, "parameterSpec")
            enabling = next((child[k] for k in PARENT_VALUES if isinstance(child.get(k), dict)), {})
            values = tuple(str(v) for v in enabling.get("values") or [])
            _collect(child.get("parameterSpec") or {}, child_path, tuned, parameter.parameter_id, values)
    return parameter


def _parameter(raw: Any, path: str, parent: str, parent_values: tuple[str, ...]) -> Parameter:
    if not isinstance(raw, dict) or not raw.get("parameterId"):
        raise StudyError(join(path, "parameterId"), "missing", "the trainer flag name without '--'")
    pid = str(raw["parameterId"])
    specs = [k for k in TYPE_OF_SPEC if k in raw]
    if len(specs) != 1:
        raise StudyError(
            path, f"parameter {short(pid)} has {len(specs)} value specs", one_of(VALUE_SPECS.values())
        )
    spec_name = specs[0]
    kind, spec, spec_path = TYPE_OF_SPEC[spec_name], raw[spec_name] or {}, join(path, spec_name)
    if not isinstance(spec, dict):
        raise StudyError(spec_path, f"expected an object, got {short(spec)}", f"a {spec_name}")
    scale = str(raw.get("scaleType") or LINEAR)
    scale = LINEAR if scale == "SCALE_TYPE_UNSPECIFIED" else scale
    common = {
        "path": path,
        "parent": parent,
        "parent_values": parent_values,
        "has_children": bool(raw.get("conditionalParameterSpecs")),
    }
    if kind in ("DOUBLE", "INTEGER"):
        if "minValue" not in spec or "maxValue" not in spec:
            raise StudyError(spec_path, "needs minValue and maxValue", "minValue < maxValue")
        low = _number(spec["minValue"], join(spec_path, "minValue"), kind == "INTEGER")
        high = _number(spec["maxValue"], join(spec_path, "maxValue"), kind == "INTEGER")
        if low >= high:
            raise StudyError(
                join(spec_path, "minValue"), f"minValue {low} >= maxValue {high}", "minValue < maxValue"
            )
        if scale in LOG_SCALES and low <= 0:
            raise StudyError(
                join(spec_path, "minValue"),
                f"{scale} with minValue {low}",
                "minValue > 0 on a log scale, or UNIT_LINEAR_SCALE",
            )
        return Parameter(pid, kind, scale, low, high, **common)
    values = spec.get("values")
    values_path = join(spec_path, "values")
    if kind == "DISCRETE":
        if not isinstance(values, list) or not values:
            raise StudyError(values_path, "no values", "one or more numbers, increasing")
        numbers = tuple(_number(v, join(values_path, k), False) for k, v in enumerate(values))
        bad = next((k for k in range(1, len(numbers)) if numbers[k] <= numbers[k - 1]), None)
        if bad is not None:
            raise StudyError(
                join(values_path, bad),
                f"{numbers[bad]:g} after {numbers[bad - 1]:g}: values are not strictly increasing",
                "strictly increasing numbers",
            )
        if scale in LOG_SCALES and numbers[0] <= 0:
            raise StudyError(
                join(values_path, 0), f"{scale} with value {numbers[0]:g}", "values > 0 on a log scale"
            )
        return Parameter(pid, kind, scale, values=numbers, **common)
    if not isinstance(values, list) or not values or len({str(v) for v in values}) != len(values):
        raise StudyError(values_path, "values are empty or repeated", "distinct strings")
    return Parameter(pid, kind, scale, values=tuple(str(v) for v in values), **common)


def _number(value: Any, path: str, whole: bool) -> float | int:
    """A finite number (a whole one for an INTEGER: an int); JSON strings of numbers are read too."""
    if isinstance(value, str):
        try:
            value = float(value) if not value.strip().lstrip("-").isdigit() else int(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise StudyError(path, f"{short(value)} is not a number", "a finite number")
    if whole:
        if value != int(value):
            raise StudyError(
                path, f"{short(value)} is not a whole number", "an integer for an integerValueSpec"
            )
        return int(value)
    return float(value)
