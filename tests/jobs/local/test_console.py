"""A local run's console (jobs/local/console.py) and `run_job.py report PATH` on a local run's or study's
folder, with the fake trainer replaying a real trainer's log (its progress lines among the human ones)."""

from __future__ import annotations

import json
import os
import sqlite3
import time

import pytest

from jobs.local.run import run_local
from tests.jobs.helpers import run_cli
from tests.jobs.local.helpers import OUTPUTS, REPO_ROOT, custom_job, pool, snapshot, tuning_job

TAG = "2026-11-28 05:33:01,285 INFO trainer.progress: trainer-progress "
# The recommender's log as `run_job.py jobs/recommender.yaml --local` wrote it (shortened).
LOG = "\n".join([
    "I0000 00:00:1795843922.884802    7678 port.cc:153] oneDNN custom operations are on.",
    TAG + '{"event":"start","model":"recommender","epochs":2}',
    "2026-11-28 05:33:01,285 INFO trainer: ratings: 100836 read from ratings.csv (0.4 s)",
    TAG + '{"event":"stage","what":"ratings","detail":"100836 read from ratings.csv","seconds":0.4}',
    TAG + '{"event":"stage","what":"EASE weights","detail":"9724 x 9724 items, computed","seconds":11.8}',
    "2026-11-28 05:36:20,535 INFO trainer: epoch 1/2 loss=4.3896 val_loss=7.3866 val_recall_at_k=0.2963 "
    "(6.8 s)",
    TAG + '{"event":"epoch","epoch":1,"epochs":2,"seconds":6.8,"train":{"loss":4.3896},"val":{"loss":7.3866,'
    '"recall_at_k":0.2963}}',
    TAG + '{"event":"epoch","epoch":2,"epochs":2,"seconds":5.6,"train":{"loss":4.365},"val":{"loss":7.369,'
    '"recall_at_k":0.2958}}',
    TAG + '{"event":"result","model_dir":"/elsewhere/model","eval":{"loss":7.369,"recall_at_k":0.2958},'
    '"baselines":{"popularity":{"recall_at_k":0.1582}}}',
]) + "\n"
METRICS = {"eval": {"loss": 7.369, "recall_at_k": 0.2958},
           "data": {"baselines": {"popularity": {"recall_at_k": 0.1582}, "ease": {"recall_at_k": 0.2884}}}}
BASE = "gs/demo-models/runs/job-1"


@pytest.fixture
def local_run(tmp_path, capsys):
    """A CustomJob run here whose trainer replays LOG and writes METRICS: (its folder, its stdout)."""
    data = tmp_path / "gs/demo-data"
    data.mkdir(parents=True)
    (data / "log.txt").write_text(LOG)
    (data / "metrics.json").write_text(json.dumps(METRICS))
    args = ["--dump-dir=gs://demo-models/dumps", "--replay=gs://demo-data/log.txt",
            "--metrics=gs://demo-data/metrics.json"]
    rc = run_local("CustomJob", custom_job(pool(args)), OUTPUTS, repo_root=REPO_ROOT, local_root=tmp_path)
    out = capsys.readouterr().out
    assert rc == 0, out
    return tmp_path / BASE, out


def test_a_local_run_prints_its_progress_then_its_eval_beside_the_model(local_run):
    base, out = local_run
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("trainer started"))
    assert lines[start:start + 5] == [
        "trainer started: --model recommender, 2 epochs",
        "pre-training: ratings: 100836 read from ratings.csv (0.4 s)",
        "pre-training: EASE weights: 9724 x 9724 items, computed (11.8 s)",
        "epoch 1/2  loss 4.3896 | val loss 7.3866  recall_at_k 0.2963 (6.8 s)",
        "epoch 2/2  loss 4.3650 | val loss 7.3690  recall_at_k 0.2958 (5.6 s)",
    ]
    assert lines[start + 5].startswith("job 'fake-job' succeeded in ")
    assert lines[start + 6:] == [  # from metrics.json (the log's result line is not shown twice)
        f"  SavedModel: {base / 'model'}",
        "  eval: loss 7.3690  recall_at_k 0.2958",
        "  baseline popularity (same eval data): recall_at_k 0.1582",
        "  baseline ease (same eval data): recall_at_k 0.2884",
        f"  TensorBoard: tensorboard --logdir {base / 'logs'}",
    ]
    assert "oneDNN" not in out and "INFO trainer" not in out  # the replica log keeps the rest
    assert "oneDNN" in (base / "replica-logs/workerpool0-0.log").read_text()


def test_report_path_reports_a_local_run_as_a_cloud_custom_job(local_run, tmp_path):
    base, _ = local_run
    folder = tmp_path / "report"
    rc, out, err = run_cli(["report", base, "--report-dir", folder])
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == f"CustomJob job-1 ({base}): SUCCEEDED"
    assert lines[1].startswith("  start ") and ", end " in lines[1]
    assert lines[2:] == [
        f"  SavedModel: {base / 'model'}/",
        "  eval: loss 7.3690  recall_at_k 0.2958",
        "  baseline popularity (same eval data): recall_at_k 0.1582",
        "  baseline ease (same eval data): recall_at_k 0.2884",
        f"Results: {folder / 'job.json'}",
    ]
    report = json.loads((folder / "job.json").read_text())
    assert report["metrics"] == METRICS and report["state"] == "SUCCEEDED"
    # job.json has the fields of a cloud CustomJob's report (tests/jobs/test_report_verb.py)
    assert set(report) == {"name", "displayName", "state", "createTime", "startTime", "endTime", "duration_s",
                           "modelDir", "error", "metrics"}


def test_report_path_of_a_run_that_wrote_no_metrics_says_where_its_logs_are(local_run, tmp_path):
    base, _ = local_run
    os.remove(base / "model/metrics.json")
    rc, out, err = run_cli(["report", base, "--report-dir", tmp_path / "r"])
    assert rc == 0, err
    assert f"CustomJob job-1 ({base}): UNKNOWN" in out
    assert ("model/metrics.json: not found (the run is still going, failed or was stopped; its logs: "
            f"{base}") in out


def test_report_path_reports_a_local_study_as_its_own_end_did(tmp_path, capsys):
    args = ["--dump-dir=gs://demo-models/dumps", "--fail-trials=2"]
    body = tuning_job(args, trials=4, parallel=2, failed=2)
    assert run_local("HyperparameterTuningJob", body, OUTPUTS, repo_root=REPO_ROOT, local_root=tmp_path) == 0
    ended = capsys.readouterr().out
    base = tmp_path / "gs/demo-models/runs/study-1"
    before = snapshot(base)
    rc, out, err = run_cli(["report", base], repo_root=tmp_path)  # the default folder, under tmp_path
    assert rc == 0, err
    folder = tmp_path / ".local/reports/study-1"
    assert out.splitlines()[0] == f"Study of {base}:"
    table = ended[ended.index("\ntrial "):ended.index("Results: ")]
    assert table in out  # the table, counts, best trial and importance, as the study printed them
    assert f"Results: {folder / 'study.json'}" in out and f"Plot: {folder / 'study.png'}" in out
    reported, own = (json.loads((f / "study.json").read_text()) for f in (folder, base))
    assert reported == own
    assert snapshot(base) == before  # the study's folder (study.db included) is only read


def _fifo(path):
    path.mkdir()
    os.mkfifo(path / "study.db")


def _not_sqlite(path):
    path.mkdir()
    (path / "study.db").write_text("not a database")


def _no_study(path):
    path.mkdir()
    sqlite3.connect(path / "study.db").execute("CREATE TABLE studies (study_id INTEGER)").connection.commit()


def _huge(path):
    """A tree a walk would take long over (and never end on: it loops), with no run at its top."""
    for i in range(200):
        (path / f"d{i}" / "model").mkdir(parents=True)
        for j in range(20):
            (path / f"d{i}" / f"f{j}").write_text("")
    (path / "loop").symlink_to(path)


@pytest.mark.parametrize(
    "make, problem",
    [
        (None, "does not exist"),
        (lambda p: p.write_text("{}"), "is a regular file, not a folder"),
        (lambda p: os.mkfifo(p), "is a FIFO, not a folder"),
        (lambda p: p.symlink_to(p), "cannot be read (Too many levels of symbolic links)"),
        (lambda p: p.mkdir(), "holds no run (no model/metrics.json, replica-logs/ or study.db)"),
        (_huge, "holds no run"),
        (_fifo, "holds a study.db that is not a regular file"),
        (_not_sqlite, "is not a study's database (file is not a database)"),
        (_no_study, "holds 0 studies, not one"),
    ],
    ids=["missing", "file", "fifo", "loop", "empty", "huge", "db-fifo", "db-not-sqlite", "db-empty"],
)
def test_report_path_without_a_run_is_one_line_and_writes_nothing(tmp_path, make, problem):
    path = tmp_path / "run"
    if make is _huge:
        path.mkdir()
    if make is not None:
        make(path)
    folder = tmp_path / "report"
    started = time.monotonic()
    rc, out, err = run_cli(["report", path, "--report-dir", folder])
    assert time.monotonic() - started < 5  # no walk of the tree, no open of a FIFO
    assert rc == 2 and out == ""
    (line,) = err.splitlines()
    assert line.startswith("report: PATH: ") and problem in line, line
    assert "; allowed: the folder of a --local run" in line and len(line) < 400
    assert not folder.exists()


def test_the_chief_log_is_read_as_it_grows_and_a_flood_is_not_held_in_memory(tmp_path):
    import io

    from jobs.local.console import ChiefLog

    path, out = tmp_path / "workerpool0-0.log", io.StringIO()
    log = ChiefLog(path, out)
    log.poll()  # not there yet
    epoch = TAG + '{"event":"epoch","epoch":1,"epochs":2,"seconds":1.0,"train":{"loss":0.5},"val":{}}\n'
    with open(path, "w") as f:
        f.write(epoch[:30])  # half a line: nothing yet
        f.flush()
        log.poll()
        assert out.getvalue() == ""
        f.write(epoch[30:] + TAG + '{"event":"note","text":"' + "x" * 3_000_000)  # a line with no end
        f.flush()
        for _ in range(4):
            log.poll()
        assert len(log.pending) <= 20_000  # what is kept of it is bounded
        f.write('"}\n' + epoch.replace('"epoch":1', '"epoch":2'))
    log.poll()
    assert out.getvalue().splitlines() == ["epoch 1/2  loss 0.5000 (1.0 s)", "epoch 2/2  loss 0.5000 (1.0 s)"]
