"""Work-arounds for known Keras 3 bugs and API differences, each applied in one place and removable when
fixed upstream or when the oldest supported Keras no longer needs it.

The trainer runs on the Keras that its TensorFlow came with: the lock's (TF 2.21 / Keras 3.15), Vertex AI's
newest prebuilt training images (TF 2.17.1 with Keras 3.4.1 in the image, or whatever newer Keras 3 pip
resolves there), and the TPU image (TF 2.20). Version checks live here and nowhere else.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import re
import types


def keras_version() -> tuple[int, int, int]:
    """The installed Keras as (major, minor, patch); pre-release and local suffixes are ignored."""
    import keras

    return parse_version(keras.__version__)


def parse_version(text: str) -> tuple[int, int, int]:
    found = re.match(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?", text.strip())
    if not found:
        raise ValueError(f"not a version: {text!r}")
    major, minor, patch = (int(part or 0) for part in found.groups())
    return major, minor, patch


def write_export_archive(archive, path: str) -> None:
    """``archive.write_out(path)`` without Keras's endpoint listing on stdout.

    ``write_out(verbose=...)`` arrived in Keras 3.6; Keras 3.4.1 (TF 2.17 prebuilt images) rejects the
    argument ("unexpected keyword argument 'verbose'") and always prints, so silence its stdout instead.
    Can go when the oldest supported Keras is >= 3.6.
    """
    if "verbose" in inspect.signature(archive.write_out).parameters:
        archive.write_out(path, verbose=False)
        return
    with contextlib.redirect_stdout(io.StringIO()):
        archive.write_out(path)


def fix_distributed_symbolic_build(model) -> None:
    """Let ``fit`` build a model with dict inputs under MultiWorkerMirroredStrategy / MirroredStrategy.

    Keras 3 (up to at least 3.15) peeks at the first distributed batch and averages it across replicas with
    ``strategy.reduce("MEAN", batch)``, which fails for nested inputs ("Attempt to convert a value ({...:
    PerReplica}) ... to a Tensor"; keras-team/keras#20329, #20585). The peek only needs shapes and dtypes, so
    take the first local replica's value instead of reducing.
    """
    import tensorflow as tf
    from keras import tree

    def first_local(value):
        if isinstance(value, tf.distribute.DistributedValues):
            return model.distribute_strategy.experimental_local_results(value)[0]
        return value

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        if self._distribute_strategy is None:
            return
        if iterator is not None:
            for _, _, it in iterator:
                data_batch = tree.map_structure(first_local, next(it))
                break
        with self.distribute_strategy.scope():
            self._symbolic_build(data_batch=data_batch)

    model._maybe_symbolic_build = types.MethodType(_maybe_symbolic_build, model)


def fix_multi_worker_metric_reduction() -> None:
    """Let ``fit``/``evaluate`` reduce scalar step outputs under MultiWorkerMirroredStrategy.

    Keras 3 (up to at least 3.15) reduces every train/test step output across workers with
    ``strategy.reduce("MEAN", v, axis=0)``, which fails for the scalar loss and metric values ("Invalid
    reduction dimension 0 for input with 0 dimensions"; keras-team/keras#20585). Reduce scalars across
    replicas only (``axis=None``); everything else keeps Keras's own behaviour.
    """
    import tensorflow as tf
    from keras import tree
    from keras.src.backend.tensorflow import trainer as tf_trainer

    original = tf_trainer.reduce_per_replica
    if getattr(original, "_trainer_fixed", False):
        return

    def reduce_per_replica(values, strategy, reduction="auto"):
        if reduction not in ("auto", "mean") or not tf_trainer._collective_all_reduce_multi_worker(strategy):
            return original(values, strategy, reduction=reduction)

        def mean(value):
            local = value
            if isinstance(value, tf.distribute.DistributedValues):
                local = strategy.experimental_local_results(value)[0]
            axis = 0 if getattr(local, "shape", None) is not None and local.shape.rank else None
            return strategy.reduce("MEAN", value, axis=axis)

        return tree.map_structure(mean, values)

    reduce_per_replica._trainer_fixed = True
    tf_trainer.reduce_per_replica = reduce_per_replica
