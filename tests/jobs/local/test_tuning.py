"""Tuning studies run locally on trial subprocesses of the fake trainer."""

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from jobs.local.run import run_local
from tests.jobs.local.helpers import OUTPUTS, REPO_ROOT, alive, dumps, tuning_job

BASE = "gs/demo-models/runs/study-1"


def _study(body, tmp_path, **kw):
    rc = run_local("HyperparameterTuningJob", body, OUTPUTS, repo_root=REPO_ROOT, local_root=tmp_path, **kw)
    path = tmp_path / BASE / "study.json"
    return rc, (json.loads(path.read_text()) if path.exists() else None)


def test_study_runs_trials_with_the_contract_and_survives_a_failing_trial(tmp_path, capsys):
    body = tuning_job(
        ["--dump-dir=gs://demo-models/dumps", "--fail-trials=2"], trials=4, parallel=2, failed=2
    )
    rc, study = _study(body, tmp_path)
    assert rc == 0 and study["state"] == "SUCCEEDED"
    assert [t["state"] for t in study["trials"]] == ["SUCCEEDED", "FAILED", "SUCCEEDED", "SUCCEEDED"]
    failed = study["trials"][1]
    assert failed["log"].endswith("2/replica-logs/workerpool0-0.log") and failed["log"] in failed["failure"]
    base = tmp_path / BASE
    records = dumps(tmp_path / "gs/demo-models/dumps")
    for trial in ("1", "2", "3", "4"):
        rec = records[f"{trial}-workerpool0-0"]
        env = rec["env"]
        assert env["CLOUD_ML_TRIAL_ID"] == trial
        assert env["CLOUD_ML_HP_METRIC_FILE"] == f"{base}/{trial}/hypertune/output.metrics"
        assert env["AIP_MODEL_DIR"] == f"{base}/{trial}/model/"
        assert env["AIP_CHECKPOINT_DIR"] == f"{base}/{trial}/checkpoints/"
        assert env["AIP_TENSORBOARD_LOG_DIR"] == f"{base}/{trial}/logs/"
        params = study["trials"][int(trial) - 1]["parameters"]
        assert rec["argv"][-3:] == [f"--x={params['x']!r}", f"--n={params['n']}", f"--c={params['c']}"]
    best = study["best"]
    assert best["metric"] == max(t["metric"] for t in study["trials"] if t["metric"] is not None)
    assert best["model_dir"] == f"{base}/{best['id']}/model/"
    assert (base / "study.png").stat().st_size > 10_000
    assert set(study["importance"]) == {"x", "n", "c"}
    out = capsys.readouterr().out
    assert "trial 2 failed" in out and "best so far" in out and f"Best trial {best['id']}" in out
    assert "[2 running, 0 done, 0 failed; 4 trials]" in out  # progress counts on every trial line
    assert "[0 running, 3 done, 1 failed; 4 trials]" in out
    assert "SavedModel" in out and f"tensorboard --logdir {base}" in out


def test_max_failed_trial_count_fails_the_study_when_spent(tmp_path):
    body = tuning_job(["--dump-dir=gs://demo-models/dumps", "--fail=1"], trials=6, parallel=1, failed=2)
    rc, study = _study(body, tmp_path)
    assert rc == 1 and study["state"] == "FAILED"
    assert [t["state"] for t in study["trials"]] == ["FAILED", "FAILED"]


def test_default_failure_budget_stops_a_broken_study_early(tmp_path):
    body = tuning_job(["--dump-dir=gs://demo-models/dumps", "--fail=1"], trials=8, parallel=1, failed=0)
    rc, study = _study(body, tmp_path)
    assert rc == 1 and study["counts"]["failed"] == 3


def test_best_measurement_and_minimize(tmp_path):
    args = ["--dump-dir=gs://demo-models/dumps", "--steps=3"]
    rc, study = _study(tuning_job(args, trials=2, parallel=2, selection="BEST_MEASUREMENT"), tmp_path)
    assert rc == 0
    for t in study["trials"]:
        values = [m["value"] for m in t["measurements"]]
        assert len(values) == 3 and t["metric"] == max(values) != values[-1]
    body = tuning_job(
        args, trials=3, parallel=1, goal="MINIMIZE", base="gs://demo-models/runs/min", name="min"
    )
    rc = run_local("HyperparameterTuningJob", body, OUTPUTS, repo_root=REPO_ROOT, local_root=tmp_path)
    study = json.loads((tmp_path / "gs/demo-models/runs/min/study.json").read_text())
    assert rc == 0 and study["best"]["metric"] == min(t["metric"] for t in study["trials"])
    assert all(t["metric"] == t["measurements"][-1]["value"] for t in study["trials"])


def test_grid_search_visits_each_point_once_and_caps_trials(tmp_path):
    params = [
        {"parameterId": "n", "integerValueSpec": {"minValue": "2", "maxValue": "4"}},
        {"parameterId": "c", "categoricalValueSpec": {"values": ["a", "b"]}},
    ]
    body = tuning_job(
        ["--dump-dir=gs://demo-models/dumps"], trials=10, parallel=2, params=params, algorithm="GRID_SEARCH"
    )
    rc, study = _study(body, tmp_path)
    assert rc == 0
    points = sorted((t["parameters"]["n"], t["parameters"]["c"]) for t in study["trials"])
    assert points == [(n, c) for n in (2, 3, 4) for c in ("a", "b")]
    assert study["best"]["parameters"] == {"n": 3, "c": "b"}


def test_bayesian_search_beats_random_start_on_a_smooth_objective(tmp_path):
    params = [{"parameterId": "x", "doubleValueSpec": {"minValue": 0.0, "maxValue": 1.0}}]
    body = tuning_job(["--dump-dir=gs://demo-models/dumps"], trials=12, parallel=1, params=params)
    rc, study = _study(body, tmp_path)
    xs = [t["parameters"]["x"] for t in study["trials"]]
    assert rc == 0 and len(set(xs)) == 12
    # After the random start-up, TPE concentrates near the optimum x = 0.3.
    assert sum(abs(x - 0.3) for x in xs[-4:]) / 4 < sum(abs(x - 0.3) for x in xs[:4]) / 4
    assert abs(study["best"]["parameters"]["x"] - 0.3) < 0.1


def _driver(body, tmp_path, *extra):
    path = tmp_path / "body.json"
    path.write_text(json.dumps(body))
    return subprocess.Popen(
        [sys.executable, "-m", "tests.jobs.local.driver", str(path), str(tmp_path), *extra],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@pytest.mark.parametrize("algorithm", ["ALGORITHM_UNSPECIFIED", "RANDOM_SEARCH"])
def test_ctrl_c_keeps_finished_trials_leaves_no_orphans_and_resume_finishes_the_study(tmp_path, algorithm):
    hold = tmp_path / "gs/demo-models/hold"
    hold.parent.mkdir(parents=True)
    hold.write_text("trials 2.. wait while this file exists")
    args = ["--dump-dir=gs://demo-models/dumps", "--hold=gs://demo-models/hold"]
    body = tuning_job(args, trials=4, parallel=2, algorithm=algorithm)
    proc = _driver(body, tmp_path)
    dump_dir = tmp_path / "gs/demo-models/dumps"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not {"2-workerpool0-0", "3-workerpool0-0"} <= set(_names(dump_dir)):
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    assert "--resume" in out
    study = json.loads((tmp_path / BASE / "study.json").read_text())
    assert study["state"] == "INTERRUPTED"
    assert [t["state"] for t in study["trials"]] == ["SUCCEEDED", "INTERRUPTED", "INTERRUPTED"]
    pids = [r["pid"] for r in dumps(dump_dir).values()]
    assert len(pids) == 3 and not [p for p in pids if alive(p)]
    first = study["trials"][0]["parameters"]
    interrupted = [t["parameters"] for t in study["trials"][1:]]

    # A changed definition cannot resume the study.
    changed = json.loads(json.dumps(body))
    changed["studySpec"]["parameters"].pop()
    proc = _driver(changed, tmp_path, "--resume")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "--resume: studySpec differs" in out and out.count("\n") == 1

    # Resume (as a new submission would: another job id in baseOutputDirectory): the finished trial is not
    # re-run, the interrupted parameters run first, and 4 trials finish in all.
    hold.unlink()
    for p in dump_dir.glob("*.json"):
        p.unlink()
    body["trialJobSpec"]["baseOutputDirectory"]["outputUriPrefix"] = "gs://demo-models/runs/study-2"
    body["displayName"] = "fake-study-resubmitted"
    proc = _driver(body, tmp_path, "--resume")
    out, _ = proc.communicate(timeout=90)
    assert proc.returncode == 0, out
    assert "resuming study" in out
    study = json.loads((tmp_path / BASE / "study.json").read_text())
    finished = [t for t in study["trials"] if t["state"] == "SUCCEEDED"]
    assert len(finished) == 4 and finished[0]["parameters"] == first
    assert [t["parameters"] for t in finished[1:3]] == interrupted
    assert len({json.dumps(t["parameters"], sort_keys=True) for t in finished}) == 4  # no replayed draws
    assert "1-workerpool0-0" not in _names(dump_dir) and len(_names(dump_dir)) == 3


def _names(directory):
    return {p.stem for p in directory.glob("*.json")} if directory.exists() else set()


def test_resume_without_an_earlier_study_and_rerun_over_a_study_are_one_line_errors(tmp_path, capsys):
    body = tuning_job(["--dump-dir=gs://demo-models/dumps"], trials=1, parallel=1)
    rc, _ = _study(body, tmp_path, resume=True)
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "--resume: no earlier local run" in err
    assert _study(body, tmp_path)[0] == 0
    capsys.readouterr()
    rc, _ = _study(body, tmp_path)
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "baseOutputDirectory" in err and "--resume" in err


def test_a_pool_env_cannot_send_a_trials_metric_to_the_shared_default(tmp_path):
    tag = f"score-{uuid.uuid4().hex}"
    body = tuning_job(["--dump-dir=gs://demo-models/dumps", f"--metric={tag}"], trials=1, parallel=1)
    body["studySpec"]["metrics"][0]["metricId"] = tag
    env = [{"name": "CLOUD_ML_HP_METRIC_FILE", "value": "/tmp/hypertune/output.metrics"}]
    body["trialJobSpec"]["workerPoolSpecs"][0]["pythonPackageSpec"]["env"] = env
    rc, study = _study(body, tmp_path)
    assert rc == 0 and study["trials"][0]["state"] == "SUCCEEDED"
    env = dumps(tmp_path / "gs/demo-models/dumps")["1-workerpool0-0"]["env"]
    assert env["CLOUD_ML_HP_METRIC_FILE"] == f"{tmp_path / BASE}/1/hypertune/output.metrics"


def test_ctrl_c_while_a_trial_is_being_launched_leaves_no_trial_running(tmp_path, monkeypatch):
    """The interrupt lands between asking the sampler for trial 2 and starting its replicas (under load,
    the window a real Ctrl-C hit): that trial is recorded as interrupted, not left RUNNING, and so is
    trial 1, which was running."""
    from jobs.local import tuning

    calls = []
    real = tuning.launcher.start_job

    def start_job(*args, **kwargs):
        calls.append(kwargs["trial_id"])
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(tuning.launcher, "start_job", start_job)
    body = tuning_job(["--dump-dir=gs://demo-models/dumps"], trials=3, parallel=2)
    rc, study = _study(body, tmp_path)
    assert rc == 130 and calls == ["1", "2"]
    assert study["state"] == "INTERRUPTED"
    assert [t["state"] for t in study["trials"]] == ["INTERRUPTED", "INTERRUPTED"]
    pids = [r["pid"] for r in dumps(tmp_path / "gs/demo-models/dumps").values()]
    assert not [p for p in pids if alive(p)]
