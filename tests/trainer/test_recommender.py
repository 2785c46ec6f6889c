"""`python -m trainer.task --model recommender` end to end: a short run on the shipped MovieLens ratings with
its ranking metrics and baselines, the exported signatures reloaded in a fresh interpreter (unknown users and
items included, no seen item recommended), separate --eval-files, a time split, two workers training on
disjoint shares, and bad input (one line, exit 2, nothing written)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from tests.helpers import subprocess_env
from tests.trainer.helpers import REPO_ROOT, error_lines, run_cases, run_trainer

RATINGS = str(REPO_ROOT / "data" / "movielens" / "ratings.csv")
with open(RATINGS, encoding="utf-8") as _file:
    RATINGS_HEAD = "".join(_file.readline() for _ in range(1001))  # the header and 1000 ratings (7 users)


def recommender_args(job_dir, *extra, train=RATINGS) -> list[str]:
    return [sys.executable, "-m", "trainer.task", "--model", "recommender", "--train-files", train,
            "--job-dir", str(job_dir), *extra]


def test_help_lists_the_recommender_flags():
    out = run_trainer(recommender_args("/unused", "--help"))
    assert out.returncode == 0
    text = " ".join(out.stdout.split())  # argparse wraps the help
    for flag in ("--user-column", "--item-column", "--rating-column", "--timestamp-column", "--split",
                 "--eval-fraction", "--embedding-dim", "--l2", "--negatives", "--positive-threshold",
                 "--ranking-k", "--eval-users", "--ease-max-items", "--top-k",
                 "holds out part of --train-files"):
        assert flag in text
    assert "--image-size" not in text and "--embedding-size" not in text


@pytest.fixture(scope="module")
def movielens_run(tmp_path_factory):
    # EASE on the whole catalogue (9k items) takes a minute or more on 2 cores: it is scored on a slice in
    # test_separate_eval_files_and_a_time_split and by scripts/benchmarks/bench_recommender.py.
    job_dir = tmp_path_factory.mktemp("recommender")
    out = run_trainer(recommender_args(job_dir, "--num-epochs", "3", "--ease-max-items", "0"), timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    (job_dir / "stderr.txt").write_text(out.stderr)
    return job_dir


@pytest.mark.training
def test_trains_on_a_seeded_split_and_beats_popularity(movielens_run):
    metrics = json.loads((movielens_run / "model" / "metrics.json").read_text())
    data, evaluation = metrics["data"], metrics["eval"]
    assert set(evaluation) == {"recall_at_k", "ndcg_at_k", "loss"}
    assert (data["train"]["ratings"], data["eval"]["ratings"]) == (80_669, 20_167)
    assert data["train"]["this_worker_ratings"] == 80_669
    assert data["split"] == {"how": "random", "eval_fraction": 0.2, "seed": 42}
    assert data["ranking"] == {"k": 10, "positive_threshold": 4.0}
    assert 550 < data["eval"]["ranked_users"] == data["eval"]["users_with_positives"] <= 610
    # Three epochs already rank better than the most-rated unseen items.
    popularity = data["baselines"]["popularity"]
    assert 0.1 < popularity["recall_at_k"] < evaluation["recall_at_k"]
    assert popularity["ndcg_at_k"] < evaluation["ndcg_at_k"]
    assert data["skipped_baselines"]["ease"].startswith("9022 items > --ease-max-items 0: ")
    log = (movielens_run / "stderr.txt").read_text()
    assert "baseline popularity on the same data: ndcg_at_k=" in log
    assert "baseline ease skipped: 9022 items > --ease-max-items 0" in log
    config = json.loads((movielens_run / "model" / "trainer_config.json").read_text())
    assert config["model"] == "recommender" and config["task"]["embedding_dim"] == 64
    assert [h["epoch"] for h in metrics["history"]] == [1, 2, 3]
    assert "val_recall_at_k" in metrics["history"][0]


# Reloads the export with TensorFlow alone and calls every signature (see the script's docstring).
SCORE = REPO_ROOT / "tests" / "trainer" / "score_recommender.py"


@pytest.mark.training
def test_the_export_scores_pairs_lists_unseen_items_and_similar_items(movielens_run):
    import numpy as np

    from trainer.tasks.recommender import data as rd

    out = subprocess.run([sys.executable, SCORE, str(movielens_run / "model")], capture_output=True,
                         text=True, env=subprocess_env(), timeout=120, cwd="/")
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["signatures"] == ["serving_default", "similar_items", "top_k"]
    assert got["known_user"] == [True, True, False, True] and got["known_item"] == [True, True, True, False]
    assert got["score"][3] == -1e9 and got["score"][0] != got["score"][1]

    # The batch's widest k is 5: narrower rows are padded with "" and 0.
    assert [len(row) for row in got["items"]] == [5, 5, 5]
    assert [sum(bool(i) for i in row) for row in got["items"]] == [5, 3, 2]
    assert got["items"][1][3:] == ["", ""] and got["scores"][1][3:] == [0.0, 0.0]
    for row, scores in zip(got["items"], got["scores"], strict=True):
        kept = [s for i, s in zip(row, scores, strict=True) if i]
        assert kept == sorted(kept, reverse=True) and len(set(i for i in row if i)) == len(kept)
        assert all(0 < s < 1 for s in kept)  # the model's probability of the item being the user's next
    # Never what the user rated in training (the same seeded split the trainer made).
    ratings = rd.read_ratings([RATINGS], rd.RatingColumns("userId", "movieId", "rating", "timestamp"), "x")
    train, _ = rd.split_ratings(ratings, "random", 0.2, seed=42)
    for user, row in (("1", got["items"][0]), ("2", got["items"][2])):
        seen = set(train.items[train.users == user].tolist())
        assert seen and not seen & set(row)
    # An unknown user gets the most-rated items, scored by their share of the training ratings.
    items, counts = np.unique(train.items, return_counts=True)
    top = sorted(zip((-counts).tolist(), items.tolist(), strict=True))[:3]
    assert got["items"][1][:3] == [item for _, item in top]
    assert got["scores"][1][:3] == pytest.approx([-c / len(train) for c, _ in top], rel=1e-5)

    # similar_items: the nearest items by cosine, best first, never the item itself; an unknown item gets an
    # empty row.
    assert got["similar_known"] == [True, False]
    near = [i for i in got["similar"][0] if i]
    assert len(near) == 5 and "1" not in near and len(set(near)) == 5
    assert got["similar_scores"][0] == sorted(got["similar_scores"][0], reverse=True)
    assert all(-1 <= s <= 1 for s in got["similar_scores"][0])
    assert got["similar"][1] == [""] * 5 and got["similar_scores"][1] == [0.0] * 5


@pytest.mark.training
def test_separate_eval_files_and_a_time_split(tmp_path):
    lines = RATINGS_HEAD.splitlines()
    train = tmp_path / "train.csv"
    train.write_text("\n".join(lines[:801]) + "\n")
    held = tmp_path / "eval.csv"
    held.write_text("\n".join([lines[0], *lines[801:]]) + "\n")
    job = tmp_path / "job"
    out = run_trainer(recommender_args(job, "--eval-files", str(held), "--num-epochs", "1", "--top-k", "5",
                                       train=str(train)), timeout=120)  # fewer than 100 items: --top-k 5
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads((job / "model" / "metrics.json").read_text())["data"]
    assert data["split"] == {"how": "files"}
    assert (data["train"]["ratings"], data["eval"]["ratings"]) == (800, 200)
    # A small catalogue: EASE is computed beside popularity, on the same users.
    assert set(data["baselines"]) == {"popularity", "ease"} and not data["skipped_baselines"]
    assert 0 <= data["baselines"]["ease"]["recall_at_k"] <= 1
    job = tmp_path / "job-time"
    out = run_trainer(recommender_args(job, "--split", "time", "--num-epochs", "1", "--ease-max-items", "0",
                                       train=str(train)), timeout=120)  # --top-k 0 (default): the catalogue
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads((job / "model" / "metrics.json").read_text())["data"]
    assert data["split"]["how"] == "time" and data["eval"]["ratings"] == 160


@pytest.mark.training
@pytest.mark.timeout(300)
def test_two_workers_train_on_disjoint_shares_with_the_same_vocabularies(tmp_path):
    from tests.trainer.test_multiworker import run_cluster

    ratings = tmp_path / "ratings.csv"
    ratings.write_text(RATINGS_HEAD)
    job = tmp_path / "job"
    procs, outputs = run_cluster(tmp_path, recommender_args(
        job, "--num-epochs", "1", "--ease-max-items", "0", "--train-batch-size", "64", train=str(ratings)))
    shares = {}
    for task_type, proc in procs.items():
        assert proc.returncode == 0, f"{task_type}:\n{outputs[task_type][-3000:]}"
        found = re.findall(r"this worker's share: (\d+) ratings of (\d+) \(worker (\d) of 2\)",
                           outputs[task_type])
        assert len(found) == 1, outputs[task_type][-3000:]
        shares[task_type] = [int(v) for v in found[0]]
    total = 800  # 1000 ratings, 20 % held out
    assert {s[1] for s in shares.values()} == {total} and {s[2] for s in shares.values()} == {0, 1}
    assert all(s[0] <= 0.55 * total for s in shares.values())
    assert sum(s[0] for s in shares.values()) == total
    report = json.loads((job / "model" / "metrics.json").read_text())
    assert (report["distribution"], report["replicas"]) == ("multi_worker", 2)
    assert report["data"]["train"]["this_worker_ratings"] == shares["chief"][0]


BAD_INPUT = ["missing-column", "not-a-number", "empty-split", "top-k", "no-eval-ratings", "threshold",
             "ranking-k-zero", "ranking-k-large", "no-positives"]


def _bad_input(case: str, tmp_path) -> tuple[list[str], str]:
    """A bad-input case's command line (its files written under ``tmp_path``, its job dir tmp_path/job) and
    the start of the one error line it must print."""
    job = tmp_path / "job"
    good = tmp_path / "ratings.csv"
    good.write_text(RATINGS_HEAD)
    train, extra = str(good), []
    if case == "missing-column":
        extra = ["--user-column", "user"]
        expected = f"trainer.task: error: {good}: line 1: no column 'user' (--user-column); the header names "
        expected += "'userId', 'movieId', 'rating', 'timestamp'"
    elif case == "not-a-number":
        bad = tmp_path / "bad.csv"
        bad.write_text("userId,movieId,rating,timestamp\n1,2,4.0,5\n1,3,four,6\n")
        train = str(bad)
        expected = (f"trainer.task: error: {bad}: line 3: rating (--rating-column) must be a finite number, "
                    "got 'four'")
    elif case == "empty-split":
        extra = ["--eval-fraction", "0.0001"]
        expected = ("trainer.task: error: --eval-fraction 0.0001: the evaluation split of 1000 rating(s) "
                    "would be empty")
    elif case == "top-k":
        extra = ["--top-k", "100000"]
        expected = "trainer.task: error: --top-k 100000: larger than the catalogue of "
    elif case == "no-eval-ratings":
        header_only = tmp_path / "eval.csv"
        header_only.write_text("userId,movieId,rating,timestamp\n")
        extra = ["--eval-files", str(header_only)]
        expected = f"trainer.task: error: --eval-files: no ratings in {header_only}"
    elif case == "threshold":
        extra = ["--positive-threshold", "6"]
        expected = "trainer.task: error: --positive-threshold 6: outside the training ratings' range 0.5..5"
    elif case == "ranking-k-zero":
        extra = ["--ranking-k", "0"]
        expected = "trainer.task: error: argument --ranking-k: must be an integer >= 1, got 0"
    elif case == "ranking-k-large":
        extra = ["--ranking-k", "100000"]
        expected = "trainer.task: error: --ranking-k 100000: larger than the catalogue of "
    else:
        low = tmp_path / "low.csv"  # held-out ratings that are all below the threshold
        low.write_text("userId,movieId,rating,timestamp\n1,1,2.0,5\n2,3,1.0,6\n")
        extra = ["--eval-files", str(low)]
        expected = ("trainer.task: error: --positive-threshold 4: no user has a positive in --eval-files "
                    f"{low} (a rating >= 4 of an item known to training that the user did not rate in "
                    "training)")
    return recommender_args(job, *extra, train=train), expected


@pytest.fixture(scope="module")
def bad_input_runs(tmp_path_factory) -> dict[str, tuple]:
    """Every bad-input case run in one process (tests/trainer/cli_batch.py: TensorFlow imported once, not
    nine times): {case: (job dir, expected error line start, CompletedProcess)}."""
    return run_cases(BAD_INPUT, _bad_input, tmp_path_factory)


@pytest.mark.parametrize("case", BAD_INPUT)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(case, bad_input_runs):
    job, expected, out = bad_input_runs[case]
    assert out.returncode == 2, out.stderr[-3000:]
    errors = error_lines(out.stderr)
    assert len(errors) == 1 and errors[0].startswith(expected), errors
    assert "Traceback" not in out.stderr and not job.exists()


def test_baselines_are_computed_once_per_files_and_flags(tmp_path, caplog):
    from trainer.tasks.recommender import kept_baselines

    ratings = tmp_path / "ratings.csv"
    ratings.write_text("userId,movieId,rating\n1,10,4\n")
    folder = str(tmp_path / "kept")
    calls = []

    def baselines(flags, compute_value=0.25):
        def compute():
            calls.append(flags)
            return {"popularity": {"recall_at_k": compute_value}}
        figures, keep = kept_baselines(folder, [str(ratings)], flags, compute)
        if keep:  # what the loop does once the data and the model were accepted
            keep()
        return figures

    first = baselines(["k", 10])
    assert baselines(["k", 10], compute_value=0.9) == first and calls == [["k", 10]]  # a later trial reads it
    baselines(["k", 5])  # other flags: other figures
    ratings.write_text("userId,movieId,rating\n1,10,4\n2,10,5\n")  # changed data: computed again
    baselines(["k", 10])
    assert calls == [["k", 10], ["k", 5], ["k", 10]]
    # Damaged kept figures are computed again, with a warning, never trusted.
    for path in (tmp_path / "kept").iterdir():
        path.write_text("[not figures")
    assert baselines(["k", 10], compute_value=0.5) == {"popularity": {"recall_at_k": 0.5}}
    assert "not reading the kept baselines" in caplog.text
    # Without a place to keep them (a plain local run), every run computes them.
    assert kept_baselines(None, [str(ratings)], [], lambda: {"x": 1}) == ({"x": 1}, None)


def test_top_k_lists_too_large_to_export_are_refused_before_training(tmp_path, monkeypatch):
    import trainer.tasks.recommender as recommender
    from trainer.config import resolve_config
    from trainer.data import DataError

    ratings = tmp_path / "ratings.csv"
    ratings.write_text(RATINGS_HEAD)
    users = len({line.split(",")[0] for line in RATINGS_HEAD.splitlines()[1:]})
    monkeypatch.setattr(recommender, "MAX_LIST_ENTRIES", 50 * (users + 1))  # row 0: the unknown user
    cfg = resolve_config(["--model", "recommender", "--train-files", str(ratings), "--top-k", "60"])
    with pytest.raises(DataError) as refused:
        recommender.make_data(cfg, 64, 64)
    entries, allowed = 60 * (users + 1), 50 * (users + 1)
    assert str(refused.value) == (f"--top-k 60: {users} users x 60 recommendations would export {entries} "
                                  f"list entries, more than the {allowed} allowed; use --top-k 50 or less")
