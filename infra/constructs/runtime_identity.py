from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from infra.cdk import Construct, TerraformResource
from infra.constructs import Grant, role_id
from infra.google import ProjectIamMember, ServiceAccount, ServiceAccountIamMember

# Project-level roles of the identity training jobs run as. Vertex AI has no predefined role narrower than
# aiplatform.user that lets a job write TensorBoard experiments/time series and read its own job metadata;
# object access is granted per bucket (see the stack), never project-wide.
RUNTIME_PROJECT_ROLES = (
    "roles/aiplatform.user",
    "roles/logging.logWriter",
    "roles/monitoring.metricWriter",
)


@dataclass(frozen=True)
class RuntimeIdentityProps:
    project: str
    account_id: str
    display_name: str
    project_roles: tuple[str, ...]
    # Grants on this account: who may launch jobs as it (serviceAccountUser), who may manage it.
    account_grants: tuple[Grant, ...]
    depends_on: Sequence[TerraformResource] = ()


class RuntimeIdentity(Construct):
    """The service account Vertex AI training jobs run as, instead of the default compute service account.

    It never gets a key (workers receive short-lived tokens from the metadata server).
    `iam.serviceAccountUser` is granted on this account only, so submitters can act as it and as nothing else
    in the project.
    """

    def __init__(self, scope: Construct, id_: str, props: RuntimeIdentityProps) -> None:
        super().__init__(scope, id_)
        self.account = ServiceAccount(
            self, "account", project=props.project, account_id=props.account_id,
            display_name=props.display_name,
            description="Identity of Vertex AI training and tuning jobs (managed by infra/)",
            depends_on=list(props.depends_on) or None,
        )
        self.email = self.account.email
        self.member = f"serviceAccount:{self.account.email}"
        self.project_grants = [
            ProjectIamMember(self, role_id(role), project=props.project, role=role, member=self.member)
            for role in props.project_roles
        ]
        self.account_grants = [
            ServiceAccountIamMember(self, grant.key, service_account_id=self.account.name, role=grant.role,
                                    member=grant.member)
            for grant in props.account_grants
        ]
