"""How much --local runs at once: replicas x parallel trials within max(4, 2 x usable CPUs); trial counts and
grids within sane limits; each refusal one line naming the field, exit status 2, nothing written."""

import os
import time

import pytest

from jobs.definition.kinds import spec_field
from jobs.local import capacity, spec
from jobs.local.run import run_local
from jobs.local.spec import LocalRunError
from tests.jobs.helpers import JOBS_DIR, compile_text
from tests.jobs.helpers import OUTPUTS as JOB_OUTPUTS
from tests.jobs.local.helpers import OUTPUTS, REPO_ROOT, custom_job, dumps, pool, refused, tuning_job

DUMPS = "--dump-dir=gs://demo-models/dumps"


def test_the_cap_is_two_processes_per_usable_cpu_and_at_least_four(cpus):
    for n, cap in ((1, 4), (2, 4), (3, 6), (8, 16)):
        cpus(n)
        assert capacity.max_processes() == cap


def test_usable_cpus_are_those_this_process_may_run_on(monkeypatch):
    assert capacity.usable_cpus() == len(os.sched_getaffinity(0))
    # A container pinned to one core of a larger machine: the affinity mask counts, not os.cpu_count().
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3})
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert capacity.usable_cpus() == 1 and capacity.max_processes() == 4


@pytest.mark.parametrize("n", [1, 2])
@pytest.mark.parametrize("name", ["census_multiworker", "census_tuning_grid", "census_tuning", "census_cpu"])
def test_the_shipped_definitions_fit_on_a_one_or_two_cpu_machine(name, n, cpus):
    cpus(n)
    job = compile_text((JOBS_DIR / f"{name}.yaml").read_text())
    body = job.body
    if "studySpec" in body:
        tuning = spec.parse_tuning_job(body, JOB_OUTPUTS["trainer_image"])
        capacity.check(tuning.trial_job, tuning.study.parallel_trials)
    else:
        capacity.check(
            spec.parse_job_spec(body[spec_field(job.kind)], "jobSpec", JOB_OUTPUTS["trainer_image"])
        )


def test_a_job_over_the_cap_names_the_pool_the_cap_and_why(tmp_path, capsys, cpus):
    cpus(2)
    body = custom_job(pool([DUMPS]), pool([DUMPS], replicas=2), pool([DUMPS], replicas=2))
    err = refused(body, tmp_path, capsys)
    assert "jobSpec.workerPoolSpecs.1.replicaCount: 2 replicas make 5 processes" in err
    assert "at most 4 processes at once on this machine (2 per usable CPU, 2 CPU(s), at least 4)" in err
    assert err.endswith("use at most 1")
    # The same job fits where there are more CPUs.
    cpus(3)
    assert run_local("CustomJob", body, OUTPUTS, repo_root=REPO_ROOT, local_root=tmp_path / "root") == 0
    assert len(dumps(tmp_path / "root/gs/demo-models/dumps")) == 5


def test_a_huge_replica_count_fails_at_once_without_allocating_ports_or_files(tmp_path, capsys, cpus):
    cpus(2)
    start = time.monotonic()
    err = refused(custom_job(pool([DUMPS]), pool([DUMPS], replicas=10**9)), tmp_path, capsys)
    assert time.monotonic() - start < 5
    assert "jobSpec.workerPoolSpecs.1.replicaCount: 1000000000 replicas" in err and "use at most 3" in err


def test_a_trial_over_the_cap_names_its_pool(tmp_path, capsys, cpus):
    cpus(1)
    body = tuning_job([DUMPS], parallel=1)
    body["trialJobSpec"]["workerPoolSpecs"].append(pool([DUMPS], replicas=4))
    err = refused(body, tmp_path, capsys)
    assert "trialJobSpec.workerPoolSpecs.1.replicaCount: 4 replicas make 5 processes" in err


def test_parallel_trials_over_the_cap_name_parallel_trial_count_and_the_largest_allowed(
    tmp_path, capsys, cpus
):
    cpus(2)
    body = tuning_job([DUMPS], trials=6, parallel=3)
    body["trialJobSpec"]["workerPoolSpecs"].append(pool([DUMPS]))
    err = refused(body, tmp_path, capsys)
    assert "parallelTrialCount: 3 trials of 2 replica(s) each are 6 processes at once" in err
    assert err.endswith("use parallelTrialCount <= 2")
    assert refused(tuning_job([DUMPS], trials=6, parallel=5), tmp_path, capsys).endswith(
        "use parallelTrialCount <= 4"
    )


def test_each_replica_gets_its_share_of_the_usable_cpus(tmp_path, cpus):
    cpus(6)
    body = custom_job(pool([DUMPS]), pool([DUMPS], replicas=2))
    assert run_local("CustomJob", body, OUTPUTS, repo_root=REPO_ROOT, local_root=tmp_path) == 0
    records = dumps(tmp_path / "gs/demo-models/dumps").values()
    assert {r["env"]["TF_NUM_INTRAOP_THREADS"] for r in records} == {"2"}


LIMITS = [
    (tuning_job([], trials=1001, parallel=1), "maxTrialCount: maxTrialCount is 1001; allowed: 1..1000"),
    (
        tuning_job(
            [],
            trials=10,
            algorithm="GRID_SEARCH",
            params=[{"parameterId": "n", "integerValueSpec": {"minValue": "1", "maxValue": str(10**12)}}],
        ),
        "studySpec.parameters: the grid has 1000000000000 points; --local enumerates at most 100000",
    ),
    (
        tuning_job([], params=[{"parameterId": "d", "discreteValueSpec": {"values": [1, "x"]}}]),
        "studySpec.parameters.0.discreteValueSpec.values.1: 'x' is not a number",
    ),
    (
        tuning_job([], params=[{"parameterId": "d", "doubleValueSpec": {"minValue": 0, "maxValue": "inf"}}]),
        "studySpec.parameters.0.doubleValueSpec.maxValue: inf is not a number; allowed: a finite number",
    ),
    (
        tuning_job([], params=[{"parameterId": "d", "doubleValueSpec": ["0", "1"]}]),
        "studySpec.parameters.0.doubleValueSpec: expected an object",
    ),
    (
        tuning_job([], params=[]) | {"studySpec": {"metrics": ["accuracy"]}},
        "studySpec.metrics.0.metricId: missing",
    ),
    (
        custom_job(pool()) | {"jobSpec": {"workerPoolSpecs": [pool()], "baseOutputDirectory": "gs://b/x"}},
        "jobSpec.baseOutputDirectory: expected an object",
    ),
]


@pytest.mark.parametrize(("body", "says"), LIMITS, ids=[s.split(":")[0] for _, s in LIMITS])
def test_limits_and_malformed_fields_are_one_line(body, says, tmp_path, capsys):
    start = time.monotonic()
    assert says in refused(body, tmp_path, capsys)
    assert time.monotonic() - start < 5  # a huge grid is counted, not listed


def test_the_largest_allowed_study_and_grid_parse():
    assert spec.parse_tuning_job(tuning_job([], trials=1000, parallel=1)).study.max_trials == 1000
    params = [
        {"parameterId": "n", "integerValueSpec": {"minValue": "1", "maxValue": str(spec.MAX_GRID_POINTS)}}
    ]
    assert spec.parse_tuning_job(tuning_job([], algorithm="GRID_SEARCH", params=params)).study.parameters
    params[0]["integerValueSpec"]["maxValue"] = str(spec.MAX_GRID_POINTS + 1)
    with pytest.raises(LocalRunError, match="grid has 100001 points"):
        spec.parse_tuning_job(tuning_job([], algorithm="GRID_SEARCH", params=params))
