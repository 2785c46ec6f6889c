"""Work-arounds for known Keras 3 bugs, each applied in one place and removable when fixed upstream."""

from __future__ import annotations

import types


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
