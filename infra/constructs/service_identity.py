from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from infra.cdk import Construct, TerraformResource
from infra.constructs import Grant, role_id
from infra.constructs import validation as v
from infra.google import ProjectIamMember, ServiceAccount, ServiceAccountIamMember


@dataclass(frozen=True)
class ServiceIdentityProps:
    project: str
    account_id: str
    display_name: str
    description: str
    project_roles: tuple[str, ...]
    # Grants on this account: who may act as it (serviceAccountUser), who may manage it.
    account_grants: tuple[Grant, ...]
    depends_on: Sequence[TerraformResource] = ()

    def validate(self, where: str) -> None:
        v.check_project(where, self.project)
        v.check_str(where, "account_id", self.account_id, v.ACCOUNT_ID,
                    "6-30 lowercase letters, digits or hyphens, starting with a letter")
        v.check_text(where, "display_name", self.display_name, 100)
        v.check_text(where, "description", self.description, 256)
        v.check_roles(where, "project_roles", self.project_roles)
        # Account grants are siblings of the account and of the project grants (named by role).
        v.check_grants(where, self.account_grants, ("account", *map(role_id, self.project_roles)),
                       name="account_grants")


class ServiceIdentity(Construct):
    """A keyless service account, its project-level roles and the grants on the account itself.

    The shape every workload identity of the stack shares (RuntimeIdentity, ImageBuilder): no key is ever
    created (the runtime mints short-lived tokens), and `iam.serviceAccountUser` is granted on this account
    only, so whoever may act as it can act as nothing else in the project.
    """

    def __init__(self, scope: Construct, id_: str, props: ServiceIdentityProps) -> None:
        v.validate_props(type(self), id_, props)  # first: bad props leave nothing half-built in the stack
        super().__init__(scope, id_)
        self.account = ServiceAccount(
            self, "account", project=props.project, account_id=props.account_id,
            display_name=props.display_name, description=props.description,
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
