"""Every deterministic resource name, derived from the environment config alone (pure: no CDK import).

The stack creates its resources with these names and `infra.outputs.planned_outputs` reports them, so a job
planned before any deploy points at exactly what the deploy creates.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from infra.config import EnvironmentConfig

BUCKET_ROLES = ("data", "staging", "models", "tensorboard-logs")
# The stack a project administrator applies (identities and every project-level IAM grant), beside the
# platform stack `<env>` that CI applies. Environment names have no "-", so the names cannot collide.
BOOTSTRAP_SUFFIX = "-bootstrap"

# Google-owned domains of the service agents the platform stack grants resource-level access to, each as
# `service-<project number>@<domain>` (infra/constructs/service_agents.py builds them from these).
VERTEX_AI_AGENT_DOMAIN = "gcp-sa-aiplatform.iam.gserviceaccount.com"
# Cloud TPU has two agents: the Cloud TPU Service Agent of TPU Nodes and the TPU VM identity that TPU v2
# `generateServiceIdentity` creates.
CLOUD_TPU_AGENT_DOMAIN = "cloud-tpu.iam.gserviceaccount.com"
CLOUD_TPU_VM_AGENT_DOMAIN = "gcp-sa-tpu.iam.gserviceaccount.com"
ARTIFACT_REGISTRY_AGENT_DOMAIN = "gcp-sa-artifactregistry.iam.gserviceaccount.com"
STORAGE_AGENT_DOMAIN = "gs-project-accounts.iam.gserviceaccount.com"
# Encrypts workflow definitions with a CMEK (environments with schedules and kms_key).
WORKFLOWS_AGENT_DOMAIN = "gcp-sa-workflows.iam.gserviceaccount.com"
SERVICE_AGENT_DOMAINS = (VERTEX_AI_AGENT_DOMAIN, CLOUD_TPU_AGENT_DOMAIN, CLOUD_TPU_VM_AGENT_DOMAIN,
                         ARTIFACT_REGISTRY_AGENT_DOMAIN, STORAGE_AGENT_DOMAIN, WORKFLOWS_AGENT_DOMAIN)


@dataclass(frozen=True)
class ResourceNames:
    prefix: str
    runtime_account_id: str
    deployer_account_id: str
    builder_account_id: str
    registry_id: str
    tensorboard_display_name: str
    wif_pool_id: str
    wif_provider_id: str
    # Scheduled retraining (only created when the environment has schedules).
    scheduler_account_id: str
    scheduler_role_id: str
    # Who may call the endpoints (only created when some endpoint has predictors).
    predictor_role_id: str
    # Who may hold models past the models bucket's lifecycle (only created when there are job submitters).
    model_holder_role_id: str

    def schedule(self, name: str) -> str:
        """The workflow and the Cloud Scheduler job of schedule `name` (both regional, same name)."""
        return f"{self.prefix}-{name}"

    def bucket(self, role: str) -> str:
        if role not in BUCKET_ROLES:
            raise KeyError(f"unknown bucket role {role!r}; allowed: {', '.join(BUCKET_ROLES)}")
        return f"{self.prefix}-{role}"


def resource_names(cfg: EnvironmentConfig) -> ResourceNames:
    prefix = cfg.name_prefix
    return ResourceNames(
        prefix=prefix,
        runtime_account_id=f"{prefix}-runtime",
        deployer_account_id=f"{prefix}-deployer",
        builder_account_id=f"{prefix}-builder",
        registry_id=f"{prefix}-images",
        tensorboard_display_name=f"{prefix}-tensorboard",
        wif_pool_id=f"{prefix}-github",
        wif_provider_id="github-actions",
        scheduler_account_id=f"{prefix}-schedule",
        # Custom role ids allow letters, digits, "_" and "." only.
        scheduler_role_id=prefix.replace("-", "_") + "_scheduled_runs",
        predictor_role_id=prefix.replace("-", "_") + "_endpoint_predictors",
        model_holder_role_id=prefix.replace("-", "_") + "_model_holders",
    )


def custom_role(cfg: EnvironmentConfig, role_id: str) -> str:
    """The name the bootstrap stack's custom role `role_id` has (google_project_iam_custom_role.name), for
    the platform stack to grant it on a resource without a reference across stacks."""
    return f"projects/{cfg.project_id}/roles/{role_id}"


def endpoint_id(cfg: EnvironmentConfig, name: str) -> str:
    """The numeric id of endpoint `name` (`google_vertex_ai_endpoint.name`: digits only, at most 10, no
    leading zero), from the environment and the name alone, so its resource name is known before a deploy.
    Renaming either is a new endpoint."""
    digest = int.from_bytes(hashlib.sha256(f"{cfg.name}/{name}".encode()).digest()[:8], "big")
    return str(10**9 + digest % (9 * 10**9))


def service_account_email(cfg: EnvironmentConfig, account_id: str) -> str:
    return f"{account_id}@{cfg.project_id}.iam.gserviceaccount.com"


def workload_identity_provider(cfg: EnvironmentConfig) -> str:
    """The provider's full name as google-github-actions/auth takes it (global pool, by project number)."""
    names = resource_names(cfg)
    return (f"projects/{cfg.project_number}/locations/global/workloadIdentityPools/{names.wif_pool_id}"
            f"/providers/{names.wif_provider_id}")


def registry_url(cfg: EnvironmentConfig) -> str:
    return f"{cfg.region}-docker.pkg.dev/{cfg.project_id}/{resource_names(cfg).registry_id}"


def bootstrap_stack_name(cfg_or_env: EnvironmentConfig | str) -> str:
    env = cfg_or_env if isinstance(cfg_or_env, str) else cfg_or_env.name
    return f"{env}{BOOTSTRAP_SUFFIX}"


def service_agent(cfg: EnvironmentConfig, domain: str) -> str:
    return f"serviceAccount:service-{cfg.project_number}@{domain}"


def platform_member_allowed(cfg: EnvironmentConfig, member: str) -> bool:
    """Whom the platform stack (the one CI applies) may grant anything: this project's own service accounts,
    this project's Google service agents (by number, on Google's agent domains only: an account id such as
    `service-<number>` in another project is not one), or a configured `job_submitters` member. IAM conditions
    cannot restrict members, so this is what keeps a change to the platform stack from granting an outside
    principal access; everything else (project-level IAM, accounts, WIF) is in the bootstrap stack."""
    if member in cfg.job_submitters:
        return True
    own = re.fullmatch(rf"serviceAccount:[a-z][a-z0-9-]{{4,28}}[a-z0-9]@{re.escape(cfg.project_id)}"
                       r"\.iam\.gserviceaccount\.com", member)
    return bool(own) or member in {service_agent(cfg, domain) for domain in SERVICE_AGENT_DOMAINS}
