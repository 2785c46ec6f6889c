"""The plan of `run_job.py --local --container` (jobs/local/container_plan.py), without an engine: which
containers a job's replicas (and the server) run as, with what image, entrypoint, args, environment, mounts,
network and names."""

import json
from pathlib import Path

import pytest

from jobs.local import container_plan as plan
from jobs.local.spec import LocalRunError, parse_job_spec
from tests.jobs.local.helpers import OUTPUTS, job_spec

IMAGE = OUTPUTS["trainer_image"]
HASH = "0123456789abcdef"
CPU_IMAGE = f"{IMAGE}:cpu-{HASH}"
ROOT = Path("/work/.local")
WHO = plan.Identity("1000:1000")
ARGS = ["--model=wide_deep", "--train-files=gs://demo-data/census/adult.data", "--num-epochs=1"]


def container_pool(args=ARGS, replicas=1, image=CPU_IMAGE, command=None, env=None):
    spec = {"imageUri": image, "args": list(args)}
    if command:
        spec["command"] = command
    if env:
        spec["env"] = [{"name": k, "value": v} for k, v in env.items()]
    machine = {"machineType": "n1-standard-4"}
    return {"machineSpec": machine, "replicaCount": str(replicas), "containerSpec": spec}


def parsed(*pools):
    return parse_job_spec(job_spec(*pools), "jobSpec", IMAGE)


def planned(job, trial_id=None, extra_env=None, extra_args=()):
    base = ROOT / "gs/demo-models/runs/job-1"
    folder = base / trial_id if trial_id else base
    return plan.plan_job(
        job, images={p.index: CPU_IMAGE for p in job.pools}, run_id="census-abc123", identity=WHO,
        run_dir=folder / "replica-logs", base_local=base, local_root=ROOT, trial_id=trial_id,
        extra_env=extra_env, extra_args=extra_args, threads=2, cpu_only=True,
    )


def test_one_replica_runs_the_images_own_entrypoint_with_the_local_mapping():
    (replica,) = planned(parsed(container_pool(env={"EXTRA": "gs://demo-data/x"}))).replicas
    c = replica.container
    env = dict(c.env)
    assert replica.name == "workerpool0-0"
    assert replica.log_path == ROOT / "gs/demo-models/runs/job-1/replica-logs/workerpool0-0.log"
    assert (c.name, c.image, c.entrypoint, c.network) == ("census-abc123-workerpool0-0", CPU_IMAGE, (), "")
    assert c.args == ("--model=wide_deep", f"--train-files={ROOT}/gs/demo-data/census/adult.data",
                      "--num-epochs=1")
    # The local root at its own path: every mapped path means the same file inside and outside.
    assert c.mounts == (plan.Mount(str(ROOT), str(ROOT)),)
    assert env["AIP_MODEL_DIR"] == f"{ROOT}/gs/demo-models/runs/job-1/model/"
    assert env["EXTRA"] == f"{ROOT}/gs/demo-data/x"
    assert (env["HOME"], env["TF_NUM_INTRAOP_THREADS"], env["CUDA_VISIBLE_DEVICES"]) == ("/tmp", "2", "")
    assert "PYTHONPATH" not in env and "CLUSTER_SPEC" not in env and "TF_CONFIG" not in env


def test_every_container_is_labelled_with_its_run_and_the_command_that_started_it():
    job = parsed(container_pool(), container_pool())
    p = plan.plan_job(job, images={0: CPU_IMAGE, 1: CPU_IMAGE}, run_id="r-1", identity=WHO,
                      run_dir=ROOT / "logs", base_local=None, local_root=ROOT, owner="vm:4242")
    for replica in p.replicas:
        assert replica.container.labels == (("jobs.local.run", "r-1"), ("jobs.local.owner", "vm:4242"))
        argv = replica.container.run_args()
        assert "jobs.local.run=r-1" in argv and "jobs.local.owner=vm:4242" in argv


def test_run_args_pass_values_by_name_only():
    (replica,) = planned(parsed(container_pool())).replicas
    c = replica.container
    argv = c.run_args(("--ulimit", "nofile=20000:20000"))
    assert argv[:8] == ["run", "--rm", "--init", "--name", c.name, "--user", "1000:1000", "--label"]
    assert argv[argv.index("--volume") + 1] == f"{ROOT}:{ROOT}"
    assert argv[-4:] == [CPU_IMAGE, *c.args]
    assert argv[-5] == "nofile=20000:20000"
    assert c.run_args(remove=False)[:3] == ["run", "--init", "--name"]  # the caller removes it
    names = [argv[i + 1] for i, a in enumerate(argv) if a == "--env"]
    assert names == [name for name, _ in c.env]
    values = {v for _, v in c.env if v}
    assert not values & set(argv[:-4])  # no value on the engine's command line
    assert c.client_env()["AIP_MODEL_DIR"].endswith("/model/")


def test_replicas_reach_each_other_by_name_on_the_runs_network():
    job = parsed(container_pool(), container_pool(replicas=2))
    p = planned(job)
    assert p.network == "census-abc123"
    assert [r.name for r in p.replicas] == ["workerpool0-0", "workerpool1-0", "workerpool1-1"]
    for r in p.replicas:
        assert (r.container.network, r.container.hostname) == ("census-abc123", r.name)
        argv = r.container.run_args()
        assert argv[argv.index("--network-alias") + 1] == r.name
    worker = dict(p.replicas[2].container.env)
    spec, tf = json.loads(worker["CLUSTER_SPEC"]), json.loads(worker["TF_CONFIG"])
    assert spec["cluster"] == {"workerpool0": ["workerpool0-0:2222"],
                               "workerpool1": ["workerpool1-0:2222", "workerpool1-1:2222"]}
    assert tf["cluster"] == {"chief": ["workerpool0-0:2222"],
                             "worker": ["workerpool1-0:2222", "workerpool1-1:2222"]}
    assert tf["task"] == {"type": "worker", "index": 1}


def test_a_trial_has_its_own_names_network_folders_and_tuned_args():
    job = parsed(container_pool(), container_pool())
    metric = ROOT / "gs/demo-models/runs/job-1/3/hypertune/output.metrics"
    p = planned(job, trial_id="3", extra_env={"CLOUD_ML_HP_METRIC_FILE": str(metric)},
                extra_args=("--learning-rate=0.1",))
    assert p.network == "census-abc123-t3"
    assert p.replicas[1].container.name == "census-abc123-t3-workerpool1-0"
    assert p.replicas[0].container.args[-1] == "--learning-rate=0.1"
    env = dict(p.replicas[0].container.env)
    assert env["AIP_MODEL_DIR"] == f"{ROOT}/gs/demo-models/runs/job-1/3/model/"
    assert json.loads(env["TF_CONFIG"])["task"]["trial"] == "3"
    assert metric in p.writes and ROOT / "gs/demo-models/runs/job-1/3/replica-logs" in p.folders


def test_a_command_replaces_the_entrypoint():
    pool = container_pool(command=["python3", "-m", "trainer.other"])
    (replica,) = planned(parsed(pool)).replicas
    assert replica.container.entrypoint == ("python", "-m", "trainer.other")
    argv = replica.container.run_args()
    assert argv[argv.index("--entrypoint") + 1] == "python"
    assert argv[-6:] == [CPU_IMAGE, "-m", "trainer.other", *replica.container.args]


@pytest.mark.parametrize(
    "pool, field, problem",
    [
        (container_pool(image=f"{IMAGE}:gpu-{HASH}"), "containerSpec.imageUri", "the gpu image is skipped"),
        (container_pool(image=f"{IMAGE}:tpu-{HASH}"), "containerSpec.imageUri", "the tpu image is skipped"),
        (container_pool(image=f"{IMAGE}:cpu-{'f' * 16}"), "containerSpec.imageUri",
         "not this checkout's image; allowed: cpu-0123456789abcdef, the image --container builds"),
        (container_pool(image="gcr.io/other/image:1", command=["python", "-m", "trainer.task"]),
         "containerSpec.imageUri", "cannot be built here"),
    ],
)
def test_images_that_cannot_be_built_here_are_refused(pool, field, problem):
    with pytest.raises(LocalRunError) as exc:
        plan.pool_images(parsed(container_pool(), pool), "jobSpec", IMAGE, HASH)
    assert str(exc.value).startswith(f"jobSpec.workerPoolSpecs.1.{field}: ")
    assert problem in str(exc.value)


def test_a_python_package_job_is_refused():
    package = {"machineSpec": {"machineType": "n1-standard-4"}, "pythonPackageSpec": {
        "executorImageUri": "us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-17.py310:latest",
        "packageUris": ["gs://b/t.tar.gz"], "pythonModule": "trainer.task", "args": ARGS}}
    with pytest.raises(LocalRunError, match="pythonPackageSpec.executorImageUri: .*prebuilt image"):
        plan.pool_images(parsed(package), "jobSpec", IMAGE, HASH)


def test_this_checkouts_cpu_image_is_each_pools():
    job = parsed(container_pool(), container_pool(replicas=2))
    assert plan.pool_images(job, "jobSpec", IMAGE, HASH) == {0: CPU_IMAGE, 1: CPU_IMAGE}


def test_a_local_root_a_mount_cannot_carry_is_refused():
    job = parsed(container_pool())
    with pytest.raises(LocalRunError, match="^--local-root: .*bind mount"):
        plan.plan_job(job, images={0: CPU_IMAGE}, run_id="r", identity=WHO, run_dir=Path("/a:b/logs"),
                      base_local=None, local_root=Path("/a:b"))


def test_the_server_runs_as_vertex_runs_the_registry_entry():
    model = Path("/work/.local/gs/demo-models/census/job-1/model")
    c = plan.plan_server(model, image=CPU_IMAGE, name="serve-abc", identity=plan.Identity("0:0", "keep-id"),
                         address="127.0.0.1", host_port=8501, labels={plan.RUN_LABEL: "serve-abc"})
    assert c.entrypoint == ("python", "-m", "serving")
    assert dict(c.env) == {"AIP_STORAGE_URI": str(model), "AIP_HTTP_PORT": "8080",
                           "AIP_HEALTH_ROUTE": "/health", "AIP_PREDICT_ROUTE": "/predict", "HOME": "/tmp"}
    argv = c.run_args()
    assert argv[argv.index("--publish") + 1] == "127.0.0.1:8501:8080"
    assert argv[argv.index("--volume") + 1] == f"{model}:{model}:ro"
    assert argv[argv.index("--userns") + 1] == "keep-id"
    assert argv[-3:] == [CPU_IMAGE, "-m", "serving"]
