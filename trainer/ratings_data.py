"""Ratings for the recommender: header-named CSV columns read and checked in one pass, a deterministic split,
vocabularies from the training split, and the baselines any model must beat.

Files are read through ``tf.io.gfile`` (local paths, globs and ``gs://`` alike) by :func:`read_ratings`,
which names the file, line and column of the first bad row: a missing column, a non-numeric or non-finite
rating, an empty id. IDs are strings, never assumed dense: ``"1"`` and ``"01"`` are different users. The
split (:func:`split_ratings`) is random by seed or by time, so local runs, tuning trials and benchmarks with
the same flags evaluate on the same ratings. Everything here is NumPy; TensorFlow is imported only to read
files.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trainer.data import DataError, read_lines

# Damping of the bias-only baseline (Koren's lambda): an item or user with few ratings keeps a bias near 0.
BASELINE_DAMPING = 5.0
_MAX_BAD_FIELD = 40  # characters of a bad value quoted in an error


@dataclass(frozen=True)
class RatingColumns:
    """The header names of the columns to read (``timestamp`` None: no time column)."""

    user: str
    item: str
    rating: str
    timestamp: str | None = None


@dataclass
class Ratings:
    users: np.ndarray  # str ids, dtype object
    items: np.ndarray  # str ids, dtype object
    ratings: np.ndarray  # float32
    timestamps: np.ndarray | None  # int64 seconds, None when the files have no time column
    sources: tuple[str, ...] = ()  # the files read

    def __len__(self) -> int:
        return len(self.ratings)

    def take(self, index: np.ndarray) -> Ratings:
        return Ratings(self.users[index], self.items[index], self.ratings[index],
                       None if self.timestamps is None else self.timestamps[index], self.sources)


def _quote(value: str) -> str:
    return repr(value if len(value) <= _MAX_BAD_FIELD else value[:_MAX_BAD_FIELD] + "...")


def _header(path: str, fields: list[str], columns: RatingColumns, flags: dict[str, str]) -> dict[str, int]:
    """Column name -> position, for the named columns; a missing one is a DataError naming its flag."""
    position = {name.strip(): i for i, name in reversed(list(enumerate(fields)))}
    found = {}
    for role in ("user", "item", "rating", "timestamp"):
        name = getattr(columns, role)
        if name is None:
            continue
        if name not in position:
            if role == "timestamp" and flags.get("timestamp") is None:
                continue  # the default time column is optional
            shown = ", ".join(_quote(f) for f in fields[:20])
            raise DataError(f"{path}: line 1: no column {name!r} ({flags[role]}); the header names {shown}")
        found[role] = position[name]
    return found


def read_ratings(files: Sequence[str], columns: RatingColumns, flag: str,
                 flags: dict[str, str] | None = None) -> Ratings:
    """Every rating in ``files`` (each with its own header row). ``flags`` names the flag that set each
    column, for errors (``{"user": "--user-column", ...}``; a ``timestamp`` entry of None means the time
    column was not asked for by name, so files without it are fine)."""
    flags = {"user": "--user-column", "item": "--item-column", "rating": "--rating-column",
             "timestamp": None, **(flags or {})}
    users: list[str] = []
    items: list[str] = []
    ratings: list[float] = []
    times: list[int] = []
    with_time = None
    for path in files:
        where = width = None
        for number, line in enumerate(read_lines(path, flag), start=1):
            if not line.strip():
                continue
            text = _text(line, path, number)
            # Plain split unless the line quotes a field (csv's parser is several times slower per line).
            row = next(csv.reader([text])) if '"' in text else text.split(",")
            if where is None:  # the first non-blank line is the header
                where, width = _header(path, row, columns, flags), len(row)
                if with_time is None:
                    with_time = "timestamp" in where
                elif with_time != ("timestamp" in where):
                    raise DataError(f"{path}: line {number}: the column {columns.timestamp!r} is in some "
                                    f"of the files and not in others")
                continue
            if len(row) != width:
                raise DataError(f"{path}: line {number}: {len(row)} fields, the header names {width}")
            user, item = row[where["user"]].strip(), row[where["item"]].strip()
            for role, value in (("user", user), ("item", item)):
                if not value:
                    raise DataError(f"{path}: line {number}: empty {getattr(columns, role)} ({flags[role]})")
            ratings.append(_number(row[where["rating"]], path, number, columns.rating, flags["rating"]))
            users.append(user)
            items.append(item)
            if "timestamp" in where:
                times.append(_timestamp(row[where["timestamp"]], path, number, columns.timestamp))
        if where is None:
            raise DataError(f"{path}: empty: expected a header naming {columns.user}, {columns.item} and "
                            f"{columns.rating}")
    timestamps = np.array(times, dtype=np.int64) if with_time else None
    return Ratings(np.array(users, dtype=object), np.array(items, dtype=object),
                   np.array(ratings, dtype=np.float32), timestamps, tuple(files))


def _text(line: bytes, path: str, number: int) -> str:
    try:
        return line.decode("utf-8-sig" if number == 1 else "utf-8")  # a BOM may open the file
    except UnicodeDecodeError:
        raise DataError(f"{path}: line {number}: not UTF-8 text") from None


def _number(text: str, path: str, number: int, column: str, flag: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise DataError(f"{path}: line {number}: {column} ({flag}) must be a finite number, "
                        f"got {_quote(text)}")
    return value


def _timestamp(text: str, path: str, number: int, column: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise DataError(f"{path}: line {number}: {column} (--timestamp-column) must be an integer time, "
                        f"got {_quote(text)}") from None


def split_ratings(ratings: Ratings, how: str, fraction: float, seed: int) -> tuple[Ratings, Ratings]:
    """(train, eval): ``fraction`` of the ratings for evaluation, chosen at random by ``seed`` or, ``how ==
    "time"``, the latest ones (ties kept in file order). The same inputs always give the same split."""
    n = len(ratings)
    n_eval = int(round(n * fraction))
    if n_eval == 0 or n_eval == n:
        empty = "evaluation" if n_eval == 0 else "training"
        raise DataError(f"--eval-fraction {fraction}: the {empty} split of {n} rating(s) would be empty")
    if how == "time":
        if ratings.timestamps is None:
            raise DataError("--split time: the ratings have no time column (--timestamp-column)")
        order = np.argsort(ratings.timestamps, kind="stable")
    else:
        order = np.random.default_rng(seed).permutation(n)
    train, evaluation = np.sort(order[:n - n_eval]), np.sort(order[n - n_eval:])
    return ratings.take(train), ratings.take(evaluation)


@dataclass(frozen=True)
class Indexed:
    """Ratings as model inputs: 1-based indices into the training vocabularies, 0 for an unknown id."""

    users: np.ndarray  # int32
    items: np.ndarray  # int32
    ratings: np.ndarray  # float32


def vocabulary(ids: np.ndarray) -> np.ndarray:
    """The distinct ids, sorted (a deterministic order for the same data)."""
    return np.array(sorted(set(ids.tolist())), dtype=object)


def index(ratings: Ratings, users: np.ndarray, items: np.ndarray) -> Indexed:
    """Look ids up as keras.layers.StringLookup(vocabulary=..., num_oov_indices=1) will when serving."""
    user_ids = {u: k for k, u in enumerate(users.tolist(), start=1)}
    item_ids = {v: k for k, v in enumerate(items.tolist(), start=1)}
    return Indexed(np.array([user_ids.get(u, 0) for u in ratings.users.tolist()], dtype=np.int32),
                   np.array([item_ids.get(v, 0) for v in ratings.items.tolist()], dtype=np.int32),
                   ratings.ratings)


def bias_only(train: Indexed, num_users: int, num_items: int,
              damping: float = BASELINE_DAMPING) -> tuple[float, np.ndarray, np.ndarray]:
    """(global mean, user biases, item biases) of the damped bias-only model, each bias array indexed like
    the vocabularies (row 0, the unknown id, is 0): item biases first, then user biases on what is left."""
    mean = float(train.ratings.mean())
    residual = train.ratings - mean
    item_bias = np.bincount(train.items, residual, num_items + 1) / (
        damping + np.bincount(train.items, minlength=num_items + 1))
    residual = residual - item_bias[train.items]
    user_bias = np.bincount(train.users, residual, num_users + 1) / (
        damping + np.bincount(train.users, minlength=num_users + 1))
    item_bias[0] = user_bias[0] = 0.0
    return mean, user_bias.astype(np.float32), item_bias.astype(np.float32)


def errors(predicted: np.ndarray, actual: np.ndarray) -> dict[str, float]:
    diff = predicted.astype(np.float64) - actual
    return {"rmse": float(np.sqrt(np.mean(diff ** 2))), "mae": float(np.mean(np.abs(diff)))}


def baselines(train: Indexed, evaluation: Indexed, num_users: int, num_items: int,
              rating_range: tuple[float, float]) -> dict[str, dict[str, float]]:
    """RMSE and MAE on ``evaluation`` of the training mean and of the damped bias-only model (clipped to the
    training ratings' range, as the model's predictions are)."""
    mean, user_bias, item_bias = bias_only(train, num_users, num_items)
    biased = np.clip(mean + user_bias[evaluation.users] + item_bias[evaluation.items], *rating_range)
    return {"global_mean": errors(np.full(len(evaluation.ratings), mean), evaluation.ratings),
            "bias_only": errors(biased, evaluation.ratings)}
