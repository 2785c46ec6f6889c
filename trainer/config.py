"""The trainer's flags and its typed, validated configuration.

This module is the contract the job tooling reads (``build_parser``, ``REPORTABLE_METRICS``,
``MODELS``), so it imports only the standard library: never TensorFlow. Configuration is resolved in
exactly one place, :func:`resolve_config`: dataclass defaults, then command-line flags (which is how Vertex
AI passes a job's args and a tuning trial's ``--<parameterId>=<value>``), then validation. Any problem
raises :class:`ConfigError` with one line naming the flag and what is allowed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from trainer.contract import METRIC_FLAG, TRAINER_MODULE
from trainer.registry import TASK_MODULES

MODELS: tuple[str, ...] = tuple(TASK_MODULES)

# Tags --hypertune-metric may name. Bare names are measured on --eval-files after every epoch (what a
# tuning study should optimise); train_* are the running training metrics of the same epoch.
REPORTABLE_METRICS: tuple[str, ...] = ("accuracy", "auc", "loss", "train_accuracy", "train_auc", "train_loss")
# The direction a StudySpec metric should use for each tag.
METRIC_GOALS: dict[str, str] = {
    tag: ("MINIMIZE" if tag.endswith("loss") else "MAXIMIZE") for tag in REPORTABLE_METRICS
}
DEFAULT_HYPERTUNE_METRIC = "accuracy"

EXPORT_FORMATS: tuple[str, ...] = ("JSON", "CSV", "EXAMPLE")
DISTRIBUTIONS: tuple[str, ...] = ("auto", "default", "mirrored", "multi_worker", "tpu")
VERBOSITIES: tuple[str, ...] = ("DEBUG", "INFO", "WARNING", "ERROR")


class ConfigError(ValueError):
    """Bad command-line input; ``str()`` is one line naming the flag and what is allowed."""


@dataclass(frozen=True)
class TrainerConfig:
    """Every setting of a training run. Defaults here are the tuned defaults of the census task."""

    model: str = "wide_deep"
    train_files: tuple[str, ...] = ()
    eval_files: tuple[str, ...] = ()
    job_dir: str | None = None
    num_epochs: int = 8
    train_batch_size: int = 256  # per replica; the global batch is this times the number of replicas
    eval_batch_size: int = 1024  # per replica
    steps_per_epoch: int | None = None  # None: one pass over --train-files per epoch
    eval_steps: int | None = None  # None: all of --eval-files
    embedding_size: int = 8
    first_layer_size: int = 128
    num_layers: int = 3
    scale_factor: float = 0.5
    learning_rate: float = 0.003
    dropout: float = 0.1
    seed: int = 42
    max_bad_rows: int = 0
    cache_limit_mb: int = 1024
    export_format: str = "JSON"
    hypertune_metric: str = DEFAULT_HYPERTUNE_METRIC
    distribution: str = "auto"
    verbosity: str = "INFO"

    def layer_sizes(self) -> tuple[int, ...]:
        """Hidden layer widths of the deep part: ``max(2, int(first_layer_size * scale_factor**i))``."""
        return tuple(
            max(2, int(self.first_layer_size * self.scale_factor**i)) for i in range(self.num_layers)
        )

    def hparams(self) -> dict[str, object]:
        """The hyperparameters worth comparing across runs (TensorBoard HParams, saved config)."""
        keys = ("model", "num_epochs", "train_batch_size", "embedding_size", "first_layer_size", "num_layers",
                "scale_factor", "learning_rate", "dropout", "seed")
        return {k: getattr(self, k) for k in keys}

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True) + "\n"


_DEFAULTS = TrainerConfig()


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: either exit 2 (command line) or raise ConfigError (library use)."""

    def __init__(self, *args, raise_errors: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self._raise_errors = raise_errors

    def error(self, message: str):  # noqa: D102 - argparse hook
        line = f"{self.prog}: error: {message}"
        if self._raise_errors:
            raise ConfigError(line)
        print(line, file=sys.stderr)
        raise SystemExit(2)


def _flag(parser: argparse.ArgumentParser, name: str, **kwargs) -> None:
    """Add ``--name-with-hyphens`` plus the ``--name_with_underscores`` alias Vertex tuning trials use."""
    options = [f"--{name.replace('_', '-')}"]
    if "_" in name:
        options.append(f"--{name}")
    kwargs.setdefault("default", getattr(_DEFAULTS, name))
    parser.add_argument(*options, dest=name, **kwargs)


def _upper(value: str) -> str:
    return value.upper()


def build_parser(*, raise_errors: bool = False) -> argparse.ArgumentParser:
    """Every flag of ``python -m trainer.task``.

    With ``raise_errors`` a parse error raises :class:`ConfigError` instead of printing one line and
    exiting 2.
    """
    d = _DEFAULTS
    p = _Parser(
        prog=TRAINER_MODULE,
        description="Train a registered model on Vertex AI or locally and export a SavedModel.",
        raise_errors=raise_errors,
        allow_abbrev=False,  # a tuning parameterId must match a flag exactly, never a prefix of one
    )
    io = p.add_argument_group("data and outputs")
    _flag(io, "model", choices=MODELS, help=f"registered task (default {d.model})")
    _flag(io, "train_files", nargs="+", required=True, metavar="PATH",
          help="training data: files or globs, local or gs://")
    _flag(io, "eval_files", nargs="+", required=True, metavar="PATH",
          help="evaluation data: files or globs, local or gs://")
    _flag(io, "job_dir", metavar="DIR",
          help="output root: <job-dir>/model, /checkpoints and /logs unless AIP_MODEL_DIR, "
               "AIP_CHECKPOINT_DIR and AIP_TENSORBOARD_LOG_DIR are set (as on Vertex AI)")
    _flag(io, "max_bad_rows", type=int, metavar="N",
          help="skip and report up to N malformed rows or rows with an implausible value (outside the "
               "task's plausible range for the column, or not finite) instead of stopping at the first "
               "(default 0)")
    _flag(io, "cache_limit_mb", type=int, metavar="MB",
          help=f"cache parsed data in memory when the input files total at most MB (0: never; default "
               f"{d.cache_limit_mb})")
    _flag(io, "export_format", type=_upper, choices=EXPORT_FORMATS,
          help="serving signature of the SavedModel: JSON (raw feature dict), CSV (a raw data line) "
               "or EXAMPLE (serialized tf.Example) (default JSON)")

    tr = p.add_argument_group("training")
    _flag(tr, "num_epochs", type=int, help=f"passes over the training data (default {d.num_epochs})")
    _flag(tr, "train_batch_size", type=int, help=f"per-replica training batch (default {d.train_batch_size})")
    _flag(tr, "eval_batch_size", type=int, help=f"per-replica evaluation batch (default {d.eval_batch_size})")
    _flag(tr, "steps_per_epoch", type=int, help="cap the training steps per epoch (default: the whole data)")
    _flag(tr, "eval_steps", type=int, help="cap the evaluation steps (default: the whole data)")
    _flag(tr, "learning_rate", type=float, help=f"Adam learning rate (default {d.learning_rate})")
    _flag(tr, "seed", type=int, help=f"random seed (default {d.seed})")
    _flag(tr, "distribution", choices=DISTRIBUTIONS,
          help="distribution strategy; auto picks it from TF_CONFIG/CLUSTER_SPEC and the devices "
               "(default auto)")

    mo = p.add_argument_group("model")
    _flag(mo, "embedding_size", type=int,
          help=f"width of categorical embeddings (default {d.embedding_size})")
    _flag(mo, "first_layer_size", type=int,
          help=f"width of the first hidden layer (default {d.first_layer_size})")
    _flag(mo, "num_layers", type=int, help=f"number of hidden layers (default {d.num_layers})")
    _flag(mo, "scale_factor", type=float,
          help=f"each hidden layer is this times the previous one (default {d.scale_factor})")
    _flag(mo, "dropout", type=float, help=f"dropout rate after each hidden layer (default {d.dropout})")

    rep = p.add_argument_group("reporting")
    _flag(rep, "hypertune_metric", choices=REPORTABLE_METRICS,
          help="metric tag reported to the tuning service after each epoch; bare names are measured on "
               "--eval-files, train_* on the training data (default accuracy)")
    _flag(rep, "verbosity", type=_upper, choices=VERBOSITIES, help="log level (default INFO)")
    return p


def _check(ok: bool, flag: str, allowed: str, value: object) -> None:
    if not ok:
        raise ConfigError(f"{TRAINER_MODULE}: error: argument {flag}: must be {allowed}, got {value!r}")


def validate(cfg: TrainerConfig) -> TrainerConfig:
    """Check the values argparse cannot; raises ConfigError naming the first bad flag."""
    for name in ("num_epochs", "train_batch_size", "eval_batch_size", "embedding_size", "first_layer_size",
                 "num_layers"):
        value = getattr(cfg, name)
        _check(value >= 1, "--" + name.replace("_", "-"), "a positive integer", value)
    for name in ("steps_per_epoch", "eval_steps"):
        value = getattr(cfg, name)
        _check(value is None or value >= 1, "--" + name.replace("_", "-"), "a positive integer", value)
    _check(cfg.max_bad_rows >= 0, "--max-bad-rows", "an integer >= 0", cfg.max_bad_rows)
    _check(cfg.cache_limit_mb >= 0, "--cache-limit-mb", "an integer >= 0", cfg.cache_limit_mb)
    _check(0 < cfg.learning_rate < math.inf, "--learning-rate", "a finite number > 0", cfg.learning_rate)
    _check(0 < cfg.scale_factor <= 1, "--scale-factor", "in (0, 1]", cfg.scale_factor)
    _check(0 <= cfg.dropout < 1, "--dropout", "in [0, 1)", cfg.dropout)
    _check(cfg.model in MODELS, "--model", f"one of {', '.join(MODELS)}", cfg.model)
    _check(cfg.export_format in EXPORT_FORMATS, "--export-format", f"one of {', '.join(EXPORT_FORMATS)}",
           cfg.export_format)
    _check(cfg.hypertune_metric in REPORTABLE_METRICS, METRIC_FLAG,
           f"one of {', '.join(REPORTABLE_METRICS)}", cfg.hypertune_metric)
    _check(cfg.distribution in DISTRIBUTIONS, "--distribution", f"one of {', '.join(DISTRIBUTIONS)}",
           cfg.distribution)
    _check(bool(cfg.train_files), "--train-files", "one or more paths", cfg.train_files)
    _check(bool(cfg.eval_files), "--eval-files", "one or more paths", cfg.eval_files)
    return cfg


def resolve_config(argv: Sequence[str] | None = None) -> TrainerConfig:
    """Defaults, then flags, then validation: the only place a TrainerConfig is made from user input."""
    ns = build_parser(raise_errors=True).parse_args(list(sys.argv[1:] if argv is None else argv))
    values = {f.name: getattr(ns, f.name) for f in dataclasses.fields(TrainerConfig)}
    values["train_files"] = tuple(values["train_files"])
    values["eval_files"] = tuple(values["eval_files"])
    return validate(TrainerConfig(**values))


def config_from_json(text: str) -> TrainerConfig:
    """Read back a config written by :meth:`TrainerConfig.to_json` (e.g. the one saved beside a model)."""
    raw = json.loads(text)
    known = {f.name for f in dataclasses.fields(TrainerConfig)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"unknown config keys {unknown}")
    for key in ("train_files", "eval_files"):
        raw[key] = tuple(raw.get(key, ()))
    return validate(TrainerConfig(**raw))


__all__ = [
    "DEFAULT_HYPERTUNE_METRIC", "DISTRIBUTIONS", "EXPORT_FORMATS", "METRIC_GOALS",
    "MODELS", "REPORTABLE_METRICS",
    "ConfigError", "TrainerConfig", "build_parser", "config_from_json", "resolve_config", "validate",
]
