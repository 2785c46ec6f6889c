"""A Spot job survives a preemption: `--local` preempts its replica mid-epoch (SIGTERM, then SIGKILL after
the grace period), restarts it with the same environment, and the trainer resumes from its BackupAndRestore
backup. Census (a Spot CPU job on a slice of the data) and the shipped jobs/image_gpu_spot.yaml (MNIST's
2,000-image shard) each lose at most the epoch in progress and end with the quality of an unpreempted run of
the same seed.

The preemption is timed by the trainer's progress (its first backup written, so SIGTERM lands in a later
epoch), not by --preempt-after's clock, which a loaded machine stretches; the flag's own path is
tests/jobs/local/test_preemption.py."""

from __future__ import annotations

import io
import json
import re
import time
from pathlib import Path

import pytest

from jobs.api import compile_file
from jobs.local.preemption import Preemption
from jobs.local.run import run_local
from tests.jobs.helpers import CODE_HASH, IMAGE_HASH, JOBS_DIR, NOW, OUTPUTS, REPO_ROOT
from tests.trainer.helpers import write_slice
from trainer.contract import BACKUP_METADATA

pytestmark = pytest.mark.training

CENSUS_SPOT = """\
kind: CustomJob
trainer: {delivery: container}
labels: {app: census}
jobSpec:
  workerPoolSpecs:
    - machineSpec: {machineType: n1-standard-4}
      replicaCount: 1
      containerSpec:
        imageUri: ${infra.trainer_image}:cpu-${job.image_tag}
        args:
          - --model=wide_deep
          - --train-files=${infra.data_bucket}/census-slice/adult.data
          - --eval-files=${infra.data_bucket}/census-slice/adult.test
          - --num-epochs=3
          - --train-batch-size=32
  baseOutputDirectory: {outputUriPrefix: "${infra.models_bucket}/census-spot/${job.id}"}
  serviceAccount: ${infra.runtime_service_account}
  scheduling: {timeout: 600s, strategy: SPOT}
"""
POOL = "jobSpec.workerPoolSpecs.0.containerSpec.args"
MNIST_SMALL = [f"{POOL}.1=--train-files=${{infra.data_bucket}}/mnist/mnist-eval.tfrecord-*",
               f"{POOL}.6=--train-batch-size=32", f"{POOL}.7=--num-epochs=3"]
# Seed noise of these runs, unpreempted (2 cores, 2026-11, seeds 42 and 1-4): census accuracy 0.834-0.848,
# MNIST 0.8825-0.977 (Adam at 0.004 on 2,000 images is erratic). A run resumed from the same backup trains
# the same steps from the same state, so it lands close to the unpreempted one: 0.8400 vs 0.8420 and 0.9705
# vs 0.9770, the same in every run so far. The tolerances are within the seed noise.
TOLERANCE = {"census": 0.02, "mnist": 0.03}


def _train(file: Path, job_id: str, local_root: Path, preempt_s: float | None,
           overrides=()) -> tuple[dict, str, str]:
    """Validate and run the job here, preempted ``preempt_s`` after its first backup exists (None: not at
    all): its metrics.json, the chief's log (every attempt of it) and the runner's output."""
    job = compile_file(str(file), env="dev", overrides=overrides, outputs=OUTPUTS, repo_root=REPO_ROOT,
                       now=NOW, code_hash=CODE_HASH, image_hash=IMAGE_HASH, job_id=job_id)
    preemption = None
    if preempt_s is not None:
        preemption = Preemption(after_s=0, ready=_soon_after_the_first_backup(local_root, job_id, preempt_s))
    out = io.StringIO()
    rc = run_local(job.kind, job.body, OUTPUTS, repo_root=REPO_ROOT, local_root=local_root, stream=out,
                   preemption=preemption)
    (run,) = local_root.glob(f"gs/*/*/{job_id}")
    log = (run / "replica-logs" / "workerpool0-0.log").read_text()
    assert rc == 0, out.getvalue() + log[-3000:]
    assert not (run / "checkpoints" / BACKUP_METADATA).exists()  # removed once training completed
    return json.loads((run / "model" / "metrics.json").read_text()), log, out.getvalue()


def _soon_after_the_first_backup(local_root: Path, job_id: str, delay_s: float):
    """Preempt ``delay_s`` after the first epoch's backup is seen: SIGTERM lands some steps into the next
    epoch, not among the callbacks that end the first (which would stop it with nothing lost) nor past the
    second's end (census's epochs take 0.6-2 s here, MNIST's 1-2 s)."""
    seen: list[float] = []

    def ready() -> bool:
        if not seen and any(local_root.glob(f"gs/*/*/{job_id}/checkpoints/{BACKUP_METADATA}")):
            seen.append(time.monotonic())
        return bool(seen) and time.monotonic() - seen[0] >= delay_s

    return ready


def _check_resumed(preempted: dict, log: str, epochs: int) -> tuple[int, int, int]:
    """What the preemption cost, from the chief's log: (the backup's epochs, the step SIGTERM stopped at, the
    epoch's steps). It stopped mid-epoch, the restart resumed from the backup and trained only the rest."""
    stop = re.search(r"stopped by SIGTERM \(SIGTERM received in epoch (\d+) after step (\d+) of (\d+)\)", log)
    assert stop, re.findall(r"stopped by SIGTERM.*", log) or log[-3000:]
    epoch, step, steps = map(int, stop.groups())
    assert 1 <= step < steps  # mid-epoch: part of an epoch lost, never a whole one
    resumed = re.search(r"resuming at epoch (\d+) from the backup", log)
    assert resumed and int(resumed.group(1)) == epoch - 1  # every completed epoch was kept
    assert [h["epoch"] for h in preempted["history"]] == list(range(epoch, epochs + 1))
    assert "Traceback" not in log
    # The preempted attempt evaluated and exported nothing; the restart's backup is gone once it completed.
    assert log.count("INFO trainer: evaluation:") == 1 and log.index("evaluation:") > stop.start()
    return epoch - 1, step, steps


def _report(out: str, backed_up: int) -> None:
    """The runner's line on what the preemption cost: nothing completed was redone."""
    assert "preempting its replicas after" in out
    cost = (rf"workerpool0-0: stopped in [\d.]+s \(exit status 143\); {backed_up} epoch\(s\) completed, "
            rf"{backed_up} in its backup: the restart resumes at epoch {backed_up + 1}, redoing 0 completed "
            rf"epoch\(s\) and the part of epoch {backed_up + 1} it had trained")
    assert re.search(cost, out), out


@pytest.mark.timeout(400)
def test_census_spot_job_resumes_after_a_preemption(tmp_path):
    bucket = tmp_path / "gs" / OUTPUTS["data_bucket"].removeprefix("gs://") / "census-slice"
    bucket.mkdir(parents=True)
    census = REPO_ROOT / "data" / "census"
    write_slice(census / "adult.data", bucket / "adult.data", 4000)
    write_slice(census / "adult.test", bucket / "adult.test", 1000, keep_banner=True)
    file = tmp_path / "census_spot.yaml"
    file.write_text(CENSUS_SPOT)
    plain, _, _ = _train(file, "census-plain", tmp_path, None)
    preempted, log, out = _train(file, "census-spot", tmp_path, 0.1)
    backed_up, step, steps = _check_resumed(preempted, log, 3)
    _report(out, backed_up)
    print(f"census: preempted in epoch {backed_up + 1} after step {step} of {steps}; accuracy "
          f"{preempted['eval']['accuracy']:.4f} preempted, {plain['eval']['accuracy']:.4f} not")
    assert abs(preempted["eval"]["accuracy"] - plain["eval"]["accuracy"]) <= TOLERANCE["census"]


@pytest.mark.timeout(400)
def test_image_spot_job_resumes_after_a_preemption(tmp_path):
    file = JOBS_DIR / "image_gpu_spot.yaml"
    plain, _, _ = _train(file, "mnist-plain", tmp_path, None, overrides=MNIST_SMALL)
    preempted, log, out = _train(file, "mnist-spot", tmp_path, 0.3, overrides=MNIST_SMALL)
    backed_up, step, steps = _check_resumed(preempted, log, 3)
    _report(out, backed_up)
    print(f"mnist: preempted in epoch {backed_up + 1} after step {step} of {steps}; accuracy "
          f"{preempted['eval']['accuracy']:.4f} preempted, {plain['eval']['accuracy']:.4f} not")
    assert abs(preempted["eval"]["accuracy"] - plain["eval"]["accuracy"]) <= TOLERANCE["mnist"]
