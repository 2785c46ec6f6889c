"""The task interface: what a registered ``--model`` declares and provides to the generic training loop.

A task module (``trainer/models/<name>/__init__.py``, beside the task's own data and model modules, registered
by one line in :mod:`trainer.models`) defines
``TASK = Task(spec=TaskSpec(...), make_data=..., build_model=..., serving_fn=...)``. Importing the module
must not import TensorFlow or Keras: the job tooling imports it to read the spec
(``jobs.definition.trainer_spec``), and ``tests/trainer/test_models_registry.py`` checks this for every
registered task. Import TensorFlow inside the hook functions, or keep the hooks in a second module and name
them with :func:`lazy`.

The spec (plain data, read without TensorFlow)
----------------------------------------------
``TaskSpec(name, description, config, metrics, export_formats, defaults={}, flag_help={})``:

- ``name``: the ``--model`` value; must equal its key in ``trainer.models.TASK_MODULES``.
- ``config``: a frozen dataclass subclassing :class:`TaskConfig`. Each field, declared with :func:`option`,
  is one flag of this task: ``--field-name`` plus the ``--field_name`` alias Vertex AI tuning trials use::

      @dataclass(frozen=True)
      class ImageConfig(TaskConfig):
          image_size: int = option(224, "input height and width in pixels (default %(default)s)")
          optimizer: str = option("adam", "optimizer (default %(default)s)", choices=("sgd", "adam"))
          base_weights: str | None = option(None, "local or gs:// .weights.h5 of the backbone",
                                            type=str, metavar="PATH")
          fine_tune: bool = option(False, "also train the backbone (default %(default)s)")

          def validate(self) -> None:
              check(self.image_size >= 32, "image_size", "an integer >= 32", self.image_size)

  The flag's type is the default's type (``int``, ``float``, ``str``; ``bool`` takes
  ``true|false|1|0|yes|no``, and a bare ``--flag`` means true), or ``type=`` when the default is ``None``
  (``type=integral`` for an int that a DISCRETE tuning parameter sets: Vertex AI sends ``64.0``).
  ``help`` may use argparse's ``%(default)s``. Field names must not repeat a generic flag (the fields of
  ``trainer.config.TrainerConfig``). ``validate()`` checks what the types cannot, raising
  :class:`ConfigError` through :func:`check`, which words the one-line error as the generic flags do
  (``trainer.task: error: argument --image-size: must be an integer >= 32, got 8``). ``hparams()`` (default:
  every field whose value is not ``None``) is what TensorBoard's HParams dashboard records beside the
  generic hyperparameters. The hooks read the resolved values as ``cfg.task`` (``cfg`` being the generic
  ``trainer.config.TrainerConfig``); ``trainer_config.json`` saves them under ``"task"``.
- ``metrics``: ``{name: MAXIMIZE | MINIMIZE}`` measured on ``--eval-files`` after every epoch, e.g.
  ``{"accuracy": MAXIMIZE, "top_k_accuracy": MAXIMIZE, "loss": MINIMIZE}``. Each name is ``"loss"`` or
  the ``name`` of a metric the compiled model reports. The trainer reports each one (``--hypertune-metric``,
  a StudySpec ``metricId``) bare, measured on ``--eval-files``, or as ``train_<name>``, the running value on
  the training data, with the same goal. The first metric is the default ``--hypertune-metric``.
- ``export_formats``: ``{format: what a request sends}``, in the order ``--export-format`` lists them, the
  first being the default, e.g. ``{"IMAGE_BYTES": "encoded JPEG or PNG bytes"}``. ``serving_fn`` is
  called with one of these names.
- ``defaults``: the task's defaults of generic flags, e.g. ``{"learning_rate": 0.01, "num_epochs": 20,
  "train_batch_size": 64}``; ``--help`` and the saved config show them, an explicit flag still wins. Not
  for ``model``, the file and directory flags, ``export_format`` or ``hypertune_metric`` (those defaults
  come from the spec itself).
- ``flag_help``: the task's wording of a generic flag's help, e.g. ``{"learning_rate": "SGD or Adam
  learning rate (default %(default)s)"}``.
- ``splits_train_files``: True when ``--eval-files`` is optional because ``make_data`` then holds out part
  of ``--train-files`` itself (``cfg.eval_files`` is empty); the split must be deterministic.

The hooks (import TensorFlow inside them)
-----------------------------------------
- ``make_data(cfg, global_train_batch, global_eval_batch, shard) -> TaskData``: validated input pipelines
  that yield ``(features, label)`` batches already preprocessed for the model, plus the preprocessing layer
  that the export puts back in front of the model so serving takes raw inputs. Called outside the strategy
  scope. Bad input data raises ``trainer.input_files.DataError`` (one line, exit status 2). ``shard``
  (:class:`trainer.sharding.Shard`) is this worker's share under multi-worker training: the pipelines read
  only that share, with ``trainer.sharding.dataset_options``, while ``train_rows``/``train_steps`` and
  every statistic are the whole data's (combined with ``shard.exchange``).
- ``build_model(cfg, data) -> keras.Model``: the compiled trainable model (called inside the strategy
  scope), its compiled metrics named as in ``spec.metrics``.
- ``serving_fn(model, data, export_format) -> (fn, input_signature)``: the raw-input serving function for
  one of ``spec.export_formats``, exported as ``serving_default``.
- ``more_signatures(model, data) -> {name: (fn, input_signature)}`` (optional): further signatures of the
  same SavedModel, e.g. ``top_k``.

``make_data`` may also fill ``TaskData.state`` with values the other hooks need (vocabularies, statistics)
and ``TaskData.report["baselines"]`` with reference figures measured on the same evaluation data.

Adding a model: write its package ``trainer/models/<name>/`` (the task in ``__init__.py``, its data and model
modules beside it) and add ``"<name>": "trainer.models.<name>"`` to ``TASK_MODULES``.
Nothing else changes: ``python -m trainer.task --model <name> --help`` lists its flags, and job definitions
that name ``--model <name>`` are validated against its flags, metrics and goals.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from trainer.contract import TRAINER_MODULE

MAXIMIZE = "MAXIMIZE"
MINIMIZE = "MINIMIZE"
GOALS: tuple[str, ...] = (MAXIMIZE, MINIMIZE)
TRAIN_PREFIX = "train_"  # train_<metric>: the running value on the training data


class ConfigError(ValueError):
    """Bad command-line input; ``str()`` is one line naming the flag and what is allowed."""


def flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def check(ok: bool, name: str, allowed: str, value: object) -> None:
    """Raise ConfigError for flag ``name`` (a field name or ``--flag``) unless ``ok``."""
    if not ok:
        flag = name if name.startswith("--") else flag_name(name)
        raise ConfigError(f"{TRAINER_MODULE}: error: argument {flag}: must be {allowed}, got {value!r}")


def parse_bool(text: str) -> bool:
    """``true|false|1|0|yes|no`` in any case: how a CATEGORICAL tuning value or a YAML arg spells a switch."""
    value = str(text).strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise ValueError(f"not a boolean: {text!r}")


parse_bool.__name__ = "boolean"  # argparse names the type in its error: "invalid boolean value: 'maybe'"


def integral(text: str) -> int:
    """An int flag's type that also takes ``64.0``: Vertex AI passes DISCRETE tuning values as doubles."""
    value = float(text)
    if not value.is_integer():
        raise ValueError(f"not a whole number: {text!r}")
    return int(value)


integral.__name__ = "integer"  # argparse names the type in its error: "invalid integer value: '64.5'"


def option(default: Any, help: str, *, type: Callable | None = None, choices: tuple | None = None,  # noqa: A002
           metavar: str | None = None) -> Any:
    """A task flag: a dataclass field whose default, type, help and choices make its argparse option."""
    meta = {"help": help, "type": type, "choices": choices, "metavar": metavar}
    return field(default=default, metadata={"trainer_flag": meta})


@dataclass(frozen=True)
class TaskConfig:
    """Base of a task's own settings; subclasses add :func:`option` fields (see the module docstring)."""

    def validate(self) -> None:
        """Check the values argparse cannot; raise ConfigError through :func:`check`."""

    def hparams(self) -> dict[str, object]:
        """The task's hyperparameters worth comparing across runs (TensorBoard HParams)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


def task_flags(config: type[TaskConfig]) -> dict[str, dict[str, Any]]:
    """``{field name: argparse keyword arguments}`` of a task config class, in declaration order."""
    flags = {}
    for f in dataclasses.fields(config):
        meta = dict(f.metadata.get("trainer_flag") or {})
        if not meta:
            raise TypeError(f"{config.__name__}.{f.name} is not declared with trainer.models.base.option()")
        kind = meta.pop("type") or type(f.default)
        kwargs = {k: v for k, v in meta.items() if v is not None}
        if kind is bool:
            kwargs.update(type=parse_bool, nargs="?", const=True, metavar=kwargs.get("metavar", "BOOL"))
        elif kind is type(None):
            raise TypeError(f"{config.__name__}.{f.name} defaults to None: give option(..., type=...)")
        else:
            kwargs["type"] = kind
        flags[f.name] = {"default": f.default, **kwargs}
    return flags


@dataclass(frozen=True)
class TaskSpec:
    """What a task declares, as data: read by the trainer's parser and by the job tooling (no TensorFlow)."""

    name: str
    description: str
    config: type[TaskConfig]
    metrics: Mapping[str, str]
    export_formats: Mapping[str, str]
    defaults: Mapping[str, Any] = field(default_factory=dict)
    flag_help: Mapping[str, str] = field(default_factory=dict)
    # True: --eval-files may be left out, the task then evaluates on a split of --train-files it makes.
    splits_train_files: bool = False

    def __post_init__(self):
        for name, goal in self.metrics.items():
            if goal not in GOALS or name.startswith((TRAIN_PREFIX, "val_")) or not name.isidentifier():
                raise ValueError(f"task {self.name}: metric {name!r}: {goal!r} (want a bare name and one of "
                                 f"{', '.join(GOALS)})")
        if not self.metrics or not self.export_formats:
            raise ValueError(f"task {self.name}: declare at least one metric and one export format")
        task_flags(self.config)  # a field that is not an option() fails at import, not at the first parse

    @property
    def metric_goals(self) -> dict[str, str]:
        """Every tag the trainer can report for this task: the eval metrics bare, then their ``train_*``."""
        return {**self.metrics, **{TRAIN_PREFIX + name: goal for name, goal in self.metrics.items()}}

    @property
    def reportable_metrics(self) -> tuple[str, ...]:
        return tuple(self.metric_goals)

    @property
    def default_metric(self) -> str:
        return next(iter(self.metrics))

    @property
    def default_export_format(self) -> str:
        return next(iter(self.export_formats))


def lazy(target: str) -> Callable:
    """A hook named ``"module:function"``, imported on first call: keeps a spec module free of TensorFlow."""
    module, _, attr = target.partition(":")

    def hook(*args, **kwargs):
        return getattr(importlib.import_module(module), attr)(*args, **kwargs)

    hook.__name__ = hook.__qualname__ = attr
    return hook


@dataclass
class TaskData:
    train: Any  # tf.data.Dataset of (features, label), global batches
    eval: Any  # tf.data.Dataset of (features, label), global batches
    train_rows: int
    eval_rows: int
    train_steps: int  # batches per pass over the training data
    # A Keras layer, raw features -> model inputs, whose state (vocabularies, statistics) the export keeps
    # beside the model; None where the serving function's preprocessing holds no state (images). It must be
    # built before the export: Keras before 3.5 refuses to track an unbuilt layer.
    preprocessor: Any = None
    # What the data scan found, saved with the model (metrics.json). A "baselines" entry, {name: {metric:
    # value}} measured on the evaluation data, is logged beside the model's own evaluation.
    report: dict[str, Any] = field(default_factory=dict)
    # Task-private values make_data hands to build_model and the serving functions (e.g. vocabularies);
    # not saved.
    state: dict[str, Any] = field(default_factory=dict)
    # Writes what make_data computed to the on-disk cache for the job's later trials and restarts
    # (trainer.result_cache); the loop calls it once the data and the model were accepted, so a refused run
    # writes nothing.
    write_cache: Callable[[], None] | None = None


@dataclass(frozen=True)
class Task:
    spec: TaskSpec
    make_data: Callable[..., TaskData]
    build_model: Callable[..., Any]
    serving_fn: Callable[..., tuple[Callable, list]]
    # (model, data) -> {name: (fn, input_signature)}: signatures exported beside serving_default, whatever
    # the export format (e.g. the recommender's top_k).
    more_signatures: Callable[..., dict[str, tuple[Callable, list]]] | None = None
    # data -> {file name: text}: files the chief writes beside the SavedModel and metrics.json (e.g. the
    # recommender's users.jsonl, the input of a batch prediction over its users).
    export_files: Callable[[TaskData], dict[str, str]] | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def description(self) -> str:
        return self.spec.description

    @property
    def export_formats(self) -> tuple[str, ...]:
        return tuple(self.spec.export_formats)
