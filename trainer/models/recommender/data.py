"""Ratings for the recommender: header-named CSV columns read and checked in one pass, a deterministic split,
vocabularies from the training split, and the baselines any model must beat.

Files are read through ``tf.io.gfile`` (local paths, globs and ``gs://`` alike) by :func:`read_ratings`,
which names the file, line and column of the first bad row: a missing column, a non-numeric or non-finite
rating, an empty id. IDs are strings, never assumed dense: ``"1"`` and ``"01"`` are different users. The
split (:func:`split_ratings`) is random by seed or by time, so local runs, tuning trials and benchmarks with
the same flags evaluate on the same ratings. Everything here is NumPy; TensorFlow is imported only to read
files. What one rating may cost is bounded: ids of at most MAX_ID_BYTES, lines of at most
trainer.input_files.MAX_LINE_BYTES, float32 ratings, int64 timestamps, and training vocabularies of at most
MAX_VOCABULARY users and items.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trainer.input_files import DataError, read_lines, unreadable

# Damping of the bias-only baseline (Koren's lambda): an item or user with few ratings keeps a bias near 0.
BASELINE_DAMPING = 5.0
_MAX_BAD_FIELD = 40  # characters of a bad value quoted in an error
# Limits on what one rating may cost. An id is at most MAX_ID_BYTES (ids live in fixed-width arrays, as wide
# as the longest: one 10 MB id among a million would take gigabytes); the training vocabularies hold at most
# MAX_VOCABULARY users and as many items (the model's factors, optimiser slots and exported top-k lists grow
# with them); a rating must be a float32 (a larger one overflows to inf and reads as a diverged training);
# a timestamp an int64.
MAX_ID_BYTES = 256
MAX_VOCABULARY = 1_000_000
_FLOAT32_MAX = float(np.finfo(np.float32).max)


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
    column was not asked for by name, so files without it are fine).

    A plain file (no quotes, no carriage returns, every line with the header's field count, ASCII ids without
    surrounding blanks) is parsed with vectorised NumPy: ids become fixed-width string arrays, no Python
    object per rating. Anything else takes the line-by-line reader, which names the first bad line."""
    flags = {"user": "--user-column", "item": "--item-column", "rating": "--rating-column",
             "timestamp": None, **(flags or {})}
    parts = []
    for path in files:
        part = _read_plain(path, columns, flags, flag)
        parts.append(part if part is not None else _read_lines(path, columns, flags, flag))
    with_time = {part[3] is not None for part in parts}
    if len(with_time) > 1:
        path = files[[part[3] is None for part in parts].index(parts[0][3] is not None)]
        raise DataError(f"{path}: line 1: the column {columns.timestamp!r} is in some of the files and not "
                        "in others")
    users, items, ratings, times = (list(column) for column in zip(*parts, strict=True))
    timestamps = np.concatenate(times).astype(np.int64) if with_time == {True} else None
    return Ratings(_ids(users), _ids(items), np.concatenate(ratings).astype(np.float32), timestamps,
                   tuple(files))


def _ids(parts: list[np.ndarray]) -> np.ndarray:
    """One array of the files' ids (fixed-width ``str_`` from the plain reader, objects from the other)."""
    if all(part.dtype.kind == "U" for part in parts):
        return np.concatenate(parts)
    return np.concatenate([part.astype(object) for part in parts])


_PLAIN_CHUNK = 1 << 20  # lines per vectorised step: bounds the temporary index arrays


def _read_plain(path: str, columns: RatingColumns, flags: dict[str, str | None], flag: str):
    """(users, items, ratings, timestamps or None) of a plain file, or None: read it line by line instead."""
    import tensorflow as tf

    try:
        with tf.io.gfile.GFile(path, "rb") as f:
            data = f.read()
    except tf.errors.OpError as exc:
        raise unreadable(path, exc, flag) from None
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if b'"' in data or b"\0" in data or data.count(b"\r") != data.count(b"\r\n"):
        return None
    cut = data.find(b"\n")
    header = data if cut < 0 else data[:cut]
    body = np.frombuffer(data, np.uint8)[len(header) + 1:]
    header = header.removesuffix(b"\r")  # CRLF files: each line loses its \r, as the line reader's do
    try:
        names = header.decode("utf-8").split(",")
    except UnicodeDecodeError:
        return None
    if not header.strip():
        return None
    where, width = _header(path, names, columns, flags), len(names)
    ends = np.flatnonzero(body == ord("\n"))
    if len(body) and body[-1] != ord("\n"):
        ends = np.append(ends, len(body))
    starts = np.concatenate([[0], ends[:-1] + 1]).astype(np.int64)
    ends = ends - ((ends > starts) & (body[np.maximum(ends - 1, 0)] == ord("\r")))
    keep = ends > starts  # empty lines are skipped, as the line reader skips them
    starts, ends = starts[keep], ends[keep]
    commas = np.flatnonzero(body == ord(","))
    if width < 2 or len(commas) != len(starts) * (width - 1):
        return None
    if not len(starts):
        empty = np.zeros(0, "U1")
        times = np.zeros(0, np.int64) if "timestamp" in where else None
        return empty, empty, np.zeros(0, np.float32), times
    commas = commas.reshape(-1, width - 1)
    # Every line must hold exactly width - 1 commas: the line's first comma after its start, its last before
    # its end.
    if (commas[:, 0] < starts).any() or (commas[:, -1] >= ends).any() or (commas[1:, 0] < ends[:-1]).any():
        return None
    out = {role: [] for role in where}
    for first in range(0, len(starts), _PLAIN_CHUNK):
        rows = slice(first, first + _PLAIN_CHUNK)
        for role, column in where.items():
            begin = starts[rows] if column == 0 else commas[rows, column - 1] + 1
            end = ends[rows] if column == width - 1 else commas[rows, column]
            text = _fixed_width(body, begin, end)
            if text is None:
                return None
            out[role].append(text)
    try:
        users = np.concatenate(out["user"]).astype("U")
        items = np.concatenate(out["item"]).astype("U")
        ratings = np.concatenate(out["rating"]).astype(np.float64)
        times = np.concatenate(out["timestamp"]).astype(np.int64) if "timestamp" in where else None
    except (ValueError, UnicodeDecodeError, OverflowError):
        return None  # not a number, or a non-ASCII id: the line reader words it (or reads it)
    if not (np.abs(ratings) <= _FLOAT32_MAX).all():  # not a finite float32: the line reader words it
        return None
    return users, items, ratings.astype(np.float32), times


def _fixed_width(body: np.ndarray, begin: np.ndarray, end: np.ndarray) -> np.ndarray | None:
    """The fields ``body[begin:end]`` as a fixed-width bytes array; None for an empty field, one with a
    blank or control character at either end (the line reader strips or refuses those) or one longer than
    MAX_ID_BYTES (the line reader names it)."""
    lengths = end - begin
    if not len(lengths) or lengths.min() < 1:
        return None
    if (body[begin] <= 32).any() or (body[end - 1] <= 32).any():
        return None
    width = int(lengths.max())
    if width > MAX_ID_BYTES:
        return None
    offsets = np.arange(width)
    out = np.empty(len(begin), f"S{width}")
    step = max(1, (1 << 22) // width)  # rows at a time: the index arrays stay ~32 MB however wide the field
    for first in range(0, len(begin), step):
        rows = slice(first, first + step)
        where = begin[rows, None] + offsets[None, :]
        inside = offsets[None, :] < lengths[rows, None]
        chars = np.where(inside, body[np.minimum(where, len(body) - 1)], 0).astype(np.uint8)
        out[rows] = chars.view(f"S{width}").ravel()
    return out


def _read_lines(path: str, columns: RatingColumns, flags: dict[str, str | None], flag: str):
    """(users, items, ratings, timestamps or None) of one file, line by line, naming the first bad line."""
    users: list[str] = []
    items: list[str] = []
    ratings: list[float] = []
    times: list[int] = []
    where = width = None
    for number, line in enumerate(read_lines(path, flag), start=1):
        if not line.strip():
            continue
        text = _text(line, path, number)
        # Plain split unless the line quotes a field (csv's parser is several times slower per line).
        try:
            row = next(csv.reader([text])) if '"' in text else text.split(",")
        except csv.Error as exc:  # e.g. a quoted field over csv's field size limit (128 KiB)
            raise DataError(f"{path}: line {number}: not a CSV row: {exc}") from None
        if where is None:  # the first non-blank line is the header
            where, width = _header(path, row, columns, flags), len(row)
            continue
        if len(row) != width:
            raise DataError(f"{path}: line {number}: {len(row)} fields, the header names {width}")
        user, item = row[where["user"]].strip(), row[where["item"]].strip()
        for role, value in (("user", user), ("item", item)):
            if not value:
                raise DataError(f"{path}: line {number}: empty {getattr(columns, role)} ({flags[role]})")
            if len(value) > MAX_ID_BYTES and len(value.encode()) > MAX_ID_BYTES:
                raise DataError(f"{path}: line {number}: {getattr(columns, role)} ({flags[role]}) is "
                                f"{len(value.encode())} bytes long, more than the {MAX_ID_BYTES} an id may "
                                f"have: {_quote(value)}")
        ratings.append(_number(row[where["rating"]], path, number, columns.rating, flags["rating"]))
        users.append(user)
        items.append(item)
        if "timestamp" in where:
            times.append(_timestamp(row[where["timestamp"]], path, number, columns.timestamp))
    if where is None:
        raise DataError(f"{path}: empty: expected a header naming {columns.user}, {columns.item} and "
                        f"{columns.rating}")
    return (np.array(users, dtype=object), np.array(items, dtype=object), np.array(ratings, dtype=np.float32),
            np.array(times, dtype=np.int64) if "timestamp" in where else None)


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
    if abs(value) > _FLOAT32_MAX:  # ratings are float32: this one would be inf
        raise DataError(f"{path}: line {number}: {column} ({flag}) must be a float32 number (at most "
                        f"{_FLOAT32_MAX:.6g} in magnitude), got {_quote(text)}")
    return value


def _timestamp(text: str, path: str, number: int, column: str) -> int:
    try:
        value = int(text.strip()) if len(text) <= 100 else None  # int() refuses 4300 digits itself
    except ValueError:
        value = None
    if value is None or not -(2**63) <= value < 2**63:
        kind = "an integer time" if value is None else "an integer time in the int64 range"
        raise DataError(f"{path}: line {number}: {column} (--timestamp-column) must be {kind}, "
                        f"got {_quote(text)}")
    return value


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
    return np.unique(ids)


def vocabularies(train: Ratings, columns: RatingColumns, flag: str = "--train-files",
                 limit: int = MAX_VOCABULARY) -> tuple[np.ndarray, np.ndarray]:
    """(users, items): the training ratings' vocabularies, each of at most ``limit`` ids. Too many ids are
    refused from a count of their hashes (a sort of integers) before the sorted vocabulary of strings is
    built: on 5 million ids that is a second instead of five."""
    found = []
    for role, ids, option in (("user", train.users, "--user-column"), ("item", train.items, "--item-column")):
        count = _distinct_hashes(ids) if len(ids) > limit and ids.dtype.kind == "U" else 0
        vocab = vocabulary(ids) if count <= limit else None
        count = count if vocab is None else len(vocab)
        if count > limit:
            raise DataError(f"{flag}: {count} distinct {role}s ({getattr(columns, role)}, {option}) in the "
                            f"training ratings, more than the {limit} the model may hold")
        found.append(vocab)
    return found[0], found[1]


def _distinct_hashes(ids: np.ndarray) -> int:
    """The number of distinct 64-bit hashes of fixed-width ``str_`` ids: their distinct count, barring a
    collision (one in ~2**64 per pair), without sorting strings."""
    codes = ids.view(np.uint32).reshape(len(ids), -1)
    hashed = np.zeros(len(ids), np.uint64)
    for column in range(codes.shape[1]):  # FNV-1a over the characters, wrapping in uint64
        hashed = (hashed ^ codes[:, column]) * np.uint64(0x100000001B3)
    hashed.sort()  # in place: np.unique's hash table is ~50x slower on integers (NumPy 2.4)
    return int(np.count_nonzero(hashed[1:] != hashed[:-1])) + 1


def index(ratings: Ratings, users: np.ndarray, items: np.ndarray) -> Indexed:
    """Look ids up as keras.layers.StringLookup(vocabulary=..., num_oov_indices=1) will when serving:
    vectorised (a binary search in the sorted vocabularies), no per-rating dictionary lookups."""
    return Indexed(_lookup(ratings.users, users), _lookup(ratings.items, items), ratings.ratings)


def _lookup(ids: np.ndarray, vocabulary: np.ndarray) -> np.ndarray:
    """1-based positions of ``ids`` in the sorted ``vocabulary``, 0 where absent."""
    if not len(vocabulary):
        return np.zeros(len(ids), np.int32)
    where = np.searchsorted(vocabulary, ids).clip(0, len(vocabulary) - 1)
    return np.where(vocabulary[where] == ids, where + 1, 0).astype(np.int32)


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


# Ranking evaluation (issue 27): what the model, popularity and EASE are all scored on.
EASE_LAMBDA = 100.0  # EASE's L2 (Steck 2019); 100 was best of 100/300/1000 on the shipped data
_CHUNK = 1024  # users scored at a time: memory stays chunk x items


@dataclass(frozen=True)
class EvalUsers:
    """The evaluation's users, each with the items it rated in training (``seen``, hidden from its
    recommendations) and its held-out positives, as CSR arrays (``*_splits`` [n + 1], ``*_items``)."""

    users: np.ndarray  # int32 vocabulary index, 0 for a user the training data did not have
    seen_splits: np.ndarray
    seen_items: np.ndarray
    positive_splits: np.ndarray
    positive_items: np.ndarray
    total: int  # eval users with a positive before --eval-users kept a sample

    def __len__(self) -> int:
        return len(self.users)

    def take(self, rows: np.ndarray) -> EvalUsers:
        seen = _csr_take(self.seen_splits, self.seen_items, rows)
        positive = _csr_take(self.positive_splits, self.positive_items, rows)
        return EvalUsers(self.users[rows], *seen, *positive, self.total)


def _csr_take(splits: np.ndarray, values: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lengths = splits[rows + 1] - splits[rows]
    starts = np.repeat(splits[rows] - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    return (np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
            values[starts + np.arange(int(lengths.sum()))].astype(np.int32))


def eval_users(train: Indexed, evaluation: Ratings, scored: Indexed, rated: tuple[np.ndarray, np.ndarray],
               threshold: float, limit: int, seed: int) -> EvalUsers:
    """Every eval user (by id: each unknown user is its own row, scored as index 0) with at least one
    positive: an eval rating >= ``threshold`` of a known item the user did not rate in training. At most
    ``limit`` of them, a sample by ``seed`` (the figures are means over users)."""
    num_items = int(max(train.items.max(initial=0), scored.items.max(initial=0)))
    trained = np.unique(train.users.astype(np.int64) * (num_items + 1) + train.items)
    keys = scored.users.astype(np.int64) * (num_items + 1) + scored.items
    seen = (scored.users > 0) & np.isin(keys, trained)
    keep = (scored.ratings >= threshold) & (scored.items > 0) & ~seen
    ids, group = np.unique(evaluation.users[keep], return_inverse=True)
    total = len(ids)
    chosen = np.arange(total)
    if total > limit:
        chosen = np.sort(np.random.default_rng(seed).choice(total, limit, replace=False))
    wanted = np.isin(group, chosen)
    group = np.searchsorted(chosen, group[wanted])
    items = scored.items[keep][wanted].astype(np.int64)
    users = np.zeros(len(chosen), np.int64)
    users[group] = scored.users[keep][wanted]  # one id, one index: every row of a group agrees
    # Each (user, item) once: an item held out twice for one user is one positive.
    pairs = np.unique(group * (num_items + 1) + items)
    positive_splits = np.concatenate([[0], np.cumsum(np.bincount(pairs // (num_items + 1),
                                                                 minlength=len(chosen)))])
    positive_items = (pairs % (num_items + 1)).astype(np.int32)
    splits, values = rated
    lengths = np.where(users > 0, splits[users + 1] - splits[users], 0)
    starts = np.repeat(splits[users] - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    seen_items = values[starts + np.arange(int(lengths.sum()))].astype(np.int32)
    return EvalUsers(users.astype(np.int32), np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
                     seen_items, positive_splits.astype(np.int64), positive_items, total)


def ranking_figures(scores: np.ndarray, users: EvalUsers, rows: np.ndarray, k: int) -> np.ndarray:
    """[len(rows), 2] recall@k and NDCG@k of each eval user in ``rows`` (``scores`` [len(rows), items + 1],
    modified: seen items and column 0 are hidden), as the model's evaluation computes them."""
    scores[:, 0] = -np.inf
    for r, row in enumerate(rows):
        scores[r, users.seen_items[users.seen_splits[row]:users.seen_splits[row + 1]]] = -np.inf
    top = np.argpartition(-scores, k, axis=1)[:, :k]
    top = np.take_along_axis(top, np.argsort(-np.take_along_axis(scores, top, 1), axis=1, kind="stable"), 1)
    discount = 1 / np.log2(np.arange(2, k + 2))
    out = np.zeros((len(rows), 2))
    for r, row in enumerate(rows):
        positives = users.positive_items[users.positive_splits[row]:users.positive_splits[row + 1]]
        hits = np.isin(top[r], positives)
        best = min(k, len(positives))
        out[r] = hits.sum() / best, (hits * discount).sum() / discount[:best].sum()
    return out


def ranking_baselines(train: Indexed, users: EvalUsers, num_items: int, k: int,
                      ease_max_items: int, ease: np.ndarray | None = None) -> dict[str, dict]:
    """recall@k and NDCG@k on ``users`` of the most-rated unseen items (popularity) and, for a catalogue of
    at most ``ease_max_items``, of EASE (closed form, lambda 100: a dense items x items inverse, so it is
    skipped above that size, saying so). ``ease``: its weights, when the caller has them already."""
    popularity = np.bincount(train.items, minlength=num_items + 1).astype(np.float32)
    figures = {"popularity": np.zeros((len(users), 2))}
    if num_items > ease_max_items:
        ease = None
    elif ease is None:
        ease = ease_weights(train, num_items)
    if ease is not None:
        figures["ease"] = np.zeros((len(users), 2))
    for start in range(0, len(users), _CHUNK):
        rows = np.arange(start, min(start + _CHUNK, len(users)))
        figures["popularity"][rows] = ranking_figures(np.tile(popularity, (len(rows), 1)), users, rows, k)
        if ease is not None:
            history = np.zeros((len(rows), num_items + 1), np.float32)
            for r, row in enumerate(rows):
                history[r, users.seen_items[users.seen_splits[row]:users.seen_splits[row + 1]]] = 1
            figures["ease"][rows] = ranking_figures(history @ ease, users, rows, k)
    out = {name: {"recall_at_k": float(f[:, 0].mean()), "ndcg_at_k": float(f[:, 1].mean())}
           for name, f in figures.items()}
    if num_items > ease_max_items:
        out["ease"] = {"skipped": f"{num_items} items > --ease-max-items {ease_max_items}: EASE inverts a "
                                  "dense items x items matrix"}
    return out


def ease_weights(train: Indexed, num_items: int) -> np.ndarray:
    """EASE's item-item weights [items + 1, items + 1] (row and column 0 zero), from the training ratings
    as implicit feedback; the Gram matrix is built from the sparse pairs, never a dense users x items."""
    pairs = np.unique(train.users.astype(np.int64) * (num_items + 1) + train.items)
    users, items = pairs // (num_items + 1), (pairs % (num_items + 1)).astype(np.int64)
    gram = np.zeros((num_items + 1, num_items + 1), np.float32)
    splits = np.concatenate([[0], np.cumsum(np.bincount(users))])
    for start in range(0, len(splits) - 1, _CHUNK):
        stop = min(start + _CHUNK, len(splits) - 1)
        block = np.zeros((stop - start, num_items + 1), np.float32)
        rows = users[splits[start]:splits[stop]] - start
        block[rows, items[splits[start]:splits[stop]]] = 1
        gram += block.T @ block
    gram[np.diag_indices_from(gram)] += EASE_LAMBDA
    inverse = np.linalg.inv(gram)
    weights = -inverse / np.diag(inverse)
    weights[np.diag_indices_from(weights)] = 0
    weights[0, :] = weights[:, 0] = 0
    return weights
