"""Constructs validate their props before creating anything: one bad prop, one line, nothing in the stack."""

from __future__ import annotations

import dataclasses
import json

import pytest

from infra import cdk
from infra.constructs import Grant
from infra.constructs.alerts import AlertedSchedule, ScheduleAlerts, ScheduleAlertsProps
from infra.constructs.artifact_registry import ImageRegistry, ImageRegistryProps
from infra.constructs.audit_logs import DataAccessLogs, DataAccessLogsProps
from infra.constructs.billing_budget import BillingBudgetProps, ProjectBudget
from infra.constructs.buckets import CACHE_PREFIX, BucketProps, FolderExpiry, TrainingBucket
from infra.constructs.ci_identity import GithubCiIdentity, GithubCiIdentityProps
from infra.constructs.cmek import CmekKey, CmekKeyProps
from infra.constructs.endpoint import Endpoint, EndpointProps
from infra.constructs.endpoint_predictors import EndpointPredictors, EndpointPredictorsProps
from infra.constructs.image_builder import ImageBuilder
from infra.constructs.job_submitters import JobSubmitters, JobSubmittersProps
from infra.constructs.model_holders import ModelHolders, ModelHoldersProps
from infra.constructs.project_services import ProjectServices, ProjectServicesProps
from infra.constructs.runtime_identity import RuntimeIdentity
from infra.constructs.service_agents import ServiceAgents, ServiceAgentsProps
from infra.constructs.service_identity import ServiceIdentityProps
from infra.constructs.tensorboard import Tensorboard, TensorboardProps
from infra.constructs.validation import PropsError

PROJECT = "acme-ml-test"
GROUP = "group:ml@acme.example"
KEY = "projects/acme-sec/locations/us-central1/keyRings/ring/cryptoKeys/key"
VIEWER = "roles/storage.objectViewer"

# A valid props object per construct; each row below breaks exactly one field of it.
VALID = {
    TrainingBucket: BucketProps(
        name="acme-ml-test-data", project=PROJECT, location="us-central1", labels={"team": "ml"},
        grants=(Grant("ml-viewer", VIEWER, GROUP),), noncurrent_retention_days=30, expire_after_days=7,
        expiring_folders=(FolderExpiry(("data-scans/",), 7),), kms_key=KEY),
    ImageRegistry: ImageRegistryProps(
        project=PROJECT, location="us-central1", repository_id="acme-images", labels={"team": "ml"},
        keep_versions=10, untagged_retention_days=7,
        grants=(Grant("ml-reader", "roles/artifactregistry.reader", GROUP),), kms_key=KEY),
    Tensorboard: TensorboardProps(project=PROJECT, region="us-central1", display_name="acme-tensorboard",
                                  labels={"team": "ml"}, kms_key=KEY),
    RuntimeIdentity: ServiceIdentityProps(
        project=PROJECT, account_id="acme-runtime", display_name="Runtime", description="What jobs run as",
        project_roles=("roles/logging.logWriter",),
        account_grants=(Grant("ml-sa-user", "roles/iam.serviceAccountUser", GROUP),)),
    GithubCiIdentity: GithubCiIdentityProps(
        project=PROJECT, pool_id="acme-github", provider_id="github-actions", repository="acme/repo",
        repository_id=42, deploy_branch="main", deployer_account_id="acme-deployer",
        project_roles=("roles/storage.admin",)),
    CmekKey: CmekKeyProps(kms_key=KEY, grants=(Grant(
        "agent", "roles/cloudkms.cryptoKeyEncrypterDecrypter", "serviceAccount:a@b.iam.example.com"),)),
    JobSubmitters: JobSubmittersProps(project=PROJECT, members=(("ml", GROUP),)),
    ProjectServices: ProjectServicesProps(project=PROJECT, services=("storage.googleapis.com",)),
    ServiceAgents: ServiceAgentsProps(project=PROJECT, project_number="123456789012",
                                      with_storage_agent=True),
    DataAccessLogs: DataAccessLogsProps(project=PROJECT, service="storage.googleapis.com"),
    Endpoint: EndpointProps(
        project=PROJECT, region="us-central1", endpoint_id="1234567890", display_name="Recommender",
        description="top_k", labels={"team": "ml"}, kms_key=KEY, logging_table="bq://acme-ml-test.logs.rec",
        sampling_rate=0.5, logs_writer="serviceAccount:a@b.iam.example.com", psc_projects=(PROJECT,)),
    EndpointPredictors: EndpointPredictorsProps(project=PROJECT, role_id="acme_predictors",
                                                members=(("ml", GROUP),)),
    ModelHolders: ModelHoldersProps(project=PROJECT, role_id="acme_model_holders"),
    ProjectBudget: BillingBudgetProps(
        project=PROJECT, project_number="123456789012", display_name="acme monthly",
        billing_account="012345-6789AB-CDEF01", amount=99.5, thresholds=(50.0, 100.0),
        email="costs@acme.example", pubsub_topic=f"projects/{PROJECT}/topics/budget"),
    ScheduleAlerts: ScheduleAlertsProps(
        project=PROJECT, display_name="acme scheduled retraining", email="oncall@acme.example",
        no_success_days=2, labels={"team": "ml"}, schedules=(
            AlertedSchedule("daily", "acme-daily", "us-central1", "jobs/recommender.yaml"),
            AlertedSchedule("weekly", "acme-weekly", "us-central1", "jobs/recommender.yaml", paused=True))),
}
VALID[ImageBuilder] = VALID[RuntimeIdentity]


def _grant(key="g", role=VIEWER, member=GROUP) -> Grant:
    return Grant(key, role, member)


ID = "under-test"
# (construct, {field: bad value} or {"<id>": bad id}, field reported, what the message says is allowed)
BAD_PROPS = [
    (TrainingBucket, {"<id>": ""}, "<id>", "non-empty construct id"),
    (TrainingBucket, {"<id>": "a/b"}, "<id>", "non-empty construct id"),
    (TrainingBucket, {"name": ""}, "name", "GCS bucket name"),
    (TrainingBucket, {"name": "Acme_Data"}, "name", "GCS bucket name"),
    (TrainingBucket, {"name": "ab"}, "name", "3-63"),
    (TrainingBucket, {"name": "a" * 64}, "name", "3-63"),
    (TrainingBucket, {"name": "goog-data"}, "name", "not starting with 'goog'"),
    (TrainingBucket, {"name": "my-google-data"}, "name", "containing 'google'"),
    (TrainingBucket, {"project": ""}, "project", "6-30 lowercase"),
    (TrainingBucket, {"project": "Acme-ML"}, "project", "6-30 lowercase"),
    (TrainingBucket, {"location": "US-CENTRAL1"}, "location", "lowercase Google Cloud region"),
    (TrainingBucket, {"labels": {"Team": "ml"}}, "labels.Team", "label key"),
    (TrainingBucket, {"labels": {"team": "M L"}}, "labels.team", "label value"),
    (TrainingBucket, {"grants": [_grant()]}, "grants", "a tuple of Grant"),
    (TrainingBucket, {"grants": (_grant(key=""),)}, "grants[0].key", "non-empty construct id"),
    (TrainingBucket, {"grants": (_grant(role=""),)}, "grants[0].role", "roles/"),
    (TrainingBucket, {"grants": (_grant(role="storage.objectViewer"),)}, "grants[0].role", "roles/"),
    (TrainingBucket, {"grants": (_grant(role="projects/acme-ml-test/roles/a-b"),)}, "grants[0].role",
     "projects/P/roles/ID"),
    (TrainingBucket, {"grants": (_grant(member=""),)}, "grants[0].member", "IAM member"),
    (TrainingBucket, {"grants": (_grant(member="ml@acme.example"),)}, "grants[0].member", "IAM member"),
    (TrainingBucket, {"grants": (_grant(), _grant(role="roles/storage.objectUser"))}, "grants[1].key",
     "a key used once (already grants[0])"),
    (TrainingBucket, {"grants": (_grant(key="bucket"),)}, "grants[0].key", "another child"),
    (TrainingBucket, {"grants": (_grant(key="a"), _grant(key="b"))}, "grants[1]",
     "each (role, member) once (repeats grants[0])"),
    (TrainingBucket, {"noncurrent_retention_days": -1}, "noncurrent_retention_days", "from 1 to 3650"),
    (TrainingBucket, {"noncurrent_retention_days": 0}, "noncurrent_retention_days", "from 1 to 3650"),
    (TrainingBucket, {"noncurrent_retention_days": True}, "noncurrent_retention_days", "whole number"),
    (TrainingBucket, {"expire_after_days": -7}, "expire_after_days", "from 1 to 3650"),
    (TrainingBucket, {"protect_from_destroy": "yes"}, "protect_from_destroy", "True or False"),
    # A folder rule with no folder would expire the whole bucket.
    (TrainingBucket, {"expiring_folders": (FolderExpiry(("",), 7),)}, "expiring_folders[0].prefixes[0]",
     "a folder ending in '/'"),
    (TrainingBucket, {"expiring_folders": (FolderExpiry(("/",), 7),)}, "expiring_folders[0].prefixes[0]",
     "a folder ending in '/'"),
    (TrainingBucket, {"expiring_folders": (FolderExpiry(("census-tuning",), 7),)},
     "expiring_folders[0].prefixes[0]", "a folder ending in '/'"),
    (TrainingBucket, {"expiring_folders": (FolderExpiry((), 7),)}, "expiring_folders[0].prefixes", "1-50"),
    (TrainingBucket, {"expiring_folders": (FolderExpiry(("a/", "a/"), 7),)},
     "expiring_folders[0].prefixes[1]", "each folder once"),
    (TrainingBucket, {"expiring_folders": (FolderExpiry(("a/",), 0),)}, "expiring_folders[0].days",
     "from 1 to 3650"),
    (TrainingBucket, {"expiring_folders": (FolderExpiry(("a/",), 1),) * 91}, "expiring_folders",
     "100 lifecycle rules a bucket"),
    (TrainingBucket, {"kms_key": "ml-key"}, "kms_key", "projects/P/locations/L/keyRings/R/cryptoKeys/K"),
    (TrainingBucket, {"kms_key": ""}, "kms_key", "projects/P/locations/L/keyRings/R/cryptoKeys/K"),
    (TrainingBucket, {"kms_key": KEY.replace("us-central1", "europe-west4")}, "kms_key",
     "the key is in 'europe-west4'"),
    (ImageRegistry, {"<id>": ""}, "<id>", "non-empty construct id"),
    (ImageRegistry, {"project": ""}, "project", "6-30 lowercase"),
    (ImageRegistry, {"location": ""}, "location", "region"),
    (ImageRegistry, {"repository_id": ""}, "repository_id", "starting with a letter"),
    (ImageRegistry, {"repository_id": "Images"}, "repository_id", "lowercase"),
    (ImageRegistry, {"labels": {"team": "A"}}, "labels.team", "label value"),
    (ImageRegistry, {"keep_versions": 0}, "keep_versions", "from 1 to 1000"),
    (ImageRegistry, {"untagged_retention_days": -1}, "untagged_retention_days", "from 1 to 3650"),
    (ImageRegistry, {"grants": (_grant(key="repository"),)}, "grants[0].key", "another child"),
    (ImageRegistry, {"grants": (_grant(role="artifactregistry.reader"),)}, "grants[0].role", "roles/"),
    (ImageRegistry, {"kms_key": KEY.replace("us-central1", "us-east1")}, "kms_key", "'us-central1'"),
    (Tensorboard, {"<id>": ""}, "<id>", "non-empty construct id"),
    (Tensorboard, {"project": "p"}, "project", "6-30 lowercase"),
    (Tensorboard, {"region": "us_central1"}, "region", "region such as us-central1"),
    (Tensorboard, {"display_name": ""}, "display_name", "non-empty text"),
    (Tensorboard, {"display_name": "x" * 129}, "display_name", "at most 128"),
    (Tensorboard, {"labels": {"": "x"}}, "labels.", "label key"),
    (Tensorboard, {"kms_key": "keyRings/r/cryptoKeys/k"}, "kms_key", "projects/P/locations/L"),
    (RuntimeIdentity, {"<id>": ""}, "<id>", "non-empty construct id"),
    (RuntimeIdentity, {"project": ""}, "project", "6-30 lowercase"),
    (RuntimeIdentity, {"account_id": ""}, "account_id", "6-30 lowercase"),
    (RuntimeIdentity, {"account_id": "short"}, "account_id", "6-30 lowercase"),
    (RuntimeIdentity, {"account_id": "a" * 31}, "account_id", "6-30 lowercase"),
    (RuntimeIdentity, {"account_id": "Acme-Runtime"}, "account_id", "6-30 lowercase"),
    (RuntimeIdentity, {"account_id": "1acme-runtime"}, "account_id", "starting with a letter"),
    (RuntimeIdentity, {"account_id": "acme-runtime-"}, "account_id", "6-30 lowercase"),
    (RuntimeIdentity, {"display_name": " "}, "display_name", "non-empty text"),
    (RuntimeIdentity, {"description": "two\nlines"}, "description", "on one line"),
    (RuntimeIdentity, {"project_roles": ("logging.logWriter",)}, "project_roles[0]", "roles/"),
    (RuntimeIdentity, {"project_roles": ("roles/logging.logWriter",) * 2}, "project_roles[1]",
     "each role once"),
    (RuntimeIdentity, {"project_roles": ["roles/logging.logWriter"]}, "project_roles", "a tuple of roles"),
    (RuntimeIdentity, {"account_grants": (_grant(key="account"),)}, "account_grants[0].key", "another child"),
    (RuntimeIdentity, {"account_grants": (_grant(key="logging-logWriter"),)}, "account_grants[0].key",
     "another child"),
    (RuntimeIdentity, {"account_grants": (_grant(member="ml@acme.example"),)}, "account_grants[0].member",
     "IAM member"),
    (ImageBuilder, {"account_id": "b"}, "account_id", "6-30 lowercase"),
    (GithubCiIdentity, {"<id>": ""}, "<id>", "non-empty construct id"),
    (GithubCiIdentity, {"project": ""}, "project", "6-30 lowercase"),
    (GithubCiIdentity, {"pool_id": ""}, "pool_id", "4-32"),
    (GithubCiIdentity, {"pool_id": "gcp-github"}, "pool_id", "not starting with 'gcp-'"),
    (GithubCiIdentity, {"provider_id": "gh"}, "provider_id", "4-32"),
    (GithubCiIdentity, {"repository": "acme"}, "repository", "OWNER/NAME"),
    (GithubCiIdentity, {"repository_id": 0}, "repository_id", "from 1 to"),
    (GithubCiIdentity, {"repository_id": "42"}, "repository_id", "whole number"),
    (GithubCiIdentity, {"deploy_branch": ""}, "deploy_branch", "branch name"),
    (GithubCiIdentity, {"deploy_branch": "main' || true"}, "deploy_branch", "branch name"),
    (GithubCiIdentity, {"deployer_account_id": "ci"}, "deployer_account_id", "6-30 lowercase"),
    (GithubCiIdentity, {"project_roles": ("owner",)}, "project_roles[0]", "roles/"),
    (GithubCiIdentity, {"project_roles": ("roles/resourcemanager.projectIamAdmin",)}, "project_roles[0]",
     "cannot change identities or IAM"),
    (GithubCiIdentity, {"project_roles": ("roles/storage.admin", "roles/iam.workloadIdentityPoolAdmin")},
     "project_roles[1]", "must not control its own trust"),
    (GithubCiIdentity, {"project_roles": ("roles/storage.admin",) * 2}, "project_roles[1]", "each role once"),
    (CmekKey, {"<id>": ""}, "<id>", "non-empty construct id"),
    (CmekKey, {"kms_key": ""}, "kms_key", "projects/P/locations/L"),
    (CmekKey, {"kms_key": "projects/acme-sec/locations/us-central1/keyRings/ring"}, "kms_key",
     "projects/P/locations/L"),
    (CmekKey, {"grants": ()}, "grants", "at least one grant"),
    (CmekKey, {"grants": (_grant(role="cloudkms.cryptoKeyEncrypterDecrypter"),)}, "grants[0].role", "roles/"),
    (JobSubmitters, {"<id>": ""}, "<id>", "non-empty construct id"),
    (JobSubmitters, {"project": ""}, "project", "6-30 lowercase"),
    (JobSubmitters, {"members": (("", GROUP),)}, "members[0].key", "non-empty construct id"),
    (JobSubmitters, {"members": (("ml", "ml@acme.example"),)}, "members[0].member", "IAM member"),
    (JobSubmitters, {"members": (("ml", ""),)}, "members[0].member", "IAM member"),
    (JobSubmitters, {"members": (("ml", GROUP), ("ml", "user:me@acme.example"))}, "members[1]",
     "each key once (repeats members[0])"),
    (JobSubmitters, {"members": (("ml",),)}, "members[0]", "(key, member) pair"),
    (JobSubmitters, {"project_roles": ("roles/owner", "owner")}, "project_roles[1]", "roles/"),
    (ProjectServices, {"<id>": ""}, "<id>", "non-empty construct id"),
    (ProjectServices, {"project": ""}, "project", "6-30 lowercase"),
    (ProjectServices, {"services": ()}, "services", "non-empty tuple"),
    (ProjectServices, {"services": ("storage",)}, "services[0]", "storage.googleapis.com"),
    (ProjectServices, {"services": ("storage.googleapis.com",) * 2}, "services[1]", "each service once"),
    (ServiceAgents, {"<id>": ""}, "<id>", "non-empty construct id"),
    (ServiceAgents, {"project": ""}, "project", "6-30 lowercase"),
    (ServiceAgents, {"project_number": "12ab"}, "project_number", "project's number"),
    (ServiceAgents, {"project_number": 123456789012}, "project_number", "as a string"),
    (ServiceAgents, {"with_storage_agent": "yes"}, "with_storage_agent", "True or False"),
    (DataAccessLogs, {"<id>": ""}, "<id>", "non-empty construct id"),
    (DataAccessLogs, {"project": ""}, "project", "6-30 lowercase"),
    (DataAccessLogs, {"service": "storage"}, "service", "storage.googleapis.com"),
    (DataAccessLogs, {"log_types": ()}, "log_types", "a non-empty tuple"),
    (DataAccessLogs, {"log_types": ["DATA_READ"]}, "log_types", "a non-empty tuple"),
    (DataAccessLogs, {"log_types": ("DATA_READ", "READ")}, "log_types[1]",
     "ADMIN_READ, DATA_READ, DATA_WRITE"),
    (DataAccessLogs, {"log_types": ("DATA_READ", "DATA_READ")}, "log_types[1]", "each log type once"),
    (Endpoint, {"endpoint_id": "0123456789"}, "endpoint_id", "1-10 digits without a leading zero"),
    (Endpoint, {"endpoint_id": "12345678901"}, "endpoint_id", "1-10 digits"),
    (Endpoint, {"endpoint_id": "recommender"}, "endpoint_id", "1-10 digits"),
    (Endpoint, {"region": "us-central"}, "region", "Google Cloud region"),
    (Endpoint, {"display_name": ""}, "display_name", "non-empty text on one line"),
    (Endpoint, {"description": "a\nb"}, "description", "one line"),
    (Endpoint, {"kms_key": KEY.replace("us-central1", "europe-west4")}, "kms_key", "'us-central1'"),
    (Endpoint, {"logging_table": "acme-ml-test.logs.rec"}, "logging_table", "bq://PROJECT.DATASET.TABLE"),
    (Endpoint, {"logging_table": "bq://acme-ml-test.logs"}, "logging_table", "bq://PROJECT.DATASET.TABLE"),
    (Endpoint, {"sampling_rate": 0.0}, "sampling_rate", "greater than 0 and at most 1"),
    (Endpoint, {"sampling_rate": 1.5}, "sampling_rate", "greater than 0 and at most 1"),
    (Endpoint, {"logs_writer": "a@b.iam.example.com"}, "logs_writer", "an IAM member"),
    (Endpoint, {"psc_projects": ()}, "psc_projects", "a non-empty tuple of project ids"),
    (Endpoint, {"psc_projects": ("Acme",)}, "psc_projects[0]", "a project id"),
    (Endpoint, {"psc_projects": (PROJECT, PROJECT)}, "psc_projects[1]", "each project once"),
    (EndpointPredictors, {"role_id": "a-b"}, "role_id", "3-64 letters"),
    (ModelHolders, {"role_id": "acme-model-holders"}, "role_id", "3-64 letters"),
    (ModelHolders, {"project": "Acme"}, "project", "6-30 lowercase"),
    (EndpointPredictors, {"members": ()}, "members", "a non-empty tuple"),
    (EndpointPredictors, {"members": (("role", GROUP),)}, "members[0].key", "other than 'role'"),
    (EndpointPredictors, {"members": (("ml", "ml@acme.example"),)}, "members[0].member", "an IAM member"),
    (EndpointPredictors, {"members": (("ml", GROUP), ("ml", "user:x@acme.example"))}, "members[1]",
     "each key once"),
    (ProjectBudget, {"billing_account": "billingAccounts/012345-6789AB-CDEF01"}, "billing_account",
     "a billing account id"),
    (ProjectBudget, {"amount": 0.0}, "amount", "a positive float"),
    (ProjectBudget, {"thresholds": (100.0, 50.0)}, "thresholds", "increasing"),
    (ProjectBudget, {"email": "not an email"}, "email", "an email address"),
    (ProjectBudget, {"pubsub_topic": "budget"}, "pubsub_topic", "projects/P/topics/T"),
    (ScheduleAlerts, {"email": "oncall"}, "email", "an email address"),
    (ScheduleAlerts, {"no_success_days": 0}, "no_success_days", "from 1 to 90"),
    (ScheduleAlerts, {"no_success_days": 91}, "no_success_days", "from 1 to 90"),
    (ScheduleAlerts, {"schedules": ()}, "schedules", "a non-empty tuple of AlertedSchedule"),
    # Names go into a Monitoring filter and a PromQL query, quoted: nothing that could end the quote.
    (ScheduleAlerts, {"schedules": (AlertedSchedule("daily", 'a"b', "us-central1", "jobs/x.yaml"),)},
     "schedules[0].workflow", "a workflow name"),
    (ScheduleAlerts, {"schedules": (AlertedSchedule("daily", "acme-daily", "us central1", "jobs/x.yaml"),)},
     "schedules[0].region", "Google Cloud region"),
    (ScheduleAlerts, {"schedules": (AlertedSchedule("daily", "acme-a", "us-central1", "jobs/x.yaml"),
                                    AlertedSchedule("daily", "acme-b", "us-central1", "jobs/x.yaml"))},
     "schedules[1]", "each schedule once"),
    (ScheduleAlerts, {"labels": {"Team": "ml"}}, "labels.Team", "a label key"),
]


def _new_stack(tmp_path) -> cdk.TerraformStack:
    return cdk.TerraformStack(cdk.App(outdir=str(tmp_path)), "props")


def _resources(stack: cdk.TerraformStack) -> dict:
    return json.loads(cdk.Testing.synth(stack)).get("resource", {})


@pytest.mark.parametrize("construct", list(VALID), ids=lambda c: c.__name__)
def test_valid_props_build_resources(tmp_path, construct):
    """The control for the table below: the same props, unbroken, do create resources (or a data source)."""
    stack = _new_stack(tmp_path)
    construct(stack, ID, VALID[construct])
    synthesized = json.loads(cdk.Testing.synth(stack))
    assert synthesized.get("resource") or synthesized.get("data")


@pytest.mark.parametrize(("construct", "change", "field", "allowed"), BAD_PROPS,
                         ids=[f"{c.__name__}-{f}-{i}" for i, (c, _, f, _) in enumerate(BAD_PROPS)])
def test_bad_props_fail_in_one_line_before_anything_is_created(tmp_path, construct, change, field, allowed):
    stack = _new_stack(tmp_path)
    id_ = change.get("<id>", ID)
    props = dataclasses.replace(VALID[construct], **{k: v for k, v in change.items() if k != "<id>"})
    with pytest.raises(PropsError) as info:
        construct(stack, id_, props)
    message = str(info.value)
    assert isinstance(info.value, ValueError)
    assert "\n" not in message
    assert message.startswith(f"{construct.__name__} {id_!r}: field '{field}': got "), message
    assert allowed in message.split("; allowed: ", 1)[1], message
    # Validation runs first: the stack holds nothing, not even the construct's own node.
    assert stack.node.children == []
    assert _resources(stack) == {}


def test_the_cache_rule_names_the_folder_the_trainer_caches_in():
    """infra/ may not import the trainer: the two spellings of the folder are held equal here."""
    from trainer.env import DATA_SCANS

    assert CACHE_PREFIX == f"{DATA_SCANS}/"
