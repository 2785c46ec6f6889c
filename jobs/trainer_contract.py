"""What this repo's trainer accepts, read from ``trainer.config`` without importing TensorFlow.

A tuning study whose parameter is not a trainer flag, or whose metric the trainer never reports, runs (and
bills) every trial to completion before anyone notices; these facts let ``jobs.validate`` refuse it up front.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

# The module Vertex runs for this repo's python package and its metric flag, as the trainer defines them.
from trainer.contract import METRIC_FLAG, TRAINER_MODULE

__all__ = ["METRIC_FLAG", "TRAINER_MODULE", "TrainerArgsError", "TrainerContract", "load_trainer_contract"]


class TrainerArgsError(ValueError):
    """A job's args that the trainer's parser rejects."""


@dataclass(frozen=True)
class TrainerContract:
    flags: frozenset[str]
    reportable_metrics: tuple[str, ...]
    default_metric: str
    models: tuple[str, ...]
    parse: Callable[[Sequence[str]], object] | None = None

    def check_args(self, args: Sequence[str]) -> None:
        """Raise TrainerArgsError with the parser's own one-line message if the trainer would reject args."""
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


@lru_cache(maxsize=1)
def load_trainer_contract() -> TrainerContract:
    from trainer import config  # the trainer keeps this module free of TensorFlow

    parser = config.build_parser()
    flags = frozenset(s for action in parser._actions for s in action.option_strings if s.startswith("--"))
    default_metric = next(
        (a.default for a in parser._actions if METRIC_FLAG in a.option_strings),
        getattr(config, "DEFAULT_HYPERTUNE_METRIC", "accuracy"),
    )

    def parse(args: Sequence[str]):
        # The trainer's own start-up path: its parser, then the checks argparse cannot make. A value of the
        # right type but out of range (--scale-factor=-1, --num-layers=0) would otherwise pass here and fail
        # every trial at start-up, after the job was scheduled and billed.
        return config.resolve_config(list(args))

    return TrainerContract(
        flags=flags,
        reportable_metrics=tuple(config.REPORTABLE_METRICS),
        default_metric=str(default_metric),
        models=tuple(config.MODELS),
        parse=parse,
    )
