from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from infra.cdk import Construct, TerraformResource
from infra.constructs import Grant, skip_unless_cmek
from infra.constructs import validation as v
from infra.google import (
    ArtifactRegistryRepository,
    ArtifactRegistryRepositoryCleanupPolicies,
    ArtifactRegistryRepositoryCleanupPoliciesCondition,
    ArtifactRegistryRepositoryCleanupPoliciesMostRecentVersions,
    ArtifactRegistryRepositoryIamMember,
)


@dataclass(frozen=True)
class ImageRegistryProps:
    project: str
    location: str
    repository_id: str
    labels: Mapping[str, str]
    keep_versions: int
    untagged_retention_days: int
    grants: tuple[Grant, ...]
    kms_key: str | None = None
    depends_on: Sequence[TerraformResource] = ()

    def validate(self, where: str) -> None:
        v.check_project(where, self.project)
        v.check_region(where, "location", self.location)
        v.check_str(where, "repository_id", self.repository_id, v.REPOSITORY_ID,
                    "1-63 lowercase letters, digits or hyphens, starting with a letter")
        v.check_labels(where, self.labels)
        v.check_positive(where, "keep_versions", self.keep_versions, 1000)
        v.check_positive(where, "untagged_retention_days", self.untagged_retention_days, 3650)
        v.check_grants(where, self.grants, ("repository",))
        v.check_kms_key(where, self.kms_key, self.location)


class ImageRegistry(Construct):
    """Docker repository for trainer images, with a cleanup policy and reader/writer grants on it."""

    def __init__(self, scope: Construct, id_: str, props: ImageRegistryProps) -> None:
        v.validate_props(type(self), id_, props)  # first: bad props leave nothing half-built in the stack
        super().__init__(scope, id_)
        self.repository = ArtifactRegistryRepository(
            self, "repository",
            project=props.project,
            location=props.location,
            repository_id=props.repository_id,
            format="DOCKER",
            description="Trainer images for Vertex AI custom training (managed by infra/)",
            labels=dict(props.labels),
            kms_key_name=props.kms_key,
            cleanup_policy_dry_run=False,
            cleanup_policies=[
                # KEEP wins over DELETE: the newest versions survive whatever else matches.
                ArtifactRegistryRepositoryCleanupPolicies(
                    id="keep-recent-versions", action="KEEP",
                    most_recent_versions=ArtifactRegistryRepositoryCleanupPoliciesMostRecentVersions(
                        keep_count=props.keep_versions)),
                ArtifactRegistryRepositoryCleanupPolicies(
                    id="delete-old-untagged", action="DELETE",
                    condition=ArtifactRegistryRepositoryCleanupPoliciesCondition(
                        tag_state="UNTAGGED", older_than=f"{props.untagged_retention_days * 86400}s")),
            ],
            depends_on=list(props.depends_on) or None,
        )
        skip_unless_cmek(self.repository, props.kms_key, "CKV_GCP_84")
        self.grants = [
            ArtifactRegistryRepositoryIamMember(
                self, grant.key, project=props.project, location=props.location,
                repository=self.repository.name, role=grant.role, member=grant.member)
            for grant in props.grants
        ]
