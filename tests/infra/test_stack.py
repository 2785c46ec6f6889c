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
from infra.constructs import BUILDS_EDITOR
from infra.constructs.ci_identity import (
    DEPLOYER_PROJECT_ROLES,
    PROJECT_IAM_ADMIN,
    GithubCiIdentity,
    GithubCiIdentityProps,
)
from infra.constructs.job_submitters import SUBMITTER_PROJECT_ROLES
from infra.naming import BUCKET_ROLES, resource_names
from infra.outputs import OUTPUT_KEYS, PENDING_DEPLOY, is_pending, planned_outputs, resolve_outputs
from infra.stack import SERVICES
from tests.infra.helpers import BASIC, CMEK, SCENARIOS

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


def test_testing_api_sees_wif_and_registry(stack_texts, configs):
    cfg = configs[CMEK]
    assert cdk.Testing.to_have_resource_with_properties(
        stack_texts[CMEK], "google_iam_workload_identity_pool_provider",
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
            if cfg.cmek:
                assert bucket["encryption"] == {"default_kms_key_name": cfg.kms_key}
            else:
                assert "encryption" not in bucket


def test_tensorboard_log_bucket_is_in_the_tensorboards_region(stacks):
    for stack in stacks.values():
        (tensorboard,) = resources(stack, "google_vertex_ai_tensorboard").values()
        assert bucket_by_role(stack, "tensorboard-logs")["location"].lower() == tensorboard["region"]


# --- identity
# ------------------------------------------------------------------------------------------------


def iam_members(stack: dict):
    for rtype, name, body in all_resources(stack):
        if rtype.endswith("_iam_member"):
            yield rtype, name, body


def test_no_keys_no_force_destroy_no_authoritative_iam_no_beta_no_random(stacks):
    for env, stack in stacks.items():
        types = set(stack["resource"])
        assert "google_service_account_key" not in types
        assert not [t for t in types if t.endswith(("_iam_binding", "_iam_policy"))], env
        assert not [t for t in types if t.startswith("random_")], env
        assert set(stack["provider"]) == {"google"}
        assert set(stack["terraform"]["required_providers"]) == {"google"}
        assert not [p for p, k, v in walk(stack["resource"]) if k == "force_destroy" and v is not False]
        assert "google-beta" not in json.dumps(stack)
        # Jobs never fall back to the default compute service account.
        assert "-compute@developer.gserviceaccount.com" not in json.dumps(stack)


def test_no_basic_roles_and_no_project_level_impersonation(stacks):
    for env, stack in stacks.items():
        roles = [(rtype, body["role"]) for rtype, _, body in iam_members(stack)]
        assert roles, env
        assert not [r for r in roles if r[1] in BASIC_ROLES], env
        project_roles = {role for rtype, role in roles if rtype == "google_project_iam_member"}
        assert not project_roles & IMPERSONATION_ROLES, env


def account_grants(stack: dict) -> dict[str, set[tuple[str, str]]]:
    """account id -> {(role, member)} granted on that service account."""
    found = {}
    for grant in resources(stack, "google_service_account_iam_member").values():
        rtype, account, attr = ref_target(stack, grant["service_account_id"])
        assert (rtype, attr) == ("google_service_account", "name")
        found.setdefault(account["account_id"], set()).add((grant["role"], grant["member"]))
    return found


def test_service_account_user_only_for_submitters_and_ci_on_the_runtime_and_builder_accounts(stacks, configs):
    for env, stack in stacks.items():
        cfg = configs[env]
        names = resource_names(cfg)
        deployer = account_member(stack, names.deployer_account_id)
        grants = account_grants(stack)
        users = {account: {m for role, m in found if role == "roles/iam.serviceAccountUser"}
                 for account, found in grants.items()}
        # Submitters and CI run jobs (runtime) and image builds (builder) as these accounts, and as nothing
        # else.
        assert {a for a, members in users.items() if members} == {
            names.runtime_account_id, names.builder_account_id}, env
        for account in (names.runtime_account_id, names.builder_account_id):
            assert grants[account] == {
                *(("roles/iam.serviceAccountUser", m) for m in (*cfg.job_submitters, deployer)),
                ("roles/iam.serviceAccountAdmin", deployer),
            }, (env, account)


def test_image_builder_holds_exactly_log_writing_staging_reads_and_pushes_to_this_repository(stacks, configs):
    for env, stack in stacks.items():
        cfg = configs[env]
        names = resource_names(cfg)
        builder = account_member(stack, names.builder_account_id)
        (repo_name, repo), = resources(stack, "google_artifact_registry_repository").items()
        found = set()
        for rtype, _, body in iam_members(stack):
            if body["member"] != builder:
                continue
            if rtype == "google_storage_bucket_iam_member":
                target = ref_target(stack, body["bucket"])[1]["labels"]["bucket-role"]
            elif rtype == "google_artifact_registry_repository_iam_member":
                assert body["repository"] == f"${{google_artifact_registry_repository.{repo_name}.name}}"
                assert (body["project"], body["location"]) == (repo["project"], repo["location"])
                target = repo["repository_id"]
            elif rtype == "google_project_iam_member":
                assert "condition" not in body
                target = body["project"]
            else:
                target = rtype  # any other kind of grant is unexpected
            found.add((rtype, body["role"], target))
        assert found == {
            ("google_project_iam_member", "roles/logging.logWriter", cfg.project_id),
            ("google_storage_bucket_iam_member", "roles/storage.objectViewer", "staging"),
            ("google_artifact_registry_repository_iam_member", "roles/artifactregistry.writer",
             names.registry_id),
        }, env
        # ...and the account is referred to nowhere else: no other grant, condition or resource names it.
        email_ref = builder.removeprefix("serviceAccount:")
        assert json.dumps(stack["resource"]).count(email_ref) == len(found)
        assert stack["output"]["builder_service_account"]["value"] == email_ref


@pytest.mark.parametrize("env", SCENARIOS)
def test_runtime_account_object_access_is_per_bucket(stacks, env):
    stack = stacks[env]
    # Writers also read the bucket's metadata: TensorFlow's makedirs checks the bucket root (BucketExists).
    writer = {"roles/storage.objectUser", "roles/storage.legacyBucketReader"}
    expected = {"data": {"roles/storage.objectViewer"}, "staging": {"roles/storage.objectViewer"},
                "models": writer, "tensorboard-logs": writer}
    found = {}
    for grant in resources(stack, "google_storage_bucket_iam_member").values():
        if "google_service_account.runtime_account" in grant["member"]:
            _, bucket, _ = ref_target(stack, grant["bucket"])
            found.setdefault(bucket["labels"]["bucket-role"], set()).add(grant["role"])
    assert found == expected
    project = {b["role"] for b in resources(stack, "google_project_iam_member").values()
               if "google_service_account.runtime_account" in b["member"]}
    assert project == {"roles/aiplatform.user", "roles/logging.logWriter", "roles/monitoring.metricWriter"}
    assert not [p for p in project if "storage" in p]


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


def test_github_oidc_pins_repository_id_and_branch(stacks, configs):
    for env, stack in stacks.items():
        gh = configs[env].github
        (provider,) = resources(stack, "google_iam_workload_identity_pool_provider").values()
        condition = provider["attribute_condition"]
        assert f"assertion.repository_id == '{gh.repository_id}'" in condition
        assert f"assertion.ref == 'refs/heads/{gh.deploy_branch}'" in condition
        assert provider["attribute_mapping"]["attribute.repository_id"] == "assertion.repository_id"
        (binding,) = [b for b in resources(stack, "google_service_account_iam_member").values()
                      if b["role"] == "roles/iam.workloadIdentityUser"]
        assert binding["member"].startswith("principalSet://iam.googleapis.com/${google_iam_workload_identity_pool.")
        assert binding["member"].endswith(f"/attribute.repository_id/{gh.repository_id}")


def test_deployer_has_exactly_the_documented_roles(stacks):
    for stack in stacks.values():
        roles = {}
        for body in resources(stack, "google_project_iam_member").values():
            if "google_service_account.ci_deployer" in body["member"]:
                roles[body["role"]] = body.get("condition")
        assert set(roles) == set(DEPLOYER_PROJECT_ROLES) | {PROJECT_IAM_ADMIN}
        assert BUILDS_EDITOR in roles  # the deploy workflow builds the trainer image after the apply
        assert "modifiedGrantsByRole" in roles[PROJECT_IAM_ADMIN]["expression"]
        granted = {b["role"] for b in resources(stack, "google_project_iam_member").values()}
        expression = roles[PROJECT_IAM_ADMIN]["expression"]
        # The deployer may (re)grant every project role the stack manages except projectIamAdmin itself, which
        # would let it grant itself the role without the condition and then any role at all.
        assert {role for role in granted if f"'{role}'" in expression} == granted - {PROJECT_IAM_ADMIN}
        assert "projectIamAdmin" not in expression


def test_deployer_is_never_allowed_to_grant_project_iam_admin(tmp_path):
    stack = cdk.TerraformStack(cdk.App(outdir=str(tmp_path)), "escalation")
    props = GithubCiIdentityProps(
        project="acme-ml-dev", pool_id="pool", provider_id="github", repository="acme/repo", repository_id=1,
        deploy_branch="main", deployer_account_id="acme-deployer", project_roles=(),
        grantable_project_roles=("roles/aiplatform.user", PROJECT_IAM_ADMIN))
    with pytest.raises(ValueError, match="must not be grantable by the deployer"):
        GithubCiIdentity(stack, "ci", props)


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
        for body in resources(stack, "google_artifact_registry_repository_iam_member").values():
            match = REF.search(body["member"])
            who = ref_target(stack, match[0])[1]["account_id"] if match else body["member"]
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


def test_job_submitters_project_roles(stacks, configs):
    for env, stack in stacks.items():
        for member in configs[env].job_submitters:
            roles = {b["role"] for b in resources(stack, "google_project_iam_member").values()
                     if b["member"] == member}
            assert roles == set(SUBMITTER_PROJECT_ROLES) == {
                "roles/aiplatform.user",
                BUILDS_EDITOR,
                "roles/logging.viewer",
            }, env


def test_services_and_backend(stacks, configs):
    for env, stack in stacks.items():
        cfg = configs[env]
        services = {b["service"]: b for b in resources(stack, "google_project_service").values()}
        expected = set(SERVICES) | ({"cloudkms.googleapis.com"} if cfg.cmek else set())
        assert set(services) == expected
        assert "cloudbuild.googleapis.com" in services
        assert all(b["disable_on_destroy"] is False for b in services.values())
        backend = stack["terraform"]["backend"]
        assert backend == {"gcs": {"bucket": cfg.state_bucket, "prefix": f"infra/{env}"}}


@pytest.mark.parametrize("plain", [env for env in SCENARIOS if env != CMEK])
def test_cmek_is_a_config_option(stacks, configs, plain):
    cmek, dev = stacks[CMEK], stacks[plain]
    assert configs[CMEK].cmek and not configs[plain].cmek
    key = configs[CMEK].kms_key
    (tb,) = resources(cmek, "google_vertex_ai_tensorboard").values()
    assert tb["encryption_spec"] == {"kms_key_name": key}
    agents = {b["member"] for b in resources(cmek, "google_kms_crypto_key_iam_member").values()}
    assert len(agents) == 3 and all(b["crypto_key_id"] == key
                                    for b in resources(cmek, "google_kms_crypto_key_iam_member").values())
    assert "kms" not in json.dumps(without_comments(dev["resource"])).replace("cloudkms", "")
    # ...and a stack without a key says why its CMEK checks are skipped, in the synthesized JSON itself.
    skips = {s["id"]: s["comment"] for _, _, body in all_resources(dev)
             for s in body.get("//", {}).get("checkov", {}).get("skip", [])}
    assert "kms_key: null" in skips["CKV_GCP_84"] and "kms_key: null" in skips["CKV2_GCP_26"]


# --- outputs: planned and deployed cannot disagree
# -----------------------------------------------------------


def simulate_apply(stack: dict, tensorboard_id: str) -> dict[str, str]:
    """Evaluate the stack's output expressions the way Terraform would after an apply, using the synthesized
    resource arguments and Google's documented rules for computed attributes."""
    project_number = stack["output"]["project_number"]["value"]

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
        if (rtype, attr) == ("google_vertex_ai_tensorboard", "name"):
            return f"projects/{project_number}/locations/{body['region']}/tensorboards/{tensorboard_id}"
        raise AssertionError(f"output refers to {rtype}.{attr}, which this simulation does not know")

    def evaluate(value: str) -> str:
        value = re.sub(r'\$\{element\(split\("/", ([a-z0-9_]+\.[A-Za-z0-9_-]+\.[a-z_]+)\), (\d+)\)\}',
                       lambda m: evaluate("${" + m[1] + "}").split("/")[int(m[2])], value)
        return REF.sub(lambda m: attribute(m[1], stack["resource"][m[1]][m[2]], m[3]), value)

    return {key: evaluate(body["value"]) for key, body in stack["output"].items()}


def test_outputs_are_exactly_the_interface_keys(stacks):
    for stack in stacks.values():
        assert set(stack["output"]) == set(OUTPUT_KEYS)
        assert stack["//"]["outputs"] == {stack["//"]["metadata"]["stackName"]: {k: k for k in OUTPUT_KEYS}}


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


@pytest.mark.parametrize("env", SCENARIOS)
def test_outputs_depend_on_the_grants_that_make_what_they_name_usable(stacks, env):
    """Whoever reads an output (a job, a build, the deploy workflow) gets a thing it can already use:
    Terraform writes the output only after the grants on that thing (expected sets derived from the JSON)."""
    stack = stacks[env]
    out = stack["output"]
    depends = {key: {d.removeprefix("${").removesuffix("}") for d in body.get("depends_on", [])}
               for key, body in out.items()}
    assert all(len(body.get("depends_on", [])) == len(depends[key]) for key, body in out.items())
    runtime = out["runtime_service_account"]["value"]
    deployer = out["deployer_service_account"]["value"]
    (wif_user,) = [b for b in resources(stack, "google_service_account_iam_member").values()
                   if b["role"] == "roles/iam.workloadIdentityUser"]
    registry = grants_on(stack, "google_artifact_registry_repository_iam_member", "repository",
                         out["artifact_registry"]["value"])
    expected = {
        # Literals from the config: no resource, nothing to wait for.
        "project": set(), "project_number": set(), "region": set(),
        **{key: grants_on(stack, "google_storage_bucket_iam_member", "bucket", out[key]["value"])
           for key in ("data_bucket", "staging_bucket", "models_bucket", "tensorboard_logs_bucket")},
        "runtime_service_account": grants_of_account(stack, runtime),
        # No resource-level IAM on a TensorBoard: the runtime writes it with its project roles.
        "tensorboard": {g for g in grants_of_account(stack, runtime) if g.startswith("google_project_iam")},
        "artifact_registry": registry,
        "trainer_image": registry,
        "builder_service_account": grants_of_account(stack, out["builder_service_account"]["value"]),
        # The provider's tokens act through the grants on the account they impersonate.
        "workload_identity_provider": {
            f"google_service_account_iam_member.{n}"
            for n, b in resources(stack, "google_service_account_iam_member").items()
            if b["service_account_id"] == wif_user["service_account_id"]},
        "deployer_service_account": grants_of_account(stack, deployer),
    }
    assert depends == expected
    # Not vacuous: each named resource's grants are there, the roles that make it usable among them.
    assert all(expected[key] for key in expected if key not in ("project", "project_number", "region"))
    roles = {key: {stack["resource"][d.split(".")[0]][d.split(".")[1]]["role"] for d in deps}
             for key, deps in depends.items()}
    assert "roles/storage.objectUser" in roles["models_bucket"] & roles["tensorboard_logs_bucket"]
    assert "roles/storage.objectViewer" in roles["data_bucket"] & roles["staging_bucket"]
    assert {"roles/aiplatform.user", "roles/iam.serviceAccountUser"} <= roles["runtime_service_account"]
    assert "roles/aiplatform.user" in roles["tensorboard"]
    assert {"roles/artifactregistry.writer", "roles/artifactregistry.reader"} <= roles["trainer_image"]
    assert "roles/iam.workloadIdentityUser" in roles["workload_identity_provider"]
    assert wif_user["service_account_id"] == deployer.replace(".email}", ".name}")  # the deployer's tokens


def test_planned_and_deployed_outputs_cannot_disagree(stacks, configs, tmp_path):
    for env, stack in stacks.items():
        planned = planned_outputs(configs[env])
        # The CLI writes {stack: {construct id: value}} using the stack's "//".outputs map
        # (getConstructIdsForOutputs).
        applied = simulate_apply(stack, tensorboard_id="8472910365")
        ids = stack["//"]["outputs"][env]
        path = tmp_path / f"{env}.json"
        path.write_text(json.dumps({env: {cid: applied[tf_id] for cid, tf_id in ids.items()}}))
        deployed = resolve_outputs(env, path)
        assert tuple(deployed) == OUTPUT_KEYS
        for key in OUTPUT_KEYS:
            if key == "tensorboard":
                assert is_pending(planned[key]) and not is_pending(deployed[key])
                assert deployed[key] == planned[key].replace(PENDING_DEPLOY, "8472910365")
            else:
                assert deployed[key] == planned[key], (env, key)


# --- determinism and golden files
# ----------------------------------------------------------------------------


def test_synthesis_is_deterministic(tmp_path, configs, stack_texts):
    from infra.main import build_app

    app, _ = build_app([configs[BASIC]], tmp_path)
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


@pytest.mark.parametrize("env", SCENARIOS)
def test_golden(stacks, env):
    path = GOLDEN_DIR / f"{env}.json"
    actual = golden_summary(stacks[env])
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(json.dumps(actual, indent=2, sort_keys=True) + "\n")
    assert path.is_file(), f"missing {path}; run UPDATE_GOLDEN=1 pytest tests/infra"
    assert actual == json.loads(path.read_text()), f"{env} differs from {path}; if intended: UPDATE_GOLDEN=1"


def test_app_entry_point_synthesizes_into_the_cli_outdir(tmp_path, monkeypatch, stack_texts):
    from infra.main import main

    monkeypatch.setenv("CDKTF_OUTDIR", str(tmp_path))  # what `cdktn synth` sets for the app
    monkeypatch.setenv("INFRA_STACKS", CMEK)
    assert main([]) == 0
    assert sorted(p.name for p in (tmp_path / "stacks").iterdir()) == [CMEK]
    assert (tmp_path / "stacks" / CMEK / "cdk.tf.json").read_text() == stack_texts[CMEK]
    assert f'baseline: "{tmp_path.resolve()}/.checkov.baseline"' in (tmp_path / ".checkov.yaml").read_text()
