"""Golden files: the exact --dry-run output of every shipped definition (fixed clock, code and image hashes
and outputs): the job request (stdout, <name>.json) and the plan with its build requests (stderr,
<name>.plan.txt).

A change to a definition or to the compiler shows up as a reviewable diff of the requests Vertex AI and Cloud
Build receive. Regenerate after an intended change: UPDATE_GOLDEN=1 pytest tests/jobs/test_golden.py
"""

from __future__ import annotations

import json
import os

import pytest

from jobs.definition.image import RUNNABLE_PREBUILT, variant_for_machine
from tests.jobs.helpers import IMAGE_HASH, OUTPUTS, REPO_ROOT, SHIPPED, run_cli

GOLDEN = REPO_ROOT / "tests" / "jobs" / "golden"


def test_every_issue_definition_is_shipped():
    names = {p.stem for p in SHIPPED}
    assert {
        "census_cpu",
        "census_tuning",
        "census_tuning_grid",
        "census_multiworker",
        "census_gpu",
        "census_tpu",
        "census_prebuilt",
        "image_gpu",
        "image_mirrored",
        "image_tpu",
        "image_tuning",
        "image_dropout_tuning",
        "recommender",
        "recommender_tuning",
    } <= names


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_dry_run_matches_golden(path):
    rc, out, err = run_cli([path.relative_to(REPO_ROOT), "--dry-run"])
    assert rc == 0, err
    request = json.loads(out)
    golden = GOLDEN / f"{path.stem}.json"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.write_text(out, encoding="utf-8")
    assert golden.is_file(), f"missing {golden}; run UPDATE_GOLDEN=1 pytest {__file__}"
    assert request == json.loads(golden.read_text(encoding="utf-8"))
    assert out == golden.read_text(encoding="utf-8")  # key order too: it is what a reviewer reads
    plan = GOLDEN / f"{path.stem}.plan.txt"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        plan.write_text(err, encoding="utf-8")
    assert err == plan.read_text(encoding="utf-8")


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_shipped_definitions_follow_the_house_rules(path):
    rc, out, _ = run_cli([path.relative_to(REPO_ROOT), "--dry-run"])
    request = json.loads(out)
    kind, body = next((k, v) for k, v in request.items() if k != "parent")
    spec = body["jobSpec"] if kind == "customJob" else body["trialJobSpec"]
    job_id = body["displayName"]
    assert spec["serviceAccount"] == "vertex-runtime@demo-project.iam.gserviceaccount.com"
    assert spec["baseOutputDirectory"]["outputUriPrefix"].startswith("gs://demo-project-models/")
    assert spec["baseOutputDirectory"]["outputUriPrefix"].endswith(job_id)
    assert spec["tensorboard"] == "projects/demo-project/locations/us-central1/tensorboards/1234567890"
    assert spec["scheduling"]["timeout"].endswith("s")
    assert {"app", "submission_hash"} <= set(body["labels"])
    if kind == "hyperparameterTuningJob":
        assert body["maxFailedTrialCount"] >= 1
    for pool in spec["workerPoolSpecs"]:
        if path.stem == "census_prebuilt":
            program = pool["pythonPackageSpec"]
            assert program["pythonModule"] == "trainer.task"
            assert program["executorImageUri"] in RUNNABLE_PREBUILT
            assert program["packageUris"] == [
                "gs://demo-project-staging/packages/0123456789abcdef/trainer-0.1.0.tar.gz"
            ]
        else:
            # Every other definition runs the trainer image of its hardware, built from this checkout.
            program = pool["containerSpec"]
            variant = variant_for_machine(pool["machineSpec"])
            assert program["imageUri"] == f"{OUTPUTS['trainer_image']}:{variant}-{IMAGE_HASH}"
            assert "command" not in program  # the image's entrypoint is the trainer
        # Data in the data bucket, and shipped in data/ (what --local stages there), so it runs as written.
        # (The recommender may leave --eval-files out: it holds out part of --train-files.)
        for flag in ("--train-files", "--eval-files"):
            values = [a.split("=", 1)[1] for a in program["args"] if a.startswith(flag + "=")]
            assert len(values) == 1 or (flag == "--eval-files" and "--model=recommender" in program["args"])
            for value in values:
                assert value.startswith("gs://demo-project-data/"), value
                assert sorted(REPO_ROOT.glob("data/" + value.removeprefix("gs://demo-project-data/"))), value
