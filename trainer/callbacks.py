"""Keras callbacks for the Vertex AI contract: tuning reports, HParams, epoch logs, preemption and
divergence."""

from __future__ import annotations

import json
import logging
import math
import signal
import time

import keras

from trainer import progress
from trainer.contract import BACKUP_METADATA, METRIC_FLAG

log = logging.getLogger("trainer")


def keras_log_key(tag: str) -> str:
    """Map a reportable tag (``TaskSpec.metric_goals``: ``name`` measured on --eval-files, ``train_name``
    on the training data) to the key Keras uses in its epoch logs."""
    return tag[len("train_"):] if tag.startswith("train_") else f"val_{tag}"


class HypertuneReporter(keras.callbacks.Callback):
    """Report one metric to Vertex AI Vizier after every epoch, the epoch number as global step.

    cloudml-hypertune appends a JSON line to ``$CLOUD_ML_HP_METRIC_FILE``, which is what the Vertex AI
    training service reads for a tuning trial.
    """

    def __init__(self, tag: str):
        super().__init__()
        import hypertune

        self.tag = tag
        self.key = keras_log_key(tag)
        self.hpt = hypertune.HyperTune()

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        if self.key not in logs:
            raise KeyError(f"{METRIC_FLAG} {self.tag}: Keras logged no {self.key!r} "
                           f"(have {sorted(logs)})")
        self.hpt.report_hyperparameter_tuning_metric(
            hyperparameter_metric_tag=self.tag, metric_value=float(logs[self.key]), global_step=epoch + 1)


class HParamsWriter(keras.callbacks.Callback):
    """Record the run's hyperparameters for TensorBoard's HParams dashboard when training starts."""

    def __init__(self, log_dir: str, hparams: dict, trial: str | None):
        super().__init__()
        self.log_dir = log_dir
        self.hparams = hparams
        self.trial = trial

    def on_train_begin(self, logs=None):
        import tensorflow as tf

        try:
            from tensorboard.plugins.hparams import api as hp
        except ImportError:  # TF >= 2.21 no longer installs tensorboard; scalars are still written
            log.warning("HParams not written: the tensorboard package is not installed")
            return
        with tf.summary.create_file_writer(self.log_dir).as_default():
            hp.hparams(self.hparams, trial_id=self.trial)


class EpochLogger(keras.callbacks.Callback):
    """One log line per epoch (Vertex AI's log viewer handles progress bars badly), and its progress line."""

    def __init__(self, num_epochs: int):
        super().__init__()
        self.num_epochs = num_epochs
        self.started = 0.0
        self.history: list[dict] = []

    def on_epoch_begin(self, epoch, logs=None):
        self.started = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        logs = {k: float(v) for k, v in (logs or {}).items()}
        self.history.append({"epoch": epoch + 1, **logs})
        metrics = " ".join(f"{k}={v:.4f}" for k, v in sorted(logs.items()))
        seconds = time.perf_counter() - self.started
        log.info("epoch %d/%d %s (%.1f s)", epoch + 1, self.num_epochs, metrics, seconds)
        progress.emit("epoch", epoch=epoch + 1, epochs=self.num_epochs, seconds=round(seconds, 1),
                      train={k: v for k, v in logs.items() if not k.startswith("val_")},
                      val={k.removeprefix("val_"): v for k, v in logs.items() if k.startswith("val_")})


class PhaseTimer(keras.callbacks.Callback):
    """Wall time of the run's phases, for metrics.json and the scale benchmark: the first training step
    (pipeline start-up, tracing, and any work an in-memory cache does before it can yield), then the steady
    training rate (every later step, validation excluded)."""

    def __init__(self, global_batch: int):
        super().__init__()
        self.global_batch = global_batch
        self.first_step_s: float | None = None
        self.steps = 0
        self.train_s = 0.0
        self.eval_s = 0.0
        self._started = self._eval_started = 0.0

    def on_epoch_begin(self, epoch, logs=None):
        self._started = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        now = time.perf_counter()
        if self.first_step_s is None:
            self.first_step_s = now - self._started
        else:
            self.steps += 1
            self.train_s += now - self._started
        self._started = now

    def on_test_begin(self, logs=None):
        self._eval_started = time.perf_counter()

    def on_test_end(self, logs=None):
        self.eval_s += time.perf_counter() - self._eval_started

    def figures(self) -> dict[str, float]:
        rate = self.steps * self.global_batch / self.train_s if self.train_s else 0.0
        return {"first_step_s": round(self.first_step_s or 0.0, 3), "validation_s": round(self.eval_s, 3),
                "steady_examples_per_s": round(rate, 1)}


class Preempted(Exception):
    """Raised between training steps after SIGTERM, so the process can exit cleanly."""


class PreemptionGuard(keras.callbacks.Callback):
    """Turn SIGTERM (how Vertex AI preempts a replica) into a clean stop between two training steps.

    The last completed epoch is already in BackupAndRestore's backup; a restarted run resumes there.
    ``Preempted`` says where training stopped (the epoch and step), which is what the restart trains again.
    """

    def __init__(self):
        super().__init__()
        self.received = False
        self._previous = None
        self._epoch = 0
        self._where = "before the first epoch"

    def _handle(self, signum, frame):
        self.received = True

    def on_train_begin(self, logs=None):
        self._previous = signal.signal(signal.SIGTERM, self._handle)

    def on_train_end(self, logs=None):
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)

    def _check(self):
        if self.received:
            self.on_train_end()
            raise Preempted(f"SIGTERM received {self._where}")

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch + 1
        self._where = f"in epoch {self._epoch} before its first step"

    def on_train_batch_end(self, batch, logs=None):
        steps = (self.params or {}).get("steps")
        self._where = f"in epoch {self._epoch} after step {batch + 1}" + (f" of {steps}" if steps else "")
        self._check()

    def on_test_batch_end(self, batch, logs=None):
        self._where = f"in epoch {self._epoch}'s validation"
        self._check()

    def on_epoch_end(self, epoch, logs=None):
        self._where = f"at the end of epoch {epoch + 1}"
        self._check()


class Diverged(Exception):
    """The loss or the weights became NaN or infinite; ``str()`` is one line. Nothing is exported."""


def _finite(value) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):  # not a scalar: not a loss Keras logs
        return True


class DivergenceGuard(keras.callbacks.Callback):
    """Raise :class:`Diverged` at the first training step whose loss is NaN or infinite, and at the end of an
    epoch whose validation loss is.

    Keras's ``TerminateOnNaN`` only sets ``stop_training``: ``fit`` would return normally and the loop would
    export the broken model. Raising skips the export and every later callback of that step, so put this
    guard first: a diverged epoch is then neither backed up nor reported to the tuning service. The loss
    Keras logs is the epoch's running mean, reduced across replicas (``compat``'s multi-worker reduction
    included): once one step's loss is not finite it stays so for the epoch, and every worker of a
    multi-worker job sees the same value at the same step, so all of them stop together and none is left
    waiting in a collective for one that stopped.
    """

    def __init__(self, num_epochs: int):
        super().__init__()
        self.num_epochs = num_epochs
        self.epoch = 0

    def _fail(self, what: str, value, where: str):
        raise Diverged(f"training diverged: the {what} is {float(value)} at {where}; nothing was exported "
                       "(lower --learning-rate or check the data)")

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not _finite(loss):
            self._fail("training loss", loss, f"epoch {self.epoch + 1}/{self.num_epochs}, step {batch + 1}")

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        for key, what in (("loss", "training loss"), ("val_loss", "validation loss")):
            if key in logs and not _finite(logs[key]):
                self._fail(what, logs[key], f"the end of epoch {epoch + 1}/{self.num_epochs}")


def check_trained(model, metrics: dict[str, float]) -> None:
    """Raise :class:`Diverged` unless the final evaluation loss and every weight are finite (before export).

    Every replica runs it on the same values (the evaluation is reduced across replicas and the weights are
    synchronised), so a multi-worker job stops on every worker or on none.
    """
    import numpy as np

    if not _finite(metrics.get("loss", 0.0)):
        raise Diverged(f"training diverged: the evaluation loss is {metrics['loss']} after training; "
                       "nothing was exported (lower --learning-rate or check the data)")
    for weight in model.weights:
        if not np.isfinite(np.asarray(weight)).all():
            name = getattr(weight, "path", weight.name)
            raise Diverged(f"training diverged: weight {name} is not finite after training; nothing was "
                           "exported (lower --learning-rate or check the data)")


def read_backup_epoch(backup_dir: str) -> int:
    """The epoch BackupAndRestore will resume from (0 when there is no backup)."""
    import tensorflow as tf

    path = f"{backup_dir}/{BACKUP_METADATA}"
    try:
        if not tf.io.gfile.exists(path):
            return 0
        with tf.io.gfile.GFile(path) as f:
            return int(json.load(f).get("epoch", 0))
    except (ValueError, tf.errors.OpError):
        return 0
