"""trainer.env: Vertex AI's output directories, cluster description and strategy choice."""

from __future__ import annotations

import json

import pytest

from trainer.config import ConfigError
from trainer.env import (
    Cluster,
    choose_distribution,
    cluster_from_env,
    cpu_replicas,
    data_cache_dir,
    output_dirs,
    trial_id,
)


def test_output_dirs_default_to_job_dir():
    dirs = output_dirs("gs://b/job/", {})
    assert (dirs.model, dirs.checkpoints, dirs.logs) == ("gs://b/job/model", "gs://b/job/checkpoints",
                                                         "gs://b/job/logs")


def test_output_dirs_follow_aip_variables():
    env = {"AIP_MODEL_DIR": "gs://m/3/model/", "AIP_CHECKPOINT_DIR": "gs://m/3/checkpoints",
           "AIP_TENSORBOARD_LOG_DIR": "gs://m/3/logs"}
    dirs = output_dirs(None, env)
    assert (dirs.model, dirs.checkpoints, dirs.logs) == ("gs://m/3/model", "gs://m/3/checkpoints", "gs://m/3/logs")
    # Partly set: the rest falls back to --job-dir.
    assert output_dirs("/j", {"AIP_MODEL_DIR": "/m"}).checkpoints == "/j/checkpoints"


@pytest.mark.parametrize(("job_dir", "environ", "expected"), [
    ("/runs/job", {}, "/runs/job/data-scans"),
    ("gs://b/job/", {}, "gs://b/data-scans/job"),  # one prefix of the bucket, which its lifecycle expires
    ("gs://b/", {}, "gs://b/data-scans"),
    # A CustomJob on Vertex AI: <base>/model; a trial: <base>/<trial id>/model, all trials share <base>.
    (None, {"AIP_MODEL_DIR": "gs://m/census/123/model/"}, "gs://m/data-scans/census/123"),
    (None, {"AIP_MODEL_DIR": "gs://m/study/7/model/", "CLOUD_ML_TRIAL_ID": "7"}, "gs://m/data-scans/study"),
    ("/runs/job", {"CLOUD_ML_TRIAL_ID": "7"}, "/runs/job/data-scans"),  # a trial run by hand: its job dir
])
def test_scans_are_cached_where_the_jobs_trials_and_restarts_find_them(job_dir, environ, expected):
    if "AIP_MODEL_DIR" in environ:  # Vertex AI sets the three together
        base = environ["AIP_MODEL_DIR"].removesuffix("model/")
        environ = {**environ, "AIP_CHECKPOINT_DIR": base + "checkpoints/",
                   "AIP_TENSORBOARD_LOG_DIR": base + "logs/"}
    assert data_cache_dir(output_dirs(job_dir, environ), environ) == expected


def test_output_dirs_need_job_dir_or_aip():
    with pytest.raises(ConfigError, match="--job-dir"):
        output_dirs(None, {})


def test_no_cluster_is_a_single_chief():
    cluster = cluster_from_env({})
    assert cluster.is_chief and not cluster.is_multi_worker and cluster.num_workers == 1


def test_tf_config_chief_and_workers():
    spec = {"chief": ["h0:2222"], "worker": ["h1:2222", "h2:2222"], "evaluator": ["h3:2222"]}
    env = {"TF_CONFIG": json.dumps({"cluster": spec, "task": {"type": "worker", "index": 0}})}
    cluster = cluster_from_env(env)
    assert cluster.num_workers == 3 and cluster.is_multi_worker
    assert not cluster.is_chief  # worker 0 is not the chief when a chief exists
    env["TF_CONFIG"] = json.dumps({"cluster": spec, "task": {"type": "chief", "index": 0}})
    assert cluster_from_env(env).is_chief


def test_worker_zero_is_chief_without_chief_task():
    def env(index):
        return {"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1", "b:1"]},
                                         "task": {"type": "worker", "index": index}})}

    assert cluster_from_env(env(0)).is_chief
    assert not cluster_from_env(env(1)).is_chief


def test_vertex_cluster_spec_worker_pools():
    spec = {"cluster": {"workerpool0": ["cmle-training-workerpool0-ab-0:2222"],
                        "workerpool1": ["cmle-training-workerpool1-ab-0:2222",
                                        "cmle-training-workerpool1-ab-1:2222"]},
            "environment": "cloud", "task": {"type": "workerpool1", "index": 1}, "job": "{}"}
    cluster = cluster_from_env({"CLUSTER_SPEC": json.dumps(spec)})
    assert cluster.source == "CLUSTER_SPEC"
    assert (cluster.task_type, cluster.task_index, cluster.num_workers) == ("worker", 1, 3)
    assert not cluster.is_chief
    assert json.loads(cluster.tf_config())["cluster"]["chief"] == ["cmle-training-workerpool0-ab-0:2222"]
    spec["task"] = {"type": "workerpool0", "index": 0}
    assert cluster_from_env({"CLUSTER_SPEC": json.dumps(spec)}).is_chief


def test_tf_config_wins_over_cluster_spec():
    tf_config = {"cluster": {"chief": ["a:1"], "worker": ["b:1"]}, "task": {"type": "worker", "index": 0}}
    spec = {"cluster": {"workerpool0": ["a:1"]}, "task": {"type": "workerpool0", "index": 0}}
    cluster = cluster_from_env({"TF_CONFIG": json.dumps(tf_config), "CLUSTER_SPEC": json.dumps(spec)})
    assert cluster.source == "TF_CONFIG" and cluster.task_type == "worker"


@pytest.mark.parametrize("env, match", [
    ({"TF_CONFIG": "{not json"}, "TF_CONFIG: not valid JSON"),
    ({"TF_CONFIG": "[1]"}, "TF_CONFIG: must be a JSON object"),
    ({"TF_CONFIG": json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 3}})},
     "not in the cluster"),
    ({"CLUSTER_SPEC": json.dumps({"cluster": {"workerpool9": ["a:1"]}, "task": {"type": "workerpool9"}})},
     "unknown worker pools"),
])
def test_bad_cluster_environment(env, match):
    with pytest.raises(ConfigError, match=match):
        cluster_from_env(env)


def test_trial_id():
    assert trial_id({}) is None
    assert trial_id({"CLOUD_ML_TRIAL_ID": "7"}) == "7"


@pytest.mark.parametrize("requested, cluster, gpus, env, expected", [
    ("auto", Cluster(), 0, {}, "default"),
    ("auto", Cluster(), 1, {}, "default"),
    ("auto", Cluster(), 4, {}, "mirrored"),
    ("auto", Cluster("chief", 0, {"chief": ["a:1"], "worker": ["b:1"]}), 4, {}, "multi_worker"),
    ("auto", Cluster("chief", 0, {"chief": ["a:1"]}), 0, {}, "default"),
    ("auto", Cluster(), 0, {"TPU_ACCELERATOR_TYPE": "v5litepod-8"}, "tpu"),
    ("default", Cluster(), 8, {}, "default"),
    ("tpu", Cluster(), 0, {}, "tpu"),
    # run_job.py --local on a machine without the job's accelerators
    ("tpu", Cluster(), 0, {"TRAINER_CPU_FALLBACK": "1"}, "default"),
    ("mirrored", Cluster(), 0, {"TRAINER_CPU_FALLBACK": "1"}, "default"),
    ("multi_worker", Cluster("chief", 0, {"chief": ["a:1"], "worker": ["b:1"]}), 0,
     {"TRAINER_CPU_FALLBACK": "1"}, "multi_worker"),
    # ... for a pool of several GPUs: as many logical CPU devices stand in for them
    ("mirrored", Cluster(), 0, {"TRAINER_CPU_FALLBACK": "1", "TRAINER_CPU_REPLICAS": "2"}, "mirrored"),
    ("auto", Cluster(), 0, {"TRAINER_CPU_REPLICAS": "2"}, "mirrored"),
    ("auto", Cluster(), 0, {"TRAINER_CPU_REPLICAS": "1"}, "default"),
    ("mirrored", Cluster(), 0, {"TRAINER_CPU_FALLBACK": "1", "TRAINER_CPU_REPLICAS": "1"}, "default"),
    ("tpu", Cluster(), 0, {"TRAINER_CPU_FALLBACK": "1", "TRAINER_CPU_REPLICAS": "8"}, "default"),
    ("auto", Cluster("chief", 0, {"chief": ["a:1"], "worker": ["b:1"]}), 0, {"TRAINER_CPU_REPLICAS": "2"},
     "multi_worker"),
])
def test_choose_distribution(requested, cluster, gpus, env, expected):
    assert choose_distribution(requested, cluster, gpus, env) == expected


@pytest.mark.parametrize("raw, expected", [("", 1), ("1", 1), (" 2 ", 2), ("16", 16)])
def test_cpu_replicas(raw, expected):
    assert cpu_replicas({"TRAINER_CPU_REPLICAS": raw}) == expected
    assert cpu_replicas({}) == 1


@pytest.mark.parametrize("raw", ["0", "17", "two", "2.0", "-2", "\u00b2", "1" * 5000])
def test_cpu_replicas_out_of_range_is_a_config_error(raw):
    expected = r"^TRAINER_CPU_REPLICAS='.{0,42}: expected a whole number from 1 to 16$"
    with pytest.raises(ConfigError, match=expected):
        cpu_replicas({"TRAINER_CPU_REPLICAS": raw})
