"""`run_job.py JOB --local --container`: the shipped census jobs with every replica in this checkout's cpu
image (fixtures in tests/container/conftest.py), against the same job run by --local: the same metrics with
the same seed, the same outputs; two replicas in two containers over their network; SIGTERM stops and
removes every container and network the run started.

The jobs train on a slice of the census data (staged where --local stages the shipped data, which it never
overwrites) for one epoch: the shipped settings otherwise."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobs.api import load_outputs
from jobs.local.container import run_stem, sweep
from jobs.local.container_plan import RUN_LABEL
from jobs.local.environment import local_bucket
from tests.container.conftest import REPO_ROOT
from tests.helpers import subprocess_env

pytestmark = pytest.mark.training

RUN_JOB = REPO_ROOT / "scripts" / "run_job.py"
CENSUS = REPO_ROOT / "data" / "census"
ONE_EPOCH = "jobSpec.workerPoolSpecs.0.containerSpec.args.3=--num-epochs=1"
ONE_WORKER = "jobSpec.workerPoolSpecs.1.replicaCount=1"


def stage_slice(root: Path, train_rows: int = 2000, eval_rows: int = 500) -> Path:
    """The first rows of the census files where --local stages the data bucket, so the job reads them."""
    bucket = local_bucket(load_outputs("dev", None, "jobs/census_cpu.yaml")["data_bucket"], root)
    for name, rows in (("adult.data", train_rows), ("adult.test", eval_rows)):
        dest = bucket / "census" / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        with open(CENSUS / name) as source:
            dest.write_text("".join(line for _, line in zip(range(rows), source, strict=False)))
    return root


def run_job(*args, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(RUN_JOB), *map(str, args)], cwd=REPO_ROOT,
                          env=subprocess_env(), capture_output=True, text=True, timeout=timeout)


def base_of(stdout: str) -> Path:
    return Path(re.search(r"SavedModel: (\S+)/model\n", stdout)[1])


def left_of(engine, name: str) -> list[str]:
    """The containers (running or not) and networks of job ``name``'s runs that are still there."""
    stem = run_stem(name) + "-"
    containers = engine.call("ps", "--all", "--filter", f"label={RUN_LABEL}", "--format", "{{.Names}}")
    networks = engine.call("network", "ls", "--filter", f"label={RUN_LABEL}", "--format", "{{.Name}}")
    return [n for n in (containers.stdout + networks.stdout).decode().split() if n.startswith(stem)]


def job_name(output: str) -> str:
    return re.search(r"job '([^']+)': running", output)[1]


def layout(base: Path) -> list[str]:
    """The files a run wrote under its base folder, with the names that differ by run and machine (its data
    scans' keys hash their paths; TensorBoard names events by host and time) reduced to their kind."""
    names = set()
    for path in base.rglob("*"):
        if path.is_file():
            rel = str(path.relative_to(base))
            rel = re.sub(r"data-scans/\w+\.npz", "data-scans/<key>.npz", rel)
            names.add(re.sub(r"events\.out\.tfevents\..*", "<events>", rel))
    return sorted(names)


@pytest.fixture(scope="module")
def census_runs(cpu_image, tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, Path]]:
    """The shipped census_cpu.yaml for one epoch on the slice: by --local, and by --local --container."""
    runs = {}
    for mode in ("local", "container"):
        root = stage_slice(tmp_path_factory.mktemp(mode))
        extra = ["--container"] if mode == "container" else []
        result = run_job("jobs/census_cpu.yaml", "--local", *extra, "--local-root", root, "--set", ONE_EPOCH)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        runs[mode] = (result, base_of(result.stdout))
    return runs


def test_census_in_the_image_trains_to_the_local_metrics_with_the_same_outputs(census_runs):
    (_, local), (result, container) = census_runs["local"], census_runs["container"]
    metrics = {mode: json.loads((base / "model" / "metrics.json").read_text())
               for mode, base in (("local", local), ("container", container))}
    # The same wheel of TensorFlow, the same seed and thread counts: the same numbers.
    assert metrics["container"]["eval"] == pytest.approx(metrics["local"]["eval"], rel=1e-6)
    # The same rows read from the same files, at the same paths under each run's own local root.
    data = {mode: json.dumps(metrics[mode]["data"]).replace(str(base).split("/gs/")[0], "<root>")
            for mode, base in (("local", local), ("container", container))}
    assert data["container"] == data["local"]
    assert layout(container) == layout(local)
    assert {"model/saved_model.pb", "replica-logs/workerpool0-0.log"} <= set(layout(container))
    # The replica ran the image's entrypoint as this user: what it wrote is this user's, as after --local.
    assert {p.stat().st_uid for p in container.rglob("*")} == {os.getuid()}
    assert "running 1 replica(s) (workerpool0-0)" in result.stdout


def test_two_replicas_train_in_two_containers_over_their_network(engine, cpu_image, tmp_path):
    root = stage_slice(tmp_path, train_rows=1000, eval_rows=401)
    result = run_job("jobs/census_multiworker.yaml", "--local", "--container", "--local-root", root,
                     "--set", ONE_EPOCH, "--set", ONE_WORKER)
    base = base_of(result.stdout)
    logs = "\n".join(p.read_text()[-2000:] for p in (base / "replica-logs").glob("*.log"))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:] + logs
    assert "running 2 replica(s) (workerpool0-0, workerpool1-0)" in result.stdout
    run = json.loads((base / "model" / "metrics.json").read_text())
    assert (run["distribution"], run["replicas"]) == ("multi_worker", 2)
    assert sorted(p.name for p in (base / "replica-logs").iterdir()) == ["workerpool0-0.log",
                                                                          "workerpool1-0.log"]
    # Nothing of the run is left: its containers went with --rm, its network at its end.
    assert left_of(engine, job_name(result.stdout)) == []


@contextlib.contextmanager
def running_multiworker(engine, tmp_path: Path) -> Iterator[tuple[subprocess.Popen, str, Path]]:
    """census_multiworker.yaml (a chief and one worker) started by run_job.py --local --container, once both
    replicas' containers and their network are there: the process, the job's name and its output's log; the
    process is killed on leaving if it still runs."""
    root = stage_slice(tmp_path, train_rows=1000, eval_rows=401)
    log = tmp_path / "run_job.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(RUN_JOB), "jobs/census_multiworker.yaml", "--local", "--container",
             "--local-root", str(root), "--set", ONE_WORKER],
            cwd=REPO_ROOT, env=subprocess_env(), stdout=out, stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 300
        while not re.search(r"job '[^']+': running", log.read_text()):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        name = job_name(log.read_text())
        while len(left_of(engine, name)) < 3:  # both replicas' containers and their network
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        yield proc, name, log
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_sigterm_stops_and_removes_every_container_and_the_network(engine, cpu_image, tmp_path):
    with running_multiworker(engine, tmp_path) as (proc, name, log):
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 130, log.read_text()[-3000:]
    assert "interrupted; replicas stopped" in log.read_text()
    assert left_of(engine, name) == []


def test_a_study_runs_each_trials_replicas_in_containers(engine, cpu_image, tmp_path):
    root = stage_slice(tmp_path, train_rows=1000, eval_rows=401)
    log = tmp_path / "run_job.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, str(RUN_JOB), "jobs/census_tuning.yaml", "--local", "--container",
             "--local-root", str(root), "--set", "maxTrialCount=2",
             "--set", "trialJobSpec.workerPoolSpecs.0.containerSpec.args.3=--num-epochs=1"],
            cwd=REPO_ROOT, env=subprocess_env(), stdout=out, stderr=subprocess.STDOUT,
        )
    seen: set[str] = set()
    try:
        deadline = time.monotonic() + 600
        while proc.poll() is None:
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            found = re.search(r"study '([^']+)'", log.read_text())
            if found:
                seen.update(left_of(engine, found[1]))
            time.sleep(0.5)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert proc.returncode == 0, text[-3000:]
    name = re.search(r"study '([^']+)'", text)[1]
    # Each trial's replica is a container of its own (the trial in its name), gone once the study ended.
    assert {n.rsplit("-t", 1)[-1] for n in seen} == {"1-workerpool0-0", "2-workerpool0-0"}
    assert left_of(engine, name) == []
    assert "Study succeeded: 2 succeeded, 0 failed" in text
    base = Path(re.search(r"Results: (\S+)/study.json", text)[1])
    for trial in ("1", "2"):
        assert (base / trial / "model" / "saved_model.pb").exists()
        assert (base / trial / "replica-logs" / "workerpool0-0.log").exists()


def test_what_a_killed_command_left_behind_is_removed_by_the_next_run(engine, cpu_image, tmp_path):
    """SIGKILL gives run_job.py no chance to stop its containers (they outlive their engine clients); the
    next --container command removes them, knowing their owner is gone."""
    with running_multiworker(engine, tmp_path) as (proc, name, _):
        proc.kill()
        proc.wait()
    assert len(left_of(engine, name)) == 3  # orphans: two containers still training, and their network
    swept = sweep(engine)
    assert [run for run in swept if run.startswith(run_stem(name))] and left_of(engine, name) == []


def test_a_build_that_fails_is_one_line_naming_its_step_and_nothing_runs(engine, cpu_image, tmp_path):
    """A checkout whose image does not build (a copy of this one with a failing step): the job is not run."""
    copy = tmp_path / "repo"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True)
    for name in tracked.stdout.decode().split("\0"):
        if name and (REPO_ROOT / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO_ROOT / name, copy / name)
    dockerfile = copy / "Dockerfile"
    first = "FROM ${BASE_IMAGE} AS base\n"
    dockerfile.write_text(dockerfile.read_text().replace(first, first + "RUN exit 3\n", 1))
    result = subprocess.run(
        [sys.executable, str(copy / "scripts" / "run_job.py"), "jobs/census_cpu.yaml", "--local",
         "--container", "--local-root", str(tmp_path / "root")],
        cwd=copy, env=subprocess_env(), capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-3000:]
    (line,) = result.stderr.splitlines()
    assert re.fullmatch(r"error: local run --container: Dockerfile: the build failed at step .*RUN exit 3 "
                        r"\(exit status 3\)", line), line
    assert not (tmp_path / "root").exists()  # nothing staged, no job started
