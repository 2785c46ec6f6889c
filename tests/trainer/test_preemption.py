"""Preemption for real: SIGTERM a training process, restart it with the same arguments, it resumes."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time

import pytest

from tests.trainer.helpers import REPO_ROOT, run_trainer, subprocess_env, trainer_args

pytestmark = pytest.mark.training

EPOCHS = 6  # enough that the SIGTERM after the first backup lands mid-run; each epoch costs the suite


@pytest.mark.timeout(300)
def test_sigterm_then_restart_resumes_from_the_backup(tmp_path, census_slice):
    job = tmp_path / "job"
    args = trainer_args(census_slice, job, "--num-epochs", str(EPOCHS), "--steps-per-epoch", "20",
                        "--train-batch-size", "32")
    metadata = job / "checkpoints" / "training_metadata.json"
    log_path = tmp_path / "first.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(args, cwd=REPO_ROOT, env=subprocess_env(), stdout=log,
                                stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 180
            while not metadata.exists() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            assert proc.poll() is None, "training ended before the first backup was seen"
            proc.send_signal(signal.SIGTERM)
            first_rc = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    first_log = log_path.read_text()
    assert first_rc == 143, first_log[-3000:]
    assert "stopped by SIGTERM" in first_log and "Traceback" not in first_log
    saved_epoch = json.loads(metadata.read_text())["epoch"]
    assert 1 <= saved_epoch < EPOCHS
    first_epochs = [int(n) for n in re.findall(rf"epoch (\d+)/{EPOCHS} ", first_log)]
    assert first_epochs == list(range(1, saved_epoch + 1))
    assert not (job / "model").exists()  # nothing exported by the interrupted run

    second = run_trainer(args, timeout=240)
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"resuming at epoch {saved_epoch} " in second.stderr
    history = json.loads((job / "model" / "metrics.json").read_text())["history"]
    # The restart ran only the remaining epochs; together they are exactly an uninterrupted run's epochs.
    assert [h["epoch"] for h in history] == list(range(saved_epoch + 1, EPOCHS + 1))
    assert sorted(first_epochs + [h["epoch"] for h in history]) == list(range(1, EPOCHS + 1))
    assert not metadata.exists()  # the backup is removed once training completes
