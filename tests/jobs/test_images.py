"""The trainer image: build context and tag (jobs.definition.image), validation of the image a pool runs, and
builds through Cloud Build at submission, against the fake REST endpoint (Artifact Registry, Cloud Build,
Vertex AI) and a directory standing in for gs://."""

from __future__ import annotations

import gzip
import json
import os
import re
import tarfile

import pytest

import jobs.cloud.plan
from jobs.cloud.builds import job_builds
from jobs.cloud.client import tag_resource_name
from jobs.definition.errors import JobError
from jobs.definition.image import (
    ImageError,
    context_files,
    image_hash,
    parse_prebuilt,
    variant_for_machine,
    write_context,
)
from tests.jobs.fake_vertex import FakeVertex, FakeVertexServer
from tests.jobs.helpers import (
    CUSTOM,
    DELETE,
    IMAGE_HASH,
    JOBS_DIR,
    OUTPUTS,
    PREBUILT_CPU,
    REPO_ROOT,
    SHIPPED,
    check,
    make_repo,
    on_trainer_image,
    run_cli,
)

# Followed jobs and builds are polled without waiting (tests/jobs/conftest.py).
pytestmark = pytest.mark.usefixtures("no_poll_sleep")

POOL = "jobSpec.workerPoolSpecs.0"
T4 = {"machineType": "n1-standard-8", "acceleratorType": "NVIDIA_TESLA_T4", "acceleratorCount": 1}
V3 = {"machineType": "cloud-tpu", "acceleratorType": "TPU_V3", "acceleratorCount": 8}


# ---- context and tag --------------------------------------------------------------------------------------


def test_the_context_is_what_the_allowlist_lets_through(tmp_path):
    repo = make_repo(tmp_path)
    assert context_files(repo) == [
        "Dockerfile",
        "docker/requirements-cpu.txt",
        "trainer/__init__.py",
        "trainer/models/census.py",
        "trainer/task.py",
    ]


def test_the_tag_hash_follows_the_context_and_nothing_else(tmp_path):
    repo = make_repo(tmp_path)
    first = image_hash(repo)
    assert len(first) == 16 and first == image_hash(repo)
    (repo / "data/census/adult.data").write_text("changed\n")  # outside the context
    (repo / "trainer/__pycache__/other.pyc").write_text("x")
    assert image_hash(repo) == first
    for rel in ("trainer/task.py", "Dockerfile", "docker/requirements-cpu.txt"):
        before = image_hash(repo)
        (repo / rel).write_text((repo / rel).read_text() + "# changed\n")
        assert image_hash(repo) != before, rel
    (repo / "trainer/new.py").write_text("")
    assert "trainer/new.py" in context_files(repo)


def test_the_context_tarball_is_reproducible_and_holds_exactly_the_context(tmp_path):
    repo = make_repo(tmp_path / "repo")
    first, second = tmp_path / "a.tar.gz", tmp_path / "b.tar.gz"
    files, size, digest = write_context(repo, first)
    os.utime(repo / "trainer/task.py", (1, 1))  # mtimes do not reach the tarball
    write_context(repo, second)
    assert first.read_bytes() == second.read_bytes()
    assert digest == image_hash(repo)
    with tarfile.open(first) as tar:
        members = tar.getmembers()
        assert [m.name for m in members] == context_files(repo) and files == len(members)
        assert {(m.mtime, m.uid, m.mode) for m in members} == {(0, 0, 0o644)}
        assert sum(m.size for m in members) == size
        assert tar.extractfile("trainer/task.py").read() == b"print('train')\n"
    assert gzip.decompress(first.read_bytes())  # a plain gzip stream, as Cloud Build expects


def test_the_shipped_context_is_small_and_leaves_out_data_tests_and_environments():
    files = context_files(REPO_ROOT)
    assert "Dockerfile" in files and "trainer/task.py" in files
    assert not [f for f in files if f.split("/")[0] in ("data", "tests", ".venv", "node_modules", ".git")]
    assert not [f for f in files if "__pycache__" in f or f.endswith(".pyc")]
    size = sum((REPO_ROOT / f).stat().st_size for f in files)
    assert size < 2 << 20, f"{len(files)} files, {size} bytes"


@pytest.mark.parametrize(
    "dockerignore, field, words",
    [
        ("!trainer\n", "line 1", "first rule must be `*`"),
        ("*\n!../secrets\n", "line 2", "leaves the context"),
        ("*\n!Dockerfile\n!trainer/**/x.py\n", "line 3", "unsupported pattern"),
        ("*\n!trainer\n", "(rules)", "Dockerfile is not in the build context"),
    ],
    ids=["not-an-allowlist", "parent-path", "inner-double-star", "no-dockerfile"],
)
def test_bad_dockerignore_is_one_error_naming_the_line(tmp_path, dockerignore, field, words):
    repo = make_repo(tmp_path, dockerignore)
    with pytest.raises(ImageError) as caught:
        image_hash(repo)
    assert (caught.value.file, caught.value.field) == (".dockerignore", field)
    assert words in caught.value.problem


def test_unreadable_or_irregular_inputs_are_refused(tmp_path):
    repo = make_repo(tmp_path)
    (repo / "trainer/link.py").symlink_to(repo / "README.md")
    with pytest.raises(ImageError) as caught:
        context_files(repo)
    assert caught.value.file == "trainer/link.py" and "not a regular file" in caught.value.problem
    (repo / "trainer/link.py").unlink()
    (repo / "Dockerfile").unlink()
    (repo / "Dockerfile").mkdir()
    with pytest.raises(ImageError) as caught:
        context_files(repo)
    assert caught.value.file == "Dockerfile" and "not a regular file" in caught.value.problem
    (repo / "Dockerfile").rmdir()
    with pytest.raises(ImageError) as caught:
        context_files(repo)
    assert caught.value.file == "Dockerfile" and "missing" in caught.value.problem
    (repo / ".dockerignore").write_bytes(b"*\n!Dockerfile\xff\n")
    with pytest.raises(ImageError) as caught:
        context_files(repo)
    assert caught.value.file == ".dockerignore" and "UTF-8" in caught.value.problem


def test_hostile_contexts_fail_before_anything_is_read(tmp_path, monkeypatch):
    import jobs.definition.image

    repo = make_repo(tmp_path / "repo")
    outside = tmp_path / "outside"
    outside.mkdir()
    (repo / "trainer/linked").symlink_to(outside, target_is_directory=True)
    with pytest.raises(ImageError) as caught:
        context_files(repo)
    assert caught.value.file == "trainer/linked" and "not a regular file" in caught.value.problem
    (repo / "trainer/linked").unlink()
    os.mkfifo(repo / "trainer/pipe")
    with pytest.raises(ImageError) as caught:
        image_hash(repo)  # would block forever reading a FIFO
    assert caught.value.file == "trainer/pipe"
    (repo / "trainer/pipe").unlink()
    monkeypatch.setattr(jobs.definition.image, "MAX_CONTEXT_BYTES", 10)
    with pytest.raises(ImageError) as caught:
        image_hash(repo)
    assert caught.value.file == ".dockerignore" and "over" in caught.value.problem
    monkeypatch.undo()
    (repo / ".dockerignore").write_text("*\n" + "!x\n" * 40000)
    with pytest.raises(ImageError) as caught:
        image_hash(repo)
    assert caught.value.file == ".dockerignore" and "KiB" in caught.value.problem


# ---- which image runs where ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "machine, variant",
    [
        ({"machineType": "n1-standard-4"}, "cpu"),
        (T4, "gpu"),
        ({"machineType": "a2-highgpu-1g"}, "gpu"),  # the A100 comes with the machine type
        ({"machineType": "g2-standard-8", "acceleratorType": "NVIDIA_L4", "acceleratorCount": 1}, "gpu"),
        (V3, "tpu"),
        ({"machineType": "ct5lp-hightpu-1t"}, "tpu"),
    ],
)
def test_variant_for_machine(machine, variant):
    assert variant_for_machine(machine) == variant


@pytest.mark.parametrize(
    "uri, parsed",
    [
        ("us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-17.py310:latest", ("tf", "cpu", (2, 17))),
        ("europe-docker.pkg.dev/vertex-ai/training/tf-gpu.2-17.py310:latest", ("tf", "gpu", (2, 17))),
        ("us-docker.pkg.dev/vertex-ai/training/tf-tpu.2-15.cp310:latest", ("tf", "tpu", (2, 15))),
        ("us-docker.pkg.dev/vertex-ai/training/pytorch-gpu.2-4.py310:latest", ("pytorch", "gpu", (2, 4))),
        ("gcr.io/my-project/trainer:v1", None),
    ],
)
def test_parse_prebuilt(uri, parsed):
    found = parse_prebuilt(uri)
    assert (found and (found.framework, found.variant, found.version)) == parsed


IMAGE_ERRORS = [
    (
        "keras-2-image",
        {f"{POOL}.pythonPackageSpec.executorImageUri": PREBUILT_CPU.replace("2-17", "2-15")},
        f"{POOL}.pythonPackageSpec.executorImageUri",
        "TensorFlow 2.15 (Keras 2)",
    ),
    (
        "tpu-2-15-image",
        {
            f"{POOL}.machineSpec": V3,
            f"{POOL}.pythonPackageSpec.executorImageUri": "us-docker.pkg.dev/vertex-ai/training/tf-tpu.2-15.cp310",  # noqa: E501
        },
        f"{POOL}.pythonPackageSpec.executorImageUri",
        "TensorFlow 2.15",
    ),
    (
        "tf-2-16-image",
        {f"{POOL}.pythonPackageSpec.executorImageUri": PREBUILT_CPU.replace("2-17", "2-16")},
        f"{POOL}.pythonPackageSpec.executorImageUri",
        "TensorFlow 2.16",
    ),
    (
        "other-framework",
        {
            f"{POOL}.pythonPackageSpec.executorImageUri": (
                "us-docker.pkg.dev/vertex-ai/training/pytorch-xla.2-4.py310:latest"
            )
        },
        f"{POOL}.pythonPackageSpec.executorImageUri",
        "not a prebuilt TensorFlow training image",
    ),
    (
        "unknown-image",
        {f"{POOL}.pythonPackageSpec.executorImageUri": "gcr.io/my-project/custom:1"},
        f"{POOL}.pythonPackageSpec.executorImageUri",
        "not a prebuilt TensorFlow training image",
    ),
    (
        "cpu-prebuilt-on-gpu",
        {f"{POOL}.machineSpec": T4},
        f"{POOL}.pythonPackageSpec.executorImageUri",
        "a tf-cpu image on a machine with NVIDIA_TESLA_T4",
    ),
    (
        "gpu-image-on-tpu",
        {**on_trainer_image("gpu"), f"{POOL}.machineSpec": V3},
        f"{POOL}.containerSpec.imageUri",
        "the gpu trainer image on a machine with TPU_V3",
    ),
    (
        "cpu-image-on-gpu",
        {**on_trainer_image("cpu"), f"{POOL}.machineSpec": T4},
        f"{POOL}.containerSpec.imageUri",
        "the cpu trainer image on a machine with NVIDIA_TESLA_T4",
    ),
    (
        "tag-latest",
        {**on_trainer_image("cpu"), f"{POOL}.containerSpec.imageUri": "${infra.trainer_image}:latest"},
        f"{POOL}.containerSpec.imageUri",
        "tag 'latest' cannot be resolved",
    ),
    (
        "no-tag",
        {**on_trainer_image("cpu"), f"{POOL}.containerSpec.imageUri": "${infra.trainer_image}"},
        f"{POOL}.containerSpec.imageUri",
        "tag '(none)' cannot be resolved",
    ),
    (
        "unknown-variant",
        {
            **on_trainer_image("cpu"),
            f"{POOL}.containerSpec.imageUri": "${infra.trainer_image}:arm-0123456789abcdef",
        },
        f"{POOL}.containerSpec.imageUri",
        "cannot be resolved",
    ),
]


@pytest.mark.parametrize(
    "mutations, path, words", [e[1:] for e in IMAGE_ERRORS], ids=[e[0] for e in IMAGE_ERRORS]
)
def test_images_the_trainer_cannot_run_on_are_refused(mutations, path, words):
    with pytest.raises(JobError) as caught:
        check(CUSTOM, mutations)
    error = caught.value
    assert error.path == path and words in error.problem, str(error)
    assert "\n" not in str(error)
    if "pythonPackageSpec" in path and "tf-cpu image" not in words:
        # The one line names the images the trainer runs on.
        assert PREBUILT_CPU in error.allowed and "trainer_image" in error.allowed


def test_images_the_trainer_runs_on_are_accepted():
    check(CUSTOM)
    check(
        CUSTOM,
        {
            f"{POOL}.machineSpec": T4,
            f"{POOL}.pythonPackageSpec.executorImageUri": PREBUILT_CPU.replace("cpu", "gpu"),
        },
    )
    for variant, machine in (("cpu", {"machineType": "n1-standard-4"}), ("gpu", T4), ("tpu", V3)):
        check(CUSTOM, {**on_trainer_image(variant), f"{POOL}.machineSpec": machine})
    # An earlier build may be pinned by its tag; whether it exists is checked at submission.
    check(
        CUSTOM,
        {
            **on_trainer_image("cpu"),
            f"{POOL}.containerSpec.imageUri": "${infra.trainer_image}:cpu-00000000000000aa",
        },
    )
    # Another module in the user's own image is not this repo's trainer: nothing to check.
    check(
        CUSTOM,
        {
            "trainer": {"delivery": "container"},
            f"{POOL}.pythonPackageSpec": DELETE,
            f"{POOL}.containerSpec": {"imageUri": "gcr.io/p/other:1", "args": ["--anything"]},
        },
    )


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_build_requests_are_valid_cloud_build_requests(path):
    """What --dry-run prints and a submission sends, checked against the real cloudbuild_v1 types."""
    from google.cloud.devtools import cloudbuild_v1

    rc, out, err = run_cli([path, "--dry-run"])
    assert rc == 0, err
    job = _compiled(path)
    for build in job_builds(job, OUTPUTS, IMAGE_HASH):
        request = cloudbuild_v1.CreateBuildRequest.from_json(json.dumps(build.request))
        assert request.build.images == [build.image] and build.image in err
        assert request.build.service_account.endswith(OUTPUTS["builder_service_account"])
        assert request.build.options.logging == cloudbuild_v1.BuildOptions.LoggingMode.CLOUD_LOGGING_ONLY
        assert json.dumps(build.request, indent=2) in err


def _compiled(path):
    from tests.jobs.helpers import compile_text

    return compile_text(path.read_text(), file=str(path))


# ---- builds at submission ------------------------------------------------------------------------------

CPU_JOB = JOBS_DIR / "census_cpu.yaml"


@pytest.fixture
def repo(tmp_path):
    return make_repo(tmp_path / "repo")


def submit(server, repo, gcs, *args, **kwargs):
    return run_cli([CPU_JOB, *args], factory=server.factory(gcs), image_hash=None, repo_root=repo, **kwargs)


def test_a_missing_image_is_built_once_then_reused(repo, tmp_path, monkeypatch):
    gcs = tmp_path / "gcs"
    digest = image_hash(repo)
    image = f"{OUTPUTS['trainer_image']}:cpu-{digest}"
    with FakeVertexServer(FakeVertex(tags=set())) as server:
        rc, out, err = submit(server, repo, gcs)
        assert rc == 0, err
        (post,) = server.fake.created_builds()
        assert post.path == "/v1/projects/demo-project/locations/us-central1/builds"
        assert post.body["images"] == [image]
        assert post.body["source"]["storageSource"] == {
            "bucket": "demo-project-staging",
            "object": f"builds/{digest}.tar.gz",
        }
        assert post.body["steps"][0]["args"][:3] == ["build", "--target", "cpu"]
        # The uploaded context is this checkout's, byte for byte what write_context makes.
        uploaded = gcs / "demo-project-staging" / "builds" / f"{digest}.tar.gz"
        expected = tmp_path / "expected.tar.gz"
        write_context(repo, expected)
        assert uploaded.read_bytes() == expected.read_bytes()
        # The job runs that image, and is created only after the build succeeded.
        (job,) = server.fake.created()
        assert job.body["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["imageUri"] == image
        # (then its registration and its Experiments record)
        order = [r.path for r in server.fake.requests
                 if r.method == "POST" and "/models" not in r.path and "/metadataStores" not in r.path]
        assert order[0].endswith("/builds") and order[-1].endswith("/customJobs")
        assert "build QUEUED" in out and "build SUCCESS" in out and f"trainer image: built {image}" in out

        # Same code again: found in Artifact Registry, nothing uploaded or built.
        monkeypatch.setattr(jobs.cloud.plan, "write_context", _must_not_run)
        rc, out, err = submit(server, repo, gcs, "--no-wait")
        assert rc == 0, err
        assert len(server.fake.created_builds()) == 1 and "already built" in out

        # Changed code: a new tag, a new build.
        (repo / "trainer/task.py").write_text("print('changed')\n")
        monkeypatch.undo()
        monkeypatch.setattr(jobs.cloud.plan, "POLL_SECONDS", 0)
        rc, out, err = submit(server, repo, gcs, "--no-wait")
        assert rc == 0, err
        assert len(server.fake.created_builds()) == 2
        assert server.fake.created_builds()[1].body["images"] == [
            f"{OUTPUTS['trainer_image']}:cpu-{image_hash(repo)}"
        ]


def _must_not_run(*args, **kwargs):
    raise AssertionError("identical code must not be packed or uploaded again")


def test_a_failed_build_is_one_line_with_its_log_and_submits_nothing(repo, tmp_path):
    fake = FakeVertex(tags=set(), build_states=["QUEUED", "WORKING", "FAILURE"], build_detail="step 0 failed")
    with FakeVertexServer(fake) as server:
        rc, out, err = submit(server, repo, tmp_path / "gcs")
    assert rc == 1
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "ended FAILURE: step 0 failed" in err
    assert "log: https://console.cloud.google.com/cloud-build/builds/build-1?project=demo-project" in err
    assert fake.created() == []


def test_a_tag_that_cannot_be_resolved_is_bad_input_and_nothing_happens(repo, tmp_path, write_job):
    pinned = CPU_JOB.read_text().replace("cpu-${job.image_tag}", "cpu-00000000000000aa")
    # Without its registry block, which would build the serving image (this checkout's cpu tag) too.
    path = write_job(re.sub(r"\nregistry:\n(?:  .*\n)+", "\n", pinned))
    gcs = tmp_path / "gcs"
    with FakeVertexServer(FakeVertex(tags=set())) as server:
        rc, out, err = run_cli([path], factory=server.factory(gcs), image_hash=None, repo_root=repo)
        assert rc == 2 and err.count("\n") == 1, err
        assert err.startswith(f"{path}: jobSpec.workerPoolSpecs.0.containerSpec.imageUri: ")
        assert "cpu-00000000000000aa is not in Artifact Registry" in err
        assert server.fake.created() == [] and server.fake.created_builds() == []
        assert not gcs.exists()
        # Once that tag exists, the pinned image is used as is: no build.
        server.fake.add_image(f"{OUTPUTS['trainer_image']}:cpu-00000000000000aa")
        rc, out, err = run_cli(
            [path, "--no-wait"], factory=server.factory(gcs), image_hash=None, repo_root=repo
        )
        assert rc == 0, err
        assert server.fake.created_builds() == [] and len(server.fake.created()) == 1


def test_a_retried_submit_follows_the_running_build(repo, tmp_path):
    fake = FakeVertex(tags=set(), build_states=["QUEUED", "WORKING"])
    with FakeVertexServer(fake) as server:
        calls = []

        def interrupt(seconds):
            calls.append(seconds)
            if len(calls) == 2:
                raise KeyboardInterrupt

        jobs.cloud.plan._sleep, original = interrupt, jobs.cloud.plan._sleep
        try:
            rc, out, err = submit(server, repo, tmp_path / "gcs")
        finally:
            jobs.cloud.plan._sleep = original
        assert rc == 130 and "running the same command again" in err
        fake.build_states = ["WORKING", "SUCCESS"]
        rc, out, err = submit(server, repo, tmp_path / "gcs", "--no-wait")
        assert rc == 0, err
        assert len(fake.created_builds()) == 1 and "reusing build build-1" in out
        assert len(fake.created()) == 1


@pytest.mark.parametrize("broken", ["missing", "directory"])
def test_a_missing_dockerfile_is_one_line_naming_it(tmp_path, broken, write_job):
    repo = make_repo(tmp_path / "repo")
    (repo / "Dockerfile").unlink()
    if broken == "directory":
        (repo / "Dockerfile").mkdir()
    for args in (["--dry-run"], []):
        with FakeVertexServer(FakeVertex(tags=set())) as server:
            rc, out, err = run_cli(
                [CPU_JOB, *args], factory=server.factory(tmp_path / "gcs"), image_hash=None, repo_root=repo
            )
            assert rc == 2 and err.count("\n") == 1 and err.startswith("Dockerfile: (file): "), err
            assert server.fake.requests == []
    # A job that does not use the image does not need the Dockerfile.
    rc, out, err = run_cli([JOBS_DIR / "census_prebuilt.yaml", "--dry-run"], image_hash=None, repo_root=repo)
    assert rc == 0, err


def test_tag_resource_names():
    assert tag_resource_name("us-central1-docker.pkg.dev/p/ml/trainer:cpu-0123") == (
        "projects/p/locations/us-central1/repositories/ml/packages/trainer/tags/cpu-0123"
    )
    assert tag_resource_name("europe-west4-docker.pkg.dev/p/ml/team/trainer:v1") == (
        "projects/p/locations/europe-west4/repositories/ml/packages/team%2Ftrainer/tags/v1"
    )
    for bad in (
        "gcr.io/p/trainer:v1",
        "us-docker.pkg.dev/p/ml/trainer",
        "us-docker.pkg.dev/p/ml/t@sha256:ab",
    ):
        with pytest.raises(ValueError):
            tag_resource_name(bad)
