"""The synthesized stacks, asserted with the CDK testing API and plain walks over cdk.tf.json.

Regenerate the golden files after an intended change: UPDATE_GOLDEN=1 pytest tests/infra
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from infra import cdk
from infra.bootstrap import BOOTSTRAP_SERVICES, BUDGET_OUTPUT
from infra.constructs.billing_budget import budget_services
from infra.constructs.runtime_identity import RUNTIME_PROJECT_ROLES
from infra.naming import BUCKET_ROLES, resource_names
from infra.outputs import (
    BOOTSTRAP_OUTPUT_KEYS,
    OUTPUT_KEYS,
    PENDING_DEPLOY,
    is_pending,
    output_keys,
    planned_outputs,
    resolve_outputs,
)
from infra.stack import LOGGING_SERVICES, SCHEDULE_SERVICES, SERVICES
from tests.infra.helpers import BASIC, CMEK, SCENARIOS, scenario_runs

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
BASIC_ROLES = {"roles/owner", "roles/editor", "roles/viewer"}
IMPERSONATION_ROLES = {"roles/iam.serviceAccountUser", "roles/iam.serviceAccountTokenCreator"}
REF = re.compile(r"\$\{([a-z0-9_]+)\.([A-Za-z0-9_-]+)\.([a-z_]+)\}")


def resources(stack: dict, rtype: str) -> dict[str, dict]:
    return stack.get("resource", {}).get(rtype, {})


def all_resources(stack: dict):
    for rtype, items in stack.get("resource", {}).items():
        for name, body in items.items():
            yield rtype, name, body


def walk(node, path=()):
    """Every (path, key, value) in a JSON tree."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield path, key, value
            yield from walk(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from walk(value, (*path, i))


def without_comments(node):
    if isinstance(node, dict):
        return {k: without_comments(v) for k, v in node.items() if k != "//"}
    if isinstance(node, list):
        return [without_comments(v) for v in node]
    return node


def ref_target(stack: dict, expression: str) -> tuple[str, dict, str]:
    """`${type.logical_id.attr}` -> (type, resource body, attr)."""
    match = REF.fullmatch(expression)
    assert match, expression
    rtype, name, attr = match.groups()
    return rtype, stack["resource"][rtype][name], attr


def account_member(stack: dict, account_id: str) -> str:
    """The IAM member string the stack uses for its own service account `account_id` (a reference)."""
    (name,) = [n for n, body in resources(stack, "google_service_account").items()
               if body["account_id"] == account_id]
    return f"serviceAccount:${{google_service_account.{name}.email}}"


def bucket_by_role(stack: dict, role: str) -> dict:
    (body,) = [b for b in resources(stack, "google_storage_bucket").values()
               if b["labels"]["bucket-role"] == role]
    return body


# --- CDK testing API
# -----------------------------------------------------------------------------------------


def test_testing_api_matches_the_synthesized_file(synth_result, stacks):
    _, app_stacks = synth_result
    synthesized = json.loads(cdk.Testing.synth(app_stacks[BASIC]))  # without "//" metadata
    assert synthesized["resource"] == without_comments(stacks[BASIC]["resource"])
    assert synthesized["output"] == stacks[BASIC]["output"]


@pytest.mark.parametrize("role", BUCKET_ROLES)
def test_buckets_have_the_required_properties(stack_texts, configs, role):
    cfg = configs[BASIC]
    assert cdk.Testing.to_have_resource_with_properties(stack_texts[BASIC], "google_storage_bucket", {
        "name": resource_names(cfg).bucket(role),
        "location": cfg.region.upper(),
        "uniform_bucket_level_access": True,
        "public_access_prevention": "enforced",
        "force_destroy": False,
        "versioning": {"enabled": True},
        "labels": {**cfg.all_labels, "bucket-role": role},
    })


def test_testing_api_sees_wif_and_registry(stack_texts, bootstrap_texts, configs):
    cfg = configs[CMEK]
    assert cdk.Testing.to_have_resource_with_properties(
        bootstrap_texts[CMEK], "google_iam_workload_identity_pool_provider",
        {"oidc": {"issuer_uri": "https://token.actions.githubusercontent.com"}})
    assert cdk.Testing.to_have_resource_with_properties(
        stack_texts[CMEK], "google_artifact_registry_repository",
        {"format": "DOCKER", "kms_key_name": cfg.kms_key, "repository_id": resource_names(cfg).registry_id})
    assert not cdk.Testing.to_have_resource_with_properties(
        stack_texts[BASIC], "google_artifact_registry_repository", {"kms_key_name": cfg.kms_key})


# --- storage
# -------------------------------------------------------------------------------------------------


def test_bucket_lifecycles_and_destroy_protection(stacks, configs):
    for env, stack in stacks.items():
        cfg = configs[env]
        for role in BUCKET_ROLES:
            bucket = bucket_by_role(stack, role)
            assert bucket["name"] == resource_names(cfg).bucket(role)
            assert bucket["uniform_bucket_level_access"] is True
            assert bucket["public_access_prevention"] == "enforced"
            assert (bucket["versioning"], bucket["force_destroy"]) == ({"enabled": True}, False)
            protected = bucket.get("lifecycle", {}).get("prevent_destroy", False)
            assert protected == (role in ("data", "models")), (env, role)
            rules = {(r["action"]["type"], json.dumps(r["condition"], sort_keys=True))
                     for r in bucket["lifecycle_rule"]}
            assert ("Delete", json.dumps({"days_since_noncurrent_time": cfg.noncurrent_retention_days,
                                          "with_state": "ARCHIVED"}, sort_keys=True)) in rules
            assert ("AbortIncompleteMultipartUpload", '{"age": 1}') in rules
            expiry = ("Delete", json.dumps({"age": cfg.staging_retention_days, "with_state": "LIVE"},
                                           sort_keys=True))
            assert (expiry in rules) == (role == "staging")
            folders = {(r["condition"]["age"], tuple(r["condition"]["matches_prefix"]))
                       for r in bucket["lifecycle_rule"] if "matches_prefix" in r["condition"]}
            # The models bucket's cached pre-training results, and the studies where the config names them.
            expected = {(cfg.result_cache_retention_days, ("data-scans/",))}
            if cfg.study_prefixes:
                expected.add((cfg.study_retention_days, cfg.study_prefixes))
            assert folders == (expected if role == "models" else set()), (env, role)
            assert all(r["action"]["type"] == "Delete" and r["condition"]["with_state"] == "LIVE"
                       for r in bucket["lifecycle_rule"] if "matches_prefix" in r["condition"])
            if cfg.cmek:
                assert bucket["encryption"] == {"default_kms_key_name": cfg.kms_key}
            else:
                assert "encryption" not in bucket


def test_tensorboard_log_bucket_is_in_the_tensorboards_region(stacks):
    for stack in stacks.values():
        (tensorboard,) = resources(stack, "google_vertex_ai_tensorboard").values()
        assert bucket_by_role(stack, "tensorboard-logs")["location"].lower() == tensorboard["region"]


# --- identity and IAM across the two stacks (the bootstrap stack's own tests: test_bootstrap.py)
# ----------------------------------------------------------------------------------------------


def iam_members(stack: dict):
    for rtype, name, body in all_resources(stack):
        if rtype.endswith("_iam_member"):
            yield rtype, name, body


def test_no_keys_no_force_destroy_no_authoritative_iam_no_beta_no_random(all_stacks):
    for name, stack in all_stacks.items():
        types = set(stack["resource"])
        assert "google_service_account_key" not in types
        assert not [t for t in types if t.endswith(("_iam_binding", "_iam_policy"))], name
        assert not [t for t in types if t.startswith("random_")], name
        assert set(stack["provider"]) == {"google"}
        assert set(stack["terraform"]["required_providers"]) == {"google"}
        assert not [p for p, k, v in walk(stack["resource"]) if k == "force_destroy" and v is not False]
        assert "google-beta" not in json.dumps(stack)
        # Jobs never fall back to the default compute service account.
        assert "-compute@developer.gserviceaccount.com" not in json.dumps(stack)


def test_no_basic_roles_and_no_project_level_impersonation(all_stacks):
    for name, stack in all_stacks.items():
        roles = [(rtype, body["role"]) for rtype, _, body in iam_members(stack)]
        assert roles, name
        assert not [r for r in roles if r[1] in BASIC_ROLES], name
        project_roles = {role for rtype, role in roles if rtype == "google_project_iam_member"}
        assert not project_roles & IMPERSONATION_ROLES, name


def own_account(cfg, account_id: str) -> str:
    """The literal member the platform stack names a bootstrap account by."""
    return f"serviceAccount:{account_id}@{cfg.project_id}.iam.gserviceaccount.com"


def test_platform_stack_creates_no_identity_and_no_project_iam(stacks):
    """What CI applies cannot change who anyone is or what they hold on the project."""
    for env, stack in stacks.items():
        types = set(stack["resource"])
        assert types & {
            "google_service_account", "google_service_account_iam_member", "google_project_iam_member",
            "google_project_iam_audit_config", "google_iam_workload_identity_pool",
            "google_iam_workload_identity_pool_provider", "google_project_iam_custom_role"} == set(), env
        assert {t for t in types if "iam" in t} <= {
            "google_storage_bucket_iam_member", "google_artifact_registry_repository_iam_member",
            "google_kms_crypto_key_iam_member", "google_bigquery_dataset_iam_member"}, env
        assert not [b for t in types if "iam" in t for b in stack["resource"][t].values() if "condition" in b]


def platform_member_ok(cfg, member: str) -> bool:
    """The rule, spelled independently of infra.naming: the project's own accounts, its service agents on
    Google's agent domains, or a configured job submitter."""
    agent_domains = ("gcp-sa-aiplatform", "cloud-tpu", "gcp-sa-tpu", "gcp-sa-artifactregistry",
                     "gs-project-accounts", "gcp-sa-workflows")
    own = re.fullmatch(rf"serviceAccount:[a-z][a-z0-9-]+@{cfg.project_id}\.iam\.gserviceaccount\.com",
                       member)
    agent = re.fullmatch(
        rf"serviceAccount:service-{cfg.project_number}@(?P<d>[a-z-]+)\.iam\.gserviceaccount\.com", member)
    return bool(own) or bool(agent and agent["d"] in agent_domains) or member in cfg.job_submitters


def test_every_member_the_platform_stack_names_is_allowed(stacks, configs):
    """A walk over every IAM resource of the synthesized platform JSON (whatever its type): each member is a
    literal (no reference a plan could fill with anyone) that `platform_member_ok` accepts."""
    for env, stack in stacks.items():
        cfg = configs[env]
        members = [body.get("member") or body.get("members") for rtype, _, body in all_resources(stack)
                   if "iam" in rtype]
        assert len(members) > 10, env
        assert all(isinstance(m, str) and "${" not in m for m in members), env
        refused = [m for m in members if not platform_member_ok(cfg, m)]
        assert refused == [], env
        # Not vacuous: the rule refuses outsiders, lookalike agents and other projects' accounts.
        for outsider in ("user:someone@gmail.com", "allUsers", "group:attackers@example.com",
                         f"serviceAccount:x-runtime@other-{cfg.project_id}.iam.gserviceaccount.com",
                         f"serviceAccount:service-{cfg.project_number}@evil-project.iam.gserviceaccount.com"):
            assert not platform_member_ok(cfg, outsider)


def test_platform_stack_refuses_a_grant_to_an_outside_member(tmp_path, configs):
    """The stack-level check itself: a platform stack with one more grant, to a principal outside the project,
    or with a project-level grant, does not synthesize."""
    from infra.google import ProjectIamMember, StorageBucketIamMember
    from infra.naming import platform_member_allowed
    from infra.stack import PlatformMemberError, PlatformStack, check_platform_members

    cfg = configs[BASIC]
    stack = PlatformStack(cdk.App(outdir=str(tmp_path)), cfg, scenario_runs(cfg))
    assert check_platform_members(stack, cfg) == sum(1 for _ in iam_members(
        json.loads(cdk.Testing.synth(stack))))
    for member in ("user:outsider@gmail.com",
                   f"serviceAccount:service-{cfg.project_number}@evil-proj.iam.gserviceaccount.com",
                   "serviceAccount:runtime@another-project.iam.gserviceaccount.com"):
        assert not platform_member_allowed(cfg, member)
    rogue = StorageBucketIamMember(stack, "rogue", bucket=stack.buckets["data"].bucket.name,
                                   role="roles/storage.admin", member="user:outsider@gmail.com")
    with pytest.raises(PlatformMemberError, match=r"member 'user:outsider@gmail.com' is not allowed"):
        check_platform_members(stack, cfg)
    rogue.node.scope.node.try_remove_child("rogue")
    ProjectIamMember(stack, "rogue-project", project=cfg.project_id, role="roles/storage.admin",
                     member=own_account(cfg, resource_names(cfg).runtime_account_id))
    with pytest.raises(PlatformMemberError, match="google_project_iam_member is not allowed here"):
        check_platform_members(stack, cfg)


def test_runtime_and_builder_hold_the_documented_access_across_both_stacks(stacks, bootstraps, configs):
    """Each account's grants: project roles in the bootstrap stack, resource roles in the platform stack."""
    writer = {"roles/storage.objectUser", "roles/storage.legacyBucketReader"}
    for env, stack in stacks.items():
        cfg = configs[env]
        names = resource_names(cfg)
        for account_id, project_roles, buckets, registry in (
            (names.runtime_account_id, set(RUNTIME_PROJECT_ROLES),
             {"data": {"roles/storage.objectViewer"}, "staging": {"roles/storage.objectViewer"},
              "models": writer, "tensorboard-logs": writer}, {"roles/artifactregistry.reader"}),
            (names.builder_account_id, {"roles/logging.logWriter"},
             {"staging": {"roles/storage.objectViewer"}}, {"roles/artifactregistry.writer"}),
        ):
            member = own_account(cfg, account_id)
            found = {}
            for grant in resources(stack, "google_storage_bucket_iam_member").values():
                if grant["member"] == member:
                    role = ref_target(stack, grant["bucket"])[1]["labels"]["bucket-role"]
                    found.setdefault(role, set()).add(grant["role"])
            assert found == buckets, (env, account_id)
            registry_grants = resources(stack, "google_artifact_registry_repository_iam_member").values()
            assert {g["role"] for g in registry_grants if g["member"] == member} == registry
            assert {g["role"] for g in resources(stack, "google_kms_crypto_key_iam_member").values()
                    if g["member"] == member} == set()
            boot = bootstraps[env]
            ref = account_member(boot, account_id)
            assert {b["role"] for b in resources(boot, "google_project_iam_member").values()
                    if b["member"] == ref} == project_roles
            assert not [p for p in project_roles if "storage" in p]
        # ...and the builder is named nowhere else in the platform stack.
        builder = own_account(cfg, names.builder_account_id).removeprefix("serviceAccount:")
        assert json.dumps(stack["resource"]).count(builder) == 2
        assert stack["output"]["builder_service_account"]["value"] == builder


def test_submitters_may_hold_objects_in_the_models_bucket_and_nowhere_else(stacks, bootstraps, configs):
    """The bootstrap stack defines the model-holder role with exactly objects get/list/update (holds, never
    create or delete); the platform stack grants it to the job submitters on the models bucket alone."""
    for env, stack in stacks.items():
        cfg = configs[env]
        role_id = resource_names(cfg).model_holder_role_id
        roles = [b for b in resources(bootstraps[env], "google_project_iam_custom_role").values()
                 if b["role_id"] == role_id]
        holder = f"projects/{cfg.project_id}/roles/{role_id}"
        granted = [(g["member"], ref_target(stack, g["bucket"])[1]["labels"]["bucket-role"])
                   for g in resources(stack, "google_storage_bucket_iam_member").values()
                   if g["role"] == holder]
        project_grants = [b for b in resources(bootstraps[env], "google_project_iam_member").values()
                          if role_id in b["role"]]
        assert project_grants == [], env  # a project-level grant would reach every bucket
        if not cfg.job_submitters:
            assert roles == [] and granted == [], env
            continue
        (role,) = roles
        assert role["project"] == cfg.project_id
        assert role["permissions"] == [
            "storage.objects.get", "storage.objects.list", "storage.objects.update"]
        assert sorted(granted) == sorted((member, "models") for member in cfg.job_submitters), env
        # ...and the platform stack names the role nowhere else (no other bucket, registry or member).
        assert json.dumps(stack["resource"]).count(holder) == len(cfg.job_submitters)
    assert configs[BASIC].job_submitters and not configs["minimal"].job_submitters


def test_service_agents_built_from_project_number_get_bucket_access(stacks, configs):
    for env, stack in stacks.items():
        number = configs[env].project_number
        vertex = f"serviceAccount:service-{number}@gcp-sa-aiplatform.iam.gserviceaccount.com"
        tpu_agents = (f"serviceAccount:service-{number}@cloud-tpu.iam.gserviceaccount.com",
                      f"serviceAccount:service-{number}@gcp-sa-tpu.iam.gserviceaccount.com")
        access = {}
        for grant in resources(stack, "google_storage_bucket_iam_member").values():
            _, bucket, _ = ref_target(stack, grant["bucket"])
            access.setdefault(grant["member"], {}).setdefault(bucket["labels"]["bucket-role"], set()).add(
                grant["role"])
        assert access[vertex]["data"] == {"roles/storage.objectViewer"}
        writer = {"roles/storage.objectUser", "roles/storage.legacyBucketReader"}
        for tpu in tpu_agents:
            assert access[tpu] == {"data": {"roles/storage.objectViewer"}, "models": writer,
                                   "tensorboard-logs": writer}


def test_registry_cleanup_and_grants(stacks, configs):
    for env, stack in stacks.items():
        cfg = configs[env]
        (repo,) = resources(stack, "google_artifact_registry_repository").values()
        policies = {p["id"]: p for p in repo["cleanup_policies"]}
        keep = policies["keep-recent-versions"]["most_recent_versions"]
        assert keep == {"keep_count": cfg.registry_keep_versions}
        assert policies["delete-old-untagged"]["condition"] == {
            "tag_state": "UNTAGGED", "older_than": f"{cfg.registry_untagged_retention_days * 86400}s"}
        grants = {}
        own = re.compile(rf"serviceAccount:([a-z0-9-]+)@{cfg.project_id}\.iam\.gserviceaccount\.com")
        for body in resources(stack, "google_artifact_registry_repository_iam_member").values():
            match = own.fullmatch(body["member"])
            who = match[1] if match else body["member"]
            grants.setdefault(who, set()).add(body["role"])
        names = resource_names(cfg)
        vertex = f"serviceAccount:service-{cfg.project_number}@gcp-sa-aiplatform.iam.gserviceaccount.com"
        reader, writer = {"roles/artifactregistry.reader"}, {"roles/artifactregistry.writer"}
        # Only the builder and CI push; submitters read tags (is the image built yet?) and may pull.
        assert grants == {
            names.runtime_account_id: reader,
            vertex: reader,
            names.deployer_account_id: writer,
            names.builder_account_id: writer,
            **{member: reader for member in cfg.job_submitters},
        }, env


def test_services_and_backend(all_stacks, configs):
    for env, cfg in configs.items():
        for name, expected, state in (
            (env, (set(SERVICES) - set(budget_services(cfg.billing_budget)))
             | ({"cloudkms.googleapis.com"} if cfg.cmek else set())
             | (set(SCHEDULE_SERVICES) if cfg.schedules else set())
             | (set(LOGGING_SERVICES) if any(e.request_response_logging for e in cfg.endpoints) else set()),
             f"infra/{env}"),
            (f"{env}-bootstrap", set(BOOTSTRAP_SERVICES) | set(budget_services(cfg.billing_budget)),
             f"infra/{env}-bootstrap"),
        ):
            stack = all_stacks[name]
            services = {b["service"]: b for b in resources(stack, "google_project_service").values()}
            assert set(services) == expected, name
            assert all(b["disable_on_destroy"] is False for b in services.values())
            # Each stack its own state: CI's apply never holds the bootstrap stack's state lock or plan.
            assert stack["terraform"]["backend"] == {"gcs": {"bucket": cfg.state_bucket, "prefix": state}}
        assert "cloudbuild.googleapis.com" in SERVICES
        assert "bigquery.googleapis.com" not in SERVICES  # only where an endpoint logs to BigQuery
        assert not set(SERVICES) & set(BOOTSTRAP_SERVICES)  # one stack manages each API
        platform, bootstrap = (
            {b["service"] for b in resources(all_stacks[name], "google_project_service").values()}
            for name in (env, f"{env}-bootstrap"))
        assert not platform & bootstrap, env  # a budget's email channel moves the Monitoring API


@pytest.mark.parametrize("plain", [env for env in SCENARIOS if env != CMEK])
def test_cmek_is_a_config_option(stacks, configs, plain):
    cmek, dev = stacks[CMEK], stacks[plain]
    assert configs[CMEK].cmek and not configs[plain].cmek
    key = configs[CMEK].kms_key
    (tb,) = resources(cmek, "google_vertex_ai_tensorboard").values()
    assert tb["encryption_spec"] == {"kms_key_name": key}
    grants = resources(cmek, "google_kms_crypto_key_iam_member").values()
    number = configs[CMEK].project_number
    # The Workflows agent because this scenario has a schedule: its workflow is encrypted with the key.
    assert configs[CMEK].schedules
    assert {b["member"] for b in grants} == {f"serviceAccount:service-{number}@{domain}" for domain in (
        "gs-project-accounts.iam.gserviceaccount.com", "gcp-sa-artifactregistry.iam.gserviceaccount.com",
        "gcp-sa-aiplatform.iam.gserviceaccount.com", "gcp-sa-workflows.iam.gserviceaccount.com")}
    assert [w["crypto_key_name"] for w in resources(cmek, "google_workflows_workflow").values()] == [key]
    assert all(b["crypto_key_id"] == key for b in grants)
    # The Storage agent is named by its literal email, after the lookup that makes it exist.
    (lookup,) = cmek["data"]["google_storage_project_service_account"]
    assert all(f"data.google_storage_project_service_account.{lookup}" in b["depends_on"] for b in grants)
    assert "kms" not in json.dumps(without_comments(dev["resource"])).replace("cloudkms", "")
    # ...and a stack without a key says why its CMEK checks are skipped, in the synthesized JSON itself.
    skips = {s["id"]: s["comment"] for _, _, body in all_resources(dev)
             for s in body.get("//", {}).get("checkov", {}).get("skip", [])}
    assert "kms_key: null" in skips["CKV_GCP_84"] and "kms_key: null" in skips["CKV2_GCP_26"]


# --- outputs: planned and deployed cannot disagree
# -----------------------------------------------------------


def simulate_apply(stack: dict, tensorboard_id: str, project_number: str) -> dict[str, str]:
    """Evaluate the stack's output expressions the way Terraform would after an apply, using the synthesized
    resource arguments and Google's documented rules for computed attributes."""

    def attribute(rtype: str, body: dict, attr: str) -> str:
        if (rtype, attr) == ("google_storage_bucket", "name"):
            return body["name"]
        if (rtype, attr) == ("google_service_account", "email"):
            return f"{body['account_id']}@{body['project']}.iam.gserviceaccount.com"
        if (rtype, attr) == ("google_artifact_registry_repository", "registry_uri"):
            return f"{body['location']}-docker.pkg.dev/{body['project']}/{body['repository_id']}"
        if (rtype, attr) == ("google_iam_workload_identity_pool", "workload_identity_pool_id"):
            return body["workload_identity_pool_id"]
        if (rtype, attr) == ("google_iam_workload_identity_pool_provider", "name"):
            return (f"projects/{project_number}/locations/global/workloadIdentityPools/"
                    f"{evaluate(body['workload_identity_pool_id'])}/providers/{body['workload_identity_pool_provider_id']}")
        if (rtype, attr) == ("google_vertex_ai_endpoint", "name"):
            return body["name"]
        if (rtype, attr) == ("google_vertex_ai_tensorboard", "name"):
            return f"projects/{project_number}/locations/{body['region']}/tensorboards/{tensorboard_id}"
        if (rtype, attr) == ("google_billing_budget", "name"):  # the Budget API picks the budget's id
            return f"billingAccounts/{body['billing_account']}/budgets/{tensorboard_id}"
        raise AssertionError(f"output refers to {rtype}.{attr}, which this simulation does not know")

    def evaluate(value: str) -> str:
        value = re.sub(r'\$\{element\(split\("/", ([a-z0-9_]+\.[A-Za-z0-9_-]+\.[a-z_]+)\), (\d+)\)\}',
                       lambda m: evaluate("${" + m[1] + "}").split("/")[int(m[2])], value)
        return REF.sub(lambda m: attribute(m[1], stack["resource"][m[1]][m[2]], m[3]), value)

    return {key: evaluate(body["value"]) for key, body in stack["output"].items()}


def test_outputs_are_exactly_the_interface_keys(stacks, bootstraps, configs):
    for env, stack in stacks.items():
        # OUTPUT_KEYS, and `endpoint_<name>` for each endpoint of the config.
        keys = output_keys(configs[env])
        assert set(keys) - set(OUTPUT_KEYS) == {f"endpoint_{e.name}" for e in configs[env].endpoints}
        assert set(stack["output"]) == set(keys)
        assert stack["//"]["outputs"] == {stack["//"]["metadata"]["stackName"]: {k: k for k in keys}}
    for stack in bootstraps.values():
        assert set(stack["output"]) == set(BOOTSTRAP_OUTPUT_KEYS) | {BUDGET_OUTPUT}


def grants_of_account(stack: dict, email_ref: str) -> set[str]:
    """The project grants of the service account `${google_service_account.X.email}` and the grants on it."""
    rtype, account, attr = ref_target(stack, email_ref)
    assert (rtype, attr) == ("google_service_account", "email")
    name = REF.fullmatch(email_ref)[2]
    return {
        *(f"google_project_iam_member.{n}" for n, b in resources(stack, "google_project_iam_member").items()
          if b["member"] == f"serviceAccount:{email_ref}"),
        *(f"google_service_account_iam_member.{n}"
          for n, b in resources(stack, "google_service_account_iam_member").items()
          if b["service_account_id"] == f"${{google_service_account.{name}.name}}"),
    }


def grants_on(stack: dict, rtype: str, attr: str, target_ref: str) -> set[str]:
    """Every `<rtype>` grant whose `attr` is the resource `target_ref` (`${type.name.attr}`) refers to."""
    target = REF.search(target_ref)
    ref = f"${{{target[1]}.{target[2]}.name}}"
    return {f"{rtype}.{n}" for n, b in resources(stack, rtype).items() if b[attr] == ref}


def grants_naming(stack: dict, email: str) -> set[str]:
    return {f"{rtype}.{n}" for rtype, n, b in iam_members(stack) if b["member"] == f"serviceAccount:{email}"}


def output_depends(stack: dict) -> dict[str, set[str]]:
    out = stack["output"]
    depends = {key: {d.removeprefix("${").removesuffix("}") for d in body.get("depends_on", [])}
               for key, body in out.items()}
    assert all(len(body.get("depends_on", [])) == len(depends[key]) for key, body in out.items())
    return depends


@pytest.mark.parametrize("env", SCENARIOS)
def test_outputs_depend_on_the_grants_that_make_what_they_name_usable(stacks, configs, env):
    """Whoever reads an output (a job, a build, the deploy workflow) gets a thing it can already use:
    Terraform writes the output only after the grants on that thing (expected sets derived from the JSON)."""
    stack = stacks[env]
    out = stack["output"]
    depends = output_depends(stack)
    registry = grants_on(stack, "google_artifact_registry_repository_iam_member", "repository",
                         out["artifact_registry"]["value"])
    expected = {
        # Literals from the config: no resource, nothing to wait for; the provider is the bootstrap stack's.
        "project": set(), "project_number": set(), "region": set(), "workload_identity_provider": set(),
        **{key: grants_on(stack, "google_storage_bucket_iam_member", "bucket", out[key]["value"])
           for key in ("data_bucket", "staging_bucket", "models_bucket", "tensorboard_logs_bucket")},
        # The bootstrap stack's accounts: every grant this stack gives each of them.
        **{key: grants_naming(stack, out[key]["value"])
           for key in ("runtime_service_account", "builder_service_account", "deployer_service_account")},
        # No resource-level IAM on a TensorBoard: the runtime writes it with its (bootstrap) project roles.
        "tensorboard": set(),
        "artifact_registry": registry,
        "trainer_image": registry,
        # An endpoint that logs its predictions: once Vertex AI may write to the dataset.
        **{key: {f"google_bigquery_dataset_iam_member.{n}"
                 for n in resources(stack, "google_bigquery_dataset_iam_member")
                 if n.startswith(key.replace("_", "-", 1))}
           for key in out if key.startswith("endpoint_")},
    }
    assert depends == expected
    # Not vacuous: each named resource's grants are there, the roles that make it usable among them.
    literals = ("project", "project_number", "region", "workload_identity_provider", "tensorboard",
                *(f"endpoint_{e.name}" for e in configs[env].endpoints if not e.request_response_logging))
    assert all(expected[key] for key in expected if key not in literals)
    roles = {key: {stack["resource"][d.split(".")[0]][d.split(".")[1]]["role"] for d in deps}
             for key, deps in depends.items()}
    assert "roles/storage.objectUser" in roles["models_bucket"] & roles["tensorboard_logs_bucket"]
    assert "roles/storage.objectViewer" in roles["data_bucket"] & roles["staging_bucket"]
    assert {"roles/storage.objectUser", "roles/artifactregistry.reader"} <= roles["runtime_service_account"]
    assert {"roles/artifactregistry.writer", "roles/artifactregistry.reader"} <= roles["trainer_image"]


@pytest.mark.parametrize("env", SCENARIOS)
def test_bootstrap_outputs_depend_on_the_grants_of_what_they_name(bootstraps, env):
    stack = bootstraps[env]
    out = stack["output"]
    (wif_user,) = [b for b in resources(stack, "google_service_account_iam_member").values()
                   if b["role"] == "roles/iam.workloadIdentityUser"]
    deployer = out["deployer_service_account"]["value"]
    assert output_depends(stack) == {
        "project": set(),
        "runtime_service_account": grants_of_account(stack, out["runtime_service_account"]["value"]),
        "builder_service_account": grants_of_account(stack, out["builder_service_account"]["value"]),
        "deployer_service_account": grants_of_account(stack, deployer),
        # The provider's tokens act through the grants on the account they impersonate.
        "workload_identity_provider": {
            f"google_service_account_iam_member.{n}"
            for n, b in resources(stack, "google_service_account_iam_member").items()
            if b["service_account_id"] == wif_user["service_account_id"]},
        BUDGET_OUTPUT: set(),  # the budget's name, or why there is none
    }
    assert wif_user["service_account_id"] == deployer.replace(".email}", ".name}")  # the deployer's tokens


def test_planned_and_deployed_outputs_cannot_disagree(all_stacks, configs, tmp_path):
    for env in configs:
        planned = planned_outputs(configs[env])
        for name in (env, f"{env}-bootstrap"):
            stack = all_stacks[name]
            # The CLI writes {stack: {construct id: value}} using the stack's "//".outputs map
            # (getConstructIdsForOutputs).
            applied = simulate_apply(stack, "8472910365", configs[env].project_number)
            ids = stack["//"]["outputs"][name]
            path = tmp_path / f"{name}.json"
            path.write_text(json.dumps({name: {cid: applied[tf_id] for cid, tf_id in ids.items()}}))
            if name == env:
                deployed = resolve_outputs(env, path)
                assert tuple(deployed) == output_keys(configs[env])
            else:
                # The bootstrap outputs (the repository variables) are the same values under the same keys.
                deployed = json.loads(path.read_text())[name]
                deployed.pop(BUDGET_OUTPUT)  # what the plan says of the budget, not a value jobs read
                assert tuple(sorted(deployed)) == tuple(sorted(BOOTSTRAP_OUTPUT_KEYS))
            for key in deployed:
                if key == "tensorboard":
                    assert is_pending(planned[key]) and not is_pending(deployed[key])
                    assert deployed[key] == planned[key].replace(PENDING_DEPLOY, "8472910365")
                else:
                    assert deployed[key] == planned[key], (name, key)


# --- determinism and golden files
# ----------------------------------------------------------------------------


def test_synthesis_is_deterministic(tmp_path, configs, stack_texts):
    from infra.main import build_app

    app, _ = build_app([configs[BASIC]], tmp_path, schedules={BASIC: scenario_runs(configs[BASIC])})
    app.synth()
    assert (tmp_path / "stacks" / BASIC / "cdk.tf.json").read_text() == stack_texts[BASIC]


GOLDEN_FIELDS = {
    "google_storage_bucket": ("name", "location", "lifecycle", "lifecycle_rule", "encryption", "labels"),
    "google_service_account": ("account_id",),
    "google_vertex_ai_tensorboard": ("display_name", "region", "encryption_spec"),
    "google_artifact_registry_repository": ("repository_id", "location", "kms_key_name", "cleanup_policies"),
    "google_iam_workload_identity_pool": ("workload_identity_pool_id",),
    "google_iam_workload_identity_pool_provider": (
        "workload_identity_pool_provider_id", "attribute_condition", "attribute_mapping"),
    "google_project_service": ("service",),
    "google_project_iam_audit_config": ("service", "audit_log_config"),
    "google_project_iam_custom_role": ("role_id", "permissions"),
    "google_workflows_workflow": ("name", "region", "service_account", "call_log_level", "crypto_key_name",
                                  "user_env_vars", "deletion_protection"),
    "google_cloud_scheduler_job": ("name", "region", "schedule", "time_zone", "paused", "attempt_deadline",
                                   "retry_config", "http_target"),
    "google_monitoring_alert_policy": ("display_name", "conditions", "notification_channels", "severity"),
    "google_monitoring_notification_channel": ("type", "labels"),
}
SUFFIX = re.compile(r"_[0-9A-F]{8}\b")


def golden_summary(stack: dict) -> dict:
    """The fields that matter: names, locations, protections, every IAM grant, outputs and the backend."""
    summary = {}
    for rtype, _, body in all_resources(stack):
        path = body["//"]["metadata"]["path"].split("/", 1)[1]
        if rtype.endswith("_iam_member"):
            targets = ("bucket", "repository", "service_account_id", "crypto_key_id", "project")
            target = next(body[k] for k in targets if k in body)
            entry = f"{body['role']} -> {body['member']} on {target}"
            if "condition" in body:
                entry += f" if {body['condition']['expression']}"
        else:
            entry = {k: body[k] for k in GOLDEN_FIELDS.get(rtype, ()) if k in body}
        summary.setdefault(rtype, {})[path] = entry
    summary["output"] = {k: v["value"] for k, v in stack["output"].items()}
    summary["output_depends_on"] = {k: sorted(v["depends_on"]) for k, v in stack["output"].items()
                                    if "depends_on" in v}
    summary["backend"] = stack["terraform"]["backend"]
    return json.loads(SUFFIX.sub("", json.dumps(summary, sort_keys=True)))


@pytest.mark.parametrize("name", [n for env in SCENARIOS for n in (env, f"{env}-bootstrap")])
def test_golden(all_stacks, name):
    path = GOLDEN_DIR / f"{name}.json"
    actual = golden_summary(all_stacks[name])
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(json.dumps(actual, indent=2, sort_keys=True) + "\n")
    assert path.is_file(), f"missing {path}; run UPDATE_GOLDEN=1 pytest tests/infra"
    assert actual == json.loads(path.read_text()), f"{name} differs from {path}; if intended: UPDATE_GOLDEN=1"


def test_app_entry_point_synthesizes_into_the_cli_outdir(tmp_path, monkeypatch, stack_texts):
    from infra.main import main

    monkeypatch.setenv("CDKTF_OUTDIR", str(tmp_path))  # what `cdktn synth` sets for the app
    monkeypatch.setenv("INFRA_STACKS", CMEK)  # an environment: both of its stacks
    # The schedule compiler is the jobs layer's (scripts/synth.py passes it); here the scenario's stand-in.
    assert main([], compiler=scenario_runs) == 0
    assert sorted(p.name for p in (tmp_path / "stacks").iterdir()) == [CMEK, f"{CMEK}-bootstrap"]
    assert (tmp_path / "stacks" / CMEK / "cdk.tf.json").read_text() == stack_texts[CMEK]
    # Each stack's checkov config and baseline next to it, none for all stacks at once.
    for name in (CMEK, f"{CMEK}-bootstrap"):
        config = (tmp_path / "stacks" / name / ".checkov.yaml").read_text()
        assert f'baseline: "{tmp_path.resolve()}/stacks/{name}/.checkov.baseline"' in config
    assert not (tmp_path / ".checkov.yaml").exists()


def test_one_stack_of_an_environment_can_be_selected(tmp_path, monkeypatch, bootstrap_texts):
    from infra.main import main

    monkeypatch.setenv("CDKTF_OUTDIR", str(tmp_path))
    monkeypatch.delenv("INFRA_STACKS", raising=False)
    assert main([f"{CMEK}-bootstrap"], compiler=scenario_runs) == 0
    assert sorted(p.name for p in (tmp_path / "stacks").iterdir()) == [f"{CMEK}-bootstrap"]
    assert (tmp_path / "stacks" / f"{CMEK}-bootstrap" / "cdk.tf.json").read_text() == bootstrap_texts[CMEK]


def test_an_environment_with_schedules_needs_the_job_compiler(tmp_path, monkeypatch, capsys):
    """`python -m infra.main` alone cannot compile a job file (infra/ never imports jobs/): one line, exit 2,
    nothing synthesized; nor the bootstrap stack alone, whose schedule account holds what the compiled
    schedules need (more where one registers its model)."""
    from infra.main import main

    monkeypatch.setenv("CDKTF_OUTDIR", str(tmp_path / "out"))
    monkeypatch.delenv("INFRA_STACKS", raising=False)
    assert main([CMEK]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
    assert f"{CMEK}.yaml: field 'schedules': compiling them needs the jobs layer" in err
    assert "scripts/synth.py" in err
    assert not (tmp_path / "out").exists()
    assert main([f"{CMEK}-bootstrap"]) == 2
    assert not (tmp_path / "out").exists()
