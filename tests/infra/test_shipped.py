"""The shipped infra/environments/*.yaml, whatever valid values a user has put in them.

Users replace every value there first thing (infra/README.md), so nothing here asserts a value of those files:
they load, synthesize and pass the policy scan as they are, and so do copies rewritten with other valid values
(another project, number, region, prefix, repository...), read through the same override the other infra
tests point at tests/infra/scenarios/.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from infra.config import ENVIRONMENTS_DIR, ENVIRONMENTS_DIR_VAR, list_environments, load_environment
from infra.naming import BUCKET_ROLES, resource_names
from infra.outputs import OUTPUT_KEYS, planned_outputs
from infra.policy import collect_skips, scan, write_checkov_config

SHIPPED = sorted(p.stem for p in ENVIRONMENTS_DIR.glob("*.yaml"))


def rewritten(doc: dict, env: str, index: int) -> dict:
    """Other valid values for every field a user sets, keeping the file's shape (CMEK on or off)."""
    region = "europe-west1" if doc.get("region") != "europe-west1" else "us-east4"
    doc = {
        **doc,
        "project_id": f"rw-{env}-project",
        "project_number": str(987650000000 + index),
        "region": region,
        "name_prefix": f"rw{env}",
        "state_bucket": f"rw{env}-state",
        "github": {"owner": "rewritten-org", "repository": f"rewritten-{env}", "repository_id": 4242 + index,
                   "deploy_branch": "trunk"},
        "job_submitters": [f"group:rw-{env}@rewritten.example", "user:someone@rewritten.example"],
        "labels": {"team": "rewritten", "owner": env},
        "staging_retention_days": 3,
        "noncurrent_retention_days": 7,
        "registry_keep_versions": 4,
        "registry_untagged_retention_days": 2,
    }
    if doc.get("kms_key"):
        doc["kms_key"] = f"projects/rw-keys-project/locations/{region}/keyRings/rw/cryptoKeys/{env}"
    return doc


def _load_and_synth(env_dir: Path, outdir: Path) -> tuple[dict, dict]:
    """Configs of `env_dir` (through the override) and their synthesized stacks."""
    from infra.main import build_app

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(ENVIRONMENTS_DIR_VAR, str(env_dir))
        configs = {env: load_environment(env) for env in list_environments()}
    app, built = build_app(list(configs.values()), outdir)
    app.synth()
    # Both stacks of each environment: `<env>` and `<env>-bootstrap`.
    stacks = {name: json.loads((outdir / "stacks" / name / "cdk.tf.json").read_text()) for name in built}
    return configs, stacks


@pytest.fixture(scope="module")
def shipped_and_rewritten(tmp_path_factory):
    """Copies of the shipped files as they are and rewritten, both synthesized and scanned by one checkov run
    (its start-up is most of its time) from one directory, stacks/<as-is|rewritten>-<stack>/cdk.tf.json, each
    stack judged by its own skips (infra.policy.scan)."""
    as_is, other = tmp_path_factory.mktemp("shipped"), tmp_path_factory.mktemp("rewritten")
    for index, env in enumerate(SHIPPED):
        shutil.copy(ENVIRONMENTS_DIR / f"{env}.yaml", as_is / f"{env}.yaml")
        doc = yaml.safe_load((ENVIRONMENTS_DIR / f"{env}.yaml").read_text(encoding="utf-8"))
        (other / f"{env}.yaml").write_text(yaml.safe_dump(rewritten(doc, env, index)), encoding="utf-8")
    results = {name: _load_and_synth(env_dir, tmp_path_factory.mktemp(f"{name}.out"))
               for name, env_dir in (("as-is", as_is), ("rewritten", other))}
    scanned = tmp_path_factory.mktemp("scan")
    for name, (_, stacks) in results.items():
        for env, stack in stacks.items():
            (scanned / "stacks" / f"{name}-{env}").mkdir(parents=True)
            (scanned / "stacks" / f"{name}-{env}" / "cdk.tf.json").write_text(json.dumps(stack, indent=2))
    write_checkov_config(scanned)
    return results, scan(scanned, separately=False)


def test_the_shipped_environments_load_and_synthesize(shipped_and_rewritten):
    assert SHIPPED, f"no environment in {ENVIRONMENTS_DIR}"
    configs, stacks = shipped_and_rewritten[0]["as-is"]
    assert sorted(configs) == SHIPPED
    assert sorted(stacks) == sorted([*SHIPPED, *(f"{env}-bootstrap" for env in SHIPPED)])
    for env in configs:
        stack = stacks[env]
        assert set(stack["output"]) == set(OUTPUT_KEYS)
        assert stack["output"]["project"]["value"] == planned_outputs(configs[env])["project"]
        assert stacks[f"{env}-bootstrap"]["output"]["project"]["value"] == configs[env].project_id


def test_rewritten_copies_load_and_synthesize_with_their_own_values(shipped_and_rewritten):
    configs, stacks = shipped_and_rewritten[0]["rewritten"]
    assert sorted(configs) == SHIPPED
    for index, (env, cfg) in enumerate(sorted(configs.items())):
        # What was loaded is the rewritten copy, and the stack is built from it.
        assert (cfg.project_id, cfg.name_prefix, cfg.github.repository_id) == (
            f"rw-{env}-project", f"rw{env}", 4242 + index)
        for name in (f"{env}-bootstrap", env):
            bootstrap = stacks[name]
            assert bootstrap["terraform"]["backend"]["gcs"]["bucket"] == f"rw{env}-state"
            assert bootstrap["provider"]["google"][0]["project"] == cfg.project_id
            assert {body["project"] for items in bootstrap["resource"].values() for body in items.values()
                    if "project" in body} == {cfg.project_id}
        stack = stacks[env]
        assert stack["provider"]["google"][0]["project"] == cfg.project_id
        assert stack["provider"]["google"][0]["region"] == cfg.region
        projects = {body["project"] for items in stack["resource"].values() for body in items.values()
                    if "project" in body}
        assert projects == {cfg.project_id}
        buckets = {b["name"] for b in stack["resource"]["google_storage_bucket"].values()}
        assert buckets == {resource_names(cfg).bucket(role) for role in BUCKET_ROLES}
        # The config literals and the bootstrap stack's names (accounts, provider), as planned from this copy.
        literal = {k: v["value"] for k, v in stack["output"].items() if "${" not in v["value"]}
        assert literal == {k: v for k, v in planned_outputs(cfg).items() if k in (
            "project", "project_number", "region", "runtime_service_account", "builder_service_account",
            "deployer_service_account", "workload_identity_provider")}


def test_shipped_and_rewritten_stacks_pass_the_policy_scan(shipped_and_rewritten):
    results, figures = shipped_and_rewritten
    # Every stack was scanned, bootstrap stacks included: each one's written skips come back as skipped, and
    # nothing else does.
    assert set(figures) == {f"{n}-{name}" for n, (_, stacks) in results.items() for name in stacks}
    for n, (_, stacks) in results.items():
        for name, stack in stacks.items():
            result = figures[f"{n}-{name}"]
            assert result.ok and result.passed > 0, result.line()
            assert set(result.skipped) == {(logical_id, entry["id"])
                                           for (_, logical_id), entries in collect_skips(stack).items()
                                           for entry in entries}
