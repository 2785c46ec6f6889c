"""The bootstrap stacks (`<env>-bootstrap`): CI's identity and every project-level grant, applied by an
administrator; the deployer they create can change none of it."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from infra import cdk
from infra.bootstrap import SCHEDULE_DEPLOYER_ROLES
from infra.constructs import BUILDS_EDITOR
from infra.constructs.alerts import ALERT_DEPLOYER_ROLES
from infra.constructs.buckets import ACCESS_LOGS_REASON
from infra.constructs.ci_identity import (
    DEPLOY_EVENTS,
    DEPLOY_WORKFLOW_PATH,
    DEPLOYER_FORBIDDEN_ROLES,
    DEPLOYER_PROJECT_ROLES,
    GithubCiIdentity,
    GithubCiIdentityProps,
)
from infra.constructs.job_submitters import SUBMITTER_PROJECT_ROLES
from infra.constructs.validation import PropsError
from infra.naming import resource_names
from infra.policy import collect_skips
from tests.infra.helpers import SCENARIOS

# Roles with which an account could change identities, trust or project IAM (its own included).
IAM_ADMIN_ROLES = {
    "roles/owner", "roles/editor", "roles/resourcemanager.projectIamAdmin", "roles/iam.securityAdmin",
    "roles/iam.workloadIdentityPoolAdmin", "roles/iam.serviceAccountAdmin", "roles/iam.serviceAccountCreator",
    "roles/iam.serviceAccountKeyAdmin", "roles/iam.serviceAccountTokenCreator", "roles/iam.roleAdmin",
}


def resources(stack: dict, rtype: str) -> dict[str, dict]:
    return stack.get("resource", {}).get(rtype, {})


def account(stack: dict, account_id: str) -> tuple[str, str]:
    """(member, account name reference) of the stack's service account `account_id`."""
    (name,) = [n for n, b in resources(stack, "google_service_account").items()
               if b["account_id"] == account_id]
    ref = f"google_service_account.{name}"
    return f"serviceAccount:${{{ref}.email}}", f"${{{ref}.name}}"


def grants_on_accounts(stack: dict) -> dict[str, set[tuple[str, str]]]:
    """account id -> {(role, member)} granted on that service account."""
    ids = {f"${{google_service_account.{n}.name}}": b["account_id"]
           for n, b in resources(stack, "google_service_account").items()}
    found = {account_id: set() for account_id in ids.values()}
    for grant in resources(stack, "google_service_account_iam_member").values():
        found[ids[grant["service_account_id"]]].add((grant["role"], grant["member"]))
    return found


def test_bootstrap_holds_the_identities_and_every_project_grant(bootstraps, configs):
    for env, stack in bootstraps.items():
        names = resource_names(configs[env])
        # The schedule account exists only where there is something to schedule.
        scheduler = {names.scheduler_account_id} if configs[env].schedules else set()
        assert {b["account_id"] for b in resources(stack, "google_service_account").values()} == {
            names.runtime_account_id, names.builder_account_id, names.deployer_account_id, *scheduler}
        assert len(resources(stack, "google_iam_workload_identity_pool")) == 1
        assert len(resources(stack, "google_iam_workload_identity_pool_provider")) == 1
        # Everything it grants is project- or account-level: no resource of the platform stack here.
        assert {t for t in stack["resource"] if t.endswith("_iam_member")} == {
            "google_project_iam_member", "google_service_account_iam_member"}, env


def test_deployer_holds_exactly_what_applying_the_platform_stack_needs(all_stacks, bootstraps, configs):
    for env, stack in bootstraps.items():
        names = resource_names(configs[env])
        deployer, _ = account(stack, names.deployer_account_id)
        project = {b["role"]: b for b in resources(stack, "google_project_iam_member").values()
                   if b["member"] == deployer}
        schedules = bool(configs[env].schedules)
        assert set(DEPLOYER_PROJECT_ROLES) == {
            "roles/serviceusage.serviceUsageAdmin", "roles/storage.admin", "roles/artifactregistry.admin",
            "roles/aiplatform.user", BUILDS_EDITOR}
        # Workflows and Cloud Scheduler jobs only for an environment that has schedules.
        scheduling = set(SCHEDULE_DEPLOYER_ROLES) if schedules else set()
        # ...and their alert policies and channel unless the config opts out (`cmek`: alerts: false).
        alerting = set(ALERT_DEPLOYER_ROLES) if schedules and configs[env].alerts else set()
        assert alerting or env != "standard"
        assert set(project) == set(DEPLOYER_PROJECT_ROLES) | scheduling | alerting
        assert not [b for b in project.values() if "condition" in b]
        # On accounts: acting as the runtime, builder (and schedule) accounts only; on itself nothing (the WIF
        # binding isn't its).
        on_accounts = {(account_id, role) for account_id, grants in grants_on_accounts(stack).items()
                       for role, member in grants if member == deployer}
        acted_as = (names.runtime_account_id, names.builder_account_id,
                    *((names.scheduler_account_id,) if schedules else ()))
        assert on_accounts == {(account_id, "roles/iam.serviceAccountUser") for account_id in acted_as}
        # On the deployer account, one grant: who may become it (nobody may administer it but this stack).
        ((role, member),) = grants_on_accounts(stack)[names.deployer_account_id]
        assert role == "roles/iam.workloadIdentityUser" and member.startswith("principalSet://")
    # No IAM administration anywhere, for anyone: not in the bootstrap stacks, not in what CI applies.
    for name, stack in all_stacks.items():
        roles = {b["role"] for items in stack["resource"].values() for b in items.values() if "role" in b}
        assert not roles & IAM_ADMIN_ROLES, name
        assert "modifiedGrantsByRole" not in json.dumps(stack), name


def test_the_only_way_to_become_the_deployer_is_the_pinned_provider(bootstraps, configs):
    for env, stack in bootstraps.items():
        cfg = configs[env]
        _, deployer_name = account(stack, resource_names(cfg).deployer_account_id)
        (binding,) = [b for b in resources(stack, "google_service_account_iam_member").values()
                      if b["service_account_id"] == deployer_name]
        (pool,) = resources(stack, "google_iam_workload_identity_pool")
        assert binding["role"] == "roles/iam.workloadIdentityUser"
        assert binding["member"] == (f"principalSet://iam.googleapis.com/${{google_iam_workload_identity_pool."
                                     f"{pool}.name}}/attribute.repository_id/{cfg.github.repository_id}")
        # ...and no other principalSet/principal is named anywhere.
        assert json.dumps(stack["resource"]).count("principal") == 1


@pytest.mark.parametrize("role", sorted(DEPLOYER_FORBIDDEN_ROLES))
def test_deployer_props_refuse_any_role_that_administers_identities_or_iam(tmp_path, role):
    stack = cdk.TerraformStack(cdk.App(outdir=str(tmp_path)), "escalation")
    props = GithubCiIdentityProps(
        project="acme-ml-dev", pool_id="pool", provider_id="github", repository="acme/repo", repository_id=1,
        deploy_branch="main", deployer_account_id="acme-deployer",
        project_roles=("roles/aiplatform.user", role))
    with pytest.raises(PropsError, match=r"field 'project_roles\[1\]'.*must not control its own trust"):
        GithubCiIdentity(stack, "ci", props)
    assert stack.node.children == []
    GithubCiIdentity(stack, "ci", dataclasses.replace(props, project_roles=DEPLOYER_PROJECT_ROLES))


def test_service_account_user_only_for_submitters_and_ci_on_the_runtime_and_builder_accounts(bootstraps,
                                                                                             configs):
    for env, stack in bootstraps.items():
        cfg = configs[env]
        names = resource_names(cfg)
        deployer, _ = account(stack, names.deployer_account_id)
        grants = grants_on_accounts(stack)
        # Scheduled runs create jobs as the runtime account, so the schedule account may act as it (only).
        scheduler = ((account(stack, names.scheduler_account_id)[0],) if cfg.schedules else ())
        for account_id, extra in ((names.runtime_account_id, scheduler), (names.builder_account_id, ())):
            assert grants[account_id] == {
                ("roles/iam.serviceAccountUser", m) for m in (*cfg.job_submitters, deployer, *extra)
            }, (env, account_id)


def test_job_submitters_project_roles(bootstraps, configs):
    for env, stack in bootstraps.items():
        for member in configs[env].job_submitters:
            roles = {b["role"] for b in resources(stack, "google_project_iam_member").values()
                     if b["member"] == member}
            assert roles == set(SUBMITTER_PROJECT_ROLES) == {
                "roles/aiplatform.user", BUILDS_EDITOR, "roles/logging.viewer"}, env


# --- the GitHub provider's condition, evaluated
# ----------------------------------------------------------------

CLAUSE_EQ = re.compile(r"assertion\.([a-z_]+) == '([^']*)'")
CLAUSE_IN = re.compile(r"assertion\.([a-z_]+) in \[('[^']*'(?:, '[^']*')*)\]")


def evaluate(condition: str, claims: dict[str, str]) -> bool:
    """A tiny evaluator of the CEL subset the condition may use: `&&` of `assertion.X == 'v'` and
    `assertion.X in ['a', 'b']`. Anything else (`||`, `!`, a function, parentheses) fails the test."""
    result = True
    for clause in condition.split(" && "):
        if match := CLAUSE_EQ.fullmatch(clause):
            result &= claims.get(match[1]) == match[2]
        elif match := CLAUSE_IN.fullmatch(clause):
            result &= claims.get(match[1]) in re.findall(r"'([^']*)'", match[2])
        else:
            raise AssertionError(f"unexpected clause {clause!r} in {condition!r}")
    return result


def github_claims(owner_repo: str, repository_id: int, branch: str, event: str = "push",
                  workflow: str = DEPLOY_WORKFLOW_PATH, **extra: str) -> dict[str, str]:
    """The claims of a GitHub Actions OIDC token (docs.github.com, "About security hardening with OpenID
    Connect"): a job without `environment:` on a branch."""
    ref = f"refs/heads/{branch}"
    return {"repository": owner_repo, "repository_id": str(repository_id), "ref": ref, "event_name": event,
            "sub": f"repo:{owner_repo}:ref:{ref}", "workflow_ref": f"{owner_repo}/{workflow}@{ref}", **extra}


@pytest.mark.parametrize("env", SCENARIOS)
def test_github_provider_admits_only_the_deploy_workflow_of_the_deploy_branch(bootstraps, configs, env):
    gh = configs[env].github
    (provider,) = resources(bootstraps[env], "google_iam_workload_identity_pool_provider").values()
    condition = provider["attribute_condition"]
    repo, rid, branch = gh.full_name, gh.repository_id, gh.deploy_branch
    # The five pins, as text.
    for pin in (f"assertion.repository_id == '{rid}'", f"assertion.ref == 'refs/heads/{branch}'",
                f"assertion.sub == 'repo:{repo}:ref:refs/heads/{branch}'",
                f"assertion.workflow_ref == '{repo}/.github/workflows/deploy.yml@refs/heads/{branch}'",
                "assertion.event_name in ['push', 'workflow_dispatch']"):
        assert pin in condition
    assert DEPLOY_EVENTS == ("push", "workflow_dispatch")
    assert DEPLOY_WORKFLOW_PATH == ".github/workflows/deploy.yml"
    # ...and evaluated over tokens: the deploy workflow on the branch, by each of its events, gets in.
    for event in DEPLOY_EVENTS:
        assert evaluate(condition, github_claims(repo, rid, branch, event))
    fork = f"attacker/{gh.repository}"
    refused = {
        "fork": github_claims(fork, rid + 1, branch),
        "fork claiming the id": {**github_claims(fork, rid, branch), "repository_id": str(rid + 1)},
        "other branch": github_claims(repo, rid, f"{branch}-x"),
        "pull request ref": {**github_claims(repo, rid, branch, "pull_request"), "ref": "refs/pull/7/merge",
                             "sub": f"repo:{repo}:pull_request"},
        "other workflow on the branch": github_claims(repo, rid, branch, workflow=".github/workflows/ci.yml"),
        "deploy.yml from another branch": {
            **github_claims(repo, rid, branch),
            "workflow_ref": f"{repo}/{DEPLOY_WORKFLOW_PATH}@refs/heads/{branch}-x"},
        "pull_request_target on the branch": github_claims(repo, rid, branch, "pull_request_target"),
        "schedule": github_claims(repo, rid, branch, "schedule"),
        "workflow_run": github_claims(repo, rid, branch, "workflow_run"),
        "deployment environment": {**github_claims(repo, rid, branch),
                                   "sub": f"repo:{repo}:environment:prod"},
        "no event claim": {k: v for k, v in github_claims(repo, rid, branch).items() if k != "event_name"},
    }
    assert {case for case, claims in refused.items() if evaluate(condition, claims)} == set()
    mapping = provider["attribute_mapping"]
    assert mapping["google.subject"] == "assertion.sub"
    assert mapping["attribute.workflow_ref"] == "assertion.workflow_ref"
    assert mapping["attribute.event_name"] == "assertion.event_name"
    assert mapping["attribute.repository_id"] == "assertion.repository_id"


def test_the_evaluator_can_fail():
    """The control: a condition without the workflow and event pins admits another workflow and event."""
    loose = "assertion.repository_id == '1' && assertion.ref == 'refs/heads/main'"
    assert evaluate(loose, github_claims("a/b", 1, "main", "schedule", workflow=".github/workflows/x.yml"))
    with pytest.raises(AssertionError, match="unexpected clause"):
        evaluate("assertion.ref == 'refs/heads/main' || true", {})


# --- Data Access logs: what the buckets' CKV_GCP_62 skip relies on
# ---------------------------------------------------------


def test_storage_data_access_logs_are_enabled_where_the_skip_says(all_stacks, bootstraps, stacks):
    for stack in bootstraps.values():
        (audit,) = resources(stack, "google_project_iam_audit_config").values()
        assert audit["service"] == "storage.googleapis.com"
        assert audit["project"] == stack["provider"]["google"][0]["project"]
        assert sorted(c["log_type"] for c in audit["audit_log_config"]) == ["DATA_READ", "DATA_WRITE"]
        assert not [c for c in audit["audit_log_config"] if c.get("exempted_members")]
    # The reason every bucket gives checkov names that place.
    assert "bootstrap stack" in ACCESS_LOGS_REASON and "google_project_iam_audit_config" in ACCESS_LOGS_REASON
    assert "DATA_READ, DATA_WRITE" in ACCESS_LOGS_REASON
    for env, stack in stacks.items():
        reasons = {entry["comment"] for (rtype, _), entries in collect_skips(stack).items()
                   for entry in entries if entry["id"] == "CKV_GCP_62" and rtype == "google_storage_bucket"}
        assert reasons == {ACCESS_LOGS_REASON}, env
        assert env + "-bootstrap" in all_stacks
