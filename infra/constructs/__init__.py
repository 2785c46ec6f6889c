"""One construct per logical entity, each with its IAM inside and a frozen props dataclass."""

from __future__ import annotations

from dataclasses import dataclass

from infra.cdk import TerraformResource

# Checkov's terraform_json runner ignores inline suppressions (bridgecrewio/checkov#4634), so skips are
# written into each resource's "//" comment in this shape and turned into a checkov baseline by infra.policy.
SKIP_KEY = "checkov"


@dataclass(frozen=True)
class Grant:
    """An additive IAM grant; `key` names it in construct ids (`member` may be an unresolved reference)."""

    key: str
    role: str
    member: str


def checkov_skip(resource: TerraformResource, check_id: str, reason: str) -> None:
    """Record a justified checkov suppression on `resource` in the synthesized JSON."""
    skips = getattr(resource, "_checkov_skips", [])
    skips.append({"id": check_id, "comment": reason})
    resource._checkov_skips = skips
    resource.add_override("//.checkov.skip", sorted(skips, key=lambda s: s["id"]))


CMEK_OFF_REASON = (
    "CMEK is off for this environment by config (kms_key: null); set kms_key to encrypt with a CMEK."
)


def skip_unless_cmek(resource: TerraformResource, kms_key: str | None, check_id: str) -> None:
    """Without a key the resource uses Google-managed encryption by config choice; say so to checkov."""
    if not kms_key:
        checkov_skip(resource, check_id, CMEK_OFF_REASON)


# Creating Cloud Build builds (submitters and CI build the trainer image); cloudbuild.builds.create has no
# resource-level IAM.
BUILDS_EDITOR = "roles/cloudbuild.builds.editor"
# checkov CKV_GCP_49 counts builds.editor as impersonation: a build that names no account may run as the
# legacy Cloud Build account with no actAs check on the caller. The reason below holds only once the Bootstrap
# step in infra/README.md is done; the stack cannot check it (no GA resource reads the default build account).
BUILDS_EDITOR_REASON = (
    "cloudbuild.builds.create exists only at project level. A build runs as the service account it names, "
    "which Cloud Build allows only to callers with iam.serviceAccounts.actAs on it (here: the builder "
    "account, for job submitters and CI); the one exception, the legacy "
    "PROJECT_NUMBER@cloudbuild.gserviceaccount.com, must not be the project's default build account "
    "(infra/README.md, Bootstrap)."
)


def skip_justified_project_role(resource: TerraformResource, role: str) -> None:
    """Record why a project-level grant of a role checkov flags is intended (today only builds.editor)."""
    if role == BUILDS_EDITOR:
        checkov_skip(resource, "CKV_GCP_49", BUILDS_EDITOR_REASON)


def role_id(role: str) -> str:
    """`roles/storage.objectViewer` -> `storage-objectViewer`, for readable, stable construct ids."""
    return role.removeprefix("roles/").replace(".", "-")


