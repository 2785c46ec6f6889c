"""What this repo's trainer accepts, read from ``trainer.config`` without importing TensorFlow.

A tuning study whose parameter is not a trainer flag, or whose metric the trainer never reports, runs (and
bills) every trial to completion before anyone notices; these facts let ``jobs.validate`` refuse it up front.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

# The module Vertex runs for this repo's python package.
TRAINER_MODULE = "trainer.task"
METRIC_FLAG = "--hypertune-metric"


class TrainerArgsError(ValueError):
    """A job's args that the trainer's parser rejects."""


@dataclass(frozen=True)
class TrainerContract:
    flags: frozenset[str]
    reportable_metrics: tuple[str, ...]
    default_metric: str
    models: tuple[str, ...]
    parse: Callable[[Sequence[str]], argparse.Namespace] | None = None

    def check_args(self, args: Sequence[str]) -> None:
        """Raise TrainerArgsError with the parser's own one-line message if the trainer would reject args."""
        if self.parse is None:
            return
        try:
            self.parse(list(args))
        except SystemExit as exc:  # a parser that exits instead of raising
            raise TrainerArgsError(f"the trainer's parser exited with status {exc.code}") from None
        except ValueError as exc:
            raise TrainerArgsError(str(exc).splitlines()[0]) from None


@lru_cache(maxsize=1)
def load_trainer_contract() -> TrainerContract:
    from trainer import config  # the trainer keeps this module free of TensorFlow

    parser = config.build_parser()
    flags = frozenset(s for action in parser._actions for s in action.option_strings if s.startswith("--"))
    default_metric = next(
        (a.default for a in parser._actions if METRIC_FLAG in a.option_strings),
        getattr(config, "DEFAULT_HYPERTUNE_METRIC", "accuracy"),
    )

    def parse(args: Sequence[str]) -> argparse.Namespace:
        try:
            strict = config.build_parser(raise_errors=True)
        except (
            TypeError
        ):  # an older parser without raise_errors: parse_known_args still reports unknown flags
            strict = config.build_parser()
        namespace, unknown = strict.parse_known_args(list(args))
        if unknown:
            raise TrainerArgsError(f"unrecognized arguments: {' '.join(unknown)}")
        return namespace

    return TrainerContract(
        flags=flags,
        reportable_metrics=tuple(config.REPORTABLE_METRICS),
        default_metric=str(default_metric),
        models=tuple(config.MODELS),
        parse=parse,
    )
