from __future__ import annotations

import re
from dataclasses import dataclass

from infra.cdk import Construct
from infra.constructs import validation as v
from infra.constructs.service_identity import ServiceIdentity, ServiceIdentityProps
from infra.google import ProjectIamCustomRole, ProjectIamMember

# What a scheduled run does, and nothing else: start an execution of its workflow (Cloud Scheduler's token)
# and, as the workflow, look for a run already under way, create the CustomJob and poll it to its end.
# Predefined roles are far wider: roles/aiplatform.user also creates endpoints, datasets and pipelines, and
# roles/workflows.invoker would be the only project-level alternative (the provider has no workflow-level IAM
# resource). Acting as the runtime account is granted on that account alone (serviceAccountUser).
SCHEDULER_PERMISSIONS = (
    "aiplatform.customJobs.create",
    "aiplatform.customJobs.get",
    "aiplatform.customJobs.list",
    "workflows.executions.create",
)
# What registering each run's model adds, only where some schedule's definition has a `registry:` block: list
# the model's versions (the one labelled with the run, if an earlier execution uploaded it), get the version
# holding an alias (`models/<id>@<alias>`), upload a version and poll its operation, and move an alias
# (mergeVersionAliases is an update of the model). The upload names no service account, so Vertex AI's service
# agent reads the artifacts and the serving image: no actAs. Reading metrics.json is a grant on the models
# bucket (platform stack), not a project role.
REGISTRY_PERMISSIONS = (
    "aiplatform.models.get",
    "aiplatform.models.list",
    "aiplatform.models.update",
    "aiplatform.models.upload",
)
# What a batch prediction after registration adds, only where some schedule has `batch_predict:`: create the
# BatchPredictionJob and poll it (the connector waits for its end). It runs as the runtime account, which the
# runner may already act as; its model is the registry's, which the runner already reads.
BATCH_PERMISSIONS = (
    "aiplatform.batchPredictionJobs.create",
    "aiplatform.batchPredictionJobs.get",
)
# What a canary deploy adds, only where some schedule has `deploy:`: read the endpoint (what it serves and its
# split) and deploy to it (deployModel: the connector polls its operation). The request names no service
# account, so the model serves as Vertex AI's own: no actAs. Not undeploy: rollback stays a person's.
DEPLOY_PERMISSIONS = (
    "aiplatform.endpoints.deploy",
    "aiplatform.endpoints.get",
)
# The workflow's log lines (call logging of errors, sys.log) are written as this account.
SCHEDULER_PROJECT_ROLES = ("roles/logging.logWriter",)
SCHEDULER_DESCRIPTION = "Identity of the scheduled retraining runs (Cloud Scheduler + Workflows, infra/)"
CUSTOM_ROLE_ID = re.compile(r"^[A-Za-z0-9_.]{3,64}$")


@dataclass(frozen=True)
class ScheduleRunnerProps(ServiceIdentityProps):
    role_id: str = ""
    permissions: tuple[str, ...] = SCHEDULER_PERMISSIONS

    def validate(self, where: str) -> None:
        super().validate(where)
        for i, grant in enumerate(self.account_grants):
            v.check(where, f"account_grants[{i}].key", grant.key, grant.key not in ("role", "custom-role"),
                    "a key other than 'role' and 'custom-role' (children of this construct)")
        v.check_str(where, "role_id", self.role_id, CUSTOM_ROLE_ID, "3-64 letters, digits, '_' or '.'")
        v.check(where, "permissions", self.permissions, isinstance(self.permissions, tuple)
                and len(self.permissions) > 0 and all(re.fullmatch(r"[a-z]+(\.[A-Za-z]+){2}", p or "")
                                                       for p in self.permissions),
                "a non-empty tuple of permissions such as aiplatform.customJobs.create")


class ScheduleRunner(ServiceIdentity):
    """The service account scheduled retraining runs as, with a custom project role holding exactly the
    permissions in SCHEDULER_PERMISSIONS (and REGISTRY_PERMISSIONS where a schedule registers its model).
    One account for both steps of a run: Cloud Scheduler mints its token to start the workflow, and the
    workflow calls Vertex AI as it. Created only for an environment with schedules; grants on the runtime
    account let it act as that one account.
    """

    def __init__(self, scope: Construct, id_: str, props: ScheduleRunnerProps) -> None:
        super().__init__(scope, id_, props)
        self.role = ProjectIamCustomRole(
            self, "role", project=props.project, role_id=props.role_id,
            title="Scheduled retraining runs", description=SCHEDULER_DESCRIPTION,
            permissions=list(props.permissions), depends_on=list(props.depends_on) or None)
        self.project_grants.append(ProjectIamMember(
            self, "custom-role", project=props.project, role=self.role.name, member=self.member))
