from __future__ import annotations

from infra.constructs.service_identity import ServiceIdentity

# Project-level roles of the identity training jobs run as. Vertex AI has no predefined role narrower than
# aiplatform.user that lets a job write TensorBoard experiments/time series and read its own job metadata;
# object access is granted per bucket (see the stack), never project-wide.
RUNTIME_PROJECT_ROLES = (
    "roles/aiplatform.user",
    "roles/logging.logWriter",
    "roles/monitoring.metricWriter",
)
RUNTIME_DESCRIPTION = "Identity of Vertex AI training and tuning jobs (managed by infra/)"


class RuntimeIdentity(ServiceIdentity):
    """The service account Vertex AI training jobs run as, instead of the default compute service account.

    Workers receive short-lived tokens from the metadata server; submitters may act as this account and as
    nothing else in the project.
    """
