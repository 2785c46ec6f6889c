"""jobs.definition.body, the one reader of a compiled job body, and the readers built on it agreeing with each
other."""

from __future__ import annotations

import pytest

from jobs.definition import body
from jobs.definition.kinds import CUSTOM_JOB, TUNING_JOB
from jobs.local import spec as local_spec
from tests.jobs.helpers import JOBS_DIR, OUTPUTS, compile_text

PACKAGE = {
    "replicaCount": 1,
    "machineSpec": {"machineType": "n1-standard-4"},
    "pythonPackageSpec": {
        "executorImageUri": "us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-17.py310:latest",
        "pythonModule": "trainer.task",
        "args": ["--a=1"],
        "env": [{"name": "X", "value": "1"}],
    },
}
CONTAINER = {
    "replicaCount": 2,
    "containerSpec": {"imageUri": "r/p/trainer:cpu-abc", "command": ["python", "-m", "x"], "args": ["--b"]},
}


@pytest.mark.parametrize("kind, field", [(CUSTOM_JOB, "jobSpec"), (TUNING_JOB, "trialJobSpec")])
def test_pools_keep_their_positions_and_dotted_paths_for_either_kind(kind, field):
    job = {field: {"workerPoolSpecs": [PACKAGE, {}, None, CONTAINER]}}
    pools = body.job_pools(job, kind)
    assert [(p.index, p.path) for p in pools] == [(i, f"{field}.workerPoolSpecs.{i}") for i in range(4)]
    assert [p.raw for p in pools] == [PACKAGE, {}, {}, CONTAINER]
    assert (
        pools[0].field("machineSpec", "machineType") == f"{field}.workerPoolSpecs.0.machineSpec.machineType"
    )
    other = TUNING_JOB if kind == CUSTOM_JOB else CUSTOM_JOB
    assert body.job_spec(job, kind) is job[field] and body.job_spec(job, other) is None


def test_a_pool_reads_its_program_whichever_spec_it_has():
    package, container, empty = (
        body.Pool(i, f"p.{i}", raw) for i, raw in enumerate([PACKAGE, CONTAINER, {}])
    )
    assert (package.is_package, package.module, package.args, package.command) == (
        True,
        "trainer.task",
        ["--a=1"],
        [],
    )
    assert package.image.endswith("tf-cpu.2-17.py310:latest")
    assert (package.image_field, package.args_field) == (
        "pythonPackageSpec.executorImageUri",
        "pythonPackageSpec.args",
    )
    assert package.env == [{"name": "X", "value": "1"}]
    assert (container.is_container, container.module, container.command, container.image) == (
        True,
        "",
        ["python", "-m", "x"],
        "r/p/trainer:cpu-abc",
    )
    assert (container.image_field, container.args_field) == ("containerSpec.imageUri", "containerSpec.args")
    assert (empty.programs, empty.program_field, empty.image, empty.args, empty.machine) == (
        (),
        "",
        "",
        [],
        {},
    )


@pytest.mark.parametrize(
    "uri, split",
    [
        ("r/p/trainer:cpu-0123", ("r/p/trainer", "cpu-0123")),
        ("r/p/trainer", ("r/p/trainer", "")),
        ("localhost:5000/p/trainer", ("localhost:5000/p/trainer", "")),
        ("localhost:5000/p/trainer:v1", ("localhost:5000/p/trainer", "v1")),
        ("r/p/trainer:v1@sha256:ab", ("r/p/trainer", "v1")),
        ("r/p/trainer@sha256:ab", ("r/p/trainer", "")),
    ],
)
def test_image_references_split_into_name_and_tag(uri, split):
    assert body.split_image(uri) == split and body.image_name(uri) == split[0]


def test_gs_uris_split_map_and_name_their_bucket():
    assert body.split_gs("gs://b/dir/obj.tar.gz") == ("b", "dir/obj.tar.gz")
    for bad in ("gs://b", "s3://b/o", "/b/o"):
        with pytest.raises(ValueError, match="gs://bucket/object"):
            body.split_gs(bad)
    assert [body.gs_bucket(u) for u in ("gs://b/x/y", "gs://b", "b")] == ["b", "b", "b"]
    assert body.rebase_gs("--f=gs://b/x,gs://c/y", "/tmp/l/gs/") == "--f=/tmp/l/gs/b/x,/tmp/l/gs/c/y"
    assert body.is_gs("gs://b") and not body.is_gs("/gs://")


def test_compile_and_the_local_executor_see_the_same_pools_at_the_same_paths():
    job = compile_text((JOBS_DIR / "census_multiworker.yaml").read_text(), {"jobSpec.workerPoolSpecs.2": {}})
    assert job.worker_pools() == [(p.path, p.raw) for p in job.pools()]
    assert [p.path for p in job.pools()] == [f"jobSpec.workerPoolSpecs.{i}" for i in range(len(job.pools()))]
    parsed = local_spec.parse_job_spec(job.body["jobSpec"], "jobSpec", OUTPUTS["trainer_image"])
    assert len(parsed.pools) >= 2
    assert [(p.index, p.path) for p in parsed.pools] == [(p.index, p.path) for p in job.pools() if p.raw]
