"""The recommender's hooks (:class:`trainer.models.base.Task`): :func:`make_data` reads, splits and checks the
ratings (:mod:`trainer.models.recommender.data`), deals this worker its share and computes or reads what a
study caches (:mod:`trainer.models.recommender.cached_results`); :func:`build_model`, :func:`serving_fn` and
:func:`more_signatures` build the model and its signatures (:mod:`trainer.models.recommender.model`).

TensorFlow is imported inside the hooks: the task package imports this module for them.
"""

from __future__ import annotations

import json
import logging
import math

import numpy as np

from trainer import progress
from trainer.input_files import DataError, expand_files, name_files
from trainer.models.base import TaskData
from trainer.models.recommender import data as rd
from trainer.models.recommender.cached_results import cached_baselines, cached_item_item
from trainer.result_cache import may_claim
from trainer.sharding import PREFETCH_BATCHES, UNSHARDED, Shard, dataset_options, empty_share

log = logging.getLogger("trainer")

DEFAULT_TOP_K = 100  # the top_k signature's largest k when --top-k is 0
# users x k of the exported top_k lists: 1 GB of int32 items and float32 probabilities, built in memory at
# export and loaded whole by every server replica.
MAX_LIST_ENTRIES = 1 << 27


def make_data(cfg, global_train_batch: int, global_eval_batch: int,
              shard: Shard = UNSHARDED) -> TaskData:
    import tensorflow as tf

    from trainer.models.recommender.model import IdLookup, rated_by_user

    task = cfg.task
    columns = rd.RatingColumns(task.user_column, task.item_column, task.rating_column, task.timestamp_column)
    # The time column is optional unless a time split needs it.
    flags = {"timestamp": "--timestamp-column" if task.split == "time" and not cfg.eval_files else None}
    with progress.stage("ratings") as done:
        paths = expand_files(cfg.train_files, "--train-files")
        given = rd.read_ratings(paths, columns, "--train-files", flags)
        done["detail"] = f"{len(given)} read from {name_files(given.sources)}"
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
    cache_writes = []
    weights = None
    if task.item_item_scale > 0 and len(items) <= task.ease_max_items:
        # Every worker scores its eval users and exports with it: each reads the cached matrix or computes it.
        with progress.stage("EASE weights", f"{len(items)} x {len(items)} items: starting") as done:
            weights, cache_weights = cached_item_item(shard.cache_dir, files, [columns, split, cfg.seed],
                                                      len(items), lambda: rd.ease_weights(fit, len(items)),
                                                      claim=may_claim(shard))
            done["detail"] = f"{len(items)} x {len(items)} items, {_whence(shard, cache_weights)}"
        if shard.index == 0:
            cache_writes.append(cache_weights)
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
        with progress.stage("baselines", f"on {len(ranked)} users: starting") as done:
            baselines, cache_figures = cached_baselines(shard.cache_dir, files, depends, lambda: (
                rd.ranking_baselines(fit, ranked, len(items), task.ranking_k, task.ease_max_items, weights)),
                claim=may_claim(shard))
            measured = [name for name, figures in baselines.items() if "skipped" not in figures]
            done["detail"] = (f"{', '.join(measured) or 'none'} on {len(ranked)} users, "
                              f"{_whence(shard, cache_figures)}")
        cache_writes.append(cache_figures)
    cache_writes = [write for write in cache_writes if write]
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
               "users": users.tolist(), "ranking_k": task.ranking_k,
               "popularity": np.bincount(fit.items, minlength=len(items) + 1), "item_item": weights},
        write_cache=(lambda: [write() for write in cache_writes]) if cache_writes else None)


def _whence(shard: Shard, cache_write) -> str:
    """How a cached result came (trainer.models.recommender.cached_results: no writer once it was read)."""
    return "read from the run cache" if shard.cache_dir and cache_write is None else "computed"


USERS_FILE = "users.jsonl"


def export_files(data: TaskData) -> dict[str, str]:
    """Beside the SavedModel, every user it knows as a top_k instance, one a line: `{"user": ID, "k":
    --ranking-k}` (the k the gate's recall@k measured). A batch prediction of the export reads it: every
    known user's list (infra/environments/dev.yaml's daily batch)."""
    k = data.state["ranking_k"]
    lines = (json.dumps({"user": str(user), "k": k}) + "\n" for user in data.state["users"])
    return {USERS_FILE: "".join(lines)}


def build_model(cfg, data: TaskData):
    from trainer.models.recommender.model import RankingMF, compile_recommender

    state = data.state
    model = RankingMF(state["num_users"], len(state["items"]), cfg.task.embedding_dim, cfg.task.l2,
                      cfg.task.negatives, state["popularity"], cfg.task.ranking_k, seed=cfg.seed,
                      item_item=state["item_item"], item_item_scale=cfg.task.item_item_scale,
                      name="ranking_mf")
    return compile_recommender(model, cfg.learning_rate)


def serving_fn(model, data: TaskData, export_format: str):
    from trainer.models.recommender.model import top_k_function

    if export_format != "JSON":
        raise ValueError(f"unsupported export format {export_format!r}")
    # A deployed recommender's default request asks for recommendations: serving_default is top_k.
    return top_k_function(data.preprocessor, _tables(model, data))


def more_signatures(model, data: TaskData):
    from trainer.models.recommender.model import similar_items_function, top_k_function

    tables = _tables(model, data)
    return {"top_k": top_k_function(data.preprocessor, tables),
            "similar_items": similar_items_function(model, data.preprocessor, tables, data.state["max_k"])}


def _tables(model, data: TaskData) -> dict:
    """Each user's recommendations and their probabilities, and the item ids, computed once and shared by
    every signature (trainer.models.recommender.model.serving_tables)."""
    from trainer.models.recommender.model import recommendations, serving_tables

    state = data.state
    if "tables" not in state:
        state["tables"] = serving_tables(state["items"], *recommendations(model, state["rated"],
                                                                           state["max_k"]))
    return state["tables"]
