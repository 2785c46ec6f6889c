"""End to end: a multi-worker census job with the real trainer (trainer.task) on a slice of the shipped data.

`--local`'s chief and worker pools form one MultiWorkerMirroredStrategy cluster over loopback with the
TF_CONFIG the runner generates; each worker trains on its own share of the files and only the chief exports.
It is also the census cluster of tests/trainer/test_multiworker.py (whose other clusters refuse or stop a
run): one training checks the runner and the trainer's sharding together.

The 2-trial census study end to end (per-epoch measurements, the study's metric against the trainer's, the
trials' logs and the best model) runs from a converted legacy definition: tests/jobs/test_convert.py."""

import json
import subprocess
import sys

import pytest

from jobs.local.run import run_local
from tests.helpers import subprocess_env
from tests.jobs.local.helpers import OUTPUTS, REPO_ROOT, job_spec, pool
from tests.trainer.helpers import EVAL_ROWS, TRAIN_ROWS, write_slice
from tests.trainer.test_multiworker import shares_of, split_lines

# Runs the real trainer (a minute): complete runs only, not `make test-fast`.
pytestmark = pytest.mark.training

CENSUS = REPO_ROOT / "data" / "census"
# Reloads the chief's export with TensorFlow alone and scores one raw row through serving_default.
LOAD = ("import sys, tensorflow as tf; m = tf.saved_model.load(sys.argv[1]); "
        "out = m.signatures['serving_default'](**{k: tf.constant([v], tf.int64 if isinstance(v, int) "
        "else tf.string) for k, v in eval(sys.argv[2]).items()}); "
        "p = float(out['scores'][0][1]); assert 0 <= p <= 1, p; print('p', p)")
ROW = {"age": 50, "workclass": "Self-emp-not-inc", "fnlwgt": 83311, "education": "Bachelors",
       "education_num": 13, "marital_status": "Married-civ-spouse", "occupation": "Exec-managerial",
       "relationship": "Husband", "race": "White", "gender": "Male", "capital_gain": 0, "capital_loss": 0,
       "hours_per_week": 13, "native_country": "United-States"}


@pytest.mark.timeout(300)
def test_chief_and_worker_train_on_their_own_shares_and_only_the_chief_exports(tmp_path, capsys):
    # Two training files of unequal sizes: each worker reads one of them (by file); the one evaluation file
    # is shared by record, with a warning that says how many files sharding by file needs.
    data = tmp_path / "gs/demo-data/slice"
    data.mkdir(parents=True)
    whole = write_slice(CENSUS / "adult.data", tmp_path / "adult.data", TRAIN_ROWS)
    split_lines(whole, 2, data)  # slice/adult.data-0 (two thirds), slice/adult.data-1
    write_slice(CENSUS / "adult.test", data / "adult.test", EVAL_ROWS, keep_banner=True)
    args = [
        "--model=wide_deep",
        "--train-files", "gs://demo-data/slice/adult.data-0", "gs://demo-data/slice/adult.data-1",
        "--eval-files=gs://demo-data/slice/adult.test",
        "--num-epochs=2",
        "--train-batch-size=64",
    ]
    # Each replica's scratch folder of its own: the worker's must be left empty (its export copy deleted).
    scratch = {role: tmp_path / f"tmp-{role}" for role in ("chief", "worker")}
    for folder in scratch.values():
        folder.mkdir()
    chief, worker = (pool(args, module="trainer.task", env={"TMPDIR": str(scratch[role])})
                     for role in ("chief", "worker"))
    body = {
        "displayName": "census-mw",
        "jobSpec": job_spec(chief, worker, base="gs://demo-models/census-mw/job-1"),
    }
    rc = run_local("CustomJob", body, OUTPUTS, repo_root=REPO_ROOT, local_root=tmp_path)
    out = capsys.readouterr().out
    job = tmp_path / "gs/demo-models/census-mw/job-1"
    logs = job / "replica-logs"  # the chief pool 0, the worker pool 1
    outputs = {role: (logs / f"workerpool{i}-0.log").read_text() for i, role in enumerate(scratch)}
    assert rc == 0, out + "\n".join(text[-2000:] for text in outputs.values())
    for task_type, output in outputs.items():
        assert "strategy: multi_worker, 2 replica(s), global batch 128" in output, (task_type, output[-3000:])
        assert ("--eval-files: 1 file(s) for 2 workers: every worker reads all the bytes and keeps one "
                "record in every 2; split the data into at least 2 files") in output
    assert "; chief" in outputs["chief"] and "; worker_0" in outputs["worker"]
    chief, worker = shares_of(outputs["chief"]), shares_of(outputs["worker"])
    assert chief[1] == worker[1] == TRAIN_ROWS and chief[0] + worker[0] == TRAIN_ROWS
    assert chief[2] == worker[2] == "by file" and max(chief[0], worker[0]) <= 0.7 * TRAIN_ROWS
    # One epoch is one pass over the data across both workers: 2000 rows / global batch 128 = 16 steps.
    assert all("epoch 1/2" in output for output in outputs.values())
    report = json.loads((job / "model" / "metrics.json").read_text())
    assert report["data"]["train"]["rows"] == TRAIN_ROWS
    assert report["data"]["shard"] == {"index": 0, "count": 2, "by_record": False,
                                       "train_records": chief[0], "eval_records": EVAL_ROWS // 2}
    assert (report["distribution"], report["replicas"]) == ("multi_worker", 2)
    assert [h["epoch"] for h in report["history"]] == [1, 2]
    # The console (jobs/local/console.py): the chief's progress once, then the eval beside the model.
    lines = out.splitlines()
    assert [line for line in lines if line.startswith("trainer started")] == [
        "trainer started: --model wide_deep, 2 epochs"
    ]
    assert any(line.startswith(f"pre-training: data: train: {TRAIN_ROWS} rows") for line in lines)
    epochs = [line for line in lines if line.startswith("epoch ")]
    assert len(epochs) == 2
    for number, epoch in enumerate(epochs, 1):
        assert epoch.startswith(f"epoch {number}/2  loss ") and " auc " in epoch and " | val loss " in epoch
    assert f"  SavedModel: {job / 'model'}" in lines
    (shown,) = [line for line in lines if line.startswith("  eval: ")]
    assert shown.startswith(f"  eval: loss {report['eval']['loss']:.4f}  ")
    figures = shown.removeprefix("  eval: ").split("  ")
    assert sorted(figures) == sorted(f"{name} {value:.4f}" for name, value in report["eval"].items())

    # Only the chief exports: its SavedModel is the only one; the worker's scratch copy was deleted.
    assert (job / "model" / "saved_model.pb").is_file()
    assert list(scratch["worker"].iterdir()) == []
    assert not (job / "model" / "worker_0").exists()
    assert not [p for p in (job / "checkpoints").rglob("*") if p.is_file()]  # every replica's backup done

    loaded = subprocess.run([sys.executable, "-c", LOAD, str(job / "model"), repr(ROW)], cwd=REPO_ROOT,
                            env=subprocess_env(), capture_output=True, text=True, timeout=120)
    assert loaded.returncode == 0 and "p " in loaded.stdout, loaded.stderr[-3000:]
