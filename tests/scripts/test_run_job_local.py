"""`run_job.py JOB --local` as the README has users run it: the CLI, the shipped data staged into a local
gs:// tree, the real trainer, outputs under the job's baseOutputDirectory. One epoch (`--set`) keeps it short.
Bad input through the CLI (a --local-root that is no directory, a symlinked bucket folder, too many processes
at once, a `..` URI by --set) is one line, exit status 2 and nothing written, and needs no training.
"""

from __future__ import annotations

import json
import os

import pytest

from infra.outputs import resolve_outputs
from jobs.local import capacity
from tests.jobs.helpers import OUTPUTS, REPO_ROOT, arg_path, run_script


@pytest.mark.training
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
    # Recorded as a run of its experiment: the trainer's resolved flags, its eval figures, the data it read.
    record = json.loads((tmp_path / "experiments" / folder / f"{run.name}.json").read_text())
    run_metadata = record["run"]["metadata"]
    assert run_metadata["_params"]["num_epochs"] == 1 and run_metadata["_metrics"] == metrics["eval"]
    assert run_metadata["_params"]["train_files"] == f"{outputs['data_bucket']}/census/adult.data"
    assert [d["size"] for d in run_metadata["lineage"]["data"]] == [
        (REPO_ROOT / "data/census" / name).stat().st_size for name in ("adult.data", "adult.test")]
    listed = run_script(["runs", f"jobs/{job}.yaml", "--local", "--local-root", tmp_path], script_env)
    assert listed.returncode == 0 and listed.stdout.splitlines()[2].startswith(run.name), listed.stderr


def _tree(root):
    return sorted((str(p.relative_to(root)), p.is_symlink()) for p in root.rglob("*"))


def _refused(cli, capsys, tmp_path, *argv):
    """run_job.py ARGV in-process: exit status 2, one line on stderr, nothing under tmp_path changed."""
    before = _tree(tmp_path)
    rc, out, err = cli(argv)
    err += capsys.readouterr().err  # run_local writes to sys.stderr itself
    assert rc == 2, out + err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert _tree(tmp_path) == before
    return err


def test_a_local_root_that_is_a_file_is_one_line(cli, capsys, tmp_path):
    root = tmp_path / "root"
    root.write_text("not a directory")
    err = _refused(cli, capsys, tmp_path, "jobs/census_cpu.yaml", "--local", "--local-root", root)
    assert f"--local-root: {root} is a regular file" in err


def test_a_bucket_folder_symlinked_out_of_the_local_root_is_refused(cli, capsys, tmp_path):
    root, outside = tmp_path / "root", tmp_path / "outside"
    outside.mkdir()
    (root / "gs").mkdir(parents=True)
    (root / "gs" / OUTPUTS["models_bucket"].removeprefix("gs://")).symlink_to(outside)
    err = _refused(cli, capsys, tmp_path, "jobs/census_cpu.yaml", "--local", "--local-root", root)
    assert "jobSpec.baseOutputDirectory.outputUriPrefix" in err and "outside the local root" in err
    assert not list(outside.iterdir())


@pytest.mark.parametrize("job, override, field", [
    ("census_multiworker", "jobSpec.workerPoolSpecs.1.replicaCount=9", "workerPoolSpecs.1.replicaCount: 9"),
    ("census_tuning_grid", "parallelTrialCount=5", "parallelTrialCount"),
])
def test_more_processes_than_this_machine_runs_at_once_are_refused(cli, capsys, tmp_path, monkeypatch, job,
                                                                  override, field):
    monkeypatch.setattr(capacity, "usable_cpus", lambda: 2)
    err = _refused(cli, capsys, tmp_path, f"jobs/{job}.yaml", "--local", "--local-root", tmp_path / "root",
                   "--set", override)
    assert field in err and "at most 4 processes at once" in err


def test_a_dot_dot_uri_set_on_the_command_line_writes_nothing(cli, capsys, tmp_path):
    # Validation refuses it first; the local runner's own gate would too (test_hostile_input.py).
    bucket = OUTPUTS["models_bucket"]
    err = _refused(cli, capsys, tmp_path, "jobs/census_cpu.yaml", "--local", "--local-root",
                   tmp_path / "root", "--set",
                   f"jobSpec.baseOutputDirectory.outputUriPrefix={bucket}/../../../escaped")
    assert "jobSpec.baseOutputDirectory.outputUriPrefix" in err and "'..'" in err
    assert not os.path.exists(tmp_path / "escaped")
