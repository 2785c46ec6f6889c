"""A legacy job's hyperparameters -> the tuning job's study: the metric tag the trainer reports, goal,
algorithm, trial counts and parameters, checked by the StudySpec rules (``jobs.definition.study``) and refused
in the legacy field's terms."""

from __future__ import annotations

from typing import Any

from jobs.definition.body import GOALS, VALUE_SPECS
from jobs.definition.errors import one_of, short
from jobs.definition.study import ALGORITHMS, StudyError, parse_study
from jobs.definition.trainer_spec import TrainerArgsError, TrainerSpec
from jobs.legacy import tables
from jobs.legacy.convert_fields import check_fields, read_count, read_enum, read_number, read_text
from jobs.legacy.convert_program import flag_alias
from jobs.legacy.convert_types import Conversion
from jobs.legacy.source import TRAINING_INPUT as T
from jobs.legacy.source import LegacyJob


def study_fields(
    legacy: LegacyJob, contract: TrainerSpec, model: str, args: list[str], out: Conversion
) -> dict[str, Any]:
    path = f"{T}.hyperparameters"
    spec = legacy.training["hyperparameters"]
    check_fields(legacy, path, spec, tables.HYPERPARAMETER_FIELDS)
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
    goal = read_enum(legacy, f"{path}.goal", spec["goal"], GOALS)
    expected = model_contract.wrong_goal(tag, goal)
    if expected:
        raise legacy.error(f"{path}.goal", f"{goal} {tag} tunes toward a worse model", expected)
    algorithm = read_enum(
        legacy, f"{path}.algorithm", spec.get("algorithm", "ALGORITHM_UNSPECIFIED"), ALGORITHMS
    )
    # Their ranges are the study's rules (jobs.definition.study), checked with the rest below.
    trials = read_count(legacy, f"{path}.maxTrials", spec.get("maxTrials", 1), None)
    parallel = read_count(legacy, f"{path}.maxParallelTrials", spec.get("maxParallelTrials", 1), None)
    failed = read_count(legacy, f"{path}.maxFailedTrials", spec.get("maxFailedTrials", 0), None)
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
    contract: TrainerSpec,
    model: str,
    args: list[str],
    path: str,
    raw: Any,
    out: Conversion,
    index: int,
) -> dict[str, Any]:
    check_fields(legacy, path, raw, tables.PARAMETER_FIELDS)
    name = read_text(legacy, f"{path}.parameterName", raw.get("parameterName"), "a flag of the trainer")
    flags = contract.model(model).flags  # type: ignore[union-attr]
    alias = flag_alias(f"--{name}", flags)
    if alias:
        out.decisions.append(f"params.{index} {name} -> {alias[2:]}: this trainer's name for it")
        name = alias[2:]
    if f"--{name}" not in flags:
        raise legacy.error(
            f"{path}.parameterName",
            f"--{name} is not a flag of the trainer's {model} model",
            ", ".join(sorted(f[2:] for f in flags if "_" not in f and f not in ("--help", "--model"))),
        )
    kind = read_enum(legacy, f"{path}.type", raw.get("type"), tables.PARAMETER_TYPES)
    scale = read_enum(legacy, f"{path}.scaleType", raw.get("scaleType", "NONE"), tables.SCALE_TYPES)
    out.blame.append((f"studySpec.parameters.{index}", path))
    spec: dict[str, Any] = {"parameterId": name}
    if kind in ("INTEGER", "DOUBLE"):
        low = read_number(legacy, f"{path}.minValue", raw.get("minValue"))
        high = read_number(legacy, f"{path}.maxValue", raw.get("maxValue"))
        spec[VALUE_SPECS[kind]] = {"minValue": low, "maxValue": high}
    elif kind == "DISCRETE":
        values = raw.get("discreteValues")
        if not isinstance(values, list) or not values:
            raise legacy.error(f"{path}.discreteValues", "missing or empty", "a list of numbers")
        numbers = [read_number(legacy, f"{path}.discreteValues.{i}", v) for i, v in enumerate(values)]
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


def _integer_flag(contract: TrainerSpec, args: list[str], name: str, numbers: list[float]) -> bool:
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
