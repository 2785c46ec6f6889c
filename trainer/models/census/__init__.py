"""Census income (UCI Adult): a Wide & Deep binary classifier, registered as ``--model wide_deep``.

Wide part: a linear model over every categorical column, bucketised age and hashed feature crosses
(``HashedCrossing``), plus a piecewise-linear function of each numeric column. Deep part: embeddings of the
categorical columns, of each numeric column's piecewise-linear encoding (``--numeric-bins`` quantile bins of
the training split, Gorishniy et al. 2022) and the normalised numeric columns, through ``num_layers`` ReLU
layers of ``max(2, int(first_layer_size * scale_factor**i))`` units. The two logits are summed into one
sigmoid. The encoding is what brings the model level with gradient boosting on the UCI split
(``scripts/benchmarks/bench_census_gbdt.py``): accuracy 0.8616 -> 0.8697, AUC 0.9189 -> 0.9274.

This module is the task (its flags, spec and hooks); :mod:`trainer.models.census.data` holds the schema, the
feature definitions, the preprocessing layer and the pipelines, :mod:`trainer.models.census.model` the network
and its serving functions.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainer.models.base import (
    MAXIMIZE,
    MINIMIZE,
    Task,
    TaskConfig,
    TaskSpec,
    check,
    integral,
    option,
)
from trainer.models.census.data import make_data
from trainer.models.census.model import build_model, serving_fn

MAX_NUMERIC_BINS = 256


@dataclass(frozen=True)
class CensusConfig(TaskConfig):
    """The Wide & Deep model's own flags (``--embedding-size`` ...); defaults tuned on the UCI split."""

    embedding_size: int = option(8, "width of categorical embeddings (default %(default)s)")
    first_layer_size: int = option(128, "width of the first hidden layer (default %(default)s)")
    num_layers: int = option(3, "number of hidden layers (default %(default)s)")
    scale_factor: float = option(0.5,
                                 "each hidden layer is this times the previous one (default %(default)s)")
    dropout: float = option(0.1, "dropout rate after each hidden layer (default %(default)s)")
    numeric_bins: int = option(
        64, "piecewise-linear encoding of each numeric column over this many quantile bins of the training "
            "data (fewer where values repeat), fed to both parts; 0: only the normalised value "
            "(default %(default)s)", metavar="N", type=integral)
    numeric_embedding_size: int = option(
        16, "width of each numeric column's embedding of its encoding in the deep part (default %(default)s)",
        type=integral)
    max_bad_rows: int = option(
        0, "skip and report up to N malformed rows or rows with an implausible value (outside the task's "
           "plausible range for the column, or not finite) instead of stopping at the first (default 0)",
        metavar="N")

    def validate(self) -> None:
        for name in ("embedding_size", "first_layer_size", "num_layers"):
            check(getattr(self, name) >= 1, name, "a positive integer", getattr(self, name))
        check(self.max_bad_rows >= 0, "max_bad_rows", "an integer >= 0", self.max_bad_rows)
        check(0 <= self.numeric_bins <= MAX_NUMERIC_BINS, "numeric_bins", f"an integer from 0 to "
              f"{MAX_NUMERIC_BINS}", self.numeric_bins)
        check(self.numeric_embedding_size >= 1, "numeric_embedding_size", "a positive integer",
              self.numeric_embedding_size)
        check(0 < self.scale_factor <= 1, "scale_factor", "in (0, 1]", self.scale_factor)
        check(0 <= self.dropout < 1, "dropout", "in [0, 1)", self.dropout)

    def layer_sizes(self) -> tuple[int, ...]:
        """Hidden layer widths of the deep part: ``max(2, int(first_layer_size * scale_factor**i))``."""
        return tuple(
            max(2, int(self.first_layer_size * self.scale_factor**i)) for i in range(self.num_layers)
        )

    def hparams(self) -> dict[str, object]:
        keys = ("embedding_size", "first_layer_size", "num_layers", "scale_factor", "dropout", "numeric_bins",
                "numeric_embedding_size")
        return {k: getattr(self, k) for k in keys}


SPEC = TaskSpec(
    name="wide_deep",
    description="UCI Adult census income, Wide & Deep binary classifier",
    config=CensusConfig,
    metrics={"accuracy": MAXIMIZE, "auc": MAXIMIZE, "loss": MINIMIZE},
    export_formats={"JSON": "raw feature dict", "CSV": "a raw data line", "EXAMPLE": "serialized tf.Example"},
    # Tuned on the UCI split (scripts/benchmarks/bench_trainer_quality.py): larger batches and a higher rate
    # than the generic defaults, with the cosine decay below.
    defaults={"num_epochs": 8, "train_batch_size": 256, "eval_batch_size": 1024, "learning_rate": 0.003},
    flag_help={"learning_rate": "Adam learning rate (default %(default)s)"},
)

TASK = Task(spec=SPEC, make_data=make_data, build_model=build_model, serving_fn=serving_fn)
