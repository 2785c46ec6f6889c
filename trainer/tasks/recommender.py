"""A ratings recommender, registered as ``--model recommender``: biased matrix factorisation in Keras 3.

Input: CSV files (local or ``gs://``) whose header names the user, item, rating and, optionally, timestamp
columns (MovieLens's ``userId,movieId,rating,timestamp`` by default; ``--user-column`` etc. rename them).
IDs are strings; the vocabularies come from the training ratings and travel inside the SavedModel. Without
``--eval-files``, ``--eval-fraction`` of ``--train-files`` is held out, at random by ``--seed`` or, with
``--split time``, the latest ratings: the same flags always evaluate on the same ratings.

Model (:mod:`trainer.recommender_model`): ``mean + b_u + b_i + p_u . q_i`` with ``--embedding-dim``
factors, a per-rating ``--l2`` penalty and biases started from the damped bias-only baseline. Metrics on the
evaluation ratings: RMSE (the default tuning metric, MINIMIZE) and MAE, logged and saved beside the same
figures for the global mean and the bias-only baseline. Export: ``serving_default`` rates (user, item)
pairs; ``top_k`` returns each user's best items they did not rate in training. An id the training data did
not have falls back to the other's bias and the global mean.

    python -m trainer.task --model recommender --help
    python -m trainer.task --model recommender --train-files data/movielens/ratings.csv \\
        --job-dir /tmp/recommender

This module imports no TensorFlow at import time: the job tooling reads its spec.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainer.sharding import UNSHARDED, Shard
from trainer.tasks.base import MINIMIZE, Task, TaskConfig, TaskData, TaskSpec, check, integral, option

SPLITS = ("random", "time")
DEFAULT_TOP_K = 100  # the top_k signature's largest k when --top-k is 0


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
    l2: float = option(0.1, "L2 penalty per rating on the factors it touches; biases get a tenth "
                       "(default %(default)s)")
    top_k: int = option(0, "the most items the top_k signature returns per user, at most the catalogue "
                        f"(default 0: {DEFAULT_TOP_K} or the whole catalogue if smaller)", type=integral,
                        metavar="K")

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
        check(self.top_k >= 0, "top_k", "an integer >= 0", self.top_k)


SPEC = TaskSpec(
    name="recommender",
    description="ratings recommender: biased matrix factorisation of user-item ratings (CSV)",
    config=RecommenderConfig,
    metrics={"rmse": MINIMIZE, "mae": MINIMIZE, "loss": MINIMIZE},
    export_formats={"JSON": "{\"user\": ID, \"item\": ID} instances (ids as strings); the top_k signature "
                            "takes {\"user\": ID, \"k\": N}"},
    defaults={"num_epochs": 12, "train_batch_size": 256, "eval_batch_size": 4096, "learning_rate": 0.002},
    flag_help={"learning_rate": "Adam learning rate, decayed to 0 over the run (default %(default)s)"},
    splits_train_files=True,
)


def make_data(cfg, global_train_batch: int, global_eval_batch: int,
              shard: Shard = UNSHARDED) -> TaskData:
    import numpy as np
    import tensorflow as tf

    from trainer import ratings_data as rd
    from trainer.data import DataError, expand_files
    from trainer.recommender_model import IdLookup, rated_by_user

    task = cfg.task
    columns = rd.RatingColumns(task.user_column, task.item_column, task.rating_column, task.timestamp_column)
    # The time column is optional unless a time split needs it.
    flags = {"timestamp": "--timestamp-column" if task.split == "time" and not cfg.eval_files else None}
    given = rd.read_ratings(expand_files(cfg.train_files, "--train-files"), columns, "--train-files", flags)
    if not len(given):
        raise DataError(f"--train-files: no ratings in {', '.join(given.sources)}")
    if cfg.eval_files:
        train = given
        evaluation = rd.read_ratings(expand_files(cfg.eval_files, "--eval-files"), columns, "--eval-files",
                                     flags)
        if not len(evaluation):
            raise DataError(f"--eval-files: no ratings in {', '.join(evaluation.sources)}")
        split = {"how": "files"}
    else:
        train, evaluation = rd.split_ratings(given, task.split, task.eval_fraction, cfg.seed)
        split = {"how": task.split, "eval_fraction": task.eval_fraction, "seed": cfg.seed}
    users, items = rd.vocabulary(train.users), rd.vocabulary(train.items)
    if task.top_k > len(items):
        raise DataError(f"--top-k {task.top_k}: larger than the catalogue of {len(items)} items in the "
                        f"training ratings")
    max_k = task.top_k or min(DEFAULT_TOP_K, len(items))
    fit, score = rd.index(train, users, items), rd.index(evaluation, users, items)
    rating_range = (float(train.ratings.min()), float(train.ratings.max()))
    mean, user_bias, item_bias = rd.bias_only(fit, len(users), len(items))

    train_ds = tf.data.Dataset.from_tensor_slices(({"user": fit.users, "item": fit.items}, fit.ratings))
    train_ds = train_ds.shuffle(len(fit.ratings), seed=cfg.seed, reshuffle_each_iteration=True)
    if cfg.steps_per_epoch is not None:
        train_ds = train_ds.repeat()
    eval_ds = tf.data.Dataset.from_tensor_slices(({"user": score.users, "item": score.items}, score.ratings))
    unknown = {"unknown_users": int(np.sum(score.users == 0)), "unknown_items": int(np.sum(score.items == 0))}
    report = {
        "train": {"files": list(given.sources), "ratings": len(train), "users": len(users),
                  "items": len(items)},
        "eval": {"files": list(evaluation.sources), "ratings": len(evaluation), **unknown},
        "split": split, "rating_range": list(rating_range), "global_mean": mean,
        "baselines": rd.baselines(fit, score, len(users), len(items), rating_range),
    }
    where = "files" if cfg.eval_files else f"{task.split} {task.eval_fraction:g} split, seed {cfg.seed}"
    report["summary"] = (f"train: {len(train)} ratings by {len(users)} users of {len(items)} items; eval: "
                         f"{len(evaluation)} ratings ({where}; {unknown['unknown_users']} by unknown users, "
                         f"{unknown['unknown_items']} of unknown items)")
    lookup = IdLookup(users.tolist(), items.tolist(), name="id_lookup")
    lookup({"user": tf.constant(["?"]), "item": tf.constant(["?"])})  # built before the export tracks it
    return TaskData(
        train=train_ds.batch(global_train_batch).prefetch(tf.data.AUTOTUNE),
        eval=eval_ds.batch(global_eval_batch).prefetch(tf.data.AUTOTUNE),
        train_rows=len(train), eval_rows=len(evaluation),
        train_steps=max(1, math.ceil(len(train) / global_train_batch)),
        preprocessor=lookup, report=report,
        state={"items": items.tolist(), "mean": mean, "user_bias": user_bias, "item_bias": item_bias,
               "rating_range": rating_range, "rated": rated_by_user(fit.users, fit.items, len(users)),
               "num_users": len(users), "max_k": max_k})


def build_model(cfg, data: TaskData):
    from trainer.recommender_model import BiasedMF, compile_recommender

    state = data.state
    model = BiasedMF(state["num_users"], len(state["items"]), cfg.task.embedding_dim, cfg.task.l2,
                     state["mean"], state["rating_range"], user_bias=state["user_bias"],
                     item_bias=state["item_bias"], seed=cfg.seed, name="biased_mf")
    steps = (cfg.steps_per_epoch or data.train_steps) * cfg.num_epochs
    return compile_recommender(model, cfg.learning_rate, steps)


def serving_fn(model, data: TaskData, export_format: str):
    from trainer.recommender_model import rating_function

    if export_format != "JSON":
        raise ValueError(f"unsupported export format {export_format!r}")
    return rating_function(model, data.preprocessor)


def more_signatures(model, data: TaskData):
    from trainer.recommender_model import top_k_function

    state = data.state
    return {"top_k": top_k_function(model, data.preprocessor, state["items"], state["rated"], state["max_k"])}


TASK = Task(spec=SPEC, make_data=make_data, build_model=build_model, serving_fn=serving_fn,
            more_signatures=more_signatures)
