"""What this repo's trainer accepts, per model, read from ``trainer.config`` and the task specs without
importing TensorFlow.

A tuning study whose parameter is not a flag of the model it trains, whose metric that model never reports,
or whose goal runs the wrong way (MINIMIZE accuracy) runs (and bills) every trial to completion before anyone
notices; these facts let ``jobs.definition.validate`` refuse it up front.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

# The module Vertex runs for this repo's python package, as the trainer defines it.
from trainer.contract import TRAINER_MODULE


class TrainerArgsError(ValueError):
    """A job's args that the trainer's parser rejects."""


@dataclass(frozen=True)
class ModelSpec:
    """One ``--model``: every flag it accepts (generic ones included) and the metrics it reports."""

    name: str
    flags: frozenset[str]  # "--num-epochs", "--num_epochs", ...
    metric_goals: Mapping[str, str]  # reportable tag -> MAXIMIZE | MINIMIZE
    default_metric: str  # what trials report without --hypertune-metric

    @property
    def reportable_metrics(self) -> tuple[str, ...]:
        return tuple(self.metric_goals)

    def wrong_goal(self, metric: str, goal: str) -> str | None:
        """The goal that improves ``metric`` (one this model reports) when ``goal`` pursues the other
        direction, else None: the one rule for a study's, a registry's and a legacy job's goal."""
        expected = self.metric_goals[metric]
        return expected if goal != expected else None


@dataclass(frozen=True)
class TrainerSpec:
    models: Mapping[str, ModelSpec]
    default_model: str
    parse: Callable[[Sequence[str]], object] | None = None
    model_arg: Callable[[Sequence[str]], str] | None = None  # the --model a command line selects

    def model(self, name: str) -> ModelSpec | None:
        return self.models.get(name)

    def model_of(self, args: Sequence[str]) -> str:
        """The model ``args`` select (the default one when they name none); unknown names are returned as
        they are, for ``check_args`` to report."""
        if self.model_arg is not None:
            try:
                return self.model_arg(list(args))
            except ValueError:  # --model with no value: check_args reports it
                return self.default_model
        return self.default_model

    def models_with_flag(self, flag: str) -> tuple[str, ...]:
        return tuple(name for name, model in self.models.items() if flag in model.flags)

    def models_reporting(self, metric: str) -> tuple[str, ...]:
        return tuple(name for name, model in self.models.items() if metric in model.metric_goals)

    def check_args(self, args: Sequence[str]) -> None:
        """Raise TrainerArgsError with the parser's own one-line message if the trainer would reject args
        (the parser of the model they select: its flags and its validation)."""
        if self.parse is None:
            return
        try:
            self.parse(list(args))
        except SystemExit as exc:  # a parser that exits instead of raising
            raise TrainerArgsError(f"the trainer's parser exited with status {exc.code}") from None
        except ValueError as exc:
            # The trainer words its errors for its own command line ("trainer.task: error: ..."); here they
            # go after the definition's field path instead.
            message = str(exc).splitlines()[0].removeprefix(f"{TRAINER_MODULE}: error: ")
            raise TrainerArgsError(message) from None


def _flags(parser) -> frozenset[str]:
    return frozenset(s for action in parser._actions for s in action.option_strings if s.startswith("--"))


@lru_cache(maxsize=1)
def load_trainer_spec() -> TrainerSpec:
    # The trainer keeps trainer.config, the registry and every task module's top level free of TensorFlow.
    from trainer import config
    from trainer import models as tasks

    models = {}
    for name in tasks.models():
        spec = tasks.load_spec(name)
        models[name] = ModelSpec(
            name=name,
            flags=_flags(config.build_parser(name)),
            metric_goals=dict(spec.metric_goals),
            default_metric=spec.default_metric,
        )

    def parse(args: Sequence[str]):
        # The trainer's own start-up path: --model, that model's parser, then the checks argparse cannot
        # make. A value of the right type but out of range (--scale-factor=-1, --num-layers=0) would otherwise
        # pass here and fail every trial at start-up, after the job was scheduled and billed.
        return config.resolve_config(list(args))

    return TrainerSpec(
        models=models, default_model=tasks.DEFAULT_MODEL, parse=parse, model_arg=config.model_of
    )
