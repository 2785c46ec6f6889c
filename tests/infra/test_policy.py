"""checkov over the synthesized Terraform JSON, each stack on its own with its own skips: zero failed checks,
every skip written, with its reason, on the resource it concerns in that stack's cdk.tf.json, and real
passed / failed / skipped figures for every stack, bootstrap stacks included."""

from __future__ import annotations

import json
import shutil

import pytest

from infra.constructs import BUILDS_EDITOR
from infra.policy import CONFIG_NAME, collect_skips, run_checkov, scan, write_checkov_config
from tests.infra.helpers import BASIC, CMEK

# Where CMEK lives in a synthesized platform stack: what "prod without CMEK" loses.
CMEK_SETTINGS = {
    "google_storage_bucket": "encryption",
    "google_artifact_registry_repository": "kms_key_name",
    "google_vertex_ai_tensorboard": "encryption_spec",
}


@pytest.fixture(scope="module")
def figures(synth_dir) -> dict:
    # One checkov start-up over all stacks (what separately=False does); each stack judged by its own skips.
    return scan(synth_dir, separately=False)


def recorded_skips(stack: dict) -> set[tuple[str, str]]:
    """(logical id, check id) for every skip written into one synthesized stack."""
    found = set()
    for (_, name), entries in collect_skips(stack).items():
        for entry in entries:
            assert len(entry["comment"]) > 30, entry  # a reason, not a placeholder
            found.add((name, entry["id"]))
    return found


def test_every_stack_passes_with_zero_failed_checks_and_real_figures(figures, all_stacks):
    assert set(figures) == set(all_stacks)  # bootstrap stacks included
    for name, result in figures.items():
        print(result.line())  # the figures the suite reports (pytest -s)
        assert result.failed == [], (name, result.failed)
        assert result.stale == [], (name, result.stale)
        # Real figures: checkov ran every check on this stack (a baseline would have dropped the passed ones).
        assert result.passed >= 30, name
        assert set(result.skipped) == recorded_skips(all_stacks[name]), name


def without_cmek(stack: dict) -> dict:
    """prod as a bad merge might leave it: the CMEK settings gone from buckets, registry and TensorBoard."""
    stack = json.loads(json.dumps(stack))
    removed = [body.pop(key) for rtype, key in CMEK_SETTINGS.items()
               for body in stack["resource"][rtype].values()]
    assert len(removed) == 6  # four buckets, the registry, the TensorBoard
    return stack


def regressed(stack: dict) -> tuple[dict, str, str]:
    """dev with one new finding beside its skips (a bucket without uniform access) and one skip that no longer
    matches (its TensorBoard gets a key, so the CMEK-off skip is stale); returns the bucket and board ids."""
    stack = json.loads(json.dumps(stack))
    name, bucket = sorted(stack["resource"]["google_storage_bucket"].items())[0]
    bucket["uniform_bucket_level_access"] = False
    (tb_name, tb), = stack["resource"]["google_vertex_ai_tensorboard"].items()
    tb["encryption_spec"] = {"kms_key_name": "projects/p/locations/l/keyRings/r/cryptoKeys/k"}
    return stack, name, tb_name


@pytest.fixture(scope="module")
def broken(all_stacks, tmp_path_factory):
    """One directory, one scan: prod without CMEK, dev as it is, and dev regressed."""
    outdir = tmp_path_factory.mktemp("broken")
    dev_regressed, bucket, board = regressed(all_stacks[BASIC])
    for name, stack in ((CMEK, without_cmek(all_stacks[CMEK])), (BASIC, all_stacks[BASIC]),
                        ("regressed", dev_regressed)):
        (outdir / "stacks" / name).mkdir(parents=True)
        (outdir / "stacks" / name / "cdk.tf.json").write_text(json.dumps(stack))
    write_checkov_config(outdir)
    return outdir, scan(outdir, separately=False), (bucket, board)


def test_a_skip_written_in_one_stack_never_hides_a_finding_in_another(all_stacks, broken):
    """prod (the `cmek` scenario) without its CMEK settings: dev (`standard`) skips exactly these checks on
    resources of the same names, and the scan of prod still fails, in both ways a scan is run."""
    outdir, result, _ = broken
    prod = all_stacks[CMEK]
    # dev's skips cover exactly those checks on resources of the same names: one baseline for both passes.
    same_names = {
        *((name, "CKV_GCP_84") for name in prod["resource"]["google_artifact_registry_repository"]),
        *((name, "CKV2_GCP_26") for name in prod["resource"]["google_vertex_ai_tensorboard"])}
    assert same_names <= recorded_skips(all_stacks[BASIC])
    assert set(result[CMEK].failed) >= same_names, result[CMEK].line()
    assert result[BASIC].ok
    # As a user runs it: plain checkov on prod's directory, which loads prod's own .checkov.yaml.
    report = run_checkov(outdir / "stacks" / CMEK, outdir, "-d")
    assert {(r["resource"].split(".", 1)[1], r["check_id"]) for r in report["results"]["failed_checks"]} >= (
        same_names)
    assert report["summary"]["failed"] == len(result[CMEK].failed)


def test_the_skips_hide_no_new_finding_and_a_stale_skip_is_reported(all_stacks, broken):
    """A regression beside the written skips still fails; a skip that matches nothing is reported."""
    _, result, (bucket, board) = broken
    assert result["regressed"].failed == [(bucket, "CKV_GCP_29")]
    assert result["regressed"].stale == [(board, "CKV2_GCP_26")]
    assert len(result["regressed"].skipped) == len(recorded_skips(all_stacks[BASIC])) - 1
    assert not result["regressed"].ok


def test_each_stack_directory_scanned_by_itself_reports_its_own_skips(synth_dir, figures):
    """`checkov -d cdktf.out/stacks/<stack>` reads that stack's config and baseline only."""
    name = f"{BASIC}-bootstrap"
    config = (synth_dir / "stacks" / name / CONFIG_NAME).read_text()
    assert f"stacks/{name}/.checkov.baseline" in config
    report = run_checkov(synth_dir / "stacks" / name, synth_dir, "-d")
    assert report["summary"]["failed"] == 0, report["results"]["failed_checks"]
    skipped = report["results"]["skipped_checks"]
    assert all(r["check_result"]["suppress_comment"] == "baseline-skipped" for r in skipped)
    assert {(r["resource"].split(".", 1)[1], r["check_id"]) for r in skipped} == set(figures[name].skipped)
    assert not (synth_dir / CONFIG_NAME).exists()  # no config for all stacks at once


def test_impersonation_skips_cover_only_project_grants_of_builds_editor(bootstraps, stacks, configs):
    # CKV_GCP_49 is skipped for creating Cloud Build builds alone (its reason rests on actAs on the builder):
    # never for serviceAccountUser, tokenCreator or anything else at project level.
    for env, stack in bootstraps.items():
        skips = [(name, entry) for (_, name), entries in collect_skips(stack).items() for entry in entries
                 if entry["id"] == "CKV_GCP_49"]
        editors = {name for name, body in stack["resource"]["google_project_iam_member"].items()
                   if body["role"] == BUILDS_EDITOR}
        assert {name for name, _ in skips} == editors, env
        assert len(editors) == len(configs[env].job_submitters) + 1, env  # the submitters and CI
        assert all("infra/README.md, Bootstrap" in entry["comment"] for _, entry in skips)
        assert not [e for (_, _), entries in collect_skips(stacks[env]).items() for e in entries
                    if e["id"] == "CKV_GCP_49"]


def test_policy_cli_prints_per_stack_figures_and_fails_on_a_finding(synth_dir, broken, tmp_path, capsys,
                                                                   figures, monkeypatch):
    """`make scan` (one checkov run per stack) reports the figures of the suite's single run, and fails."""
    from infra.policy import main

    for source, name in ((synth_dir, "minimal-bootstrap"), (broken[0], "regressed")):
        shutil.copytree(source / "stacks" / name, tmp_path / "out" / "stacks" / name)
    monkeypatch.chdir(tmp_path)
    assert main(["out"]) == 1  # a relative path, as `make scan` passes it
    lines = capsys.readouterr().out.splitlines()
    result, bucket = figures["minimal-bootstrap"], broken[2][0]
    assert lines[0] == f"minimal-bootstrap: {result.passed} passed, 0 failed, {len(result.skipped)} skipped"
    assert lines[1] == broken[1]["regressed"].line() and "1 failed" in lines[1] and "1 stale" in lines[1]
    assert f"  FAILED CKV_GCP_29 {bucket}" in lines
    assert main([str(tmp_path / "nothing")]) == 2


def test_a_skip_without_a_reason_is_refused():
    skip = {"//": {"checkov": {"skip": [{"id": "CKV_GCP_62"}]}}}
    stack = {"resource": {"google_storage_bucket": {"b": skip}}}
    with pytest.raises(ValueError, match="google_storage_bucket.b: checkov skip CKV_GCP_62 has no reason"):
        collect_skips(stack)
