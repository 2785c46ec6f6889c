"""Table-driven tests of the pure pipeline before validation: strict loading, --set overrides, references,
both definition forms, flags, job ids and submission hashes."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from jobs.definition.compile import job_name
from jobs.definition.errors import JobError
from jobs.definition.gcloud_flags import JobFlags
from jobs.definition.loader import load_text
from jobs.definition.overrides import Override, apply_overrides
from tests.jobs.helpers import CUSTOM, GCLOUD_CUSTOM, IMAGE_HASH, NOW, OUTPUTS, TUNING, check, compile_text

# ---- strict YAML -------------------------------------------------------------------------------------------

BAD_YAML = [
    ("tab", "kind: CustomJob\njobSpec:\n\tworkerPoolSpecs: []\n", "line 3", "tab character in indentation"),
    (
        "duplicate",
        "kind: CustomJob\nlabels: {a: b}\nkind: HyperparameterTuningJob\n",
        "kind",
        "duplicate key (line 3; first on line 1)",
    ),
    (
        "nested-duplicate",
        "jobSpec:\n  scheduling: {timeout: 1s}\n  scheduling: {timeout: 2s}\n",
        "jobSpec.scheduling",
        "duplicate key",
    ),
    ("list", "- a\n- b\n", "line 1", "the document is a list, not a mapping"),
    ("scalar", "just text\n", "line 1", "the document is a scalar, not a mapping"),
    ("empty", "# nothing\n", "(top level)", "the file is empty"),
    ("unclosed", "labels: {a: b\n", "line 2, column 1", "malformed YAML"),
    ("bad-indent", "kind: CustomJob\n  labels: x\n", "line 2, column 9", "malformed YAML"),
    ("merge-key", "base: &b {x: 1}\nother:\n  <<: *b\n", "other.<<", "merge keys are not supported"),
    ("two-documents", "a: 1\n---\nb: 2\n", "line 2, column 1", "malformed YAML"),
]


@pytest.mark.parametrize("text, path, words", [b[1:] for b in BAD_YAML], ids=[b[0] for b in BAD_YAML])
def test_strict_yaml(text, path, words):
    with pytest.raises(JobError) as caught:
        load_text(text, "bad.yaml")
    assert caught.value.path == path, str(caught.value)
    assert words in str(caught.value)
    assert str(caught.value).startswith("bad.yaml: ")
    assert "\n" not in str(caught.value)


def test_loader_keeps_lines_and_plain_types():
    doc = load_text("a:\n  b: [1, 2]\n  when: 2024-01-01\n  anchor: &x {k: v}\n  again: *x\n", "f.yaml")
    assert doc.data == {"a": {"b": [1, 2], "when": "2024-01-01", "anchor": {"k": "v"}, "again": {"k": "v"}}}
    assert doc.lines["a.b"] == 2 and doc.lines["a.when"] == 3
    assert doc.line_of("a.b.1.nothing") == 2
    doc.data["a"]["anchor"]["k"] = "changed"
    assert doc.data["a"]["again"] == {"k": "v"}  # an alias is a copy, not a shared object


# ---- --set -------------------------------------------------------------------------------------------------

DATA = {
    "maxTrialCount": 8,
    "studySpec": {"algorithm": "GRID_SEARCH"},
    "trialJobSpec": {"workerPoolSpecs": [{"replicaCount": 1, "args": ["--a", "--b"]}]},
}

SETS = [
    ("int", "maxTrialCount=2", ("maxTrialCount",), 2),
    ("string", "studySpec.algorithm=RANDOM_SEARCH", ("studySpec", "algorithm"), "RANDOM_SEARCH"),
    (
        "index",
        "trialJobSpec.workerPoolSpecs.0.replicaCount=3",
        ("trialJobSpec", "workerPoolSpecs", 0, "replicaCount"),
        3,
    ),
    (
        "list-item",
        "trialJobSpec.workerPoolSpecs.0.args.1=--num-epochs=2",
        ("trialJobSpec", "workerPoolSpecs", 0, "args", 1),
        "--num-epochs=2",
    ),
    (
        "flow-list",
        "trialJobSpec.workerPoolSpecs.0.args=[--x, --y]",
        ("trialJobSpec", "workerPoolSpecs", 0, "args"),
        ["--x", "--y"],
    ),
    ("float", "maxTrialCount=0.5", ("maxTrialCount",), 0.5),
    ("bool", "maxTrialCount=true", ("maxTrialCount",), True),
    ("quoted", "maxTrialCount='8'", ("maxTrialCount",), "8"),
    ("date-stays-text", "studySpec.algorithm=2024-01-01", ("studySpec", "algorithm"), "2024-01-01"),
]


@pytest.mark.parametrize("text, keys, value", [s[1:] for s in SETS], ids=[s[0] for s in SETS])
def test_set_overrides(text, keys, value):
    result = apply_overrides(DATA, [Override.parse(text, "f.yaml")], "f.yaml")
    node = result
    for key in keys:
        node = node[key]
    assert node == value
    assert DATA["maxTrialCount"] == 8  # the input is not modified


BAD_SETS = [
    ("no-equals", "maxTrialCount", "--set maxTrialCount", "expected PATH=VALUE"),
    (
        "unknown",
        "maxTrials=2",
        "--set maxTrials",
        "no such field in the file; allowed: maxTrialCount, studySpec",
    ),
    ("unknown-nested", "studySpec.algo=X", "--set studySpec.algo", "allowed: studySpec.algorithm"),
    (
        "index-range",
        "trialJobSpec.workerPoolSpecs.3.replicaCount=1",
        "--set trialJobSpec.workerPoolSpecs.3",
        "not an index of this 1-item list; allowed: 0..0",
    ),
    (
        "index-not-number",
        "trialJobSpec.workerPoolSpecs.first=1",
        "--set trialJobSpec.workerPoolSpecs.first",
        "not an index",
    ),
    ("through-scalar", "maxTrialCount.x=1", "--set maxTrialCount.x", "maxTrialCount is a single value"),
]


@pytest.mark.parametrize("text, path, words", [b[1:] for b in BAD_SETS], ids=[b[0] for b in BAD_SETS])
def test_bad_set_paths(text, path, words):
    with pytest.raises(JobError) as caught:
        apply_overrides(DATA, [Override.parse(text, "f.yaml")], "f.yaml")
    assert caught.value.path == path
    assert words in str(caught.value)


# ---- references --------------------------------------------------------------------------------------------

BAD_REFS = [
    (
        "unknown-infra",
        {"labels.x": "${infra.nope}"},
        "labels.x",
        "unknown reference ${infra.nope}; allowed: ${infra.artifact_registry}",
    ),
    (
        "unknown-job",
        {"displayName": "${job.nope}"},
        "displayName",
        "unknown reference ${job.nope}; allowed: ${job.code_hash}",
    ),
    (
        "unknown-namespace",
        {"displayName": "${env.USER}"},
        "displayName",
        "allowed: ${infra.<key>}, ${job.<key>}",
    ),
]


@pytest.mark.parametrize("mutations, path, words", [b[1:] for b in BAD_REFS], ids=[b[0] for b in BAD_REFS])
def test_unresolvable_references(mutations, path, words):
    with pytest.raises(JobError) as caught:
        compile_text(CUSTOM, mutations)
    assert caught.value.path == path
    assert words in str(caught.value)


def test_references_resolve_and_escape():
    job = compile_text(
        CUSTOM, {"labels.owner": "team", "displayName": "run-$${literal}-${job.name}-${infra.region}"}
    )
    assert job.body["displayName"] == "run-${literal}-job-us-central1"
    spec = job.body["jobSpec"]
    assert spec["serviceAccount"] == OUTPUTS["runtime_service_account"]
    assert spec["baseOutputDirectory"]["outputUriPrefix"] == f"gs://demo-project-models/t/{job.job_id}"
    assert spec["workerPoolSpecs"][0]["pythonPackageSpec"]["packageUris"] == [job.package_uri]


# ---- forms, flags, identity --------------------------------------------------------------------------------


def test_gcloud_custom_job_spec_file():
    job = check(GCLOUD_CUSTOM, file="gcloud_job.yaml", flags=JobFlags(display_name="nightly"))
    assert job.kind == "CustomJob" and job.delivery == "container"
    assert job.body["displayName"] == "nightly"
    assert (
        job.body["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["imageUri"]
        == f"us-central1-docker.pkg.dev/demo-project/ml/trainer:cpu-{IMAGE_HASH}"
    )
    # Errors use the file's own paths (no jobSpec level in a gcloud file).
    with pytest.raises(JobError) as caught:
        check(GCLOUD_CUSTOM, {"workerPoolSpecs.0.replicaCount": 2})
    assert caught.value.path == "workerPoolSpecs.0.replicaCount"
    # The trainer image runs this repo's trainer, so its args are checked against the trainer's flags.
    with pytest.raises(JobError) as caught:
        check(GCLOUD_CUSTOM, {"workerPoolSpecs.0.containerSpec.args": ["--bogus"]})
    assert caught.value.path == "workerPoolSpecs.0.containerSpec.args"


def test_gcloud_tuning_config_takes_trial_counts_from_flags():
    text = "\n".join(
        line
        for line in TUNING.splitlines()
        if not line.startswith(("kind:", "trainer:", "maxTrialCount", "parallelTrialCount"))
    )
    job = check(text, flags=JobFlags(max_trial_count=6, parallel_trial_count=3))
    assert job.kind == "HyperparameterTuningJob"
    assert (job.body["maxTrialCount"], job.body["parallelTrialCount"]) == (6, 3)
    assert check(text).body["maxTrialCount"] == 1  # gcloud's default


def test_trial_flags_are_refused_for_custom_jobs():
    with pytest.raises(JobError) as caught:
        compile_text(CUSTOM, flags=JobFlags(max_trial_count=3))
    assert caught.value.path == "--max-trial-count"


def test_region_flag_moves_the_parent():
    job = compile_text(
        CUSTOM,
        {"jobSpec.tensorboard": "projects/p/locations/europe-west4/tensorboards/1"},
        flags=JobFlags(region="europe-west4"),
    )
    assert job.parent == "projects/demo-project/locations/europe-west4"


def test_unrecognizable_file():
    with pytest.raises(JobError) as caught:
        compile_text("displayName: x\n")
    assert "cannot tell what kind of job this is" in str(caught.value)


def test_job_id_and_submission_hash():
    job = compile_text(TUNING, file="jobs/census_tuning.yaml")
    assert job.job_id == f"census-tuning-20260102-030405-{job.submission_hash[:6]}"
    assert job.body["displayName"] == job.job_id
    assert job.body["labels"]["submission_hash"] == job.submission_hash
    assert len(job.submission_hash) == 16 and job.submission_hash.isalnum() and job.submission_hash.islower()
    # Deterministic: same inputs, same hash; the clock changes the id, never the hash.
    later = compile_text(TUNING, file="jobs/census_tuning.yaml", now=NOW + timedelta(hours=1))
    assert later.submission_hash == job.submission_hash and later.job_id != job.job_id
    # Anything that changes what runs changes the hash.
    assert compile_text(TUNING, {"maxTrialCount": 5}).submission_hash != job.submission_hash
    assert compile_text(TUNING, overrides=["maxTrialCount=4"]).submission_hash != job.submission_hash
    assert (
        compile_text(TUNING, outputs={**OUTPUTS, "models_bucket": "gs://other"}).submission_hash
        != compile_text(TUNING).submission_hash
    )


def test_a_given_job_id_replaces_the_clock_one_and_leaves_the_hash():
    """What a schedule compiles with (jobs.schedule): its placeholder wherever ${job.id} is, same hash."""
    job = compile_text(CUSTOM, file="jobs/census_cpu.yaml")
    scheduled = compile_text(CUSTOM, file="jobs/census_cpu.yaml", job_id="census-cpu-yyyymmdd-hhmmss-xxxxxx")
    assert scheduled.job_id == scheduled.body["displayName"] == "census-cpu-yyyymmdd-hhmmss-xxxxxx"
    assert scheduled.submission_hash == job.submission_hash
    assert json.loads(json.dumps(scheduled.body).replace(scheduled.job_id, job.job_id)) == job.body


def test_the_image_hash_counts_only_for_jobs_on_the_trainer_image():
    from tests.jobs.helpers import on_trainer_image

    other = "00000000000000aa"
    # A prebuilt-image job stays the same submission when only the image's build context changed ...
    assert compile_text(CUSTOM, image_hash=other).submission_hash == compile_text(CUSTOM).submission_hash
    # ... a job on the trainer image is a new one, running the new image.
    before = compile_text(CUSTOM, on_trainer_image("cpu"))
    after = compile_text(CUSTOM, on_trainer_image("cpu"), image_hash=other)
    assert after.submission_hash != before.submission_hash
    image = after.body["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["imageUri"]
    assert image == f"{OUTPUTS['trainer_image']}:cpu-{other}"


@pytest.mark.parametrize(
    "file, name",
    [("jobs/census_tuning.yaml", "census-tuning"), ("My Job.v2.yml", "my-job-v2"), ("___.yaml", "job")],
)
def test_job_name(file, name):
    assert job_name(file) == name


def test_request_is_the_create_request_json():
    job = compile_text(CUSTOM)
    assert job.request() == {"parent": "projects/demo-project/locations/us-central1", "customJob": job.body}


def test_set_changes_anchored_text_wherever_it_is_used():
    doc = load_text(
        "pools:\n  - spec: &t {args: [--a=1, --b=2]}\n  - spec: *t\n  - spec: {args: [--a=1]}\n", "f.yaml"
    )
    assert doc.shared["pools.1.spec.args.0"] == ("pools.0.spec.args.0", "pools.1.spec.args.0")
    result = apply_overrides(
        doc.data, [Override.parse("pools.1.spec.args.0=--a=9", "f.yaml")], "f.yaml", doc.shared
    )
    assert [p["spec"]["args"][0] for p in result["pools"]] == ["--a=9", "--a=9", "--a=1"]
    result = apply_overrides(
        doc.data, [Override.parse("pools.0.spec.args=[--c]", "f.yaml")], "f.yaml", doc.shared
    )
    assert [p["spec"]["args"] for p in result["pools"]] == [["--c"], ["--c"], ["--a=1"]]
    result["pools"][0]["spec"]["args"].append("--d")
    assert result["pools"][1]["spec"]["args"] == ["--c"]  # equal, not one shared object


def test_set_on_the_multiworker_chief_changes_its_workers(cli):
    from tests.jobs.helpers import JOBS_DIR, arg_path

    path = JOBS_DIR / "census_multiworker.yaml"
    rc, out, err = cli([path, "--dry-run", "--set", f"{arg_path(path, '--num-epochs')}=--num-epochs=2"])
    assert rc == 0, err
    pools = json.loads(out)["customJob"]["jobSpec"]["workerPoolSpecs"]
    assert [[a for a in p["containerSpec"]["args"] if a.startswith("--num-epochs")] for p in pools] == [
        ["--num-epochs=2"],
        ["--num-epochs=2"],
    ]


@pytest.mark.parametrize(
    "mutations, stages",
    [
        ({}, True),
        (
            {"jobSpec.workerPoolSpecs.0.pythonPackageSpec.packageUris": ["gs://team/pkgs/other-1.0.tar.gz"]},
            False,
        ),
    ],
    ids=["repo-trainer", "own-package"],
)
def test_the_sdist_is_staged_only_when_a_pool_installs_it(mutations, stages):
    from jobs.cloud.plan import StagePackage, build_plan

    plan = build_plan(compile_text(CUSTOM, mutations))
    assert any(isinstance(step, StagePackage) for step in plan.steps) is stages
