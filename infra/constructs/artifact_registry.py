from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from infra.cdk import Construct, TerraformResource
from infra.constructs import Grant, skip_unless_cmek
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


class ImageRegistry(Construct):
    """Docker repository for trainer images, with a cleanup policy and reader/writer grants on it."""

    def __init__(self, scope: Construct, id_: str, props: ImageRegistryProps) -> None:
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
