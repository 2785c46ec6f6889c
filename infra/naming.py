"""Every deterministic resource name, derived from the environment config alone (pure: no CDK import).

The stack creates its resources with these names and `infra.outputs.planned_outputs` reports them, so a job
planned before any deploy points at exactly what the deploy creates.
"""

from __future__ import annotations

from dataclasses import dataclass

from infra.config import EnvironmentConfig

BUCKET_ROLES = ("data", "staging", "models", "tensorboard-logs")


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
    )


def service_account_email(cfg: EnvironmentConfig, account_id: str) -> str:
    return f"{account_id}@{cfg.project_id}.iam.gserviceaccount.com"


def workload_identity_provider(cfg: EnvironmentConfig) -> str:
    """The provider's full name as google-github-actions/auth takes it (global pool, by project number)."""
    names = resource_names(cfg)
    return (f"projects/{cfg.project_number}/locations/global/workloadIdentityPools/{names.wif_pool_id}"
            f"/providers/{names.wif_provider_id}")


def registry_url(cfg: EnvironmentConfig) -> str:
    return f"{cfg.region}-docker.pkg.dev/{cfg.project_id}/{resource_names(cfg).registry_id}"
