"""Vertex AI StudySpec parameters and algorithms expressed with Optuna.

- ALGORITHM_UNSPECIFIED (Vertex: Bayesian optimization) -> seeded multivariate TPE with a short random
  start-up, "constant liar" so parallel trials do not pile onto the same point. The start-up tries every
  DISCRETE/CATEGORICAL value when at most half the trial budget allows it (:class:`_CoveringTPESampler`):
  TPE only models what it has seen, so a value the random start-up missed was otherwise never tried (the
  shipped census study kept numeric-bins at 64 in all 8 trials).
- GRID_SEARCH -> GridSampler over every INTEGER value in [min, max] and every DISCRETE/CATEGORICAL value.
- RANDOM_SEARCH -> seeded RandomSampler.

Scales: UNIT_LOG_SCALE uses Optuna's log-uniform. Optuna has no reverse-log scale, so UNIT_REVERSE_LOG_SCALE
samples y log-uniformly on [min, max] and uses x = min + max - y: the reflection puts log-scale resolution
near the top of the range, which is what Vertex's reverse log does (e.g. momentum 0.9..0.999). Optuna stores
y; the value the trial receives (x) is kept in the trial's user attributes. DISCRETE values are treated as an
unordered choice; scale types apply to DOUBLE and INTEGER parameters only.
"""

from __future__ import annotations

import random
from typing import Any

import optuna

from jobs.definition.study import Parameter, Study
from jobs.definition.validate_trainer import format_trial_value

SEED = 0


def make_sampler(study: Study, resumed_trials: int = 0) -> optuna.samplers.BaseSampler:
    """The sampler for study.algorithm; a resumed study reseeds it so random draws do not replay old trials.

    The grid keeps its seed: it fixes the grid's order, which the stored trials' grid ids refer to.
    """
    if study.algorithm == "GRID_SEARCH":
        return _AskTellGridSampler(grid(study.parameters), seed=SEED)
    seed = SEED + resumed_trials
    if study.algorithm == "RANDOM_SEARCH":
        return optuna.samplers.RandomSampler(seed=seed)
    # The default 10 random start-up trials would make a small study pure random search.
    startup = min(10, max(2, study.parallel_trials, round(study.max_trials * 0.3)))
    choices = {
        p.parameter_id: list(p.values) for p in study.parameters if p.kind in ("DISCRETE", "CATEGORICAL")
    }
    cover = max(map(len, choices.values()), default=0)
    if cover > study.max_trials // 2:  # exploring every value would leave too little budget to exploit
        choices, cover = {}, 0
    return _CoveringTPESampler(
        choices,
        seed=seed,
        n_startup_trials=max(startup, cover),
        multivariate=True,
        constant_liar=True,
    )


class _CoveringTPESampler(optuna.samplers.TPESampler):
    """TPE whose start-up trials deal each DISCRETE/CATEGORICAL parameter's values in a seeded order, so
    trials 0..n-1 of a parameter with n values try every value once (the other parameters stay random).

    Dealt by trial number, which the study assigns at ask time: parallel, resumed and failed trials keep
    their place in the order, and a resumed study continues it instead of starting over.
    """

    def __init__(self, choices: dict[str, list[Any]], *, seed: int, **kwargs: Any) -> None:
        super().__init__(seed=seed, **kwargs)
        rng = random.Random(SEED)  # the order is the study's, not the (resume-reseeded) sampler's
        self._order = {name: rng.sample(values, len(values)) for name, values in choices.items()}

    def sample_independent(self, study, trial, param_name, param_distribution):
        order = self._order.get(param_name)
        if order and trial.number < len(order):
            return order[trial.number]
        return super().sample_independent(study, trial, param_name, param_distribution)


class _AskTellGridSampler(optuna.samplers.GridSampler):
    """GridSampler whose after_trial does not call study.stop(), which raises outside study.optimize().

    The runner caps the study at the grid size itself (tuning.StudyRunner.target_trials).
    """

    def after_trial(self, study, trial, state, values) -> None:
        return None


def grid(params: tuple[Parameter, ...]) -> dict[str, list[Any]]:
    space: dict[str, list[Any]] = {}
    for p in params:
        if p.kind == "INTEGER":
            space[p.parameter_id] = list(range(int(p.low), int(p.high) + 1))
        else:
            space[p.parameter_id] = list(p.values)
    return space


def suggest(trial: optuna.Trial, params: tuple[Parameter, ...]) -> dict[str, Any]:
    """The values this trial passes to the trainer, by parameterId."""
    values: dict[str, Any] = {}
    for p in params:
        name = p.parameter_id
        if p.kind == "DISCRETE":
            values[name] = float(trial.suggest_categorical(name, list(p.values)))
        elif p.kind == "CATEGORICAL":
            values[name] = trial.suggest_categorical(name, list(p.values))
        elif p.kind == "INTEGER":
            y = trial.suggest_int(name, int(p.low), int(p.high), log=p.scale != "UNIT_LINEAR_SCALE")
            values[name] = int(p.low + p.high - y) if p.scale == "UNIT_REVERSE_LOG_SCALE" else y
        else:
            y = trial.suggest_float(name, p.low, p.high, log=p.scale != "UNIT_LINEAR_SCALE")
            values[name] = _clip(p.low + p.high - y, p) if p.scale == "UNIT_REVERSE_LOG_SCALE" else y
    return values


def _clip(x: float, p: Parameter) -> float:
    return min(p.high, max(p.low, x))


def trial_args(values: dict[str, Any]) -> tuple[str, ...]:
    """The args Vertex AI appends to a trial's command line, formatted exactly as it does."""
    return tuple(f"--{name}={format_trial_value(v)}" for name, v in values.items())
