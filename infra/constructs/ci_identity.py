from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from infra.cdk import Construct, TerraformResource
from infra.config import BRANCH
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
# The one workflow that may impersonate the deployer, and the events it runs on: the provider's condition
# pins both (`workflow_ref`, `event_name`); tests/test_workflows.py checks .github/workflows/deploy.yml
# against them.
DEPLOY_WORKFLOW_PATH = ".github/workflows/deploy.yml"
DEPLOY_EVENTS = ("push", "workflow_dispatch")

# What applying the platform stack (`cdktn deploy <env>`, infra/stack.py) and building the trainer image
# needs, and nothing that touches identities or project IAM: those live in the bootstrap stack, which a
# project administrator applies (infra/bootstrap.py). Acting as the runtime and builder accounts is granted on
# those accounts only (serviceAccountUser, in the bootstrap stack too).
DEPLOYER_PROJECT_ROLES = (
    # google_project_service: enable the platform's APIs.
    "roles/serviceusage.serviceUsageAdmin",
    # Buckets, their IAM policies and the Terraform state objects in the state bucket.
    "roles/storage.admin",
    # The docker repository, its cleanup policy and its IAM policy (creating a repository needs admin).
    "roles/artifactregistry.admin",
    # The TensorBoard instance (aiplatform.tensorboards.*); also lets CI submit jobs.
    "roles/aiplatform.user",
    # The workflow builds the trainer image after the apply: create and follow Cloud Build builds, which run
    # as the builder account (serviceAccountUser on that account only).
    BUILDS_EDITOR,
)
# Roles that would let the deployer change who it is, who may become it, or who holds what in the project:
# with any of them one bad merge could widen its own trust and keep access. Refused in its props.
DEPLOYER_FORBIDDEN_ROLES = frozenset({
    "roles/owner",
    "roles/editor",
    "roles/resourcemanager.projectIamAdmin",
    "roles/iam.securityAdmin",
    "roles/iam.roleAdmin",
    "roles/iam.workloadIdentityPoolAdmin",
    "roles/iam.serviceAccountAdmin",
    "roles/iam.serviceAccountCreator",
    "roles/iam.serviceAccountKeyAdmin",
    "roles/iam.serviceAccountTokenCreator",
    "roles/iam.serviceAccountUser",
    "roles/iam.workloadIdentityUser",
})


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
    depends_on: Sequence[TerraformResource] = ()

    def validate(self, where: str) -> None:
        v.check_project(where, self.project)
        for name in ("pool_id", "provider_id"):
            v.check_str(where, name, getattr(self, name), v.WIF_ID,
                        "4-32 lowercase letters, digits or hyphens, not starting with 'gcp-'")
        # Both are quoted into the provider's CEL condition: no quotes, no spaces.
        v.check_str(where, "repository", self.repository, v.GITHUB_REPOSITORY, "OWNER/NAME on GitHub")
        v.check_positive(where, "repository_id", self.repository_id, 10**12)
        v.check_str(where, "deploy_branch", self.deploy_branch, BRANCH, "a branch name such as main")
        v.check_str(where, "deployer_account_id", self.deployer_account_id, v.ACCOUNT_ID,
                    "6-30 lowercase letters, digits or hyphens, starting with a letter")
        v.check_roles(where, "project_roles", self.project_roles)
        for i, role in enumerate(self.project_roles):
            v.check(where, f"project_roles[{i}]", role, role not in DEPLOYER_FORBIDDEN_ROLES,
                    "a role that cannot change identities or IAM (the deployer must not control its own "
                    "trust: such grants belong to the bootstrap stack's administrator)")


def provider_condition(repository: str, repository_id: int, deploy_branch: str) -> str:
    """The CEL condition a GitHub OIDC token must meet: this repository (by id and name), the deploy branch,
    the deploy workflow on that branch, and one of its events."""
    ref = f"refs/heads/{deploy_branch}"
    events = ", ".join(f"'{event}'" for event in DEPLOY_EVENTS)
    return (
        f"assertion.repository_id == '{repository_id}' && assertion.ref == '{ref}' && "
        f"assertion.sub == 'repo:{repository}:ref:{ref}' && "
        f"assertion.workflow_ref == '{repository}/{DEPLOY_WORKFLOW_PATH}@{ref}' && "
        f"assertion.event_name in [{events}]"
    )


class GithubCiIdentity(Construct):
    """Keyless CI: GitHub Actions OIDC tokens of one workflow, on one branch of one repository, may
    impersonate the deployer. Part of the bootstrap stack: the deployer can change none of this.

    The provider's condition pins the numeric repository id (stable across renames, not re-registrable by
    others), the ref of the deploy branch, the default `sub` claim (repo:OWNER/REPO:ref:refs/heads/BRANCH),
    the calling workflow (`workflow_ref`: OWNER/REPO/.github/workflows/deploy.yml@refs/heads/BRANCH) and its
    events (`event_name`), so a fork, another branch, a pull request, another workflow of the same repository
    (even on the deploy branch) or a workflow that uses a GitHub deployment environment cannot obtain a token.
    """

    def __init__(self, scope: Construct, id_: str, props: GithubCiIdentityProps) -> None:
        v.validate_props(type(self), id_, props)  # first: bad props leave nothing half-built in the stack
        super().__init__(scope, id_)
        deps = list(props.depends_on) or None
        self.condition = provider_condition(props.repository, props.repository_id, props.deploy_branch)
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
                "attribute.workflow_ref": "assertion.workflow_ref",
                "attribute.event_name": "assertion.event_name",
            },
            attribute_condition=self.condition,
            oidc={"issuer_uri": GITHUB_ISSUER},
        )
        self.account = ServiceAccount(
            self, "deployer", project=props.project, account_id=props.deployer_account_id,
            display_name="CI deployer",
            description=f"Applies the platform stack from {props.repository} CI (managed by infra/)",
            depends_on=deps,
        )
        self.member = f"serviceAccount:{self.account.email}"
        self.principal_set = (f"principalSet://iam.googleapis.com/{self.pool.name}"
                              f"/attribute.repository_id/{props.repository_id}")
        # The only grant on the deployer account: who may become it. Nobody, the deployer included, may
        # administer it but the administrator who applies this stack.
        self.account_grants = [
            ServiceAccountIamMember(self, "workload-identity-user", service_account_id=self.account.name,
                                    role="roles/iam.workloadIdentityUser", member=self.principal_set),
        ]
        self.project_grants = []
        for role in props.project_roles:
            grant = ProjectIamMember(self, role_id(role), project=props.project, role=role,
                                     member=self.member, depends_on=deps)
            skip_justified_project_role(grant, role)
            self.project_grants.append(grant)
