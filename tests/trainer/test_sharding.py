"""trainer.sharding.dataset_options on the pipelines every task hands to Keras."""

from __future__ import annotations

import os

import pytest

from tests.trainer.helpers import REPO_ROOT
from tests.trainer.image_helpers import write_mnist_like

tf = pytest.importorskip("tensorflow")

# The cores this process may run on (a CI runner's cpuset may be fewer than the machine's).
CORES = len(os.sched_getaffinity(0))


def task_flags(name: str, census_slice, tmp_path) -> list[str]:
    if name == "wide_deep":
        return ["--train-files", str(census_slice["train"]), "--eval-files", str(census_slice["eval"])]
    if name == "image_classifier":
        return ["--train-files", str(write_mnist_like(tmp_path / "train.tfrecord", 40)), "--channels", "1",
                "--eval-files", str(write_mnist_like(tmp_path / "eval.tfrecord", 20, seed=1))]
    ratings = tmp_path / "ratings.csv"
    with open(REPO_ROOT / "data" / "movielens" / "ratings.csv", encoding="utf-8") as full:
        ratings.write_text("".join(full.readline() for _ in range(1001)))
    return ["--train-files", str(ratings)]


@pytest.mark.parametrize("steps", [None, 5], ids=["epochs", "repeated"])
@pytest.mark.parametrize("name", ["wide_deep", "image_classifier", "recommender"])
def test_no_pipeline_keras_iterates_starts_the_autotuning_thread(name, steps, census_slice, tmp_path):
    """Issue 26: as fit returns, deleting an autotuned training iterator could sit idle for up to 60 s,
    waiting for tf.data's autotuning thread to sleep out its period (see dataset_options). Every pipeline a
    task gives the loop, training and evaluation, repeated for --steps-per-epoch or not, must leave
    autotuning off, with the task's own sharding."""
    from trainer.config import resolve_config
    from trainer.models import load_task
    from trainer.sharding import UNSHARDED

    flags = task_flags(name, census_slice, tmp_path) + (["--steps-per-epoch", str(steps)] if steps else [])
    cfg = resolve_config(["--model", name, *flags])
    data = load_task(name).make_data(cfg, 8, 8, UNSHARDED)
    off = tf.data.experimental.AutoShardPolicy.OFF
    for which, ds in (("train", data.train), ("eval", data.eval)):
        options = ds.options()
        assert options.autotune.enabled is False, f"{name} {which}: autotuning is on"
        assert options.autotune.initial_parallelism == CORES, f"{name} {which}"
        assert options.experimental_distribute.auto_shard_policy == off, f"{name} {which}"
    next(iter(data.train))  # and the pipeline still runs without it


def test_untuned_turns_autotuning_off_and_leaves_the_rest_as_it_was():
    from trainer.sharding import untuned

    ordered = tf.data.Dataset.range(10).map(lambda x: x * 2, num_parallel_calls=tf.data.AUTOTUNE)
    loose = tf.data.Options()
    loose.deterministic = False
    unordered = ordered.with_options(loose)
    for ds in (ordered, unordered):
        checked = untuned(ds.prefetch(2))
        assert checked.options().autotune.enabled is False
        # AUTOTUNE's fixed parallelism then uses every core, not tf.data's default of 16.
        assert checked.options().autotune.initial_parallelism == CORES
        assert checked.options().deterministic == ds.options().deterministic
        assert sorted(checked.as_numpy_iterator()) == list(range(0, 20, 2))


def test_an_empty_share_is_one_line_naming_its_files_and_what_would_work():
    from trainer.sharding import empty_share

    files = ["a.csv", "b.csv", "c.csv", "d.csv"]
    assert empty_share([3, 1], files, "--train-files") is None
    # By file (as Shard.files deals them): worker 2 of 2 reads b.csv and d.csv.
    assert empty_share([5, 0], files, "--train-files", "data rows") == (
        "--train-files: worker 2 of 2 has no data rows in its share of the files (b.csv, d.csv): each worker "
        "trains on its own files, so give at least 2 files with data rows (a multiple of 2 files of similar "
        "sizes), or fewer workers")
    # By record: fewer files than workers, or told so (every worker reads every file).
    expected = ("--train-files: worker 3 of 3 has no records of its own: each worker keeps one in every 3 of "
                "the 2 records in a.csv; give at least 3 records, or fewer workers")
    assert empty_share([1, 1, 0], files[:1], "--train-files") == expected
    assert empty_share([1, 1, 0], files[:1] * 3, "--train-files", by_record=True) == expected.replace(
        "a.csv", "a.csv, a.csv, a.csv")
