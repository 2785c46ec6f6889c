"""Biased matrix factorisation in Keras 3, and the recommender's two serving signatures.

The model predicts ``mean + b_u + b_i + p_u . q_i`` for a user index ``u`` and an item index ``i`` (1-based
into the training vocabularies; 0 is an id the training data did not have). An unknown user or item adds
no bias and no factors, so the prediction falls back to what is known: the item's (or user's) bias and the
global mean. The L2 penalty is per rating, on the factors and biases a batch touches (the classic SGD form
of matrix factorisation: a frequent user is regularised as often as it is seen), so the strength does not
depend on the catalogue's size. Biases start from the damped bias-only baseline, so training begins at the
baseline's error and the factors learn what it leaves.
"""

from __future__ import annotations

from collections.abc import Sequence

import keras
import numpy as np
import tensorflow as tf
from keras import ops

# The biases' L2 relative to the factors' (--l2): they start from the damped baseline, already shrunk.
BIAS_L2_SCALE = 0.1
INIT_STDDEV = 0.01


class BiasedMF(keras.Model):
    """Inputs ``{"user": int [N], "item": int [N]}`` (vocabulary indices, 0 unknown) -> ratings [N]."""

    def __init__(self, num_users: int, num_items: int, dim: int, l2: float, mean: float,
                 rating_range: tuple[float, float], user_bias: np.ndarray | None = None,
                 item_bias: np.ndarray | None = None, seed: int = 0, **kwargs):
        super().__init__(**kwargs)

        def bias(values, rows, name):
            init = "zeros" if values is None else keras.initializers.Constant(np.asarray(values)[:, None])
            return keras.layers.Embedding(rows, 1, embeddings_initializer=init, name=name)

        self.user_factors = keras.layers.Embedding(
            num_users + 1, dim, name="user_factors",
            embeddings_initializer=keras.initializers.RandomNormal(stddev=INIT_STDDEV, seed=seed))
        self.item_factors = keras.layers.Embedding(
            num_items + 1, dim, name="item_factors",
            embeddings_initializer=keras.initializers.RandomNormal(stddev=INIT_STDDEV, seed=seed + 1))
        self.user_bias = bias(user_bias, num_users + 1, "user_bias")
        self.item_bias = bias(item_bias, num_items + 1, "item_bias")
        self.l2 = float(l2)
        self.mean = float(mean)
        self.low, self.high = (float(v) for v in rating_range)
        self.num_users, self.num_items = num_users, num_items

    def parts(self, users, items):
        """(user factors, item factors, user biases, item biases), zeroed where the id is unknown."""
        known_user = ops.cast(ops.greater(users, 0), "float32")
        known_item = ops.cast(ops.greater(items, 0), "float32")
        return (self.user_factors(users) * known_user[:, None],
                self.item_factors(items) * known_item[:, None],
                ops.squeeze(self.user_bias(users), -1) * known_user,
                ops.squeeze(self.item_bias(items), -1) * known_item)

    def call(self, inputs, training=False):
        p, q, bu, bi = self.parts(inputs["user"], inputs["item"])
        rating = self.mean + bu + bi + ops.sum(p * q, axis=-1)
        if training and self.l2:
            self.add_loss(self.l2 * ops.mean(ops.sum(p * p, axis=-1) + ops.sum(q * q, axis=-1))
                          + self.l2 * BIAS_L2_SCALE * ops.mean(bu * bu + bi * bi))
        # Training fits the raw score; a prediction never leaves the range of the training ratings.
        return rating if training else ops.clip(rating, self.low, self.high)


def compile_recommender(model: BiasedMF, learning_rate: float, decay_steps: int) -> BiasedMF:
    schedule = keras.optimizers.schedules.CosineDecay(learning_rate, decay_steps=max(1, decay_steps))
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=schedule),
                  loss=keras.losses.MeanSquaredError(),
                  metrics=[keras.metrics.RootMeanSquaredError(name="rmse"),
                           keras.metrics.MeanAbsoluteError(name="mae")])
    # Build the weights now (inside the strategy scope, where the caller is), not at the first batch.
    model({"user": ops.zeros((1,), "int32"), "item": ops.zeros((1,), "int32")})
    return model


def rated_by_user(users: np.ndarray, items: np.ndarray, num_users: int) -> tuple[np.ndarray, np.ndarray]:
    """The items each user rated in training as CSR arrays (row_splits [num_users + 2], values), by index."""
    order = np.lexsort((items, users))
    counts = np.bincount(users, minlength=num_users + 1)
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64), items[order].astype(np.int32)


class IdLookup(keras.layers.Layer):
    """Raw ids -> vocabulary indices, as the training data was indexed (trainer.ratings_data.index): the
    export's preprocessor, so serving takes the ids themselves."""

    def __init__(self, user_vocab: Sequence[str], item_vocab: Sequence[str], **kwargs):
        super().__init__(**kwargs)
        self.users = keras.layers.StringLookup(vocabulary=list(user_vocab), num_oov_indices=1,
                                               name="user_lookup")
        self.items = keras.layers.StringLookup(vocabulary=list(item_vocab), num_oov_indices=1,
                                               name="item_lookup")

    def call(self, inputs):
        return {"user": self.users(inputs["user"]), "item": self.items(inputs["item"])}


def rating_function(model: BiasedMF, lookup: IdLookup):
    """``serving_default``: ``user``, ``item`` (string ids [N]) -> ``rating`` [N] and whether each id was
    known (an unknown one falls back to the other's bias and the global mean)."""

    def rate(user, item):
        ids = lookup({"user": user, "item": item})
        return {"rating": model(ids, training=False), "known_user": ids["user"] > 0,
                "known_item": ids["item"] > 0}

    ids = [tf.TensorSpec([None], tf.string, name="user"), tf.TensorSpec([None], tf.string, name="item")]
    return rate, ids


def top_k_function(model: BiasedMF, lookup: IdLookup, item_vocab: Sequence[str],
                   rated: tuple[np.ndarray, np.ndarray], max_k: int):
    """``top_k``: ``user`` (string ids [N]), ``k`` (int [N], clipped to 1..max_k) -> ``items`` [N, K] and
    ``scores`` [N, K], K the batch's largest k: each user's best-scored items that they did not rate in
    training, best first. A row asking for fewer than K, or a user with fewer unrated items, is padded with
    item "" and score 0. An unknown user gets the items with the best biases."""
    item_ids = tf.constant(["", *item_vocab], tf.string)  # index 0, the unknown id, is never recommended
    rated_splits, rated_items = tf.constant(rated[0], tf.int64), tf.constant(rated[1], tf.int32)

    def top_k(user, k):
        users = lookup.users(user)
        p, _, bu, _ = model.parts(users, tf.zeros_like(users))
        every = tf.range(model.num_items + 1, dtype=users.dtype)
        q, bi = model.item_factors(every), tf.squeeze(model.item_bias(every), -1)
        # Ranked by the raw score (clipping first would tie every item above the top rating), reported as
        # the predicted rating, clipped as serving_default clips it.
        scores = model.mean + bu[:, None] + bi[None, :] + tf.matmul(p, q, transpose_b=True)
        # Hide column 0 (the unknown id) and what each user rated (row 0 of the lists, an unknown user, is
        # empty).
        n = tf.shape(users)[0]
        scores = tf.concat([tf.fill([n, 1], float("-inf")), scores[:, 1:]], axis=1)
        mine = tf.gather(tf.RaggedTensor.from_row_splits(rated_items, rated_splits), users)
        rows = tf.repeat(tf.range(n), tf.cast(mine.row_lengths(), tf.int32))
        hide = tf.stack([rows, mine.flat_values], axis=1)
        scores = tf.tensor_scatter_nd_update(scores, hide, tf.fill([tf.shape(hide)[0]], float("-inf")))
        wanted = tf.clip_by_value(tf.cast(k, tf.int32), 1, max_k)
        width = tf.minimum(tf.reduce_max(wanted), model.num_items)
        best, index = tf.math.top_k(scores, k=width)
        keep = (tf.range(width)[None, :] < wanted[:, None]) & tf.math.is_finite(best)
        return {"items": tf.where(keep, tf.gather(item_ids, index), ""),
                "scores": tf.where(keep, tf.clip_by_value(best, model.low, model.high), 0.0)}

    return top_k, [tf.TensorSpec([None], tf.string, name="user"), tf.TensorSpec([None], tf.int32, name="k")]
