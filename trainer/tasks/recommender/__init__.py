"""A ranking recommender, registered as ``--model recommender``: matrix factorisation trained with a sampled
softmax over items (Keras 3, sparse updates) plus a closed-form item-item part where the catalogue fits in
memory, evaluated by recall@k and NDCG@k.

Input: CSV files (local or ``gs://``) whose header names the user, item, rating and, optionally, timestamp
columns (MovieLens's ``userId,movieId,rating,timestamp`` by default; ``--user-column`` etc. rename them).
IDs are strings; the vocabularies come from the training ratings and travel inside the SavedModel. Without
``--eval-files``, ``--eval-fraction`` of ``--train-files`` is held out, at random by ``--seed`` or, with
``--split time``, the latest ratings: the same flags always evaluate on the same ratings.

Model (:mod:`trainer.tasks.recommender.model`): every training rating is an interaction; a user's score of an
item is ``p_u . q_i + b_i``, trained to rank the rated item above ``--negatives`` items sampled from the
catalogue (softmax cross-entropy), with ``--l2`` on the factors a rating touches. A step updates only the
rows it touched, so its cost does not grow with the catalogue. For a catalogue of at most
``--ease-max-items`` items the score adds ``--item-item-scale`` times EASE's item-item weights summed over
the items the user rated (computed once before training, the same matrix the EASE baseline scores with, and
kept for the job's later trials and restarts); a larger catalogue uses the factors alone, saying so.

Metrics, on each eval user's held-out positives (ratings >= ``--positive-threshold`` of items the user did
not rate in training; those items are never candidates): ``recall_at_k`` (the default tuning metric,
MAXIMIZE) and ``ndcg_at_k`` at ``--ranking-k``, and the full-softmax ``loss``. The same run scores the
most-rated unseen items (popularity) and, for a catalogue of at most ``--ease-max-items``, EASE on the same
users, in metrics.json's ``data.baselines`` and the log. At most ``--eval-users`` users are scored (a seeded
sample), so evaluation stays bounded on large data.

Export: ``serving_default`` and ``top_k`` return each user's best items they did not rate in training, with
the model's probability of each (lists computed at export: ``users x --top-k`` entries, whatever the number
of ratings); an unknown user gets the most popular items. ``similar_items`` returns an item's nearest items
by the cosine of the item factors; an unknown item gets an empty row and ``known`` false.

Multi-worker: every worker reads the ratings, makes the same split and vocabularies (checked with an
all-gather) and trains on its own 1/workers share of the training ratings (logged as "this worker's share").

    python -m trainer.task --model recommender --help
    python -m trainer.task --model recommender --train-files data/movielens/ratings.csv \\
        --job-dir /tmp/recommender

This module imports no TensorFlow at import time: the job tooling reads its spec.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

from trainer.sharding import UNSHARDED, Shard
from trainer.tasks.base import (
    MAXIMIZE,
    MINIMIZE,
    Task,
    TaskConfig,
    TaskData,
    TaskSpec,
    check,
    integral,
    option,
)

log = logging.getLogger("trainer")

SPLITS = ("random", "time")
DEFAULT_TOP_K = 100  # the top_k signature's largest k when --top-k is 0
# users x k of the exported top_k lists: 1 GB of int32 items and float32 probabilities, built in memory at
# export and loaded whole by every server replica.
MAX_LIST_ENTRIES = 1 << 27


@dataclass(frozen=True)
class RecommenderConfig(TaskConfig):
    """The recommender's own flags."""

    user_column: str = option("userId", "header name of the user id column (default %(default)s)",
                              metavar="NAME")
    item_column: str = option("movieId", "header name of the item id column (default %(default)s)",
                              metavar="NAME")
    rating_column: str = option("rating", "header name of the rating column (default %(default)s)",
                                metavar="NAME")
    timestamp_column: str = option("timestamp", "header name of the time column, used when present and "
                                   "needed by --split time (default %(default)s)", metavar="NAME")
    split: str = option("random", "without --eval-files: hold out ratings at random (by --seed) or the "
                        "latest ones (default %(default)s)", choices=SPLITS)
    eval_fraction: float = option(0.2, "without --eval-files: the share of --train-files held out for "
                                  "evaluation (default %(default)s)")
    embedding_dim: int = option(64, "user and item factors (default %(default)s)", type=integral, metavar="N")
    l2: float = option(0.03, "L2 penalty per rating on the user and item factors it touches "
                       "(default %(default)s)")
    negatives: int = option(1000, "items sampled from the catalogue per step as the softmax's negatives "
                            "(default %(default)s)", type=integral, metavar="N")
    positive_threshold: float = option(4.0, "an eval rating at or above this is a positive for recall and "
                                       "NDCG (default %(default)s)")
    ranking_k: int = option(10, "k of recall@k and NDCG@k (default %(default)s)", type=integral, metavar="K")
    eval_users: int = option(5000, "the most eval users scored for the ranking metrics, a seeded sample "
                             "(default %(default)s)", type=integral, metavar="N")
    ease_max_items: int = option(20000, "compute the EASE baseline when the catalogue has at most this many "
                                 "items (a dense items x items inverse; 0: never) (default %(default)s)",
                                 type=integral, metavar="N")
    item_item_scale: float = option(20.0, "weight of the item-item part (EASE's weights over the items a "
                                    "user rated) in the score, for a catalogue of at most --ease-max-items "
                                    "items; 0: the factors alone (default %(default)s)")
    top_k: int = option(0, "the most items the top_k and similar_items signatures return, at most the "
                        f"catalogue (default 0: {DEFAULT_TOP_K} or the whole catalogue if smaller)",
                        type=integral, metavar="K")

    def validate(self) -> None:
        for name in ("user_column", "item_column", "rating_column", "timestamp_column"):
            value = getattr(self, name)
            check(bool(value.strip()) and "," not in value and value.isprintable(), name,
                  "a column name (no comma)", value)
        names = [self.user_column, self.item_column, self.rating_column]
        check(len(set(names)) == 3, "rating_column", "different from --user-column and --item-column",
              self.rating_column)
        check(0 < self.eval_fraction < 1, "eval_fraction", "in (0, 1)", self.eval_fraction)
        check(1 <= self.embedding_dim <= 1024, "embedding_dim", "an integer in 1..1024", self.embedding_dim)
        check(0 <= self.l2 < math.inf, "l2", "a finite number >= 0", self.l2)
        check(self.negatives >= 1, "negatives", "an integer >= 1", self.negatives)
        check(math.isfinite(self.positive_threshold), "positive_threshold", "a finite number",
              self.positive_threshold)
        check(self.ranking_k >= 1, "ranking_k", "an integer >= 1", self.ranking_k)
        check(self.eval_users >= 1, "eval_users", "an integer >= 1", self.eval_users)
        check(self.ease_max_items >= 0, "ease_max_items", "an integer >= 0", self.ease_max_items)
        check(0 <= self.item_item_scale <= 1e6, "item_item_scale", "a number in 0..1e6", self.item_item_scale)
        check(self.top_k >= 0, "top_k", "an integer >= 0", self.top_k)


SPEC = TaskSpec(
    name="recommender",
    description="ranking recommender: matrix factorisation trained with a sampled softmax over items plus "
                "EASE's item-item weights (CSV ratings), scored by recall@k and NDCG@k",
    config=RecommenderConfig,
    metrics={"recall_at_k": MAXIMIZE, "ndcg_at_k": MAXIMIZE, "loss": MINIMIZE},
    export_formats={"JSON": "{\"user\": ID, \"k\": N} instances (ids as strings) -> the user's best N "
                            "unseen items (serving_default, also named top_k); similar_items takes "
                            "{\"item\": ID, \"k\": N}"},
    defaults={"num_epochs": 15, "train_batch_size": 1024, "eval_batch_size": 128, "learning_rate": 0.1},
    flag_help={"learning_rate": "Adagrad learning rate (sparse: only the rows a step touched) "
                                "(default %(default)s)",
               "eval_batch_size": "eval users scored per batch (default %(default)s)"},
    splits_train_files=True,
)


def make_data(cfg, global_train_batch: int, global_eval_batch: int,
              shard: Shard = UNSHARDED) -> TaskData:
    import numpy as np
    import tensorflow as tf

    from trainer.data import DataError, expand_files, name_files
    from trainer.kept import may_claim
    from trainer.sharding import PREFETCH_BATCHES, dataset_options, empty_share
    from trainer.tasks.recommender import data as rd
    from trainer.tasks.recommender.model import IdLookup, rated_by_user

    task = cfg.task
    columns = rd.RatingColumns(task.user_column, task.item_column, task.rating_column, task.timestamp_column)
    # The time column is optional unless a time split needs it.
    flags = {"timestamp": "--timestamp-column" if task.split == "time" and not cfg.eval_files else None}
    given = rd.read_ratings(expand_files(cfg.train_files, "--train-files"), columns, "--train-files", flags)
    if not len(given):
        raise DataError(f"--train-files: no ratings in {name_files(given.sources)}")
    if cfg.eval_files:
        train = given
        evaluation = rd.read_ratings(expand_files(cfg.eval_files, "--eval-files"), columns, "--eval-files",
                                     flags)
        if not len(evaluation):
            raise DataError(f"--eval-files: no ratings in {name_files(evaluation.sources)}")
        split = {"how": "files"}
        held_out = "--eval-files " + name_files(evaluation.sources)
    else:
        train, evaluation = rd.split_ratings(given, task.split, task.eval_fraction, cfg.seed)
        split = {"how": task.split, "eval_fraction": task.eval_fraction, "seed": cfg.seed}
        held_out = f"the --eval-fraction {task.eval_fraction:g} held out of --train-files"
    users, items = rd.vocabularies(train, columns)
    if task.top_k > len(items):
        raise DataError(f"--top-k {task.top_k}: larger than the catalogue of {len(items)} items in the "
                        f"training ratings")
    if task.ranking_k > len(items):
        raise DataError(f"--ranking-k {task.ranking_k}: larger than the catalogue of {len(items)} items in "
                        "the training ratings")
    low, high = float(train.ratings.min()), float(train.ratings.max())
    if not low <= task.positive_threshold <= high:
        raise DataError(f"--positive-threshold {task.positive_threshold:g}: outside the training ratings' "
                        f"range {low:g}..{high:g}")
    max_k = task.top_k or min(DEFAULT_TOP_K, len(items))
    if (len(users) + 1) * max_k > MAX_LIST_ENTRIES:
        # Refuse before training rather than run out of memory at export (or in the server).
        raise DataError(f"--top-k {max_k}: {len(users)} users x {max_k} recommendations would export "
                        f"{(len(users) + 1) * max_k} list entries, more than the {MAX_LIST_ENTRIES} allowed; "
                        f"use --top-k {max(1, MAX_LIST_ENTRIES // (len(users) + 1))} or less")
    fit, score = rd.index(train, users, items), rd.index(evaluation, users, items)
    rated = rated_by_user(fit.users, fit.items, len(users))
    ranked = rd.eval_users(fit, evaluation, score, rated, task.positive_threshold, task.eval_users, cfg.seed)
    if not len(ranked):
        raise DataError(f"--positive-threshold {task.positive_threshold:g}: no user has a positive in "
                        f"{held_out} (a rating >= {task.positive_threshold:g} of an item known to training "
                        "that the user did not rate in training)")
    # Every worker made the same split and vocabularies from the same files: check it (a collective, called
    # by every worker in the same order), so a file that changed between reads cannot desynchronise them.
    sizes = [len(users), len(items), len(train), len(ranked)]
    if any(other != sizes for other in shard.exchange(sizes)):
        raise DataError(f"--train-files: the workers read different ratings ({shard.exchange(sizes)}: "
                        "users, items, training ratings, eval users); did the files change during the start?")

    # This worker's share of the training ratings: every count-th one (the split is already random or by
    # time, so a share is a fair sample), shuffled per epoch as index arrays in NumPy, never a per-rating
    # buffer.
    mine = np.arange(shard.index, len(fit.ratings), shard.count)
    # Every worker holds the same ratings (checked above), so each computes every share's size and all
    # refuse together, with no collective, when one has none to train on (trainer.sharding.empty_share).
    empty = empty_share([len(range(i, len(fit.ratings), shard.count)) for i in range(shard.count)],
                        given.sources, "--train-files", "training ratings", by_record=True)
    if empty:
        raise DataError(empty)
    share_users, share_items = fit.users[mine], fit.items[mine]
    share_ratings = fit.ratings[mine]
    log.info("this worker's share: %d ratings of %d (worker %d of %d)", len(mine), len(fit.ratings),
             shard.index, shard.count)
    rng = np.random.default_rng([cfg.seed, shard.index])

    def batches():
        order = rng.permutation(len(mine))
        for start in range(0, len(order), global_train_batch):
            pick = order[start:start + global_train_batch]
            yield {"user": share_users[pick], "item": share_items[pick]}, share_ratings[pick]

    signature = ({"user": tf.TensorSpec([None], tf.int32), "item": tf.TensorSpec([None], tf.int32)},
                 tf.TensorSpec([None], tf.float32))
    train_ds = tf.data.Dataset.from_generator(batches, output_signature=signature).apply(
        tf.data.experimental.assert_cardinality(-(-len(mine) // global_train_batch)))
    if cfg.steps_per_epoch is not None:
        train_ds = train_ds.repeat()

    # Eval users dealt to workers; each worker's share padded to the same length with rows that have no
    # positives (weight 0), so every worker runs the same number of evaluation steps.
    per_worker = -(-len(ranked) // shard.count)
    share = ranked.take(np.arange(shard.index, len(ranked), shard.count))
    pad = per_worker - len(share)
    seen = tf.RaggedTensor.from_row_splits(share.seen_items, share.seen_splits)
    positives = tf.RaggedTensor.from_row_splits(share.positive_items, share.positive_splits)
    eval_ds = tf.data.Dataset.from_tensor_slices(({"user": share.users, "seen": seen}, positives))
    if pad:
        empty = tf.RaggedTensor.from_row_splits(np.zeros(0, np.int32), np.zeros(pad + 1, np.int64))
        eval_ds = eval_ds.concatenate(tf.data.Dataset.from_tensor_slices(
            ({"user": np.zeros(pad, np.int32), "seen": empty}, empty)))
    eval_ds = eval_ds.ragged_batch(global_eval_batch).map(
        lambda x, y: ({"user": x["user"], "seen": x["seen"].to_tensor()}, y.to_tensor()))

    # A random split's eval ratings come from the training files: each file is stat'ed once.
    files = list(dict.fromkeys([*given.sources, *evaluation.sources]))
    keeps = []
    weights = None
    if task.item_item_scale > 0 and len(items) <= task.ease_max_items:
        # Every worker scores its eval users and exports with it: each reads the kept matrix or computes it.
        weights, keep_weights = kept_item_item(shard.cache_dir, files, [columns, split, cfg.seed],
                                               len(items), lambda: rd.ease_weights(fit, len(items)),
                                               claim=may_claim(shard))
        if shard.index == 0:
            keeps.append(keep_weights)
        item_item = f"EASE's weights on {len(items)} items, scale {task.item_item_scale:g}"
    elif task.item_item_scale > 0:
        item_item = (f"skipped: {len(items)} items > --ease-max-items {task.ease_max_items} (a dense items x "
                     "items matrix); the factors alone")
    else:
        item_item = "off (--item-item-scale 0): the factors alone"
    log.info("model: matrix factorisation; item-item part: %s", item_item)
    baselines = {}
    if shard.index == 0:
        depends = [columns, split, cfg.seed, task.positive_threshold, task.ranking_k, task.eval_users,
                   task.ease_max_items]
        baselines, keep_figures = kept_baselines(shard.cache_dir, files, depends, lambda: (
            rd.ranking_baselines(fit, ranked, len(items), task.ranking_k, task.ease_max_items, weights)),
            claim=may_claim(shard))
        keeps.append(keep_figures)
    keeps = [keep for keep in keeps if keep]
    report = {
        "train": {"files": list(given.sources), "ratings": len(train), "users": len(users),
                  "items": len(items), "this_worker_ratings": len(mine)},
        "eval": {"files": list(evaluation.sources), "ratings": len(evaluation),
                 "unknown_users": int(np.sum(score.users == 0)),
                 "unknown_items": int(np.sum(score.items == 0)),
                 "ranked_users": len(ranked), "users_with_positives": ranked.total},
        "split": split, "rating_range": [low, high], "item_item": item_item,
        "ranking": {"k": task.ranking_k, "positive_threshold": task.positive_threshold},
        "baselines": {name: figures for name, figures in baselines.items() if "skipped" not in figures},
        "skipped_baselines": {name: f["skipped"] for name, f in baselines.items() if "skipped" in f},
    }
    if shard.sharded:  # the loop logs what this worker reads per epoch from it (trainer.train), as for census
        report["shard"] = {"index": shard.index, "count": shard.count, "by_record": True,
                           "train_records": len(mine), "eval_records": len(share)}
    where = "files" if cfg.eval_files else f"{task.split} {task.eval_fraction:g} split, seed {cfg.seed}"
    report["summary"] = (f"train: {len(train)} ratings by {len(users)} users of {len(items)} items; eval: "
                         f"{len(evaluation)} ratings ({where}); ranking: {len(ranked)} of {ranked.total} "
                         f"users with a rating >= {task.positive_threshold:g} of an item unseen in training, "
                         f"k = {task.ranking_k}")
    for name, why in report["skipped_baselines"].items():
        log.info("baseline %s skipped: %s", name, why)
    lookup = IdLookup(users.tolist(), items.tolist(), name="id_lookup")
    lookup({"user": tf.constant(["?"]), "item": tf.constant(["?"])})  # built before the export tracks it
    options = dataset_options(shuffle=True)
    return TaskData(
        train=train_ds.prefetch(PREFETCH_BATCHES).with_options(options),
        eval=eval_ds.prefetch(PREFETCH_BATCHES).with_options(dataset_options(shuffle=False)),
        train_rows=len(train), eval_rows=len(ranked),
        train_steps=max(1, math.ceil(len(train) / global_train_batch)),
        preprocessor=lookup, report=report,
        state={"items": items.tolist(), "rated": rated, "num_users": len(users), "max_k": max_k,
               "popularity": np.bincount(fit.items, minlength=len(items) + 1), "item_item": weights},
        keep=(lambda: [keep() for keep in keeps]) if keeps else None)


_BASELINES_FORMAT = 1  # bump when what the baselines compute changes: older kept figures are then not read
_ITEM_ITEM_FORMAT = 1  # likewise for the item-item weights


def kept_baselines(folder: str | None, files: list[str], depends: list, compute, *,
                   claim: bool = False) -> tuple[dict, Callable | None]:
    """(``compute()``: popularity's and EASE's figures, and what keeps them in ``folder`` (trainer.kept) for
    the job's later trials and restarts), or (the figures a run before this one kept for the same files and
    flags, None): EASE inverts an items x items matrix (over a minute and GBs on the shipped data), and a
    study pays for it once. ``claim``: a trial computing the same figures now is waited for (trainer.kept's
    claims)."""
    import json

    def decode(raw: bytes):
        figures = json.loads(raw)
        return figures if isinstance(figures, dict) else None

    return _kept(folder, "baselines.json", "baselines", [_BASELINES_FORMAT, depends], files, 1 << 20, decode,
                 lambda figures: json.dumps(figures).encode(), compute, claim)


def kept_item_item(folder: str | None, files: list[str], depends: list, num_items: int, compute, *,
                   claim: bool = False) -> tuple:
    """The model's item-item weights ``[items + 1, items + 1]`` float32, as :func:`kept_baselines` keeps
    the baselines' figures: the inverse is the slowest part of a run on the shipped data."""
    import io

    import numpy as np

    shape = (num_items + 1, num_items + 1)

    def decode(raw: bytes):
        weights = np.load(io.BytesIO(raw), allow_pickle=False)  # a damaged file raises: computed again
        valid = isinstance(weights, np.ndarray) and weights.shape == shape and weights.dtype == np.float32
        return weights if valid else None

    def encode(weights) -> bytes:
        out = io.BytesIO()
        np.save(out, weights, allow_pickle=False)
        return out.getvalue()

    return _kept(folder, "item-item.npy", "item-item weights", [_ITEM_ITEM_FORMAT, depends], files,
                 shape[0] * shape[1] * 4 + 4096, decode, encode, compute, claim)


def _kept(folder, name: str, what: str, version: list, files: list[str], max_bytes: int, decode, encode,
          compute, claim: bool) -> tuple:
    """(``compute()``, a callable that keeps it) or (the value kept for the same files and ``version``
    ([format, what it depends on]), None). ``name`` is the kept file's (``prefix.suffix``; the key goes
    between); ``decode`` returns None (or raises one of ``trainer.kept.UNREADABLE``) for kept bytes that are
    not a valid value; ``claim``: a miss is claimed until kept (trainer.kept.read)."""
    import tensorflow as tf

    from trainer import kept

    if not folder:
        return compute(), None
    try:
        identity = kept.files_identity(files)
    except tf.errors.OpError:
        return compute(), None
    prefix, suffix = name.rsplit(".", 1)
    fmt, depends = version
    path = f"{folder}/{prefix}-{kept.key(fmt, identity, repr(depends))}.{suffix}"
    raw = kept.read(path, max_bytes, what, claim=claim)
    if raw is not None:
        try:
            value = decode(raw)
        except kept.UNREADABLE:
            value = None
        if value is not None:
            log.info("%s: read from %s", what, path)
            return value, None
        log.warning("not reading the kept %s %s: computing them again", what, path)
    value = compute()
    return value, lambda: kept.write(path, encode(value), what)


def build_model(cfg, data: TaskData):
    from trainer.tasks.recommender.model import RankingMF, compile_recommender

    state = data.state
    model = RankingMF(state["num_users"], len(state["items"]), cfg.task.embedding_dim, cfg.task.l2,
                      cfg.task.negatives, state["popularity"], cfg.task.ranking_k, seed=cfg.seed,
                      item_item=state["item_item"], item_item_scale=cfg.task.item_item_scale,
                      name="ranking_mf")
    return compile_recommender(model, cfg.learning_rate)


def serving_fn(model, data: TaskData, export_format: str):
    from trainer.tasks.recommender.model import top_k_function

    if export_format != "JSON":
        raise ValueError(f"unsupported export format {export_format!r}")
    # A deployed recommender's default request asks for recommendations: serving_default is top_k.
    return top_k_function(data.preprocessor, _tables(model, data))


def more_signatures(model, data: TaskData):
    from trainer.tasks.recommender.model import similar_items_function, top_k_function

    tables = _tables(model, data)
    return {"top_k": top_k_function(data.preprocessor, tables),
            "similar_items": similar_items_function(model, data.preprocessor, tables, data.state["max_k"])}


def _tables(model, data: TaskData) -> dict:
    """Each user's recommendations and their probabilities, and the item ids, computed once and shared by
    every signature (trainer.tasks.recommender.model.serving_tables)."""
    from trainer.tasks.recommender.model import recommendations, serving_tables

    state = data.state
    if "tables" not in state:
        state["tables"] = serving_tables(state["items"], *recommendations(model, state["rated"],
                                                                           state["max_k"]))
    return state["tables"]


TASK = Task(spec=SPEC, make_data=make_data, build_model=build_model, serving_fn=serving_fn,
            more_signatures=more_signatures)
