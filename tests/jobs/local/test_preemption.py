"""--preempt-after on the fake trainer: a Spot VM's preemption (SIGTERM, SIGKILL after the grace period), the
replicas restarted with the same environment, and what it cost; and the jobs it refuses. The real trainer
resuming from its backup: tests/jobs/local/test_spot_resume.py."""

import json
import time

from jobs.local.preemption import Preemption
from jobs.local.run import run_local
from tests.jobs.helpers import run_cli
from tests.jobs.local.helpers import OUTPUTS, REPO_ROOT, custom_job, dumps, pool

DUMPS = "gs://demo-models/dumps"


def _run(body, tmp_path, preemption):
    return run_local(
        "CustomJob", body, OUTPUTS, repo_root=REPO_ROOT, local_root=tmp_path, preemption=preemption
    )


def _once_started(tmp_path, *replicas, grace_s=30.0):
    """Preempt once every replica has written its first record, which it does after installing its SIGTERM
    handler: earlier, on a loaded machine, SIGTERM would end it before the handler exists."""
    folder = tmp_path / "gs/demo-models/dumps"
    return Preemption(
        after_s=0.5, grace_s=grace_s, ready=lambda: all((folder / f"job-{r}.json").exists() for r in replicas)
    )


def test_preempted_replica_gets_sigterm_and_restarts_with_the_same_environment(tmp_path, capsys):
    args = [f"--dump-dir={DUMPS}", "--on-sigterm=exit", "--sleep-first=120", "--epochs=3", "--backup=2"]
    started = time.monotonic()
    assert _run(custom_job(pool(args)), tmp_path, _once_started(tmp_path, "workerpool0-0")) == 0
    assert time.monotonic() - started < 60  # the first attempt stopped at SIGTERM, not after its sleep
    records = dumps(tmp_path / "gs/demo-models/dumps")
    first, second = records["job-workerpool0-0"], records["job-workerpool0-0.2"]
    assert first["pid"] != second["pid"] and "job-workerpool0-0.3" not in records  # preempted once
    assert first["env"] == second["env"] and first["argv"] == second["argv"]
    assert first["env"]["AIP_CHECKPOINT_DIR"].endswith("/runs/job-1/checkpoints/")
    out = capsys.readouterr().out
    assert "preempting its replicas after" in out and "(SIGTERM, SIGKILL after 30s)" in out
    assert "workerpool0-0: stopped in" in out and "(exit status 143)" in out
    assert ("3 epoch(s) completed, 2 in its backup: the restart resumes at epoch 3, redoing 1 completed "
            "epoch(s) and the part of epoch 4 it had trained") in out
    assert "job 'fake-job' succeeded" in out


def test_a_replica_that_ignores_sigterm_is_killed_after_the_grace_period(tmp_path, capsys):
    args = [f"--dump-dir={DUMPS}", "--on-sigterm=ignore", "--sleep-first=120"]
    assert _run(custom_job(pool(args)), tmp_path, _once_started(tmp_path, "workerpool0-0", grace_s=1)) == 0
    records = dumps(tmp_path / "gs/demo-models/dumps")
    assert set(records) == {"job-workerpool0-0", "job-workerpool0-0.2"}
    out = capsys.readouterr().out
    assert "workerpool0-0: killed after 1." in out
    assert "0 epoch(s) completed and no backup: the restart trains from the start" in out


def test_every_replica_of_a_multi_replica_job_restarts_together_on_its_ports(tmp_path, capsys):
    args = [f"--dump-dir={DUMPS}", "--on-sigterm=exit", "--sleep-first=120"]
    preemption = _once_started(tmp_path, "workerpool0-0", "workerpool1-0")
    assert _run(custom_job(pool(args), pool(args)), tmp_path, preemption) == 0
    records = dumps(tmp_path / "gs/demo-models/dumps")
    for name in ("job-workerpool0-0", "job-workerpool1-0"):
        assert records[name]["env"] == records[f"{name}.2"]["env"]
        assert json.loads(records[name]["env"]["CLUSTER_SPEC"]) == json.loads(
            records[f"{name}.2"]["env"]["CLUSTER_SPEC"]
        )
    out = capsys.readouterr().out
    assert "workerpool0-0: stopped in" in out and "workerpool1-0: stopped in" in out


def test_a_job_that_ends_before_its_preemption_is_not_preempted(tmp_path, capsys):
    assert _run(custom_job(pool([f"--dump-dir={DUMPS}"])), tmp_path, Preemption(after_s=300)) == 0
    assert "preempting" not in capsys.readouterr().out


def test_only_a_spot_custom_job_run_here_is_preempted(capsys):
    rc, out, err = run_cli(["jobs/census_cpu.yaml", "--local", "--preempt-after", "5"])
    assert rc == 2 and not out
    assert err == (
        "jobs/census_cpu.yaml: jobSpec.scheduling.strategy: --preempt-after preempts a Spot VM; STANDARD "
        "capacity is never preempted (line 42); allowed: SPOT (e.g. jobs/image_gpu_spot.yaml)\n"
    )
    rc, out, err = run_cli(["jobs/census_tuning.yaml", "--local", "--preempt-after", "5"])
    assert rc == 2 and err.startswith("jobs/census_tuning.yaml: kind: --preempt-after preempts a CustomJob's")
    # Usage errors: argparse's own line on sys.stderr.
    for flags, words in (
        (["--preempt-after", "5"], "--preempt-after preempts the replicas of a --local run; add --local"),
        (["--local", "--preempt-after", "0"], "--preempt-after: '0' is not a number of seconds above 0"),
        (["--local", "--preempt-after", "inf"], "'inf' is not a number of seconds above 0"),
    ):
        try:
            rc = run_cli(["jobs/image_gpu_spot.yaml", *flags])[0]
        except SystemExit as exit_:
            rc = exit_.code
        err = capsys.readouterr().err
        assert rc == 2 and words in err and err.count("\n") == 1, err
