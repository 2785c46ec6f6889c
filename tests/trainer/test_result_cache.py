"""trainer/result_cache.py's claims: two trials of a local study that miss the same pre-training result
compute it once; the other waits for it and reads it. A holder that caches nothing (bad data) lets the waiter
compute (and refuse the same data with the same line); gs:// folders, multi-worker runs and folders that
cannot be written take no claim; a run gives its claims up however it ends."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.helpers import subprocess_env
from tests.trainer.helpers import REPO_ROOT, error_lines, trainer_args
from tests.trainer.result_cache_race import WAITING
from trainer import result_cache
from trainer.sharding import Shard

BAD_ROW = ("39, State-gov, not-a-number, Bachelors, 13, Never-married, Adm-clerical, Not-in-family, White, "
           "Male, 2174, 0, 40, United-States, <=50K")


def _trial(study: Path, n: int, signals: Path, train: Path, evaluation: Path) -> subprocess.Popen:
    """A local study's trial ``n`` of 2 (Vertex AI's variables, as jobs/local sets them: its cache is
    ``study/data-scans``), as a process started now (tests/trainer/result_cache_race.py)."""
    env = subprocess_env(AIP_MODEL_DIR=str(study / f"{n}/model"),
                         AIP_CHECKPOINT_DIR=str(study / f"{n}/checkpoints"),
                         AIP_TENSORBOARD_LOG_DIR=str(study / f"{n}/logs"), CLOUD_ML_TRIAL_ID=str(n))
    args = trainer_args({"train": train, "eval": evaluation}, None, "--num-epochs", "1")
    return subprocess.Popen([sys.executable, "-m", "tests.trainer.result_cache_race", str(signals), str(n),
                             str(3 - n), "--", *args[3:]], cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=(signals / f"{n}.log").open("w"), text=True)


@pytest.fixture(scope="module")
def races(tmp_path_factory, census_slice) -> dict[str, dict]:
    """Two races of two trials started together over one study folder each, all four at once: ``good``
    (the slice) and ``bad`` (a malformed training row). {case: {"holder"|"waiter": (status, stdout, log,
    scans computed), "study": Path}}; the holder is the trial that scanned first."""
    lines = census_slice["train"].read_text().split("\n")
    lines.insert(99, BAD_ROW)
    cases, procs = {}, {}
    for case in ("good", "bad"):
        root = tmp_path_factory.mktemp(f"race-{case}")
        train = census_slice["train"]
        if case == "bad":
            train = root / "with-bad-row.data"
            train.write_text("\n".join(lines))
        (root / "signals").mkdir()
        cases[case] = root
        for n in (1, 2):
            procs[case, n] = _trial(root / "study", n, root / "signals", train, census_slice["eval"])
    out = {}
    try:
        for (case, n), proc in procs.items():
            signals = cases[case] / "signals"
            stdout, _ = proc.communicate(timeout=150)
            scans = signals / f"scans-{n}"
            claimed = (signals / "claimed").read_text() if (signals / "claimed").exists() else ""
            role = "holder" if claimed == str(n) else "waiter"
            out.setdefault(case, {"study": cases[case] / "study"})[role] = (
                proc.returncode, stdout, (signals / f"{n}.log").read_text(),
                len(scans.read_text().split()) if scans.exists() else 0)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return out


def test_two_trials_that_start_together_scan_the_data_once(races):
    """The holder scans train and eval; the waiter logs one line, waits, and reads both scans it cached."""
    race = races["good"]
    (h_status, h_out, h_log, h_scans), (w_status, w_out, w_log, w_scans) = race["holder"], race["waiter"]
    assert (h_status, w_status) == (0, 0), (h_log[-3000:], w_log[-3000:])
    assert h_out == w_out == "stopped before training\nheld: []\n"
    assert (h_scans, w_scans) == (2, 0)
    assert w_log.count(WAITING) == 1 and f"{WAITING} scan (" in w_log and WAITING not in h_log
    assert w_log.count("read the scan of 1 file(s) from") == 2 and "read the scan" not in h_log
    scans = race["study"] / "data-scans"
    assert sorted(p.suffix for p in scans.iterdir()) == [".npz", ".npz"]  # no lock file, nothing partial


def test_a_holder_refused_for_bad_data_leaves_the_waiter_to_refuse_it_the_same_way(races):
    """Nothing is cached of bad data: the waiter scans it itself (exit 2, the same one line)."""
    race = races["bad"]
    (h_status, h_out, h_log, h_scans), (w_status, w_out, w_log, w_scans) = race["holder"], race["waiter"]
    assert (h_status, w_status) == (2, 2), (h_log[-3000:], w_log[-3000:])
    # The refused run gave its claim up (trainer.train's finally): its interpreter holds none once main
    # returned, so a next run there (tests/trainer/cli_batch.py) or in another process never waits for it.
    assert h_out == w_out == "held: []\n"
    assert error_lines(h_log) == error_lines(w_log) and len(error_lines(w_log)) == 1
    assert ":100: malformed" in error_lines(w_log)[0]
    assert (h_scans, w_scans) == (1, 1) and WAITING in w_log
    assert not race["study"].exists()  # refused: nothing written, not even the folder the claims were in


HOLDER = """
import os, shutil, sys
from trainer import result_cache
path, source = sys.argv[1], sys.argv[2]
assert result_cache._claim(path, "test") and result_cache.held() == [path]
print("held", flush=True)
sys.stdin.readline()
if source:
    shutil.copyfile(source, path + ".partial")
    os.replace(path + ".partial", path)
result_cache.release(path)
"""


class Holder:
    """Another run's claim on ``path``, in a process of its own: ``let_go()`` caches ``source``'s bytes there
    (or, with none, nothing: a holder that failed) and releases the claim; it does so by itself as soon as
    this process logs that it waits for it."""

    def __init__(self, path: str, source: str = ""):
        self.proc = subprocess.Popen([sys.executable, "-c", HOLDER, path, source], cwd=REPO_ROOT,
                                     env=subprocess_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
        assert self.proc.stdout.readline() == "held\n"
        self.waited = threading.Event()
        self.handler = logging.Handler()
        self.handler.emit = lambda record: self.waited.set() if WAITING in record.getMessage() else None
        # Lets go 30 s on at the latest: a test that never waits fails rather than hangs.
        self.thread = threading.Thread(target=lambda: (self.waited.wait(30), self.let_go()), daemon=True)

    def let_go(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.write("\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=10)

    def __enter__(self):
        trainer_log = logging.getLogger("trainer")
        self.level = trainer_log.level
        trainer_log.setLevel(logging.INFO)  # the waiting line is INFO
        trainer_log.addHandler(self.handler)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        logging.getLogger("trainer").removeHandler(self.handler)
        logging.getLogger("trainer").setLevel(self.level)
        self.let_go()
        self.thread.join(timeout=10)
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture(autouse=True)
def no_claims_left():
    yield
    leaked = result_cache.held()
    result_cache.release_claims()
    assert not leaked, f"claims left held: {leaked}"


def test_a_claim_is_a_lock_file_beside_the_result_until_it_is_cached(tmp_path):
    path = str(tmp_path / "scans" / "k.npz")
    assert result_cache.read(path, 100, "scan", claim=True) is None  # a miss: claimed, and the folder made
    assert result_cache.held() == [path] and Path(path + ".lock").exists()
    # The same result missed twice by one run (train and eval of the same files) waits for no one.
    assert result_cache.read(path, 100, "scan", claim=True) is None and result_cache.held() == [path]
    result_cache.write(path, b"x", "scan")
    assert result_cache.held() == [] and [p.name for p in (tmp_path / "scans").iterdir()] == ["k.npz"]
    assert result_cache.read(path, 100, "scan", claim=True) == b"x" and result_cache.held() == []
    result_cache.read(str(tmp_path / "a"), 1, "a", claim=True)
    result_cache.read(str(tmp_path / "job/data-scans/b"), 1, "b", claim=True)  # makes job/data-scans
    result_cache.read(str(tmp_path / "job/data-scans/c"), 1, "c", claim=True)
    assert (tmp_path / "job/data-scans/b.lock").exists() and (tmp_path / "job/data-scans/c.lock").exists()
    result_cache.release_claims()  # what trainer.train does however the run ends
    # Nothing cached: the lock files go, and the folders a claim made (a refused run writes nothing).
    assert result_cache.held() == [] and sorted(p.name for p in tmp_path.iterdir()) == ["scans"]


def test_a_result_that_cannot_be_cached_leaves_no_partial_file_and_no_claim(tmp_path, caplog):
    path = tmp_path / "scans" / "k.npz"
    assert result_cache.read(str(path), 100, "scan", claim=True) is None
    path.mkdir()  # the rename onto it fails, as a full disk fails the write
    result_cache.write(str(path), b"x" * 1000, "scan")
    assert "could not cache the scan" in caplog.text and result_cache.held() == []
    assert sorted(p.name for p in (tmp_path / "scans").iterdir()) == ["k.npz"]  # no partial, no lock file


def test_a_run_that_misses_a_claimed_result_waits_for_it_and_reads_it(tmp_path, caplog):
    caplog.set_level("INFO", logger="trainer")
    source = tmp_path / "computed"
    source.write_bytes(b"the result")
    path = str(tmp_path / "k.npz")
    with Holder(path, str(source)):
        assert result_cache.read(path, 100, "scan", claim=True) == b"the result"
    assert caplog.text.count(WAITING) == 1 and f"{WAITING} scan ({path}.lock)" in caplog.text
    assert result_cache.held() == [] and not Path(path + ".lock").exists()


def test_a_holder_that_caches_nothing_hands_the_claim_on(tmp_path, caplog):
    caplog.set_level("INFO", logger="trainer")
    path = str(tmp_path / "k.npz")
    with Holder(path):  # failed: nothing cached, its lock file removed as it released it
        assert result_cache.read(path, 100, "scan", claim=True) is None
    assert WAITING in caplog.text and result_cache.held() == [path] and Path(path + ".lock").exists()
    result_cache.write(path, b"x", "scan")
    assert not Path(path + ".lock").exists()


def test_a_wedged_holder_is_waited_for_a_bounded_time(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(result_cache, "WAIT_SECONDS", 0.3)
    path = str(tmp_path / "k.npz")
    holder = Holder(path)  # not entered: it never lets go by itself
    try:
        assert result_cache.read(path, 100, "scan", claim=True) is None and result_cache.held() == []
    finally:
        holder.let_go()
        holder.proc.wait()
    assert "for over 0.3 s without caching it" in caplog.text and "computing it here too" in caplog.text


def test_a_run_holding_a_claim_does_not_wait_for_another(tmp_path, caplog):
    """Two runs each holding one claim and waiting for the other's would deadlock: the one that holds
    computes instead."""
    caplog.set_level("INFO", logger="trainer")
    mine, theirs = str(tmp_path / "mine"), str(tmp_path / "theirs")
    assert result_cache.read(mine, 1, "scan", claim=True) is None
    holder = Holder(theirs)
    try:
        assert result_cache.read(theirs, 1, "scan", claim=True) is None and result_cache.held() == [mine]
    finally:
        holder.let_go()
    assert WAITING not in caplog.text and "holds another claim and computes it too" in caplog.text
    result_cache.release_claims()


def test_no_claim_where_it_cannot_work(tmp_path, caplog):
    """gs:// folders (trials on separate machines), folders that cannot be written (logged, the run goes
    on) and multi-worker runs (collectives between computing and caching) take no claim."""
    assert not result_cache._claim("gs://bucket/study/data-scans/k.npz", "scan")
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    assert result_cache.read(f"{blocked}/data-scans/k.npz", 1, "scan", claim=True) is None
    assert "could not claim the scan" in caplog.text
    assert result_cache.held() == []
    assert result_cache.may_claim(Shard(cache_dir="/x"))
    assert not result_cache.may_claim(Shard(index=1, count=2))


def test_the_recommender_waits_for_the_baselines_and_item_item_weights(tmp_path):
    from trainer.models.recommender.cached_results import cached_baselines, cached_item_item

    ratings = tmp_path / "ratings.csv"
    ratings.write_text("user,item,rating\n1,2,5\n")
    calls = []

    def compute(value):
        return lambda: calls.append(value) or value

    # Another folder's run cached the figures: the same name here, since the key is the files' and flags'.
    figures, write = cached_baselines(str(tmp_path / "other"), [str(ratings)], ["f"], compute({"pop": 1}))
    write()
    (computed,) = (tmp_path / "other").iterdir()
    folder = tmp_path / "cache"
    folder.mkdir()
    with Holder(str(folder / computed.name), str(computed)):
        assert cached_baselines(str(folder), [str(ratings)], ["f"], compute({"x": 0}), claim=True) == (
            {"pop": 1}, None)
    assert calls == [{"pop": 1}]
    np = pytest.importorskip("numpy")
    weights = np.ones((3, 3), np.float32)
    _, write = cached_item_item(str(tmp_path / "other"), [str(ratings)], ["w"], 2, compute(weights))
    write()
    (computed,) = set((tmp_path / "other").iterdir()) - {tmp_path / "other" / computed.name}
    with Holder(str(folder / computed.name)):  # failed: this run computes them, under its own claim
        got, write = cached_item_item(str(folder), [str(ratings)], ["w"], 2, compute(weights * 2), claim=True)
    assert (got == 2).all() and len(calls) == 3 and result_cache.held() == [str(folder / computed.name)]
    write()


def test_the_image_classifier_waits_for_the_checks_of_the_same_files(tmp_path, monkeypatch, caplog):
    from tests.trainer.image_helpers import digit_images, png_records, write_records
    from trainer.config import resolve_config
    from trainer.models import image_classifier
    from trainer.models.image_classifier import checks as image_checks

    images, labels = digit_images(40, seed=3)  # every digit among the first 30
    records = png_records(images, labels)
    train = write_records(tmp_path / "train.tfrecord", records[:30])
    evaluation = write_records(tmp_path / "eval.tfrecord", records[30:])
    cfg = resolve_config(["--model", "image_classifier", "--train-files", str(train), "--eval-files",
                          str(evaluation), "--channels", "1", "--num-classes", "10"])
    caplog.set_level("INFO", logger="trainer")
    data = image_classifier.make_data(cfg, 8, 8, Shard(cache_dir=str(tmp_path / "other")))
    data.write_cache()
    (computed,) = (tmp_path / "other").iterdir()
    (tmp_path / "cache").mkdir()
    with monkeypatch.context() as m, Holder(str(tmp_path / "cache" / computed.name), str(computed)):
        for name in ("scan_images", "load_images"):
            m.setattr(image_checks, name, lambda *a, **k: pytest.fail("checked the data again"))
        again = image_classifier.make_data(cfg, 8, 8, Shard(cache_dir=str(tmp_path / "cache")))
    assert again.write_cache is None and again.report == data.report
    assert WAITING in caplog.text and "the checks of a run before this one" in caplog.text
