"""A ranking recommender in Keras 3: matrix factorisation trained with a sampled softmax over items, with a
closed-form item-item part for catalogues that fit in memory; its sparse optimiser, its ranking evaluation
and its serving signatures.

Model: a user ``u`` scores item ``i`` as ``p_u . q_i + b_i + a * sum_{j rated by u} W_ji``, and
``P(i | u)`` is the softmax of those scores over the catalogue.
- The factors are trained as that softmax: for each training rating, its item against ``--negatives``
  items drawn uniformly from the catalogue per step (sampled softmax; a uniform proposal needs no log-Q
  correction). Unlike squared error on observed ratings, the loss says something about the items a user
  never rated, which is where recommendations come from (issue 27: the rating-trained model's recall@10 was
  0.022).
- ``W`` is EASE's item-item weight matrix (closed form, computed before training from the training ratings,
  the same matrix the EASE baseline uses), scaled by ``a`` (``--item-item-scale``); it exists only for a
  catalogue of at most ``--ease-max-items`` items, being a dense items x items matrix. Why both: every
  low-rank model measured on the shipped ratings (sampled- and full-softmax MF, iALS, linear and non-linear
  autoencoders) stopped at 0.86-0.89x EASE's recall@10; a full-rank item-item part closes that gap, and the
  factors, added to it, rank a little better than EASE alone (see scripts/benchmarks/bench_recommender.py).
  Larger catalogues train and serve the factors alone. ``W`` is held outside the model's weights: neither
  checkpointed nor exported (the export keeps each user's recommendations instead).

Scale: a step touches ``batch`` user rows, ``batch + negatives`` item rows and nothing else. Keras 3's
optimisers update whole tables every step (Adam's moments are dense), so :class:`SparseAdagrad` applies an
embedding's ``IndexedSlices`` gradient to the rows it names only: the cost of a step does not depend on the
catalogue's size.

Evaluation (:meth:`RankingMF.test_step`): batches of eval users with the items they rated in training
(``seen``) and their held-out positives; every item is scored, seen ones hidden, and recall@k / NDCG@k of the
top k are averaged over users. The loss is the full-softmax cross-entropy of the positives.

An unknown user (index 0) is scored by training popularity (``log(1 + count)``), in evaluation and serving.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import keras
import numpy as np
import tensorflow as tf

INIT_STDDEV = 0.05
HIDDEN = -1e9  # the score of an item that must not be recommended (finite: no NaN from -inf - -inf)


def _tf_variable(variable):
    """The tf.Variable inside a Keras variable (it has the sparse updates): Keras keeps it in ``_value``, and
    on Keras 3.4 (the prebuilt TF 2.17 images) an optimizer's slots are not instances of keras.Variable."""
    inner = getattr(variable, "_value", None)
    return inner if isinstance(inner, tf.Variable) else variable


class SparseAdagrad(keras.optimizers.Adagrad):
    """Adagrad that updates only the rows of an embedding table a batch touched (an ``IndexedSlices``
    gradient); dense gradients take Keras's own update. Rows a batch used twice get their summed gradient."""

    def update_step(self, gradient, variable, learning_rate):
        if not isinstance(gradient, tf.IndexedSlices):
            return super().update_step(gradient, variable, learning_rate)
        table = _tf_variable(variable)
        accumulator = _tf_variable(self._accumulators[self._get_variable_index(variable)])
        rows, where = tf.unique(gradient.indices)
        values = tf.math.unsorted_segment_sum(tf.cast(gradient.values, table.dtype), where, tf.shape(rows)[0])
        accumulator.scatter_add(tf.IndexedSlices(values * values, rows))
        scale = tf.cast(learning_rate, table.dtype) / tf.sqrt(tf.gather(accumulator, rows) + self.epsilon)
        table.scatter_sub(tf.IndexedSlices(values * scale, rows))


class _Untracked:
    """Holds a tensor out of Keras's and TensorFlow's tracking: no weight, no checkpoint, no export."""

    def __init__(self, value):
        self.value = value


class RankingMF(keras.Model):
    """Training batches ``({"user": int [B], "item": int [B]}, rating [B])``; evaluation batches ``({"user":
    int [B], "seen": int [B, S]}, positives int [B, P])`` (0-padded). Indices are 1-based into the training
    vocabularies, 0 an unknown id."""

    def __init__(self, num_users: int, num_items: int, dim: int, l2: float, negatives: int,
                 popularity: np.ndarray, k: int, seed: int = 0, item_item: np.ndarray | None = None,
                 item_item_scale: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        self.num_users, self.num_items = int(num_users), int(num_items)
        self.l2, self.negatives, self.k = float(l2), int(min(negatives, num_items)), int(k)
        self.user_factors = keras.layers.Embedding(
            num_users + 1, dim, name="user_factors",
            embeddings_initializer=keras.initializers.RandomNormal(stddev=INIT_STDDEV, seed=seed))
        self.item_factors = keras.layers.Embedding(
            num_items + 1, dim, name="item_factors",
            embeddings_initializer=keras.initializers.RandomNormal(stddev=INIT_STDDEV, seed=seed + 1))
        self.item_bias = keras.layers.Embedding(num_items + 1, 1, name="item_bias",
                                                embeddings_initializer="zeros")
        popularity = np.log1p(np.asarray(popularity, np.float32))
        popularity[0] = HIDDEN
        self.popularity = self.add_weight(shape=(num_items + 1,), name="log_popularity", trainable=False,
                                          initializer=keras.initializers.Constant(popularity))
        self.item_item_scale = float(item_item_scale)
        use = item_item is not None and self.item_item_scale > 0
        self._item_item = _Untracked(tf.constant(item_item, tf.float32)) if use else None
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.recall_tracker = keras.metrics.Mean(name="recall_at_k")
        self.ndcg_tracker = keras.metrics.Mean(name="ndcg_at_k")

    @property
    def metrics(self):
        return [self.loss_tracker, self.recall_tracker, self.ndcg_tracker]

    def build_all(self) -> None:
        """Create every weight now (inside the strategy scope, where the caller is)."""
        zeros = tf.zeros([1], tf.int32)
        self({"user": zeros, "item": zeros})

    def call(self, inputs, training=False):
        """``{"user", "item"}`` -> the score of each pair (:meth:`pair_scores`)."""
        return self.pair_scores(inputs["user"], inputs["item"])

    def pair_scores(self, users, items):
        """``p_u . q_i + b_i``; an unknown user gets the item's log popularity, an unknown item ``HIDDEN``."""
        p, q = self.user_factors(users), self.item_factors(items)
        score = tf.reduce_sum(p * q, -1) + tf.squeeze(self.item_bias(items), -1)
        score = tf.where(users > 0, score, tf.gather(self.popularity, items))
        return tf.where(items > 0, score, HIDDEN)

    def user_scores(self, users, seen=None):
        """Every item's score for each user ``[B, items + 1]`` (column 0, the unknown item, hidden), given
        the items each rated in training (``seen`` int [B, S], 0-padded) for the item-item part."""
        every = tf.range(self.num_items + 1)
        bias = tf.squeeze(self.item_bias(every), -1)
        scores = tf.matmul(self.user_factors(users), self.item_factors(every), transpose_b=True) + bias
        if self._item_item is not None and seen is not None:
            scores += self.item_item_scale * self.item_item_scores(seen)
        scores = tf.where((users > 0)[:, None], scores, self.popularity[None, :])
        return tf.concat([tf.fill([tf.shape(users)[0], 1], HIDDEN), scores[:, 1:]], axis=1)

    def item_item_scores(self, seen):
        """``sum_{j in seen} W_j`` per row ``[B, items + 1]``, ``seen`` int [B, S] 0-padded (each item once):
        a sparse product, so its cost is the rated items' count times the catalogue, not the catalogue
        squared."""
        seen = tf.cast(seen, tf.int64)
        where = tf.where(seen > 0)
        history = tf.SparseTensor(tf.stack([where[:, 0], tf.gather_nd(seen, where)], axis=1),
                                  tf.ones([tf.shape(where)[0]], tf.float32),
                                  tf.stack([tf.shape(seen, out_type=tf.int64)[0], self.num_items + 1]))
        return tf.sparse.sparse_dense_matmul(history, self._item_item.value)

    def train_step(self, data):
        x, _ = data[0], data[1]
        users, items = x["user"], x["item"]
        negatives = tf.random.uniform([self.negatives], 1, self.num_items + 1, dtype=items.dtype)
        with tf.GradientTape() as tape:
            p, q = rows(self.user_factors, users), rows(self.item_factors, items)
            positive = tf.reduce_sum(p * q, -1) + tf.squeeze(rows(self.item_bias, items), -1)
            others = (tf.matmul(p, rows(self.item_factors, negatives), transpose_b=True)
                      + tf.squeeze(rows(self.item_bias, negatives), -1)[None, :])
            # A sampled "negative" that is the rating's own item is no negative.
            others = tf.where(negatives[None, :] == items[:, None], HIDDEN, others)
            logits = tf.concat([positive[:, None], others], axis=1)
            loss = tf.reduce_mean(tf.reduce_logsumexp(logits, axis=1) - positive)
            penalty = self.l2 * tf.reduce_mean(tf.reduce_sum(p * p, -1) + tf.reduce_sum(q * q, -1))
            # Each replica's gradient is summed across replicas: scale to the global batch's mean.
            scaled = (loss + penalty) / tf.distribute.get_strategy().num_replicas_in_sync
        weights = self.trainable_weights
        self.optimizer.apply_gradients(zip(tape.gradient(scaled, weights), weights, strict=True))
        self.loss_tracker.update_state(loss)
        return {"loss": self.loss_tracker.result()}

    def test_step(self, data):
        x, positives = data[0], data[1]
        users, seen = x["user"], tf.cast(x["seen"], tf.int32)
        scores = hide(self.user_scores(users, seen), seen, HIDDEN)
        is_positive = hide(tf.zeros_like(scores), tf.cast(positives, tf.int32), 1.0) > 0
        count = tf.reduce_sum(tf.cast(is_positive, tf.float32), axis=1)
        weight = tf.cast(count > 0, tf.float32)  # padding rows (no positives) count for nothing
        # Full-softmax cross-entropy of each user's positives among the items it could be recommended.
        log_norm = tf.reduce_logsumexp(scores, axis=1)
        mean_positive = tf.reduce_sum(tf.where(is_positive, scores, 0.0), 1) / tf.maximum(count, 1.0)
        self.loss_tracker.update_state(log_norm - mean_positive, sample_weight=weight)
        recall, ndcg = ranking_metrics(scores, is_positive, self.k)
        self.recall_tracker.update_state(recall, sample_weight=weight)
        self.ndcg_tracker.update_state(ndcg, sample_weight=weight)
        return {m.name: m.result() for m in self.metrics}


def rows(layer, ids):
    """``layer``'s embedding rows ``ids``, gathered from the variable itself. keras.layers.Embedding reads the
    whole table into a tensor first; while that read is alive, TensorFlow's copy-on-write makes the step's
    sparse update copy the entire table (1 s a step at 1M rows instead of 8 ms)."""
    table = layer.embeddings
    return tf.gather(table.value if isinstance(table, keras.Variable) else table, ids)


def hide(scores, columns, value):
    """``scores`` with ``columns`` (int [B, S], 0 = padding, which is column 0) set to ``value`` per row."""
    columns = tf.cast(columns, tf.int32)
    n = tf.shape(columns)[0]
    rows = tf.repeat(tf.range(n)[:, None], tf.shape(columns)[1], axis=1)
    where = tf.stack([tf.reshape(rows, [-1]), tf.reshape(columns, [-1])], axis=1)
    updates = tf.fill([tf.shape(where)[0]], tf.cast(value, scores.dtype))
    out = tf.tensor_scatter_nd_update(scores, where, updates)
    # Column 0 is the padding id and the unknown item: never a candidate, never a positive.
    first = tf.fill([n, 1], tf.cast(HIDDEN if value == HIDDEN else 0, scores.dtype))
    return tf.concat([first, out[:, 1:]], 1)


def ranking_metrics(scores, is_positive, k: int):
    """(recall@k, NDCG@k) per row: hits in the top ``k`` over ``min(k, positives)``, and DCG over the
    ideal DCG of ``min(k, positives)`` hits (binary relevance)."""
    top = tf.math.top_k(scores, k=k).indices
    hits = tf.cast(tf.gather(is_positive, top, batch_dims=1), tf.float32)
    count = tf.reduce_sum(tf.cast(is_positive, tf.float32), axis=1)
    best = tf.minimum(count, float(k))
    discount = 1.0 / tf.math.log(tf.range(2, k + 2, dtype=tf.float32)) * math.log(2.0)
    ideal = tf.gather(tf.concat([[0.0], tf.cumsum(discount)], 0), tf.cast(best, tf.int32))
    recall = tf.reduce_sum(hits, 1) / tf.maximum(best, 1.0)
    ndcg = tf.reduce_sum(hits * discount[None, :], 1) / tf.maximum(ideal, 1e-9)
    return recall, ndcg


def compile_recommender(model: RankingMF, learning_rate: float) -> RankingMF:
    model.compile(optimizer=SparseAdagrad(learning_rate=learning_rate, initial_accumulator_value=1e-8))
    model.build_all()
    model.optimizer.build(model.trainable_weights)
    return model


def rated_by_user(users: np.ndarray, items: np.ndarray, num_users: int) -> tuple[np.ndarray, np.ndarray]:
    """The items each user rated in training as CSR arrays (row_splits [num_users + 2], values), by index,
    each item once per user (sorted)."""
    width = int(items.max(initial=0)) + 1
    pairs = np.unique(users.astype(np.int64) * width + items)
    users, items = pairs // width, pairs % width
    counts = np.bincount(users, minlength=num_users + 1)
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64), items.astype(np.int32)


def recommendations(model: RankingMF, rated: tuple[np.ndarray, np.ndarray], max_k: int,
                    chunk: int = 512) -> tuple[np.ndarray, np.ndarray]:
    """Each known user's ``max_k`` best unseen items and their probabilities, ``[num_users + 1, max_k]``
    int32 and float32 (row 0: the most popular items and their share of the training ratings), scoring
    ``chunk`` users at a time: the top_k signature serves these lists, so the export holds ``users x max_k``
    entries instead of every user's rated items (and the item-item matrix)."""
    splits, values = rated
    table = np.zeros((model.num_users + 1, max_k), np.int32)
    probability = np.zeros((model.num_users + 1, max_k), np.float32)
    counts = np.expm1(model.popularity.numpy()[1:].astype(np.float64))
    popular = np.argsort(-counts, kind="stable")[:max_k]
    table[0, :len(popular)] = popular + 1
    probability[0, :len(popular)] = counts[popular] / counts.sum()

    # One graph for every chunk (the seen lists' width varies): about half the time of running the same ops
    # eagerly, which matters at MovieLens-25M's 162k users (minutes of export).
    @tf.function(input_signature=[tf.TensorSpec([None], tf.int32), tf.TensorSpec([None, None], tf.int32)])
    def best_unseen(users, seen):
        scores = model.user_scores(users, seen)
        # P(i | u) over the whole catalogue, the seen items included, as the model was trained.
        log_norm = tf.reduce_logsumexp(scores[:, 1:], axis=1, keepdims=True)
        best, index = tf.math.top_k(hide(scores, seen, HIDDEN), k=max_k)
        found = best > HIDDEN / 2
        return tf.where(found, index, 0), tf.where(found, tf.exp(best - log_norm), 0.0)

    for start in range(1, model.num_users + 1, chunk):
        users = np.arange(start, min(start + chunk, model.num_users + 1), dtype=np.int32)
        lengths = splits[users + 1] - splits[users]
        seen = np.zeros((len(users), max(1, int(lengths.max()))), np.int32)
        mine = values[splits[users[0]]:splits[users[-1] + 1]]
        seen[np.arange(len(users)).repeat(lengths), _ranks(lengths)] = mine
        index, scores = best_unseen(tf.constant(users), tf.constant(seen))
        table[users], probability[users] = index.numpy(), scores.numpy()
    return table, probability


def _ranks(lengths: np.ndarray) -> np.ndarray:
    """0, 1, ..., n-1 for each n in ``lengths``, concatenated."""
    ends = np.cumsum(lengths)
    return np.arange(ends[-1] if len(ends) else 0) - np.repeat(ends - lengths, lengths)


class IdLookup(keras.layers.Layer):
    """Raw ids -> vocabulary indices, as the training data was indexed (recommender.data.index):
    the export's preprocessor, so serving takes the ids themselves."""

    def __init__(self, user_vocab: Sequence[str], item_vocab: Sequence[str], **kwargs):
        super().__init__(**kwargs)
        self.users = keras.layers.StringLookup(vocabulary=list(user_vocab), num_oov_indices=1,
                                               name="user_lookup")
        self.items = keras.layers.StringLookup(vocabulary=list(item_vocab), num_oov_indices=1,
                                               name="item_lookup")

    def call(self, inputs):
        return {"user": self.users(inputs["user"]), "item": self.items(inputs["item"])}


def serving_tables(item_vocab: Sequence[str], table: np.ndarray, probability: np.ndarray) -> dict:
    """What the serving signatures look up, as variables made once and read by every signature: the export
    then stores each once, in its variables files (a graph constant would be stored once per signature that
    captures it, inside saved_model.pb, which protobuf caps at 2 GB)."""
    # Index 0, the unknown id, is never recommended.
    return {"item_ids": tf.Variable(["", *item_vocab], dtype=tf.string, trainable=False, name="item_ids"),
            "lists": tf.Variable(table, trainable=False, name="top_k_items"),
            "scores": tf.Variable(probability, trainable=False, name="top_k_scores")}


def top_k_function(lookup: IdLookup, tables: dict):
    """``top_k`` (and ``serving_default``): ``user`` (string ids [N]), ``k`` (int [N], clipped to 1..max_k)
    -> ``items`` [N, K], ``scores`` [N, K] and ``known`` [N], K the batch's largest k: each user's best items
    that they did not rate in training, best first, from the lists :func:`recommendations` computed at export
    (``tables``: :func:`serving_tables`). A row asking for fewer than K, or a user with fewer unrated items,
    is padded with item "" and score 0. ``scores`` are the model's probability of each item being the user's
    next. An unknown user (``known`` false) gets the most popular items, scored by their share of the
    training ratings."""
    item_ids, lists, scores_of = tables["item_ids"], tables["lists"], tables["scores"]
    max_k = int(lists.shape[1])

    def top_k(user, k):
        users = lookup.users(user)
        wanted = tf.clip_by_value(tf.cast(k, tf.int32), 1, max_k)
        width = tf.maximum(tf.reduce_max(wanted), 0)  # 0 for an empty request, not INT32_MIN
        index = tf.gather(lists, users)[:, :width]
        keep = (tf.range(width)[None, :] < wanted[:, None]) & (index > 0)
        return {"items": tf.where(keep, tf.gather(item_ids, index), ""),
                "scores": tf.where(keep, tf.gather(scores_of, users)[:, :width], 0.0),
                "known": users > 0}

    return top_k, [tf.TensorSpec([None], tf.string, name="user"), tf.TensorSpec([None], tf.int32, name="k")]


def similar_items_function(model: RankingMF, lookup: IdLookup, tables: dict, max_k: int):
    """``similar_items``: ``item`` (string ids [N]), ``k`` (int [N], clipped to 1..max_k) -> ``items``
    [N, K] and ``scores`` [N, K] (cosine similarity of the item factors, best first, the item itself left
    out) and ``known`` [N]. An unknown item gets an empty row (all "" and 0) and ``known`` false."""
    item_ids = tables["item_ids"]

    def similar(item, k):
        items = lookup.items(item)
        every = tf.range(model.num_items + 1)
        table = tf.math.l2_normalize(model.item_factors(every), axis=1)
        scores = tf.matmul(tf.gather(table, items), table, transpose_b=True)
        scores = hide(scores, items[:, None], HIDDEN)  # not itself; column 0 hidden too
        wanted = tf.clip_by_value(tf.cast(k, tf.int32), 1, max_k)
        width = tf.maximum(tf.reduce_max(wanted), 0)  # 0 for an empty request, not INT32_MIN
        best, index = tf.math.top_k(scores, k=width)
        keep = (tf.range(width)[None, :] < wanted[:, None]) & (best > HIDDEN / 2) & (items > 0)[:, None]
        return {"items": tf.where(keep, tf.gather(item_ids, index), ""), "scores": tf.where(keep, best, 0.0),
                "known": items > 0}

    return similar, [tf.TensorSpec([None], tf.string, name="item"), tf.TensorSpec([None], tf.int32, name="k")]
