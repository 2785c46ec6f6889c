from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from infra.cdk import Construct, TerraformResource
from infra.constructs import BUILDS_EDITOR, role_id, skip_justified_project_role
from infra.constructs import validation as v
from infra.google import (
    IamWorkloadIdentityPool,
    IamWorkloadIdentityPoolProvider,
    ProjectIamMember,
    ServiceAccount,
    ServiceAccountIamMember,
)

GITHUB_ISSUER = "https://token.actions.githubusercontent.com"

# What applying this stack needs, and nothing broader (no owner/editor, no org-level roles):
DEPLOYER_PROJECT_ROLES = (
    # google_project_service: enable the platform's APIs.
    "roles/serviceusage.serviceUsageAdmin",
    # Buckets, their IAM policies and the Terraform state objects in the state bucket.
    "roles/storage.admin",
    # Creates service accounts only; changing them and their IAM policies is granted per account
    # (roles/iam.serviceAccountAdmin on the runtime, builder and deployer accounts), never project-wide
    # (CKV_GCP_49).
    "roles/iam.serviceAccountCreator",
    # The workload identity pool and its GitHub provider.
    "roles/iam.workloadIdentityPoolAdmin",
    # The docker repository, its cleanup policy and its IAM policy (creating a repository needs admin).
    "roles/artifactregistry.admin",
    # The TensorBoard instance (aiplatform.tensorboards.*); also lets CI submit jobs.
    "roles/aiplatform.user",
    # The workflow builds the trainer image after the apply: create and follow Cloud Build builds, which run
    # as the builder account (serviceAccountUser on that account only).
    BUILDS_EDITOR,
)
# Project IAM admin is the one escalation-capable role a stack with project-level grants needs. The condition
# (iam.googleapis.com/modifiedGrantsByRole) lets the deployer add/remove only the roles this stack grants,
# never projectIamAdmin itself: otherwise it could grant itself the role without the condition, then anything.
# So a change to this grant (e.g. a new role in the stack) is applied once by a project admin, not by CI.
PROJECT_IAM_ADMIN = "roles/resourcemanager.projectIamAdmin"
# Granted on each service account the stack manages, so the deployer can update them and their IAM policies.
SERVICE_ACCOUNT_ADMIN = "roles/iam.serviceAccountAdmin"


@dataclass(frozen=True)
class GithubCiIdentityProps:
    project: str
    pool_id: str
    provider_id: str
    repository: str  # owner/name
    repository_id: int
    deploy_branch: str
    deployer_account_id: str
    project_roles: tuple[str, ...]
    # Every project-level role the stack grants: the only ones the deployer may add or remove.
    grantable_project_roles: tuple[str, ...]
    depends_on: Sequence[TerraformResource] = ()

    def validate(self, where: str) -> None:
        v.check_project(where, self.project)
        for name in ("pool_id", "provider_id"):
            v.check_str(where, name, getattr(self, name), v.WIF_ID,
                        "4-32 lowercase letters, digits or hyphens, not starting with 'gcp-'")
        v.check_str(where, "repository", self.repository, v.GITHUB_REPOSITORY, "OWNER/NAME on GitHub")
        v.check_positive(where, "repository_id", self.repository_id, 10**12)
        # The branch is quoted into the provider's CEL condition: no quotes, no spaces.
        v.check_str(where, "deploy_branch", self.deploy_branch, v.BRANCH, "a branch name such as main")
        v.check_str(where, "deployer_account_id", self.deployer_account_id, v.ACCOUNT_ID,
                    "6-30 lowercase letters, digits or hyphens, starting with a letter")
        v.check_roles(where, "project_roles", self.project_roles)
        # A union of what each identity is granted: repeats are expected.
        v.check_roles(where, "grantable_project_roles", self.grantable_project_roles, unique=False)
        # projectIamAdmin is granted only with its condition, and never grantable: with it the deployer could
        # grant itself the role without the condition, then anything (self-escalation).
        for name in ("project_roles", "grantable_project_roles"):
            roles = getattr(self, name)
            v.check(where, name, roles, PROJECT_IAM_ADMIN not in roles,
                    f"roles without {PROJECT_IAM_ADMIN}: it must not be grantable by the deployer "
                    "(self-escalation)")


class GithubCiIdentity(Construct):
    """Keyless CI: GitHub Actions OIDC tokens from one repository and branch may impersonate the deployer.

    The provider's condition pins the numeric repository id (stable across renames, not re-registrable by
    others), the ref of the deploy branch, and the default `sub` claim
    (repo:OWNER/REPO:ref:refs/heads/BRANCH), so a fork, another branch, a pull request or a workflow that uses
    a GitHub deployment environment cannot obtain a token.
    """

    def __init__(self, scope: Construct, id_: str, props: GithubCiIdentityProps) -> None:
        v.validate_props(type(self), id_, props)  # first: bad props leave nothing half-built in the stack
        super().__init__(scope, id_)
        deps = list(props.depends_on) or None
        ref = f"refs/heads/{props.deploy_branch}"
        self.condition = (
            f"assertion.repository_id == '{props.repository_id}' && assertion.ref == '{ref}' && "
            f"assertion.sub == 'repo:{props.repository}:ref:{ref}'"
        )
        self.pool = IamWorkloadIdentityPool(
            self, "pool", project=props.project, workload_identity_pool_id=props.pool_id,
            display_name="GitHub Actions", description=f"CI for {props.repository} (managed by infra/)",
            depends_on=deps,
        )
        self.provider = IamWorkloadIdentityPoolProvider(
            self, "provider", project=props.project,
            workload_identity_pool_id=self.pool.workload_identity_pool_id,
            workload_identity_pool_provider_id=props.provider_id,
            display_name="GitHub OIDC",
            attribute_mapping={
                "google.subject": "assertion.sub",
                "attribute.repository": "assertion.repository",
                "attribute.repository_id": "assertion.repository_id",
                "attribute.ref": "assertion.ref",
            },
            attribute_condition=self.condition,
            oidc={"issuer_uri": GITHUB_ISSUER},
        )
        self.account = ServiceAccount(
            self, "deployer", project=props.project, account_id=props.deployer_account_id,
            display_name="CI deployer",
            description=f"Applies infra/ from {props.repository} CI (managed by infra/)",
            depends_on=deps,
        )
        self.member = f"serviceAccount:{self.account.email}"
        principal_set = (f"principalSet://iam.googleapis.com/{self.pool.name}"
                         f"/attribute.repository_id/{props.repository_id}")
        self.account_grants = [
            ServiceAccountIamMember(self, key, service_account_id=self.account.name, role=role, member=member)
            for key, role, member in (
                ("workload-identity-user", "roles/iam.workloadIdentityUser", principal_set),
                ("deployer-sa-admin", SERVICE_ACCOUNT_ADMIN, self.member),
            )
        ]
        self.project_grants = []
        for role in props.project_roles:
            grant = ProjectIamMember(self, role_id(role), project=props.project, role=role,
                                     member=self.member)
            skip_justified_project_role(grant, role)
            self.project_grants.append(grant)
        allowed = ", ".join(f"'{role}'" for role in sorted(set(props.grantable_project_roles)))
        self.project_grants.append(ProjectIamMember(
            self, "projectIamAdmin", project=props.project, role=PROJECT_IAM_ADMIN, member=self.member,
            condition={
                "title": "only-this-stacks-roles",
                "description": "May grant or revoke only the project roles that infra/ manages",
                "expression": (f"api.getAttribute('iam.googleapis.com/modifiedGrantsByRole', [])"
                               f".hasOnly([{allowed}])"),
            },
        ))
