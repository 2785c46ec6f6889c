"""scripts/benchmarks/scale_data.py, the scale benchmark's generators: deterministic by seed, the shapes the
trainer expects (census rows inside the plausible ranges, TFRecords copied whole, MovieLens-shaped ratings
with a long tail); and scripts/benchmarks/bench_data_scale.py refuses bad flags in one line, exit 2. No
TensorFlow, no training: the benchmark itself is run by hand (its docstring)."""

from __future__ import annotations

import collections
import importlib

import numpy as np
import pytest

from tests.jobs.helpers import REPO_ROOT
from trainer.models.census.data import PLAUSIBLE

CENSUS_NUMERIC = {0: "age", 2: "fnlwgt", 4: "education_num", 10: "capital_gain", 11: "capital_loss",
                  12: "hours_per_week"}


@pytest.fixture(scope="module")
def scripts():
    """(scale_data, bench_data_scale) imported as the benchmark imports them: from their own folder."""
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(REPO_ROOT / "scripts" / "benchmarks"))
        yield importlib.import_module("scale_data"), importlib.import_module("bench_data_scale")


def test_census_rows_are_perturbed_real_rows_in_one_file_and_in_several(scripts, tmp_path):
    scale_data = scripts[0]
    made = scale_data.census(tmp_path / "a", 1.5, 3, seed=7)
    again = scale_data.census(tmp_path / "b", 1.5, 3, seed=7)
    one, several = made[1], made[3]
    assert one.records == several.records == round(32_561 * 1.5) and several.files == 3
    text = open(one.train[0]).read()
    parts = sorted((tmp_path / "a" / "census-x1.5").glob("part-*"))
    assert len(parts) == 3 and "".join(p.read_text() for p in parts) == text  # same rows, both ways
    assert open(again[1].train[0]).read() == text  # deterministic by seed
    rows = [line.split(", ") for line in text.splitlines()]
    assert len(rows) == one.records and {len(r) for r in rows} == {15}
    values = np.array([[int(r[i]) for i in CENSUS_NUMERIC] for r in rows])
    for column, name in enumerate(CENSUS_NUMERIC.values()):
        low, high = PLAUSIBLE[name]
        assert low <= values[:, column].min() and values[:, column].max() <= high, name
    shipped = {line for line in (REPO_ROOT / "data/census/adult.data").read_text().splitlines()}
    assert sum(line in shipped for line in text.splitlines()) < 0.2 * len(rows)  # perturbed, not copied
    assert len(np.unique(values[:, 1])) > 30_000  # fnlwgt is not 21k repeated values: quantiles move


def test_image_records_are_the_shipped_records_repeated_whole(scripts, tmp_path):
    scale_data = scripts[0]
    shipped = scale_data.read_records(scale_data.MNIST_TRAIN)
    made = scale_data.mnist(tmp_path, 2, seed=1)
    assert (made.records, made.files) == (16_000, 4) and made.eval == [scale_data.MNIST_EVAL]
    copies = scale_data.read_records(sorted((tmp_path / "mnist-x2").glob("mnist-train.tfrecord-*")))
    assert collections.Counter(copies) == collections.Counter(shipped * 2)
    assert copies[:100] != shipped[:100]  # reordered by the seed


def test_ratings_are_movielens_shaped_with_long_tails(scripts, tmp_path):
    made = scripts[0].ratings(tmp_path, 0.3, seed=3)
    lines = open(made.train[0]).read().splitlines()
    assert lines[0] == "userId,movieId,rating,timestamp" and len(lines) - 1 == made.records == 30_000
    users, items, ratings, _ = zip(*(line.split(",") for line in lines[1:]), strict=True)
    assert set(ratings) <= {f"{0.5 * i:.1f}" for i in range(1, 11)} and len(set(ratings)) >= 8
    counts = sorted(collections.Counter(items).values(), reverse=True)
    assert sum(counts[:len(counts) // 100 or 1]) > 0.08 * made.records  # the top 1% of items: long tail
    assert max(collections.Counter(users).values()) > 10 * made.records / len(set(users))


@pytest.mark.parametrize("argv, message", [
    (["--models", "census,imagenet"], "unknown imagenet"),
    (["--scales", "1,-10"], "positive numbers"),
    (["--models", "mnist", "--scales", "1.5"], "whole numbers"),
    (["--files", "1"], "--files: must be at least 2"),
    (["--repo", "/nonexistent"], "no trainer/task.py"),
])
def test_bad_flags_are_one_line_and_exit_2(scripts, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        scripts[1].main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and message in err and len(err.strip().splitlines()) == 1, err
