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


def role_id(role: str) -> str:
    """`roles/storage.objectViewer` -> `storage-objectViewer`, for readable, stable construct ids."""
    return role.removeprefix("roles/").replace(".", "-")


