"""CustomJobs run locally as real replica processes of the fake trainer: the runtime contract per replica."""

import json
import os
import time
import uuid
from pathlib import Path

from jobs.local import capacity
from jobs.local.run import run_local
from tests.jobs.local.helpers import OUTPUTS, REPO_ROOT, alive, custom_job, dumps, pool


def _run(body, tmp_path, **kw):
    return run_local("CustomJob", body, OUTPUTS, repo_root=REPO_ROOT, local_root=tmp_path, **kw)


def test_single_replica_gets_vertex_dirs_mapped_gs_and_staged_data(tmp_path, capsys):
    args = ["--dump-dir=gs://demo-models/dumps", "--data=gs://demo-data/census/adult.data"]
    body = custom_job(pool(args, env={"EXTRA_VAR": "gs://demo-data/x", "OMP_NUM_THREADS": "7"}))
    assert _run(body, tmp_path) == 0
    record = dumps(tmp_path / "gs/demo-models/dumps")["job-workerpool0-0"]
    base = tmp_path / "gs/demo-models/runs/job-1"
    env = record["env"]
    assert env["AIP_MODEL_DIR"] == f"{base}/model/"
    assert env["AIP_CHECKPOINT_DIR"] == f"{base}/checkpoints/"
    assert env["AIP_TENSORBOARD_LOG_DIR"] == f"{base}/logs/"
    assert "TF_CONFIG" not in env and "CLUSTER_SPEC" not in env and "CLOUD_ML_TRIAL_ID" not in env
    # No accelerators asked for: no GPUs visible, and nothing emulated (an explicit --distribution stays).
    assert env["CUDA_VISIBLE_DEVICES"] == "" and "TRAINER_CPU_FALLBACK" not in env
    assert env["CLOUD_ML_JOB_ID"] == "local-fake-job"
    assert env["EXTRA_VAR"] == f"{tmp_path}/gs/demo-data/x" and env["OMP_NUM_THREADS"] == "7"
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(REPO_ROOT)
    assert record["argv"][1] == f"--data={tmp_path}/gs/demo-data/census/adult.data" and record["data_exists"]
    assert (base / "model/saved_model.pb").exists() and (base / "replica-logs/workerpool0-0.log").exists()
    # Staging copies only what is missing and never overwrites.
    staged = tmp_path / "gs/demo-data/census/adult.data"
    staged.write_text("edited")
    assert _run(custom_job(pool(args), base="gs://demo-models/runs/job-2"), tmp_path) == 0
    assert staged.read_text() == "edited"
    assert "succeeded" in capsys.readouterr().out


def test_two_replica_multiworker_job_gets_cluster_spec_and_tf_config_on_real_ports(tmp_path):
    args = ["--dump-dir=gs://demo-models/dumps", "--connect=1"]
    body = custom_job(pool(args), pool(args, replicas=2))
    assert _run(body, tmp_path) == 0
    records = dumps(tmp_path / "gs/demo-models/dumps")
    assert sorted(records) == ["job-workerpool0-0", "job-workerpool1-0", "job-workerpool1-1"]
    specs = {k: json.loads(r["env"]["CLUSTER_SPEC"]) for k, r in records.items()}
    tf = {k: json.loads(r["env"]["TF_CONFIG"]) for k, r in records.items()}
    cluster = specs["job-workerpool0-0"]["cluster"]
    assert len(cluster["workerpool0"]) == 1 and len(cluster["workerpool1"]) == 2
    assert len({*cluster["workerpool0"], *cluster["workerpool1"]}) == 3
    assert all(a.startswith("127.0.0.1:") for a in cluster["workerpool0"] + cluster["workerpool1"])
    assert specs["job-workerpool1-1"]["task"] == {"type": "workerpool1", "index": 1}
    assert specs["job-workerpool0-0"]["environment"] == "cloud"
    assert specs["job-workerpool0-0"]["job"]["workerPoolSpecs"][1]["replicaCount"] == "2"
    assert tf["job-workerpool0-0"]["cluster"] == {
        "chief": cluster["workerpool0"],
        "worker": cluster["workerpool1"],
    }
    assert tf["job-workerpool0-0"]["task"] == {"type": "chief", "index": 0}
    assert tf["job-workerpool1-1"]["task"] == {"type": "worker", "index": 1}
    assert records["job-workerpool0-0"]["rendezvous"] == [
        "hello from workerpool1-0",
        "hello from workerpool1-1",
    ]
    threads = {r["env"]["TF_NUM_INTRAOP_THREADS"] for r in records.values()}
    assert threads == {str(max(1, capacity.usable_cpus() // 3))}


def test_failed_replica_fails_the_job_and_stops_the_others(tmp_path, capsys):
    chief = pool(["--dump-dir=gs://demo-models/dumps", "--sleep=60"])
    worker = pool(["--dump-dir=gs://demo-models/dumps", "--fail=1"])
    start = time.monotonic()
    assert _run(custom_job(chief, worker), tmp_path) == 1
    assert time.monotonic() - start < 30
    out = capsys.readouterr().out
    assert "workerpool1-0 exited with status 1" in out and "failing on purpose" in out
    chief_pid = dumps(tmp_path / "gs/demo-models/dumps")["job-workerpool0-0"]["pid"]
    assert not alive(chief_pid)


def test_missing_accelerators_warn_once_and_run_on_cpu_or_fail_when_strict(tmp_path, capsys):
    gpu = {"machineType": "n1-standard-8", "acceleratorType": "NVIDIA_TESLA_T4", "acceleratorCount": 1}
    body = custom_job(pool(["--dump-dir=gs://demo-models/dumps"], machine=gpu))
    assert _run(body, tmp_path) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "NVIDIA_TESLA_T4 x1" in err and "CPU" in err
    env = dumps(tmp_path / "gs/demo-models/dumps")["job-workerpool0-0"]["env"]
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["TRAINER_CPU_FALLBACK"] == "1"
    assert "TRAINER_CPU_REPLICAS" not in env  # one GPU: one replica, no split
    # Two GPUs: two logical CPU devices stand in, so a mirrored trainer still runs two replicas.
    v100x2 = {"machineType": "n1-standard-8", "acceleratorType": "NVIDIA_TESLA_V100", "acceleratorCount": 2}
    body = custom_job(
        pool(["--dump-dir=gs://demo-models/d2x"], machine=v100x2), base="gs://demo-models/runs/m2"
    )
    assert _run(body, tmp_path) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "NVIDIA_TESLA_V100 x2" in err and "2 logical CPU devices stand in" in err
    env = dumps(tmp_path / "gs/demo-models/d2x")["job-workerpool0-0"]["env"]
    assert (env["TRAINER_CPU_FALLBACK"], env["TRAINER_CPU_REPLICAS"]) == ("1", "2")
    tpu = {"machineType": "ct5lp-hightpu-4t", "tpuTopology": "2x2"}
    body = custom_job(pool(["--dump-dir=gs://demo-models/d1"], machine=tpu), base="gs://demo-models/runs/t1")
    assert _run(body, tmp_path) == 0
    assert "topology 2x2" in capsys.readouterr().err
    assert dumps(tmp_path / "gs/demo-models/d1")["job-workerpool0-0"]["env"]["TRAINER_CPU_FALLBACK"] == "1"
    body = custom_job(pool(["--dump-dir=gs://demo-models/d2"], machine=tpu), base="gs://demo-models/runs/tpu")
    assert _run(body, tmp_path, strict_accelerators=True) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "topology 2x2" in err and "machineSpec" in err
    assert not (tmp_path / "gs/demo-models/d2").exists()


def test_scheduling_timeout_stops_the_job(tmp_path, capsys):
    body = custom_job(pool(["--dump-dir=gs://demo-models/dumps", "--sleep=60"]))
    body["jobSpec"]["scheduling"]["timeout"] = "1s"
    start = time.monotonic()
    assert _run(body, tmp_path) == 1
    assert time.monotonic() - start < 20
    assert "exceeded scheduling.timeout of 1s" in capsys.readouterr().out
    assert not alive(dumps(tmp_path / "gs/demo-models/dumps")["job-workerpool0-0"]["pid"])


SHARED_METRIC_FILE = Path("/tmp/hypertune/output.metrics")  # cloudml-hypertune's default, shared by every run


def test_every_replica_reports_to_a_metric_file_in_its_run_folder_never_the_shared_default(
    tmp_path, monkeypatch
):
    # A stale variable from the shell and a pool env naming the shared default are both overridden.
    monkeypatch.setenv("CLOUD_ML_HP_METRIC_FILE", str(SHARED_METRIC_FILE))
    tag = f"score-{uuid.uuid4().hex}"  # unique: other runs may write the shared file meanwhile
    args = ["--dump-dir=gs://demo-models/dumps", f"--metric={tag}"]
    body = custom_job(pool(args, env={"CLOUD_ML_HP_METRIC_FILE": str(SHARED_METRIC_FILE)}), pool(args))
    assert _run(body, tmp_path) == 0
    base = tmp_path / "gs/demo-models/runs/job-1"
    records = dumps(tmp_path / "gs/demo-models/dumps")
    assert len(records) == 2
    assert {r["env"]["CLOUD_ML_HP_METRIC_FILE"] for r in records.values()} == {
        f"{base}/hypertune/output.metrics"
    }
    assert tag in (base / "hypertune/output.metrics").read_text()  # the fake trainer's chief wrote it there
    assert tag not in _text(SHARED_METRIC_FILE)
    # Without a baseOutputDirectory the run's folder is under <root>/runs/.
    body = custom_job(pool(["--dump-dir=gs://demo-models/d2", f"--metric={tag}-2"]), base="")
    assert _run(body, tmp_path) == 0
    (metric,) = (tmp_path / "runs").glob("fake-job-*/hypertune/output.metrics")
    env = dumps(tmp_path / "gs/demo-models/d2")["job-workerpool0-0"]["env"]
    assert env["CLOUD_ML_HP_METRIC_FILE"] == str(metric) and f"{tag}-2" in metric.read_text()
    assert f"{tag}-2" not in _text(SHARED_METRIC_FILE)


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
