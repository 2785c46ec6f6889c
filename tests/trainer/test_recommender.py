"""`python -m trainer.task --model recommender` end to end: a short run on the shipped MovieLens ratings with
its baselines, the exported rating and top-k signatures reloaded in a fresh interpreter (unknown users
included), separate --eval-files, and bad input (one line, exit 2, nothing written)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import subprocess_env
from tests.trainer.helpers import REPO_ROOT, error_lines, run_trainer

RATINGS = str(REPO_ROOT / "data" / "movielens" / "ratings.csv")
with open(RATINGS, encoding="utf-8") as _file:
    RATINGS_HEAD = "".join(_file.readline() for _ in range(401))  # the header and 400 ratings


def recommender_args(job_dir, *extra, train=RATINGS) -> list[str]:
    return [sys.executable, "-m", "trainer.task", "--model", "recommender", "--train-files", train,
            "--job-dir", str(job_dir), *extra]


def test_help_lists_the_recommender_flags():
    out = run_trainer(recommender_args("/unused", "--help"))
    assert out.returncode == 0
    text = " ".join(out.stdout.split())  # argparse wraps the help
    for flag in ("--user-column", "--item-column", "--rating-column", "--timestamp-column", "--split",
                 "--eval-fraction", "--embedding-dim", "--l2", "--top-k", "holds out part of --train-files"):
        assert flag in text
    assert "--image-size" not in text and "--embedding-size" not in text


@pytest.fixture(scope="module")
def movielens_run(tmp_path_factory):
    job_dir = tmp_path_factory.mktemp("recommender")
    out = run_trainer(recommender_args(job_dir, "--num-epochs", "2"), timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    (job_dir / "stderr.txt").write_text(out.stderr)
    return job_dir


@pytest.mark.training
def test_trains_on_a_seeded_split_and_reports_the_baselines(movielens_run):
    metrics = json.loads((movielens_run / "model" / "metrics.json").read_text())
    data, evaluation = metrics["data"], metrics["eval"]
    assert set(evaluation) == {"rmse", "mae", "loss"}
    assert (data["train"]["ratings"], data["eval"]["ratings"]) == (80_669, 20_167)
    assert data["split"] == {"how": "random", "eval_fraction": 0.2, "seed": 42}
    baselines = data["baselines"]
    # Two epochs already beat the bias-only model, which beats the global mean.
    assert evaluation["rmse"] < baselines["bias_only"]["rmse"] < baselines["global_mean"]["rmse"]
    assert evaluation["mae"] < baselines["bias_only"]["mae"] < baselines["global_mean"]["mae"]
    log = (movielens_run / "stderr.txt").read_text()
    assert "baseline bias_only on the same data: mae=" in log
    assert "baseline global_mean on the same data: mae=" in log
    config = json.loads((movielens_run / "model" / "trainer_config.json").read_text())
    assert config["model"] == "recommender" and config["task"]["embedding_dim"] == 64


# Reloads the export with TensorFlow alone and calls both signatures (see the script's docstring).
SCORE = REPO_ROOT / "tests" / "trainer" / "score_recommender.py"


@pytest.mark.training
def test_the_export_rates_pairs_and_lists_unrated_items(movielens_run):
    from trainer import ratings_data as rd

    out = subprocess.run([sys.executable, SCORE, str(movielens_run / "model")], capture_output=True,
                         text=True, env=subprocess_env(), timeout=120, cwd="/")
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["signatures"] == ["serving_default", "top_k"]
    assert got["known_user"] == [True, True, False, True] and got["known_item"] == [True, True, True, False]
    # An unknown user or item falls back to the other's bias and the global mean: still a rating in range.
    assert all(0.5 <= r <= 5.0 for r in got["rating"]) and got["rating"][1] != got["rating"][2]

    # The batch's widest k is 5: narrower rows are padded with "" and 0.
    assert [len(row) for row in got["items"]] == [5, 5, 5]
    assert [sum(bool(i) for i in row) for row in got["items"]] == [5, 3, 2]
    assert got["items"][1][3:] == ["", ""] and got["scores"][1][3:] == [0.0, 0.0]
    for row, scores in zip(got["items"], got["scores"], strict=True):
        kept = [s for i, s in zip(row, scores, strict=True) if i]
        assert kept == sorted(kept, reverse=True) and len(set(i for i in row if i)) == len(kept)
    # Never what the user rated in training (the same seeded split the trainer made).
    ratings = rd.read_ratings([RATINGS], rd.RatingColumns("userId", "movieId", "rating", "timestamp"), "x")
    train, _ = rd.split_ratings(ratings, "random", 0.2, seed=42)
    for user, row in (("1", got["items"][0]), ("2", got["items"][2])):
        seen = set(train.items[train.users == user].tolist())
        assert seen and not seen & set(row)
    # An unknown user's list is the catalogue ranked by item bias, i.e. by its own predicted rating.
    assert got["unknown_ratings"] == pytest.approx(got["scores"][1][:3], abs=1e-5)


@pytest.mark.training
def test_separate_eval_files_and_a_time_split(tmp_path):
    lines = RATINGS_HEAD.splitlines()
    train = tmp_path / "train.csv"
    train.write_text("\n".join(lines[:301]) + "\n")
    held = tmp_path / "eval.csv"
    held.write_text("\n".join([lines[0], *lines[301:401]]) + "\n")
    job = tmp_path / "job"
    out = run_trainer(recommender_args(job, "--eval-files", str(held), "--num-epochs", "1", "--top-k", "5",
                                       train=str(train)), timeout=120)  # 400 ratings: fewer than 100 items
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads((job / "model" / "metrics.json").read_text())["data"]
    assert data["split"] == {"how": "files"}
    assert (data["train"]["ratings"], data["eval"]["ratings"]) == (300, 100)
    job = tmp_path / "job-time"
    out = run_trainer(recommender_args(job, "--split", "time", "--num-epochs", "1", train=str(train)),
                      timeout=120)  # --top-k 0 (default): at most the catalogue
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads((job / "model" / "metrics.json").read_text())["data"]
    assert data["split"]["how"] == "time" and data["eval"]["ratings"] == 60


@pytest.mark.parametrize("case", ["missing-column", "not-a-number", "empty-split", "top-k",
                                  "no-eval-ratings"])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(case, tmp_path):
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
        extra = ["--eval-fraction", "0.001"]
        expected = ("trainer.task: error: --eval-fraction 0.001: the evaluation split of 400 rating(s) "
                    "would be empty")
    elif case == "top-k":
        extra = ["--top-k", "100000"]
        expected = "trainer.task: error: --top-k 100000: larger than the catalogue of "
    else:
        header_only = tmp_path / "eval.csv"
        header_only.write_text("userId,movieId,rating,timestamp\n")
        extra = ["--eval-files", str(header_only)]
        expected = f"trainer.task: error: --eval-files: no ratings in {header_only}"
    out = run_trainer(recommender_args(job, *extra, train=train))
    assert out.returncode == 2, out.stderr[-3000:]
    errors = error_lines(out.stderr)
    assert len(errors) == 1 and errors[0].startswith(expected), errors
    assert "Traceback" not in out.stderr and not job.exists()
