"""End to end: a 2-trial census study with the real trainer (trainer.task) on a slice of the shipped data."""

import json

import pytest

from jobs.local import run_local
from tests.jobs.local.helpers import OUTPUTS, REPO_ROOT, job_spec, pool

# Both tests run the real trainer (minutes together): complete runs only, not `make test-fast`.
pytestmark = pytest.mark.training

CENSUS = REPO_ROOT / "data" / "census"


def _slice(src, dest, lines):
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(src) as f:
        dest.write_text("".join(line for _, line in zip(range(lines), f, strict=False)))


def test_two_trial_census_study_with_the_real_trainer(tmp_path, capsys):
    data = tmp_path / "gs/demo-data/slice"
    _slice(CENSUS / "adult.data", data / "adult.data", 2000)
    _slice(CENSUS / "adult.test", data / "adult.test", 801)  # banner line + 800 rows
    args = [
        "--model=wide_deep",
        "--train-files=gs://demo-data/slice/adult.data",
        "--eval-files=gs://demo-data/slice/adult.test",
        "--num-epochs=2",
        "--hypertune-metric=accuracy",
    ]
    body = {
        "displayName": "census-e2e",
        "studySpec": {
            "metrics": [{"metricId": "accuracy", "goal": "MAXIMIZE"}],
            "parameters": [
                {
                    "parameterId": "first-layer-size",
                    "integerValueSpec": {"minValue": "8", "maxValue": "32"},
                    "scaleType": "UNIT_LOG_SCALE",
                },
                {
                    "parameterId": "learning_rate",
                    "doubleValueSpec": {"minValue": 0.001, "maxValue": 0.01},
                    "scaleType": "UNIT_LOG_SCALE",
                },
            ],
        },
        "maxTrialCount": 2,
        "parallelTrialCount": 2,
        "maxFailedTrialCount": 1,
        "trialJobSpec": job_spec(pool(args, module="trainer.task"), base="gs://demo-models/census-e2e/job-1"),
    }
    rc = run_local("HyperparameterTuningJob", body, OUTPUTS, repo_root=REPO_ROOT, local_root=tmp_path)
    out = capsys.readouterr().out
    base = tmp_path / "gs/demo-models/census-e2e/job-1"
    study = json.loads((base / "study.json").read_text())
    assert rc == 0, out
    assert [t["state"] for t in study["trials"]] == ["SUCCEEDED", "SUCCEEDED"], out
    for trial in study["trials"]:
        assert len(trial["measurements"]) == 2  # one per epoch, as the trainer reports them
        # The study's metric is what the trainer measured on the eval slice in its last epoch.
        run = json.loads((base / trial["id"] / "model" / "metrics.json").read_text())
        assert trial["metric"] == pytest.approx(run["history"][-1]["val_accuracy"], abs=1e-6)
        assert run["data"]["eval"]["rows"] == 800 and run["data"]["train"]["rows"] == 2000
        assert list((base / trial["id"] / "logs").rglob("*tfevents*")), (
            "TensorBoard logs: <base>/<trial>/logs"
        )
    best = study["best"]
    assert (base / best["id"] / "model" / "saved_model.pb").exists()
    assert f"SavedModel: {best['model_dir']}" in out


def test_multiworker_census_job_with_the_real_trainer(tmp_path, capsys):
    data = tmp_path / "gs/demo-data/slice"
    _slice(CENSUS / "adult.data", data / "adult.data", 1000)
    _slice(CENSUS / "adult.test", data / "adult.test", 401)
    args = [
        "--model=wide_deep",
        "--train-files=gs://demo-data/slice/adult.data",
        "--eval-files=gs://demo-data/slice/adult.test",
        "--num-epochs=1",
    ]
    chief, worker = pool(args, module="trainer.task"), pool(args, module="trainer.task")
    body = {
        "displayName": "census-mw",
        "jobSpec": job_spec(chief, worker, base="gs://demo-models/census-mw/job-1"),
    }
    rc = run_local("CustomJob", body, OUTPUTS, repo_root=REPO_ROOT, local_root=tmp_path)
    out = capsys.readouterr().out
    base = tmp_path / "gs/demo-models/census-mw/job-1"
    assert rc == 0, out + "\n".join(p.read_text()[-2000:] for p in (base / "replica-logs").glob("*.log"))
    assert (base / "model" / "saved_model.pb").exists()  # only the chief exports
    run = json.loads((base / "model" / "metrics.json").read_text())
    assert (run["distribution"], run["replicas"]) == ("multi_worker", 2)
    assert not [p for p in (base / "checkpoints").rglob("*") if p.is_file()]  # every replica's backup done
