"""The bootstrap stack of an environment (`<env>-bootstrap`): who CI is and everything anyone holds on the
project, applied by a project administrator, never by CI.

The pattern of terraform-example-foundation's 0-bootstrap: the identities and the IAM that CI would otherwise
hold over itself sit in a stack that CI's own account cannot change. It holds the GitHub workload identity
pool and provider, the deployer, runtime and builder service accounts, every project-level IAM grant (theirs
and the job submitters'), the project's Data Access audit config for Cloud Storage and, with
`billing_budget.billing_account`, the project's billing budget (it belongs to the billing account). IAM
conditions cannot restrict the *member* of a grant, so no conditional projectIamAdmin could stop a deployer
from granting a role to an outside principal: the deployer holds no IAM administration at all, and the
platform stack it applies (infra/stack.py) grants only resource-level roles, only to this project's accounts,
its service agents and the configured job submitters (checked at synthesis).

    cdktn deploy dev-bootstrap      # as a project administrator, once and whenever identities or IAM change
"""

from __future__ import annotations

from infra.cdk import Construct, GcsBackend, TerraformOutput, TerraformResource, TerraformStack
from infra.config import EnvironmentConfig, member_id
from infra.constructs import Grant
from infra.constructs.alerts import ALERT_DEPLOYER_ROLES
from infra.constructs.audit_logs import DataAccessLogs, DataAccessLogsProps
from infra.constructs.billing_budget import BillingBudgetProps, ProjectBudget, budget_services
from infra.constructs.ci_identity import DEPLOYER_PROJECT_ROLES, GithubCiIdentity, GithubCiIdentityProps
from infra.constructs.endpoint_predictors import EndpointPredictors, EndpointPredictorsProps
from infra.constructs.image_builder import BUILDER_DESCRIPTION, BUILDER_PROJECT_ROLES, ImageBuilder
from infra.constructs.job_submitters import SUBMITTER_PROJECT_ROLES, JobSubmitters, JobSubmittersProps
from infra.constructs.model_holders import ModelHolders, ModelHoldersProps
from infra.constructs.project_services import ProjectServices, ProjectServicesProps
from infra.constructs.runtime_identity import RUNTIME_DESCRIPTION, RUNTIME_PROJECT_ROLES, RuntimeIdentity
from infra.constructs.schedule_runner import (
    BATCH_PERMISSIONS,
    DEPLOY_PERMISSIONS,
    REGISTRY_PERMISSIONS,
    SCHEDULER_DESCRIPTION,
    SCHEDULER_PERMISSIONS,
    SCHEDULER_PROJECT_ROLES,
    ScheduleRunner,
    ScheduleRunnerProps,
)
from infra.constructs.service_identity import ServiceIdentityProps
from infra.google import GoogleProvider
from infra.naming import bootstrap_stack_name, resource_names
from infra.outputs import BOOTSTRAP_OUTPUT_KEYS, planned_outputs
from infra.schedules import ScheduledRun, check_compiled

# What the identities and project IAM need; the platform stack enables the rest.
BOOTSTRAP_SERVICES = (
    "cloudresourcemanager.googleapis.com",  # project IAM
    "iam.googleapis.com",
    "iamcredentials.googleapis.com",  # short-lived tokens of the deployer (impersonation)
    "serviceusage.googleapis.com",
    "sts.googleapis.com",  # token exchange for workload identity federation
)
SERVICE_ACCOUNT_USER = "roles/iam.serviceAccountUser"
# What applying a platform stack with schedules needs besides DEPLOYER_PROJECT_ROLES: the workflows and the
# Cloud Scheduler jobs (neither has a narrower predefined role that creates them), and actAs on the schedule
# account (both name it) granted on that account only.
SCHEDULE_DEPLOYER_ROLES = ("roles/workflows.editor", "roles/cloudscheduler.admin")
STORAGE_SERVICE = "storage.googleapis.com"
STATE_PREFIX = "infra"
# Says whether the environment has a billing budget (jobs read none of it: not in BOOTSTRAP_OUTPUT_KEYS).
BUDGET_OUTPUT = "billing_budget"


class BootstrapStack(TerraformStack):
    """Stack `<env>-bootstrap` (`cdktn deploy dev-bootstrap`), its own state under `infra/<env>-bootstrap`.
    `schedules` are the environment's compiled schedules: what the schedule account may do depends on them."""

    def __init__(self, scope: Construct, cfg: EnvironmentConfig, schedules: tuple[ScheduledRun, ...] = ()
                 ) -> None:
        check_compiled(cfg, schedules)
        super().__init__(scope, bootstrap_stack_name(cfg))
        self.cfg = cfg
        names = resource_names(cfg)
        project = cfg.project_id

        GoogleProvider(self, "google", project=project, region=cfg.region)
        GcsBackend(self, bucket=cfg.state_bucket, prefix=f"{STATE_PREFIX}/{bootstrap_stack_name(cfg)}")
        enabled = ProjectServices(self, "services", ProjectServicesProps(
            project=project, services=BOOTSTRAP_SERVICES + budget_services(cfg.billing_budget))).services

        # Who read and wrote which object: the audit trail the buckets rely on (CKV_GCP_62's skip reason).
        self.storage_audit = DataAccessLogs(self, "storage-data-access-logs", DataAccessLogsProps(
            project=project, service=STORAGE_SERVICE, depends_on=tuple(enabled)))

        self.ci = GithubCiIdentity(self, "ci", GithubCiIdentityProps(
            project=project,
            pool_id=names.wif_pool_id,
            provider_id=names.wif_provider_id,
            repository=cfg.github.full_name,
            repository_id=cfg.github.repository_id,
            deploy_branch=cfg.github.deploy_branch,
            deployer_account_id=names.deployer_account_id,
            project_roles=DEPLOYER_PROJECT_ROLES + (SCHEDULE_DEPLOYER_ROLES if cfg.schedules else ())
            + (ALERT_DEPLOYER_ROLES if cfg.schedules and cfg.alerts else ()),
            depends_on=tuple(enabled),
        ))
        submitters = tuple((member_id(member), member) for member in cfg.job_submitters)
        # Submitters and CI run jobs as the runtime account and builds as the builder account; nobody else may
        # act as either, and nobody but this stack's administrator manages them.
        actors = tuple(Grant(f"{key}-sa-user", SERVICE_ACCOUNT_USER, member)
                       for key, member in (*submitters, ("ci-deployer", self.ci.member)))
        # Scheduled runs create jobs that run as the runtime account: the one account they may act as.
        self.scheduler: ScheduleRunner | None = None
        if cfg.schedules:
            self.scheduler = ScheduleRunner(self, "schedule-runner", ScheduleRunnerProps(
                project=project,
                account_id=names.scheduler_account_id,
                display_name="Scheduled retraining",
                description=SCHEDULER_DESCRIPTION,
                project_roles=SCHEDULER_PROJECT_ROLES,
                account_grants=(Grant("ci-deployer-sa-user", SERVICE_ACCOUNT_USER, self.ci.member),),
                role_id=names.scheduler_role_id,
                permissions=SCHEDULER_PERMISSIONS + (
                    REGISTRY_PERMISSIONS if any(run.registration for run in schedules) else ()) + (
                    BATCH_PERMISSIONS if any(run.batch for run in schedules) else ()) + (
                    DEPLOY_PERMISSIONS if any(run.deploy for run in schedules) else ()),
                depends_on=tuple(enabled),
            ))
        runtime_actors = actors + (
            (Grant("schedule-runner-sa-user", SERVICE_ACCOUNT_USER, self.scheduler.member),)
            if self.scheduler else ())
        self.runtime = RuntimeIdentity(self, "runtime", ServiceIdentityProps(
            project=project,
            account_id=names.runtime_account_id,
            display_name="Vertex AI training runtime",
            description=RUNTIME_DESCRIPTION,
            project_roles=RUNTIME_PROJECT_ROLES,
            account_grants=runtime_actors,
            depends_on=tuple(enabled),
        ))
        self.builder = ImageBuilder(self, "image-builder", ServiceIdentityProps(
            project=project,
            account_id=names.builder_account_id,
            display_name="Trainer image builder",
            description=BUILDER_DESCRIPTION,
            project_roles=BUILDER_PROJECT_ROLES,
            account_grants=actors,
            depends_on=tuple(enabled),
        ))
        self.submitters = JobSubmitters(self, "job-submitters", JobSubmittersProps(
            project=project, members=submitters, project_roles=SUBMITTER_PROJECT_ROLES,
            depends_on=tuple(enabled)))
        # The role the platform stack grants the submitters on the models bucket, so run_job.py can hold a
        # finished study's best model past the bucket's lifecycle (ModelHolders says why it is defined here).
        self.model_holders: ModelHolders | None = None
        if submitters:
            self.model_holders = ModelHolders(self, "model-holders", ModelHoldersProps(
                project=project, role_id=names.model_holder_role_id, depends_on=tuple(enabled)))
        # Every endpoint's predictors, each once: the role is project-wide (EndpointPredictors says why).
        predictors = {member_id(m): m for endpoint in cfg.endpoints for m in endpoint.predictors}
        self.predictors: EndpointPredictors | None = None
        if predictors:
            self.predictors = EndpointPredictors(self, "endpoint-predictors", EndpointPredictorsProps(
                project=project, role_id=names.predictor_role_id, members=tuple(predictors.items()),
                depends_on=tuple(enabled)))
        budget = cfg.billing_budget
        self.budget: ProjectBudget | None = None
        if budget is not None:
            self.budget = ProjectBudget(self, "billing-budget", BillingBudgetProps(
                project=project, project_number=cfg.project_number, display_name=f"{cfg.name_prefix} monthly",
                billing_account=budget.billing_account, amount=budget.amount, thresholds=budget.thresholds,
                email=budget.email, pubsub_topic=budget.pubsub_topic, depends_on=tuple(enabled)))
        self._add_outputs()
        # Not an output jobs read (BOOTSTRAP_OUTPUT_KEYS): the plan says whether the budget exists.
        TerraformOutput(self, BUDGET_OUTPUT, description="the project's billing budget (billing_budget)",
                        value=self.budget.budget.name if self.budget else
                        f"none: environment {cfg.name} sets no billing_budget.billing_account")

    def _output_dependencies(self) -> dict[str, list[TerraformResource]]:
        """Each output waits for the grants that make what it names usable (as in the platform stack)."""
        ci, runtime, builder = self.ci, self.runtime, self.builder
        return {
            "project": [],
            # The provider is usable once its tokens may impersonate the deployer (workloadIdentityUser).
            "workload_identity_provider": list(ci.account_grants),
            "deployer_service_account": [*ci.project_grants, *ci.account_grants],
            "runtime_service_account": [*runtime.project_grants, *runtime.account_grants],
            "builder_service_account": [*builder.project_grants, *builder.account_grants],
        }

    def _add_outputs(self) -> None:
        planned = planned_outputs(self.cfg)
        # References, so the outputs file reports what Terraform created; tests prove they equal the plan.
        values = {
            "project": planned["project"],
            "workload_identity_provider": self.ci.provider.name,
            "deployer_service_account": self.ci.account.email,
            "runtime_service_account": self.runtime.email,
            "builder_service_account": self.builder.email,
        }
        assert tuple(values) == BOOTSTRAP_OUTPUT_KEYS, "outputs must be infra.outputs.BOOTSTRAP_OUTPUT_KEYS"
        dependencies = self._output_dependencies()
        for key, value in values.items():
            TerraformOutput(self, key, value=value, description=f"{key} (see infra/outputs.py)",
                            depends_on=dependencies[key] or None)
