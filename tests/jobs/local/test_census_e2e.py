"""End to end: a multi-worker census job with the real trainer (trainer.task) on a slice of the shipped data.

The 2-trial census study end to end (per-epoch measurements, the study's metric against the trainer's, the
trials' logs and the best model) runs from a converted legacy definition: tests/jobs/test_convert.py."""

import json

import pytest

from jobs.local.run import run_local
from tests.jobs.local.helpers import OUTPUTS, REPO_ROOT, job_spec, pool

# Runs the real trainer (a minute): complete runs only, not `make test-fast`.
pytestmark = pytest.mark.training

CENSUS = REPO_ROOT / "data" / "census"


def _slice(src, dest, lines):
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(src) as f:
        dest.write_text("".join(line for _, line in zip(range(lines), f, strict=False)))


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
    # The console (jobs/local/console.py): the chief's progress once, then the eval beside the model.
    lines = out.splitlines()
    assert [line for line in lines if line.startswith("trainer started")] == [
        "trainer started: --model wide_deep, 1 epoch"
    ]
    assert any(line.startswith("pre-training: data: train: 1000 rows") for line in lines)
    (epoch,) = [line for line in lines if line.startswith("epoch ")]
    assert epoch.startswith("epoch 1/1  loss ") and " auc " in epoch and " | val loss " in epoch
    assert f"  SavedModel: {base / 'model'}" in lines
    (shown,) = [line for line in lines if line.startswith("  eval: ")]
    assert shown.startswith(f"  eval: loss {run['eval']['loss']:.4f}  ")
    figures = shown.removeprefix("  eval: ").split("  ")
    assert sorted(figures) == sorted(f"{name} {value:.4f}" for name, value in run["eval"].items())
