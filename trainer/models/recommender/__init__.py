"""A ranking recommender, registered as ``--model recommender``: matrix factorisation trained with a sampled
softmax over items (Keras 3, sparse updates) plus a closed-form item-item part where the catalogue fits in
memory, evaluated by recall@k and NDCG@k.

Input: CSV files (local or ``gs://``) whose header names the user, item, rating and, optionally, timestamp
columns (MovieLens's ``userId,movieId,rating,timestamp`` by default; ``--user-column`` etc. rename them).
IDs are strings; the vocabularies come from the training ratings and travel inside the SavedModel. Without
``--eval-files``, ``--eval-fraction`` of ``--train-files`` is held out, at random by ``--seed`` or, with
``--split time``, the latest ratings: the same flags always evaluate on the same ratings.

Model (:mod:`trainer.models.recommender.model`): every training rating is an interaction; a user's score of an
item is ``p_u . q_i + b_i``, trained to rank the rated item above ``--negatives`` items sampled from the
catalogue (softmax cross-entropy), with ``--l2`` on the factors a rating touches. A step updates only the
rows it touched, so its cost does not grow with the catalogue. For a catalogue of at most
``--ease-max-items`` items the score adds ``--item-item-scale`` times EASE's item-item weights summed over
the items the user rated (computed once before training, the same matrix the EASE baseline scores with, and
cached for the job's later trials and restarts); a larger catalogue uses the factors alone, saying so.

Metrics, on each eval user's held-out positives (ratings >= ``--positive-threshold`` of items the user did
not rate in training; those items are never candidates): ``recall_at_k`` (the default tuning metric,
MAXIMIZE) and ``ndcg_at_k`` at ``--ranking-k``, and the full-softmax ``loss``. The same run scores the
most-rated unseen items (popularity) and, for a catalogue of at most ``--ease-max-items``, EASE on the same
users, in metrics.json's ``data.baselines`` and the log. At most ``--eval-users`` users are scored (a seeded
sample), so evaluation stays bounded on large data.

Export: ``serving_default`` and ``top_k`` return each user's best items they did not rate in training, with
the model's probability of each (lists computed at export: ``users x --top-k`` entries, whatever the number
of ratings); an unknown user gets the most popular items. ``similar_items`` returns an item's nearest items
by the cosine of the item factors; an unknown item gets an empty row and ``known`` false. Beside the
SavedModel, ``users.jsonl`` lists every user it knows as a ``top_k`` instance (``{"user": ID, "k":
--ranking-k}``), the input of a batch prediction over all of them.

Multi-worker: every worker reads the ratings, makes the same split and vocabularies (checked with an
all-gather) and trains on its own 1/workers share of the training ratings (logged as "this worker's share").

    python -m trainer.task --model recommender --help
    python -m trainer.task --model recommender --train-files data/movielens/ratings.csv \\
        --job-dir /tmp/recommender

This module is the task (its flags and spec); :mod:`trainer.models.recommender.hooks` holds its data, model
and export hooks, :mod:`trainer.models.recommender.data` the ratings (reading, split, vocabularies,
baselines), :mod:`trainer.models.recommender.model` the model and its serving functions, and
:mod:`trainer.models.recommender.cached_results` what a study caches. It imports no TensorFlow at import time:
the job tooling reads its spec.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainer.models.base import (
    MAXIMIZE,
    MINIMIZE,
    Task,
    TaskConfig,
    TaskSpec,
    check,
    integral,
    option,
)
from trainer.models.recommender.hooks import (
    DEFAULT_TOP_K,
    build_model,
    export_files,
    make_data,
    more_signatures,
    serving_fn,
)

SPLITS = ("random", "time")


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

TASK = Task(spec=SPEC, make_data=make_data, build_model=build_model, serving_fn=serving_fn,
            more_signatures=more_signatures, export_files=export_files)
