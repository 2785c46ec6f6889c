"""The trainer's flags and its typed, validated configuration: generic settings plus the task's own.

Every task (``--model``) shares the generic settings of :class:`TrainerConfig` (data, outputs, epochs, batch
sizes, learning rate, distribution, reporting); its own flags, metrics and export formats come from its
:class:`trainer.models.base.TaskSpec`, and its resolved settings sit in ``TrainerConfig.task``. The command
line is parsed in two phases: ``--model`` first, then the generic flags plus that task's flags, so
``python -m trainer.task --model NAME --help`` lists exactly what NAME accepts.

This module and the task specs are the contract the job tooling reads (``jobs.definition.trainer_spec``),
so they import only the standard library and the task modules' TensorFlow-free top level: never TensorFlow.
Configuration is resolved in exactly one place, :func:`resolve_config`: generic defaults, then the task's
default overrides, then command-line flags (which is how Vertex AI passes a job's args and a tuning trial's
``--<parameterId>=<value>``), then validation. Any problem raises :class:`ConfigError` with one line naming
the flag and what is allowed.
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
from trainer.models import DEFAULT_MODEL, load_spec, models
from trainer.models.base import ConfigError, TaskConfig, TaskSpec, check, task_flags

DISTRIBUTIONS: tuple[str, ...] = ("auto", "default", "mirrored", "multi_worker", "tpu")
VERBOSITIES: tuple[str, ...] = ("DEBUG", "INFO", "WARNING", "ERROR")


@dataclass(frozen=True)
class TrainerConfig:
    """Every setting of a training run. Defaults here are the generic ones: a task may override them
    (``TaskSpec.defaults``), which :func:`resolve_config` and :func:`default_config` apply. ``None`` in
    ``export_format``, ``hypertune_metric`` or ``task`` means the task's default."""

    model: str = DEFAULT_MODEL
    train_files: tuple[str, ...] = ()
    eval_files: tuple[str, ...] = ()
    job_dir: str | None = None
    num_epochs: int = 10
    train_batch_size: int = 64  # per replica; the global batch is this times the number of replicas
    eval_batch_size: int = 256  # per replica
    steps_per_epoch: int | None = None  # None: one pass over --train-files per epoch
    eval_steps: int | None = None  # None: all of --eval-files
    learning_rate: float = 0.001
    seed: int = 42
    cache_limit_mb: int = 1024
    export_format: str | None = None
    hypertune_metric: str | None = None
    distribution: str = "auto"
    verbosity: str = "INFO"
    task: TaskConfig | None = None  # the task's own settings (its TaskSpec.config)

    def __post_init__(self):
        if self.model not in models():
            return  # validate() names the flag
        spec = load_spec(self.model)
        for name, value in (("export_format", spec.default_export_format),
                            ("hypertune_metric", spec.default_metric), ("task", None)):
            if getattr(self, name) is None:
                object.__setattr__(self, name, spec.config() if name == "task" else value)

    @property
    def spec(self) -> TaskSpec:
        return load_spec(self.model)

    def hparams(self) -> dict[str, object]:
        """The hyperparameters worth comparing across runs (TensorBoard HParams): generic, then the task's."""
        keys = ("model", "num_epochs", "train_batch_size", "learning_rate", "seed")
        return {**{k: getattr(self, k) for k in keys}, **(self.task.hparams() if self.task else {})}

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True) + "\n"


GENERIC_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(TrainerConfig) if f.name != "task")
# Generic settings that are the task's own business (choices and defaults from its spec) or none of it.
_NOT_OVERRIDABLE = frozenset({"model", "train_files", "eval_files", "job_dir", "export_format",
                              "hypertune_metric"})


def generic_defaults(model: str = DEFAULT_MODEL) -> dict[str, object]:
    """The generic settings' defaults for ``model``: TrainerConfig's, then the task's overrides."""
    spec = load_spec(model)
    bad = sorted(set(spec.defaults) - (set(GENERIC_FIELDS) - _NOT_OVERRIDABLE))
    if bad:
        raise ValueError(f"task {model}: defaults may override only generic settings, not {bad}")
    clash = sorted(set(task_flags(spec.config)) & set(GENERIC_FIELDS))
    if clash:
        raise ValueError(f"task {model}: flags {clash} repeat generic flags")
    base = {f.name: f.default for f in dataclasses.fields(TrainerConfig) if f.name != "task"}
    return {**base, "model": model, "export_format": spec.default_export_format,
            "hypertune_metric": spec.default_metric, **spec.defaults}


def default_config(model: str = DEFAULT_MODEL, **values) -> TrainerConfig:
    """What :func:`resolve_config` gives ``--model model`` with no other flags, with ``values`` set."""
    return TrainerConfig(**{**generic_defaults(model), **values})


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
    parser.add_argument(*options, dest=name, **kwargs)


def _upper(value: str) -> str:
    return value.upper()


def _model_flag(parser: argparse.ArgumentParser) -> None:
    _flag(parser, "model", default=DEFAULT_MODEL, choices=models(),
          help=f"registered task (default {DEFAULT_MODEL})")


def _formats_help(formats: dict[str, str]) -> str:
    named = [f"{name} ({what})" for name, what in formats.items()]
    listed = named[0] if len(named) == 1 else f"{', '.join(named[:-1])} or {named[-1]}"
    return f"serving signature of the SavedModel: {listed} (default %(default)s)"


def build_parser(model: str = DEFAULT_MODEL, *, raise_errors: bool = False) -> argparse.ArgumentParser:
    """Every flag of ``python -m trainer.task --model model``: the generic ones and the task's.

    With ``raise_errors`` a parse error raises :class:`ConfigError` instead of printing one line and
    exiting 2.
    """
    spec = load_spec(model)
    d = generic_defaults(model)
    p = _Parser(
        prog=TRAINER_MODULE,
        description="Train a registered model on Vertex AI or locally and export a SavedModel. "
                    f"Registered models: {', '.join(models())}; `--model NAME --help` lists NAME's flags.",
        raise_errors=raise_errors,
        allow_abbrev=False,  # a tuning parameterId must match a flag exactly, never a prefix of one
    )

    def generic(group, name: str, help: str, **kwargs) -> None:  # noqa: A002
        _flag(group, name, default=d[name], help=spec.flag_help.get(name, help), **kwargs)

    io = p.add_argument_group("data and outputs")
    _model_flag(io)
    generic(io, "train_files", "training data: files or globs, local or gs://", nargs="+", required=True,
            metavar="PATH")
    if spec.splits_train_files:
        generic(io, "eval_files", f"evaluation data: files or globs, local or gs:// (default: --model "
                                  f"{spec.name} holds out part of --train-files)", nargs="+", metavar="PATH")
    else:
        generic(io, "eval_files", "evaluation data: files or globs, local or gs://", nargs="+", required=True,
                metavar="PATH")
    generic(io, "job_dir", "output root: <job-dir>/model, /checkpoints and /logs unless AIP_MODEL_DIR, "
                           "AIP_CHECKPOINT_DIR and AIP_TENSORBOARD_LOG_DIR are set (as on Vertex AI)",
            metavar="DIR")
    generic(io, "cache_limit_mb", "cache parsed data in memory when it takes at most MB, and at most half "
                                  "the memory available to this machine's trainer processes (0: never; "
                                  "default %(default)s)", type=int,
            metavar="MB")
    generic(io, "export_format", _formats_help(dict(spec.export_formats)), type=_upper,
            choices=tuple(spec.export_formats))

    tr = p.add_argument_group("training")
    generic(tr, "num_epochs", "passes over the training data (default %(default)s)", type=int)
    generic(tr, "train_batch_size", "per-replica training batch (default %(default)s)", type=int)
    generic(tr, "eval_batch_size", "per-replica evaluation batch (default %(default)s)", type=int)
    generic(tr, "steps_per_epoch", "cap the training steps per epoch (default: the whole data)", type=int)
    generic(tr, "eval_steps", "cap the evaluation steps (default: the whole data)", type=int)
    generic(tr, "learning_rate", "learning rate (default %(default)s)", type=float)
    generic(tr, "seed", "random seed (default %(default)s)", type=int)
    generic(tr, "distribution", "distribution strategy; auto picks it from TF_CONFIG/CLUSTER_SPEC and the "
                                "devices (default %(default)s)", choices=DISTRIBUTIONS)

    own = p.add_argument_group(f"model {spec.name}", spec.description)
    for name, kwargs in task_flags(spec.config).items():
        _flag(own, name, **kwargs)

    rep = p.add_argument_group("reporting")
    generic(rep, "hypertune_metric", "metric tag reported to the tuning service after each epoch; bare names "
                                     "are measured on --eval-files, train_* on the training data (default "
                                     "%(default)s)", choices=spec.reportable_metrics)
    generic(rep, "verbosity", "log level (default %(default)s)", type=_upper, choices=VERBOSITIES)
    return p


def model_of(argv: Sequence[str]) -> str:
    """The ``--model`` a command line names (the last one, as argparse reads it), else the default model.

    The first phase of parsing: it decides which task's flags the full parser accepts. The name is returned
    unchecked (the full parser reports an unknown one); ``--model`` without a value raises ConfigError.
    """
    p = _Parser(prog=TRAINER_MODULE, add_help=False, allow_abbrev=False, raise_errors=True)
    _flag(p, "model", default=DEFAULT_MODEL)
    return p.parse_known_args(list(argv))[0].model


def validate(cfg: TrainerConfig) -> TrainerConfig:
    """Check the values argparse cannot; raises ConfigError naming the first bad flag."""
    for name in ("num_epochs", "train_batch_size", "eval_batch_size"):
        check(getattr(cfg, name) >= 1, name, "a positive integer", getattr(cfg, name))
    for name in ("steps_per_epoch", "eval_steps"):
        value = getattr(cfg, name)
        check(value is None or value >= 1, name, "a positive integer", value)
    check(cfg.cache_limit_mb >= 0, "cache_limit_mb", "an integer >= 0", cfg.cache_limit_mb)
    check(0 < cfg.learning_rate < math.inf, "learning_rate", "a finite number > 0", cfg.learning_rate)
    check(cfg.model in models(), "model", f"one of {', '.join(models())}", cfg.model)
    spec = cfg.spec
    check(cfg.export_format in spec.export_formats, "export_format",
          f"one of {', '.join(spec.export_formats)}", cfg.export_format)
    check(cfg.hypertune_metric in spec.reportable_metrics, METRIC_FLAG,
          f"one of {', '.join(spec.reportable_metrics)}", cfg.hypertune_metric)
    check(cfg.distribution in DISTRIBUTIONS, "distribution", f"one of {', '.join(DISTRIBUTIONS)}",
          cfg.distribution)
    check(bool(cfg.train_files), "train_files", "one or more paths", cfg.train_files)
    check(bool(cfg.eval_files) or spec.splits_train_files, "eval_files", "one or more paths", cfg.eval_files)
    if type(cfg.task) is not spec.config:
        raise ConfigError(f"--model {cfg.model} takes a {spec.config.__name__}, "
                          f"got {type(cfg.task).__name__}")
    cfg.task.validate()
    return cfg


def resolve_config(argv: Sequence[str] | None = None) -> TrainerConfig:
    """Defaults, then flags, then validation: the only place a TrainerConfig is made from user input."""
    argv = list(sys.argv[1:] if argv is None else argv)
    model = model_of(argv)
    # An unknown --model gets the default model's parser, whose --model choices word the error.
    ns = build_parser(model if model in models() else DEFAULT_MODEL, raise_errors=True).parse_args(argv)
    config = load_spec(model).config
    values = {name: getattr(ns, name) for name in GENERIC_FIELDS}
    values["train_files"] = tuple(values["train_files"])
    values["eval_files"] = tuple(values["eval_files"] or ())
    task = config(**{name: getattr(ns, name) for name in task_flags(config)})
    return validate(TrainerConfig(**values, task=task))


def config_from_json(text: str) -> TrainerConfig:
    """Read back a config written by :meth:`TrainerConfig.to_json` (e.g. the one saved beside a model)."""
    raw = json.loads(text)
    model = raw.get("model", DEFAULT_MODEL)
    if model not in models():
        raise ConfigError(f"unknown model {model!r}; registered: {', '.join(models())}")
    config = load_spec(model).config
    task_names = set(task_flags(config))
    task = dict(raw.pop("task", None) or {})
    # Configs saved before tasks had their own settings kept them at the top level.
    task.update({k: raw.pop(k) for k in list(raw) if k in task_names and k not in GENERIC_FIELDS})
    unknown = sorted(set(raw) - set(GENERIC_FIELDS)) + sorted(f"task.{k}" for k in set(task) - task_names)
    if unknown:
        raise ConfigError(f"unknown config keys {unknown}")
    for key in ("train_files", "eval_files"):
        raw[key] = tuple(raw.get(key, ()))
    # JSON has no tuples: a sequence setting comes back as the tuple a frozen config holds.
    task = {k: tuple(v) if isinstance(v, list) else v for k, v in task.items()}
    return validate(TrainerConfig(**raw, task=config(**task)))


__all__ = [
    "DEFAULT_MODEL", "DISTRIBUTIONS", "GENERIC_FIELDS", "VERBOSITIES",
    "ConfigError", "TrainerConfig", "build_parser", "config_from_json", "default_config", "generic_defaults",
    "model_of", "resolve_config", "validate",
]
