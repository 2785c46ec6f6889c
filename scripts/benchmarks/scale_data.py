"""Synthetic data at N times the shipped size, for scripts/benchmarks/bench_data_scale.py: deterministic by
seed, written on the fly under a temporary folder (nothing large is committed).

Not a command: the benchmark imports it. No TensorFlow: TFRecord records are copied with their framing
(length, CRCs) intact, so replicated shards read back exactly like the shipped ones.

- census: rows of ``data/census/adult.data`` sampled with replacement, their numeric columns perturbed within
  the ranges seen in the real data (age 17..90, hours 1..99, ...), so quantiles and statistics are not those
  of 32,561 repeated rows; written as one file and as ``files`` files (sharding by file needs several).
  Scale 1 is the shipped file itself.
- mnist / flowers: every shipped training record repeated ``scale`` times, in a seeded order, into shards
  of the shipped shard size (MNIST 4,000 records; flowers 500). Identical bytes: decode costs are real.
- ratings: MovieLens-shaped ``userId,movieId,rating,timestamp`` rows; 162,541 users and 59,047 items at 25M
  ratings (MovieLens 25M), scaled down in proportion; long-tailed item popularity (Zipf) and user activity
  (log-normal); ratings in half stars from user and item effects plus noise, so a model has something to
  learn. Repeated (user, item) pairs are possible, as the trainer allows them. Scale 1 is the shipped file.
"""

from __future__ import annotations

import math
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
CENSUS = REPO / "data" / "census"
MNIST = REPO / "data" / "mnist"
FLOWERS = REPO / "data" / "flowers"
RATINGS = REPO / "data" / "movielens" / "ratings.csv"

MNIST_TRAIN = sorted(MNIST.glob("mnist-train.tfrecord-*"))
MNIST_EVAL = str(MNIST / "mnist-eval.tfrecord-00000-of-00001")
FLOWERS_TRAIN = sorted(FLOWERS.glob("image_classification_builder-validation.tfrecord-*"))  # 80 images
FLOWERS_EVAL = str(FLOWERS / "image_classification_builder-test.tfrecord-00000-of-00001")  # 50 images

# MovieLens 25M's catalogue, which the synthetic ratings scale down in proportion to their count.
ML25M = (25_000_095, 162_541, 59_047)
RATINGS_PER_SCALE = 100_000  # synthetic ratings per unit of scale (the shipped file has 100,836)
_CHUNK = 1 << 20  # rows built and written at a time: memory stays flat at any scale


@dataclass(frozen=True)
class Dataset:
    train: list[str]  # --train-files arguments (a glob where there are many files)
    eval: list[str]  # --eval-files arguments; empty where the task splits --train-files itself
    records: int  # training records (ratings: all rows, before the trainer's split)
    files: int  # training files
    train_bytes: int


def _size(paths) -> int:
    return sum(Path(p).stat().st_size for p in paths)


# ---------------------------------------------------------------------------------------------------- census

# Column positions in adult.data and the ranges a perturbed value is kept in (min/max of adult.data+test).
_AGE, _FNLWGT, _GAIN, _LOSS, _HOURS = 0, 2, 10, 11, 12


def _census_rows() -> list[list[str]]:
    lines = (CENSUS / "adult.data").read_text().splitlines()
    return [line.split(", ") for line in lines if line.strip()]


def census(root: Path, scale: float, files: int, seed: int) -> dict[int, Dataset]:
    """{number of files: Dataset} of about 32,561 x scale rows: one file and ``files`` files, same rows."""
    shipped = CENSUS / "adult.data"
    evaluation = [str(CENSUS / "adult.test")]
    rows = _census_rows()
    total = round(len(rows) * scale)
    folder = root / f"census-x{scale:g}"
    folder.mkdir(parents=True, exist_ok=True)
    parts = [folder / f"part-{i:05d}-of-{files:05d}.csv" for i in range(files)]
    if scale == 1:
        # The shipped file as it is; its rows dealt into contiguous parts for the several-files variant.
        text = [", ".join(r) + "\n" for r in rows]
        for i, part in enumerate(parts):
            part.write_text("".join(text[i * len(text) // files:(i + 1) * len(text) // files]))
        single = [shipped]
    else:
        rng = np.random.default_rng(seed)
        # Per source row, the text between the perturbed numbers (categoricals are kept as they are).
        mid1 = [f", {r[1]}, " for r in rows]
        mid2 = [", " + ", ".join(r[3:10]) + ", " for r in rows]
        tail = [", " + ", ".join(r[13:]) + "\n" for r in rows]
        numbers = np.array([[int(r[i]) for i in (_AGE, _FNLWGT, _GAIN, _LOSS, _HOURS)] for r in rows])
        bounds = [(i * total // files, (i + 1) * total // files) for i in range(files)]
        for part, (start, stop) in zip(parts, bounds, strict=True):
            with open(part, "w") as out:
                for lo in range(start, stop, _CHUNK):
                    n = min(_CHUNK, stop - lo)
                    pick = rng.integers(0, len(rows), n)
                    age, fnl, gain, loss, hours = numbers[pick].T
                    age = np.clip(age + rng.integers(-2, 3, n), 17, 90)
                    fnl = np.clip(np.rint(fnl * np.exp(rng.normal(0, 0.1, n))), 12_285, 1_490_400).astype(int)
                    # Zero gains/losses (92%/95% of rows) stay zero: the mode is part of the distribution.
                    gain = np.clip(np.rint(gain * rng.uniform(0.9, 1.1, n)), 0, 99_999).astype(int)
                    loss = np.clip(np.rint(loss * rng.uniform(0.9, 1.1, n)), 0, 4_356).astype(int)
                    hours = np.clip(hours + rng.integers(-2, 3, n), 1, 99)
                    out.write("".join(
                        f"{a}{mid1[p]}{f}{mid2[p]}{g}, {lo_}, {h}{tail[p]}" for p, a, f, g, lo_, h in zip(
                            pick.tolist(), age.tolist(), fnl.tolist(), gain.tolist(), loss.tolist(),
                            hours.tolist(), strict=True)))
        one = folder / "train.csv"
        with open(one, "wb") as out:
            for part in parts:
                with open(part, "rb") as src:
                    shutil.copyfileobj(src, out, 16 << 20)
        single = [one]
    glob = str(folder / f"part-*-of-{files:05d}.csv")
    return {1: Dataset([str(p) for p in single], evaluation, total, 1, _size(single)),
            files: Dataset([glob], evaluation, total, files, _size(parts))}


# ---------------------------------------------------------------------------------------------------- images

def read_records(paths) -> list[bytes]:
    """Every TFRecord of ``paths`` with its framing (length, length CRC, data, data CRC), unchanged."""
    records = []
    for path in paths:
        data = Path(path).read_bytes()
        at = 0
        while at < len(data):
            (length,) = struct.unpack_from("<Q", data, at)
            end = at + 12 + length + 4
            records.append(data[at:end])
            at = end
    return records


def _replicate(root: Path, name: str, sources, scale: int, per_shard: int, evaluation: str,
               seed: int) -> Dataset:
    if scale == 1:
        return Dataset([str(p) for p in sources], [evaluation], len(read_records(sources)), len(sources),
                       _size(sources))
    records = read_records(sources)
    order = np.random.default_rng(seed).permutation(np.tile(np.arange(len(records)), scale))
    shards = max(1, math.ceil(len(order) / per_shard))
    folder = root / f"{name}-x{scale:g}"
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{name}-train.tfrecord-{i:05d}-of-{shards:05d}" for i in range(shards)]
    for i, path in enumerate(paths):
        with open(path, "wb") as out:
            out.write(b"".join(records[j] for j in order[i * len(order) // shards:
                                                         (i + 1) * len(order) // shards].tolist()))
    return Dataset([str(folder / f"{name}-train.tfrecord-*")], [evaluation], len(order), shards, _size(paths))


def mnist(root: Path, scale: int, seed: int) -> Dataset:
    """The 8,000 shipped training digits, ``scale`` times, in shards of 4,000 (the shipped shard size)."""
    return _replicate(root, "mnist", MNIST_TRAIN, scale, 4_000, MNIST_EVAL, seed)


def flowers(root: Path, scale: int, seed: int) -> Dataset:
    """The 80 shipped flowers JPEG records, ``scale`` times (25: 2,000; 250: 20,000), in shards of 500."""
    return _replicate(root, "flowers", FLOWERS_TRAIN, scale, 500, FLOWERS_EVAL, seed)


# --------------------------------------------------------------------------------------------------- ratings

_STARS = [f"{0.5 * i:.1f}" for i in range(11)]  # index 2*rating -> its text


def ratings(root: Path, scale: float, seed: int) -> Dataset:
    """100,000 x scale MovieLens-shaped ratings in one CSV; scale 1 is the shipped 100,836."""
    if scale == 1:
        return Dataset([str(RATINGS)], [], sum(1 for _ in open(RATINGS)) - 1, 1, RATINGS.stat().st_size)
    total = round(RATINGS_PER_SCALE * scale)
    num_users = max(610, round(ML25M[1] * total / ML25M[0]))
    num_items = max(1_000, round(ML25M[2] * total / ML25M[0]))
    rng = np.random.default_rng(seed)
    # Long tails: item popularity Zipf-like over a random ranking, user activity log-normal.
    popularity = 1.0 / (np.arange(num_items) + 10.0) ** 1.1
    popularity = popularity[rng.permutation(num_items)]
    activity = rng.lognormal(0.0, 1.2, num_users)
    item_cdf, user_cdf = np.cumsum(popularity / popularity.sum()), np.cumsum(activity / activity.sum())
    item_effect, user_effect = rng.normal(0, 0.45, num_items), rng.normal(0, 0.35, num_users)
    # Ids as MovieLens spells them: not dense, not in popularity order.
    item_ids = np.sort(rng.choice(10 * num_items, num_items, replace=False)) + 1
    path = root / f"ratings-x{scale:g}.csv"
    with open(path, "w") as out:
        out.write("userId,movieId,rating,timestamp\n")
        for lo in range(0, total, _CHUNK):
            n = min(_CHUNK, total - lo)
            users = np.minimum(np.searchsorted(user_cdf, rng.random(n)), num_users - 1)
            items = np.minimum(np.searchsorted(item_cdf, rng.random(n)), num_items - 1)
            value = 3.5 + item_effect[items] + user_effect[users] + rng.normal(0, 0.8, n)
            stars = np.clip(np.rint(value * 2), 1, 10).astype(int)
            stamps = rng.integers(828_124_615, 1_537_799_250, n)
            out.write("".join(f"{u},{i},{_STARS[s]},{t}\n" for u, i, s, t in zip(
                (users + 1).tolist(), item_ids[items].tolist(), stars.tolist(), stamps.tolist(),
                strict=True)))
    return Dataset([str(path)], [], total, 1, path.stat().st_size)
