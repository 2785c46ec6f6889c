"""`run_job.py JOB --local` as the README has users run it: the CLI, the shipped data staged into a local
gs:// tree, the real trainer, outputs under the job's baseOutputDirectory. One epoch (`--set`) keeps it short.
"""

from __future__ import annotations

import json

import pytest

from infra.outputs import resolve_outputs
from tests.jobs.helpers import REPO_ROOT, arg_path, run_script

pytestmark = pytest.mark.training



@pytest.mark.parametrize("job, folder, warning", [
    ("census_cpu", "census-cpu", None),
    # No TPU here: reported once, then --distribution=tpu trains on CPU (TRAINER_CPU_FALLBACK).
    ("census_tpu", "census-tpu", "this machine lacks TPU_V3 x8"),
])
def test_readme_local_run_trains_on_the_shipped_data(tmp_path, job, folder, warning, script_env):
    epochs = arg_path(REPO_ROOT / "jobs" / f"{job}.yaml", "--num-epochs")
    proc = run_script([f"jobs/{job}.yaml", "--local", "--local-root", tmp_path,
                       "--set", f"{epochs}=--num-epochs=1"], script_env, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    if warning:
        assert proc.stderr.count(warning) == 1, proc.stderr
    outputs = resolve_outputs("dev")
    data = tmp_path / "gs" / outputs["data_bucket"].removeprefix("gs://")
    assert (data / "census/adult.data").read_bytes() == (REPO_ROOT / "data/census/adult.data").read_bytes()
    (run,) = (tmp_path / "gs" / outputs["models_bucket"].removeprefix("gs://") / folder).iterdir()
    metrics = json.loads((run / "model/metrics.json").read_text())
    assert (run / "model/saved_model.pb").is_file()
    assert metrics["data"]["train"]["rows"] == 32561 and metrics["data"]["eval"]["rows"] == 16281
    assert [h["epoch"] for h in metrics["history"]] == [1]
    # One epoch on the full split already beats always answering "<=50K" (0.764 of adult.test).
    assert metrics["eval"]["accuracy"] > 0.8 and metrics["distribution"] == "default"
