"""What a task (a ``--model``) provides to the generic training loop.

The loop in :mod:`trainer.train` owns everything Vertex-specific (strategy, output dirs, callbacks,
checkpoints, tuning reports, export). A task owns its data format, its model and its serving signatures:

- ``make_data(cfg, global_train_batch, global_eval_batch) -> TaskData``: validated input pipelines that
  yield ``(features, label)`` batches already preprocessed for the model, plus the preprocessing layer that
  the export puts back in front of the model so serving takes raw inputs. Called outside the strategy scope.
- ``build_model(cfg, data) -> keras.Model``: the compiled trainable model (called inside the strategy scope).
  Its metrics must include ``accuracy`` and ``auc`` (the tags of ``trainer.config.REPORTABLE_METRICS``).
- ``serving_fn(model, data, export_format) -> (fn, input_signature)``: the raw-input serving function for one
  of ``export_formats``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class TaskData:
    train: Any  # tf.data.Dataset of (features, label), global batches
    eval: Any  # tf.data.Dataset of (features, label), global batches
    train_rows: int
    eval_rows: int
    train_steps: int  # batches per pass over the training data
    preprocessor: Any  # keras Layer raw features -> model inputs; tracked by the export
    report: dict[str, Any] = field(default_factory=dict)  # what the data scan found, saved with the model


@dataclass(frozen=True)
class Task:
    name: str
    description: str
    make_data: Callable[..., TaskData]
    build_model: Callable[..., Any]
    serving_fn: Callable[..., tuple[Callable, list]]
    export_formats: tuple[str, ...]
