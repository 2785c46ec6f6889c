"""Every shipped image and recommender job runs as written through `scripts/run_job.py --local`, shrunk by
--set only (one epoch, smaller images, the 2,000-image MNIST shard for training, two trials): the definition,
its data in data/, the trainer and the runtime contract are the ones a user runs. (The census jobs run in
tests/scripts/test_run_job_local.py.)"""

from __future__ import annotations

import json

import pytest

from tests.jobs.helpers import JOBS_DIR, run_script

pytestmark = pytest.mark.training

MNIST_SMALL = "--train-files=${infra.data_bucket}/mnist/mnist-eval.tfrecord-*"
POOL = "jobSpec.workerPoolSpecs.0.containerSpec.args"
TRIAL = "trialJobSpec.workerPoolSpecs.0.containerSpec.args"
STUDY = ["maxTrialCount=2", "parallelTrialCount=2"]

# job -> --set overrides (arg positions as written in the file; the test checks each one replaces its flag)
SHRINK = {
    "image_gpu": [f"{POOL}.4=--image-size=32", f"{POOL}.6=--num-epochs=1"],
    "image_mirrored": [f"{POOL}.1={MNIST_SMALL}", f"{POOL}.7=--num-epochs=1"],
    "image_tpu": [f"{POOL}.4=--image-size=32", f"{POOL}.6=--num-epochs=1"],
    "image_tuning": [
        *STUDY,
        "maxFailedTrialCount=1",
        f"{TRIAL}.1={MNIST_SMALL}",
        f"{TRIAL}.5=--num-epochs=1",
    ],
    "image_dropout_tuning": [*STUDY, f"{TRIAL}.1={MNIST_SMALL}", f"{TRIAL}.4=--num-epochs=1"],
    "recommender": [f"{POOL}.3=--num-epochs=1", f"{POOL}.4=--ease-max-items=0"],
    "recommender_tuning": [*STUDY, f"{TRIAL}.2=--num-epochs=1", f"{TRIAL}.4=--ease-max-items=0"],
}
# job -> (metric, its range): what each job's evaluation reports.
METRIC = {
    job: ("recall_at_k", (0.0, 1.0)) if job.startswith("recommender") else ("accuracy", (0.0, 1.0))
    for job in SHRINK
}

# job -> the strategy and replica count its local run trains with: a pool of two V100s is rehearsed by
# MirroredStrategy over two logical CPU devices; one GPU, a TPU (emulated) or none by the default strategy.
DISTRIBUTION = {
    "image_gpu": ("default", 1),
    "image_mirrored": ("mirrored", 2),
    "image_tpu": ("default", 1),
    "image_tuning": ("mirrored", 2),
    "image_dropout_tuning": ("default", 1),
    "recommender": ("default", 1),
    "recommender_tuning": ("default", 1),
}


def _replaced_flag(job: str, override: str) -> None:
    """An override must replace the same flag it sets (the file's arg order is what the index means)."""
    from jobs.definition.loader import load_file

    path, _, value = override.partition("=")
    if not path.startswith(("jobSpec", "trialJobSpec")):
        return
    node = load_file(JOBS_DIR / f"{job}.yaml").data
    for part in path.split("."):
        node = node[int(part)] if isinstance(node, list) else node[part]
    assert node.split("=", 1)[0] == value.split("=", 1)[0], (job, node, value)


@pytest.mark.parametrize("job", sorted(SHRINK))
def test_shipped_job_runs_locally(job, tmp_path, script_env):
    sets = [a for o in SHRINK[job] for a in ("--set", o)]
    for override in SHRINK[job]:
        _replaced_flag(job, override)
    result = run_script(
        [JOBS_DIR / f"{job}.yaml", "--local", "--local-root", tmp_path, *sets], script_env, timeout=600
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    models = sorted(tmp_path.glob("gs/*-models/*/*/**/saved_model.pb"))
    assert models, result.stdout[-3000:]
    metrics = [json.loads((m.parent / "metrics.json").read_text()) for m in models]
    metric, (low, high) = METRIC[job]
    assert all(low <= m["eval"][metric] <= high for m in metrics)
    assert {(m["distribution"], m["replicas"]) for m in metrics} == {DISTRIBUTION[job]}
    if "tuning" in job:
        study = json.loads(next(tmp_path.glob("gs/*-models/*/*/study.json")).read_text())
        assert [t["state"] for t in study["trials"]] == ["SUCCEEDED", "SUCCEEDED"]
