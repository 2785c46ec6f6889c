"""Export a toy SavedModel for the server's tests: ``python tests/serving/toy_model.py OUT_DIR``.

Its signatures answer in ways a test can check without a trained model: ``serving_default`` doubles ``x``,
echoes ``name`` and reports ``batch``, the number of instances in the signature call that computed the row
(how a test sees that concurrent requests were batched); ``sum`` takes rows of any length (requests of
different lengths cannot be stacked into one call).
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def export(out: str) -> None:
    import tensorflow as tf

    class Toy(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x"),
                                      tf.TensorSpec([None], tf.string, name="name")])
        def default(self, x, name):
            batch = tf.fill(tf.shape(x), tf.cast(tf.shape(x)[0], tf.int64))
            return {"double": x * 2, "name": name, "batch": batch}

        @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int64, name="ids")])
        def sum(self, ids):
            return {"total": tf.reduce_sum(ids, axis=1)}

    toy = Toy()
    tf.saved_model.save(toy, out, signatures={"serving_default": toy.default, "sum": toy.sum})


if __name__ == "__main__":
    export(sys.argv[1])
