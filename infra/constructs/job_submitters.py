from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from infra.cdk import Construct, TerraformResource
from infra.constructs import role_id
from infra.google import ProjectIamMember

# Creating a CustomJob or HyperparameterTuningJob (aiplatform.customJobs.create, ...) exists only at project
# level; Vertex AI has no per-resource IAM for jobs.
SUBMITTER_PROJECT_ROLES = ("roles/aiplatform.user",)


@dataclass(frozen=True)
class JobSubmittersProps:
    project: str
    # (construct key, IAM member) pairs; keyed by member so reordering the config list replaces nothing.
    members: tuple[tuple[str, str], ...]
    project_roles: tuple[str, ...] = SUBMITTER_PROJECT_ROLES
    depends_on: Sequence[TerraformResource] = ()


class JobSubmitters(Construct):
    """The humans (`job_submitters` in the environment config) who launch training and tuning jobs.

    Only the project-level part of their access lives here. Acting as the runtime account
    (`iam.serviceAccountUser`) is granted on that account alone (RuntimeIdentity), and their bucket and
    registry access lives on the bucket and the registry.
    """

    def __init__(self, scope: Construct, id_: str, props: JobSubmittersProps) -> None:
        super().__init__(scope, id_)
        # Project IAM calls need cloudresourcemanager.googleapis.com, which the same apply may be enabling.
        deps = list(props.depends_on) or None
        self.grants = [
            ProjectIamMember(self, f"{key}-{role_id(role)}", project=props.project, role=role, member=member,
                             depends_on=deps)
            for key, member in props.members for role in props.project_roles
        ]
