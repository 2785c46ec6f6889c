from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from infra.cdk import Construct, TerraformResource
from infra.constructs import BUILDS_EDITOR, role_id, skip_justified_project_role
from infra.constructs import validation as v
from infra.google import ProjectIamMember

# Creating a CustomJob or HyperparameterTuningJob (aiplatform.customJobs.create, ...) exists only at project
# level; Vertex AI has no per-resource IAM for jobs. The same holds for the Cloud Build builds of the trainer
# image that scripts/run_job.py creates and follows (builds.create/get/list); the builds run as the builder
# account, not as the submitter. Reading what those builds and jobs log (the log link run_job.py prints when a
# build fails, the replicas' output) needs logging.viewer: project-level again, and it excludes Data Access
# audit logs (logging.privateLogViewer).
#
# What run_job.py itself reads while it follows a job (entries.list on projects/<p>) needs
# logging.logEntries.list alone (so does viewing entries in the Logs Explorer). logging.viewer holds more and
# stays the role on purpose: the more is no more log content (logEntries.list already reads every
# non-Data-Access entry of the project, and no role or IAM condition narrows it to one job's ml_job entries;
# only a log view per resource type with logging.viewAccessor on it would), only read-only configuration
# (logs, buckets, views, sinks, exclusions, log metrics, links, locations, operations: get/list; usage.get;
# projects.get) and one's own saved Logs Explorer queries. A custom role of logEntries.list alone would
# withhold little (chiefly the sink and exclusion settings) for a bootstrap-level custom role that an
# administrator maintains and that stops following Google's updates of the predefined one.
LOGS_VIEWER = "roles/logging.viewer"
SUBMITTER_PROJECT_ROLES = ("roles/aiplatform.user", BUILDS_EDITOR, LOGS_VIEWER)


@dataclass(frozen=True)
class JobSubmittersProps:
    project: str
    # (construct key, IAM member) pairs; keyed by member so reordering the config list replaces nothing.
    members: tuple[tuple[str, str], ...]
    project_roles: tuple[str, ...] = SUBMITTER_PROJECT_ROLES
    depends_on: Sequence[TerraformResource] = ()

    def validate(self, where: str) -> None:
        v.check_project(where, self.project)
        v.check(where, "members", self.members, isinstance(self.members, tuple), "a tuple of (key, member)")
        for i, pair in enumerate(self.members):
            v.check(where, f"members[{i}]", pair, isinstance(pair, tuple) and len(pair) == 2,
                    "a (key, member) pair")
            v.check_key(where, f"members[{i}].key", pair[0])
            v.check_member(where, f"members[{i}].member", pair[1])
        # The grants' construct ids start with the key.
        keys = tuple(key for key, _ in self.members)
        for i in range(len(keys)):
            v.check_once(where, "members", keys, i, "key")
        v.check_roles(where, "project_roles", self.project_roles)


class JobSubmitters(Construct):
    """The humans (`job_submitters` in the environment config) who launch training and tuning jobs.

    Only the project-level part of their access lives here. Acting as the runtime and builder accounts
    (`iam.serviceAccountUser`) is granted on those accounts alone (RuntimeIdentity, ImageBuilder), and their
    bucket and registry access lives on the bucket and the registry.
    """

    def __init__(self, scope: Construct, id_: str, props: JobSubmittersProps) -> None:
        v.validate_props(type(self), id_, props)  # first: bad props leave nothing half-built in the stack
        super().__init__(scope, id_)
        # Project IAM calls need cloudresourcemanager.googleapis.com, which the same apply may be enabling.
        deps = list(props.depends_on) or None
        self.grants = []
        for key, member in props.members:
            for role in props.project_roles:
                grant = ProjectIamMember(self, f"{key}-{role_id(role)}", project=props.project, role=role,
                                         member=member, depends_on=deps)
                skip_justified_project_role(grant, role)
                self.grants.append(grant)
