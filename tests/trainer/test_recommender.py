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
from tests.serving.helpers import serving
from tests.trainer.helpers import REPO_ROOT, error_lines, run_cases, run_trainer, run_trainers
from trainer.contract import PROGRESS_TAG

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
    # Its progress lines (trainer.contract), what the job tooling's console shows: the steps before training
    # with their counts, an epoch line each, and the result beside the baselines.
    events = [json.loads(line.split(PROGRESS_TAG, 1)[1]) for line in log.splitlines() if PROGRESS_TAG in line]
    assert [(e["event"], e.get("what")) for e in events] == [
        ("start", None), ("stage", "ratings"), ("stage", "baselines"), ("stage", "baselines"),
        ("stage", "data"), ("epoch", None), ("epoch", None), ("epoch", None), ("result", None)]
    assert events[1]["detail"].startswith("100836 read from ")
    assert events[2]["detail"].endswith("users: starting") and events[2]["seconds"] is None  # a slow step
    assert events[3]["detail"].startswith("popularity on ") and events[3]["seconds"] >= 0
    assert events[5]["val"]["recall_at_k"] == metrics["history"][0]["val_recall_at_k"]
    assert (events[-1]["eval"], events[-1]["baselines"]) == (evaluation, data["baselines"])
    config = json.loads((movielens_run / "model" / "trainer_config.json").read_text())
    assert config["model"] == "recommender" and config["task"]["embedding_dim"] == 64
    assert [h["epoch"] for h in metrics["history"]] == [1, 2, 3]
    assert "val_recall_at_k" in metrics["history"][0]
    # Every user the model knows, once, as a top_k instance at the evaluated k: a batch prediction's input.
    lines = (movielens_run / "model" / "users.jsonl").read_text().splitlines()
    instances = [json.loads(line) for line in lines]
    assert len(instances) == len({i["user"] for i in instances}) == data["train"]["users"]
    assert all(i == {"user": i["user"], "k": 10} and isinstance(i["user"], str) for i in instances)
    assert {"user": "1", "k": 10} in instances


# Reloads the export with TensorFlow alone and calls every signature (see the script's docstring).
SCORE = REPO_ROOT / "tests" / "trainer" / "score_recommender.py"


@pytest.fixture(scope="module")
def scored(movielens_run) -> dict:
    """SCORE's calls of every signature of the export, in a fresh interpreter."""
    out = subprocess.run([sys.executable, SCORE, str(movielens_run / "model")], capture_output=True,
                         text=True, env=subprocess_env(), timeout=120, cwd="/")
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.training
def test_the_export_lists_unseen_items_and_similar_items(movielens_run, scored):
    import numpy as np

    from trainer.models.recommender import data as rd

    got = scored
    assert got["signatures"] == ["serving_default", "similar_items", "top_k"]
    assert got["default_is_top_k"] and got["known"] == [True, False, True]

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
    # An empty request gets an empty answer, not an error.
    assert got["empty"] == [{"items": [0, 0], "known": [0], "scores": [0, 0]}] * 2


@pytest.mark.training
def test_the_export_holds_the_lists_and_item_factors_once_and_nothing_per_rating(movielens_run):
    import tensorflow as tf

    saved = sorted(tuple(shape) for _, shape in tf.train.list_variables(
        str(movielens_run / "model" / "variables" / "variables")) if shape)
    # 610 users x 100 items and their probabilities, the 9,022 items' factors (similar_items) and ids: the
    # user factors and item biases, which no signature reads, stay out, and nothing is stored twice.
    assert saved == [(611, 100), (611, 100), (9023,), (9023, 64)]
    # The lists are variables, not constants of the graph (stored once per signature, under protobuf's 2 GB).
    assert (movielens_run / "model" / "saved_model.pb").stat().st_size < 400_000


@pytest.fixture(scope="module")
def recommender_server(movielens_run, tmp_path_factory):
    command = [sys.executable, "-m", "serving", "--model-dir", str(movielens_run / "model"), "--host",
               "127.0.0.1", "--port", "0"]
    with serving(command, log_dir=tmp_path_factory.mktemp("serve")) as server:
        yield server


@pytest.mark.training
def test_the_served_export_answers_as_its_signatures_do(recommender_server, scored):
    """SCORE's top_k and similar_items calls again, over HTTP: the same batches, the same answers."""
    server = recommender_server
    # A known user, an unknown one (the most rated items) and another, asking for 5, 3 and 2 items.
    asks = [{"user": "1", "k": 5}, {"user": "no-such-user", "k": 3}, {"user": "2", "k": 2}]
    best = server.predictions(asks, signature="top_k")
    assert [p["items"] for p in best] == scored["items"]
    assert [p["scores"] for p in best] == [pytest.approx(row, rel=1e-6) for row in scored["scores"]]
    assert server.predictions(asks) == best  # no signature named: serving_default, which is top_k
    near = server.predictions([{"item": "1", "k": 5}, {"item": "no-such-item", "k": 3}], "similar_items")
    assert [p["items"] for p in near] == scored["similar"]
    assert [p["known"] for p in near] == scored["similar_known"] == [True, False]
    assert near[0]["scores"] == pytest.approx(scored["similar_scores"][0], rel=1e-6)
    # One user a request, as an application asks: that user's own k items.
    alone = server.predictions([{"user": "2", "k": 2}], signature="top_k")[0]
    assert alone["items"] == scored["items"][2][:2]


@pytest.mark.training
def test_separate_eval_files_and_a_time_split(tmp_path):
    lines = RATINGS_HEAD.splitlines()
    train = tmp_path / "train.csv"
    train.write_text("\n".join(lines[:801]) + "\n")
    held = tmp_path / "eval.csv"
    held.write_text("\n".join([lines[0], *lines[801:]]) + "\n")
    jobs = {"files": tmp_path / "job", "time": tmp_path / "job-time"}
    # Both short runs in one interpreter (run_trainers): TensorFlow imported once, not twice.
    outs = run_trainers({
        # fewer than 100 items: --top-k 5
        "files": recommender_args(jobs["files"], "--eval-files", str(held), "--num-epochs", "1",
                                  "--top-k", "5", train=str(train)),
        # --top-k 0 (default): the catalogue
        "time": recommender_args(jobs["time"], "--split", "time", "--num-epochs", "1",
                                 "--ease-max-items", "0", train=str(train)),
    }, tmp_path, timeout=240)
    for name, out in outs.items():
        assert out.returncode == 0, (name, out.stderr[-3000:])
    data = json.loads((jobs["files"] / "model" / "metrics.json").read_text())["data"]
    assert data["split"] == {"how": "files"}
    assert (data["train"]["ratings"], data["eval"]["ratings"]) == (800, 200)
    # A small catalogue: EASE is computed beside popularity, on the same users.
    assert set(data["baselines"]) == {"popularity", "ease"} and not data["skipped_baselines"]
    assert 0 <= data["baselines"]["ease"]["recall_at_k"] <= 1
    data = json.loads((jobs["time"] / "model" / "metrics.json").read_text())["data"]
    assert data["split"]["how"] == "time" and data["eval"]["ratings"] == 160


@pytest.mark.training
@pytest.mark.timeout(300)
def test_two_workers_train_on_disjoint_shares_with_the_same_vocabularies(tmp_path):
    from tests.trainer.test_multiworker import run_cluster, shares_of

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
    # The loop's own input line says the same, as for census and images.
    for task_type, (mine, of, _) in shares.items():
        assert shares_of(outputs[task_type]) == (mine, of, "by record")


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
    from trainer.models.recommender.cached_results import cached_baselines

    ratings = tmp_path / "ratings.csv"
    ratings.write_text("userId,movieId,rating\n1,10,4\n")
    folder = str(tmp_path / "cache")
    calls = []

    def baselines(flags, compute_value=0.25):
        def compute():
            calls.append(flags)
            return {"popularity": {"recall_at_k": compute_value}}
        figures, write = cached_baselines(folder, [str(ratings)], flags, compute)
        if write:  # what the loop does once the data and the model were accepted
            write()
        return figures

    first = baselines(["k", 10])
    assert baselines(["k", 10], compute_value=0.9) == first and calls == [["k", 10]]  # a later trial reads it
    baselines(["k", 5])  # other flags: other figures
    ratings.write_text("userId,movieId,rating\n1,10,4\n2,10,5\n")  # changed data: computed again
    baselines(["k", 10])
    assert calls == [["k", 10], ["k", 5], ["k", 10]]
    # Damaged cached figures are computed again, with a warning, never trusted.
    for path in (tmp_path / "cache").iterdir():
        path.write_text("[not figures")
    assert baselines(["k", 10], compute_value=0.5) == {"popularity": {"recall_at_k": 0.5}}
    assert "not reading the cached baselines" in caplog.text
    # Without a place to cache them (a plain local run), every run computes them.
    assert cached_baselines(None, [str(ratings)], [], lambda: {"x": 1}) == ({"x": 1}, None)


def test_top_k_lists_too_large_to_export_are_refused_before_training(tmp_path, monkeypatch):
    import trainer.models.recommender.hooks as recommender
    from trainer.config import resolve_config
    from trainer.input_files import DataError

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


def test_the_item_item_part_is_eases_weights_scaled_and_neither_checkpointed_nor_exported(tmp_path):
    import numpy as np
    import tensorflow as tf

    import trainer.models.recommender as recommender
    from trainer.config import resolve_config
    from trainer.models.recommender import data as rd

    ratings = tmp_path / "ratings.csv"
    ratings.write_text(RATINGS_HEAD)

    def made(*flags):
        cfg = resolve_config(["--model", "recommender", "--train-files", str(ratings), "--top-k", "5",
                              *flags])
        data = recommender.make_data(cfg, 64, 64)
        return cfg, data, recommender.build_model(cfg, data)

    cfg, data, model = made("--item-item-scale", "3")
    items = len(data.state["items"])
    assert data.report["item_item"] == f"EASE's weights on {items} items, scale 3"
    # The same split and vocabularies the task made, as EASE's baseline sees them.
    columns = rd.RatingColumns("userId", "movieId", "rating", "timestamp")
    train, _ = rd.split_ratings(rd.read_ratings([str(ratings)], columns, "x"), "random", 0.2, cfg.seed)
    fit = rd.index(train, *rd.vocabularies(train, columns))
    weights = rd.ease_weights(fit, items)
    splits, values = data.state["rated"]
    users = np.arange(1, data.state["num_users"] + 1, dtype=np.int32)
    seen = np.zeros((len(users), int(np.diff(splits).max())), np.int32)
    history = np.zeros((len(users), items + 1), np.float32)
    for row, user in enumerate(users):
        mine = values[splits[user]:splits[user + 1]]
        seen[row, :len(mine)], history[row, mine] = mine, 1
    factors = model.user_scores(tf.constant(users)).numpy()
    hybrid = model.user_scores(tf.constant(users), tf.constant(seen)).numpy()
    np.testing.assert_allclose(hybrid[:, 1:] - factors[:, 1:], 3 * (history @ weights)[:, 1:], rtol=1e-4,
                               atol=1e-4)
    # A weight is what training saves and the export holds: the items x items matrix is neither.
    square = [v.path for v in model.weights if tuple(v.shape) == (items + 1, items + 1)]
    assert not square
    saved = tf.train.Checkpoint(model=model).save(str(tmp_path / "ckpt" / "c"))
    assert all(tuple(shape) != (items + 1, items + 1) for _, shape in tf.train.list_variables(saved))

    _, data, model = made("--item-item-scale", "0")
    assert model._item_item is None and data.report["item_item"].startswith("off (--item-item-scale 0)")
    _, data, model = made("--ease-max-items", "10")
    assert model._item_item is None and data.report["item_item"].startswith(
        f"skipped: {items} items > --ease-max-items 10")


def test_the_item_item_weights_are_cached_for_later_trials_and_checked_when_read(tmp_path, caplog):
    import numpy as np

    from trainer.models.recommender.cached_results import cached_item_item

    ratings = tmp_path / "ratings.csv"
    ratings.write_text("userId,movieId,rating\n1,10,4\n")
    folder = str(tmp_path / "cache")
    calls = []

    def weights(num_items, value=1.0):
        def compute():
            calls.append(num_items)
            return np.full((num_items + 1, num_items + 1), value, np.float32)
        got, write = cached_item_item(folder, [str(ratings)], ["seed", 42], num_items, compute)
        if write:
            write()
        return got

    first = weights(3)
    assert (weights(3, value=2.0) == first).all() and calls == [3]  # a later trial reads the cached matrix
    # Cached bytes of another shape (a damaged or foreign file under the same name) are never trusted.
    (cached,) = (tmp_path / "cache").iterdir()
    np.save(cached.open("wb"), np.zeros((2, 2), np.float32))
    assert (weights(3, value=5.0) == 5).all() and calls == [3, 3]
    assert "not reading the cached item-item weights" in caplog.text
    cached.write_bytes(cached.read_bytes()[:100])  # a truncated file
    assert (weights(3, value=6.0) == 6).all() and calls == [3, 3, 3]
    cached.write_bytes(b"")  # an empty one (a power loss after the rename)
    assert (weights(3, value=7.0) == 7).all() and calls == [3, 3, 3, 3]
