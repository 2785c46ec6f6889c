"""checkov over the synthesized Terraform JSON: zero failed checks, and every skip is written, with its
reason, on the resource it concerns in cdk.tf.json."""

from __future__ import annotations

import json

import pytest

from infra.constructs import BUILDS_EDITOR
from infra.policy import CONFIG_NAME, collect_skips, write_checkov_config
from tests.infra.helpers import BASIC, findings, run_checkov


@pytest.fixture(scope="module")
def checkov_report(synth_dir) -> dict:
    return run_checkov(synth_dir)


def recorded_skips(stacks: dict) -> set[tuple[str, str, str]]:
    """(stack, logical id, check id) for every skip written into the synthesized JSON."""
    found = set()
    for env, stack in stacks.items():
        for (_, name), entries in collect_skips(stack).items():
            for entry in entries:
                assert len(entry["comment"]) > 30, entry  # a reason, not a placeholder
                found.add((env, name, entry["id"]))
    return found


def test_checkov_passes_with_zero_failed_checks(synth_dir, checkov_report):
    assert (synth_dir / CONFIG_NAME).is_file()
    assert checkov_report["summary"]["failed"] == 0, checkov_report["results"]["failed_checks"]


def test_exactly_the_written_skips_are_skipped(stacks, checkov_report):
    # checkov's baseline matching ignores the file, so compare per stack: a skip written in one stack must not
    # hide the same finding in another, and nothing without a written reason may be skipped.
    skipped = checkov_report["results"]["skipped_checks"]
    assert all(r["check_result"]["suppress_comment"] == "baseline-skipped" for r in skipped)
    assert findings(skipped) == recorded_skips(stacks)
    assert len(skipped) == len(recorded_skips(stacks))


def test_impersonation_skips_cover_only_project_grants_of_builds_editor(stacks, configs):
    # CKV_GCP_49 is skipped for creating Cloud Build builds alone (its reason rests on actAs on the builder):
    # never for serviceAccountUser, tokenCreator or anything else at project level.
    for env, stack in stacks.items():
        skips = [(name, entry) for (_, name), entries in collect_skips(stack).items() for entry in entries
                 if entry["id"] == "CKV_GCP_49"]
        editors = {name for name, body in stack["resource"]["google_project_iam_member"].items()
                   if body["role"] == BUILDS_EDITOR}
        assert {name for name, _ in skips} == editors, env
        assert len(editors) == len(configs[env].job_submitters) + 1, env  # the submitters and CI
        assert all("infra/README.md, Bootstrap" in entry["comment"] for _, entry in skips)


def test_the_baseline_hides_no_new_finding(stacks, tmp_path):
    """A regression beside the written skips still fails (baseline mode lists few passed checks)."""
    stack = json.loads(json.dumps(stacks[BASIC]))
    name, bucket = sorted(stack["resource"]["google_storage_bucket"].items())[0]
    bucket["uniform_bucket_level_access"] = False
    (tmp_path / "stacks" / BASIC).mkdir(parents=True)
    (tmp_path / "stacks" / BASIC / "cdk.tf.json").write_text(json.dumps(stack))
    write_checkov_config(tmp_path)
    report = run_checkov(tmp_path)
    assert {(r["resource"].split(".", 1)[1], r["check_id"]) for r in report["results"]["failed_checks"]} == {
        (name, "CKV_GCP_29")}
    assert report["summary"]["skipped"] == len(recorded_skips({BASIC: stack}))


def test_a_skip_without_a_reason_is_refused():
    skip = {"//": {"checkov": {"skip": [{"id": "CKV_GCP_62"}]}}}
    stack = {"resource": {"google_storage_bucket": {"b": skip}}}
    with pytest.raises(ValueError, match="google_storage_bucket.b: checkov skip CKV_GCP_62 has no reason"):
        collect_skips(stack)
