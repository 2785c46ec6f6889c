from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from infra.cdk import Construct, TerraformResource
from infra.config import PROJECT_NUMBER
from infra.constructs import validation as v
from infra.google import DataGoogleStorageProjectServiceAccount
from infra.naming import (
    ARTIFACT_REGISTRY_AGENT_DOMAIN,
    CLOUD_TPU_AGENT_DOMAIN,
    CLOUD_TPU_VM_AGENT_DOMAIN,
    STORAGE_AGENT_DOMAIN,
    VERTEX_AI_AGENT_DOMAIN,
    WORKFLOWS_AGENT_DOMAIN,
)


@dataclass(frozen=True)
class ServiceAgentsProps:
    project: str
    project_number: str
    # Only CMEK needs the Cloud Storage agent before any bucket exists; the lookup is an API call at plan
    # time.
    with_storage_agent: bool = False
    depends_on: Sequence[TerraformResource] = ()

    def validate(self, where: str) -> None:
        v.check_project(where, self.project)
        # The agents' emails are built from it: a wrong number names accounts that do not exist.
        v.check_str(where, "project_number", self.project_number, PROJECT_NUMBER,
                    "the project's number as a string, e.g. \"123456789012\"")
        v.check_bool(where, "with_storage_agent", self.with_storage_agent)


class ServiceAgents(Construct):
    """The Google-managed identities that act for Vertex AI, Cloud TPU, Cloud Storage and Artifact Registry.

    Their emails are built from the project number (`service-<number>@<domain>`) instead of the beta-only
    `google_project_service_identity`: the google-beta bindings would add ~500 MB and ~3 s to every synth. The
    Vertex AI and Cloud TPU agents normally come into existence when their APIs are enabled (ProjectServices,
    which this construct depends on; infra/README.md has the one-time command for an agent Google creates only
    on first use); the Cloud Storage agent is materialised by the GA data source below, which the
    CMEK grants depend on, before any bucket exists.

    Google grants each agent its service agent role when the API is enabled; this stack does not re-grant
    those project-level roles (checkov CKV_GCP_49 rightly flags impersonation-capable grants). The agents get
    only bucket-, registry- and key-level access, which lives with the bucket, the registry and the key. The
    tutorials' project-wide `roles/ml.serviceAgent` for the TPU agent belonged to the retired AI Platform
    Training; on Vertex AI, TPU workers run as the job's runtime service account, so the TPU agents only get
    bucket-level access.
    """

    def __init__(self, scope: Construct, id_: str, props: ServiceAgentsProps) -> None:
        v.validate_props(type(self), id_, props)  # first: bad props leave nothing half-built in the stack
        super().__init__(scope, id_)
        number = props.project_number
        self.vertex_ai = f"serviceAccount:service-{number}@{VERTEX_AI_AGENT_DOMAIN}"
        self.cloud_tpu = f"serviceAccount:service-{number}@{CLOUD_TPU_AGENT_DOMAIN}"
        self.cloud_tpu_vm = f"serviceAccount:service-{number}@{CLOUD_TPU_VM_AGENT_DOMAIN}"
        self.artifact_registry = f"serviceAccount:service-{number}@{ARTIFACT_REGISTRY_AGENT_DOMAIN}"
        self.workflows = f"serviceAccount:service-{number}@{WORKFLOWS_AGENT_DOMAIN}"
        self.storage: str | None = None
        # Grants on the Storage agent depend on this lookup (it is None without CMEK).
        self.storage_lookup: DataGoogleStorageProjectServiceAccount | None = None
        if props.with_storage_agent:
            # GA data source; calling it also creates the agent if the project has never used Cloud Storage.
            # The member is the literal email (the same `service-<number>@gs-project-accounts...` the data
            # source returns), so every member of the platform stack can be checked at synthesis.
            self.storage_lookup = DataGoogleStorageProjectServiceAccount(
                self, "storage", project=props.project, depends_on=list(props.depends_on) or None)
            self.storage = f"serviceAccount:service-{number}@{STORAGE_AGENT_DOMAIN}"
