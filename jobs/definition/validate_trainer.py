"""The study and this repo's trainer's spec: every pool's args are ones the trainer takes, a
study's parameters are flags of the model its trials run with values the flag accepts, and the metric a study
or the registry compares is one that model reports, pursued in the direction that improves it."""

from __future__ import annotations

from typing import Any

from jobs.definition.body import STUDY_FIELD, Pool, join
from jobs.definition.compile import CompiledJob
from jobs.definition.errors import one_of, short
from jobs.definition.study import Parameter, Study, StudyError, parse_study
from jobs.definition.trainer_spec import TrainerArgsError, TrainerSpec
from jobs.definition.validate_pools import check_replicas_agree
from trainer.contract import METRIC_FLAG, TRAINER_MODULE


def check_study(job: CompiledJob) -> Study:
    """The study, by the StudySpec rules of jobs.definition.study, a refusal addressed to the definition's
    field."""
    try:
        return parse_study(job.body)
    except StudyError as exc:
        raise job.error(exc.path, exc.problem, exc.allowed) from None


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


def check_trainer_spec(
    job: CompiledJob, trainer: TrainerSpec, trainer_pools: list[Pool], study: Study | None
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
    check_replicas_agree(job, trainer_pools)
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


def _check_tuned_flag(job: CompiledJob, trainer: TrainerSpec, where: str, flag: str, models) -> None:
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
    job: CompiledJob, study: Study, trainer: TrainerSpec, args: list[str], args_path: str, models
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


def check_registry_metric(job: CompiledJob, trainer: TrainerSpec, chief: Pool) -> None:
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


def _check_trial_values(
    job: CompiledJob, trainer: TrainerSpec, args: list[str], parameter: Parameter
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
