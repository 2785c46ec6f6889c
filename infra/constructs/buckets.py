from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from infra.cdk import Construct, TerraformResource, TerraformResourceLifecycle
from infra.config import BUCKET_FOLDER, BUCKET_NAME, MAX_STUDY_PREFIXES
from infra.constructs import Grant, checkov_skip
from infra.constructs import validation as v
from infra.google import (
    StorageBucket,
    StorageBucketIamMember,
    StorageBucketLifecycleRule,
    StorageBucketLifecycleRuleAction,
    StorageBucketLifecycleRuleCondition,
)

ACCESS_LOGS_REASON = (
    "Object access is audited with Cloud Audit Logs: Data Access logs (DATA_READ, DATA_WRITE) for "
    "storage.googleapis.com, enabled on the project by the environment's bootstrap stack "
    "(infra/bootstrap.py, google_project_iam_audit_config); GCS usage logs are the legacy mechanism and "
    "would need a log bucket that itself cannot log (CKV_GCP_63)."
)


# Where the trainer caches pre-training results on Cloud Storage (trainer.env.DATA_SCANS, which infra/ may
# not import: tests/infra/test_constructs.py holds the two equal).
CACHE_PREFIX = "data-scans/"
# GCS takes at most 100 lifecycle rules per bucket; every bucket has 2-3 of its own.
MAX_EXPIRING_FOLDERS = 90


@dataclass(frozen=True)
class FolderExpiry:
    """Live objects under any of ``prefixes`` are deleted ``days`` after they were written (their age)."""

    prefixes: tuple[str, ...]
    days: int


@dataclass(frozen=True)
class BucketProps:
    name: str
    project: str
    location: str
    labels: Mapping[str, str]
    grants: tuple[Grant, ...]
    noncurrent_retention_days: int
    # Data and models are the expensive-to-recreate buckets: Terraform refuses to plan their destruction.
    protect_from_destroy: bool = False
    expire_after_days: int | None = None
    # Folders of objects nothing reads after the job that wrote them (caches, finished studies).
    expiring_folders: tuple[FolderExpiry, ...] = ()
    kms_key: str | None = None
    depends_on: Sequence[TerraformResource] = field(default=())

    def validate(self, where: str) -> None:
        name = self.name
        # GCS refuses names that start with "goog" or contain "google" (and near misspellings of it).
        v.check(where, "name", name, v.matches(BUCKET_NAME, name) and not name.startswith("goog")
                and not any(word in name for word in ("google", "g00gle", "go0gle", "g0ogle")),
                "a GCS bucket name: 3-63 lowercase letters, digits, '-' or '_', starting and ending with a "
                "letter or digit, not starting with 'goog' or containing 'google'")
        v.check_project(where, self.project)
        v.check_region(where, "location", self.location)
        v.check_labels(where, self.labels)
        v.check_grants(where, self.grants, ("bucket",))
        v.check_positive(where, "noncurrent_retention_days", self.noncurrent_retention_days, 3650)
        v.check_bool(where, "protect_from_destroy", self.protect_from_destroy)
        if self.expire_after_days is not None:
            v.check_positive(where, "expire_after_days", self.expire_after_days, 3650)
        folders = self.expiring_folders
        v.check(where, "expiring_folders", folders,
                isinstance(folders, tuple) and len(folders) <= MAX_EXPIRING_FOLDERS,
                f"a tuple of at most {MAX_EXPIRING_FOLDERS} FolderExpiry (GCS: 100 lifecycle rules a bucket)")
        for i, expiry in enumerate(folders):
            field_ = f"expiring_folders[{i}]"
            prefixes = expiry.prefixes if isinstance(expiry, FolderExpiry) else None
            v.check(where, f"{field_}.prefixes", prefixes, isinstance(prefixes, tuple)
                    and 0 < len(prefixes) <= MAX_STUDY_PREFIXES,
                    f"a FolderExpiry of 1-{MAX_STUDY_PREFIXES} folders")
            for j, prefix in enumerate(prefixes):
                # Never '' or '/': a prefix rule with no folder would expire the whole bucket.
                v.check_str(where, f"{field_}.prefixes[{j}]", prefix, BUCKET_FOLDER, "a folder ending in '/'")
                v.check_once(where, f"{field_}.prefixes", prefixes, j, "folder")
            v.check_positive(where, f"{field_}.days", expiry.days, 3650)
        v.check_kms_key(where, self.kms_key, self.location)


class TrainingBucket(Construct):
    """A regional, private, versioned bucket with its lifecycle and its object-level grants.

    `force_destroy` is false so a non-empty bucket is never deleted with its objects; uniform bucket-level
    access makes IAM the only access path and public access prevention blocks allUsers/allAuthenticatedUsers
    for good.
    """

    def __init__(self, scope: Construct, id_: str, props: BucketProps) -> None:
        v.validate_props(type(self), id_, props)  # first: bad props leave nothing half-built in the stack
        super().__init__(scope, id_)
        rules = [
            # Versioning keeps overwritten checkpoints and models recoverable for a while, not forever.
            _rule("Delete", days_since_noncurrent_time=props.noncurrent_retention_days,
                  with_state="ARCHIVED"),
            # Interrupted uploads of large packages or SavedModels otherwise bill for their parts
            # indefinitely.
            _rule("AbortIncompleteMultipartUpload", age=1),
        ]
        if props.expire_after_days is not None:
            rules.append(_rule("Delete", age=props.expire_after_days, with_state="LIVE"))
        # Age counts from the object's creation, not its last read: Cloud Storage keeps no read time.
        rules += [_rule("Delete", age=expiry.days, matches_prefix=list(expiry.prefixes), with_state="LIVE")
                  for expiry in props.expiring_folders]
        self.bucket = StorageBucket(
            self, "bucket",
            name=props.name,
            project=props.project,
            location=props.location.upper(),
            storage_class="STANDARD",
            uniform_bucket_level_access=True,
            public_access_prevention="enforced",
            force_destroy=False,
            versioning={"enabled": True},
            lifecycle_rule=rules,
            labels=dict(props.labels),
            encryption={"default_kms_key_name": props.kms_key} if props.kms_key else None,
            lifecycle=(TerraformResourceLifecycle(prevent_destroy=True)
                       if props.protect_from_destroy else None),
            depends_on=list(props.depends_on) or None,
        )
        checkov_skip(self.bucket, "CKV_GCP_62", ACCESS_LOGS_REASON)
        self.grants = [
            StorageBucketIamMember(self, grant.key, bucket=self.bucket.name, role=grant.role,
                                   member=grant.member)
            for grant in props.grants
        ]


def _rule(action: str, **condition) -> StorageBucketLifecycleRule:
    return StorageBucketLifecycleRule(action=StorageBucketLifecycleRuleAction(type=action),
                                      condition=StorageBucketLifecycleRuleCondition(**condition))
