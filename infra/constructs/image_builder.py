from __future__ import annotations

from infra.constructs.service_identity import ServiceIdentity

# With a user-specified service account, Cloud Build writes the build's logs as that account: with
# `options.logging: CLOUD_LOGGING_ONLY` (what scripts/run_job.py sets) it needs logEntries.create, which has
# no resource-level IAM. Its other access is on the staging bucket (read the build context) and the trainer
# repository (push), granted there by the stack.
BUILDER_PROJECT_ROLES = ("roles/logging.logWriter",)
BUILDER_DESCRIPTION = "Identity of Cloud Build builds of the trainer image (managed by infra/)"


class ImageBuilder(ServiceIdentity):
    """The service account the Cloud Build builds of the trainer image run as.

    A dedicated account instead of Cloud Build's default (the legacy Cloud Build account or the Compute Engine
    default account, both with project-wide access): a build runs whatever the context's Dockerfile says, so
    what it can reach is exactly what this account holds. No keys; Cloud Build mints its tokens.
    """
