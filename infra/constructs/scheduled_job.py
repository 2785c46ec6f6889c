from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from common.model_registry import (
    ALIAS,
    ALIAS_RULE,
    DEFAULT_ALIAS,
    MAX_ALIASES,
    metric_label_key,
    writer_labels,
)
from infra.cdk import Construct, TerraformResource
from infra.config import LABEL_KEY, SERVICE_ACCOUNT_EMAIL
from infra.constructs import validation as v
from infra.google import (
    CloudSchedulerJob,
    CloudSchedulerJobHttpTarget,
    CloudSchedulerJobHttpTargetOauthToken,
    CloudSchedulerJobRetryConfig,
    WorkflowsWorkflow,
)
from infra.schedules import (
    ATTEMPT_DEADLINE_S,
    GOALS,
    MAX_BACKOFF_S,
    MAX_RETRY_DURATION_S,
    MIN_BACKOFF_S,
    RETRY_COUNT,
    ScheduledBatch,
    ScheduledDeploy,
    ScheduledRegistration,
    ScheduledRun,
    workflow_source,
)

EXECUTIONS_API = "https://workflowexecutions.googleapis.com/v1"
CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
WORKFLOW_NAME = re.compile(r"^[a-z][a-z0-9-]{0,62}[a-z0-9]$")
ENV_VAR = re.compile(r"^[A-Z][A-Z0-9_]{0,39}$")
# Vertex AI: a model id (UploadModelRequest.modelId).
MODEL_ID = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")


@dataclass(frozen=True)
class ScheduledJobProps:
    project: str
    name: str  # the workflow's and the Cloud Scheduler job's name (infra.naming)
    run: ScheduledRun
    # The email both run as: Cloud Scheduler's token to start an execution, the workflow's calls to Vertex AI.
    service_account: str
    # (placeholder in the request, workflow variable, value): values only known at deploy time (references),
    # which the workflow reads from its environment instead of the request carrying the planned placeholder.
    late_values: tuple[tuple[str, str, str], ...] = ()
    labels: Mapping[str, str] = None  # type: ignore[assignment]
    kms_key: str | None = None
    depends_on: Sequence[TerraformResource] = ()

    def validate(self, where: str) -> None:
        v.check_project(where, self.project)
        v.check_str(where, "name", self.name, WORKFLOW_NAME, "1-64 lowercase letters, digits or hyphens")
        v.check(where, "run", self.run, isinstance(self.run, ScheduledRun), "an infra.schedules.ScheduledRun")
        v.check_region(where, "run.region", self.run.region)
        v.check(where, "run.parent", self.run.parent,
                self.run.parent == f"projects/{self.project}/locations/{self.run.region}",
                f"projects/{self.project}/locations/<region>: jobs of this project")
        v.check(where, "run.body", self.run.body, self.run.run_id_placeholder in self.run.body,
                "a request that names its run id (the placeholder) somewhere, e.g. displayName")
        v.check_str(where, "service_account", self.service_account, SERVICE_ACCOUNT_EMAIL,
                    "a service account email")
        for i, item in enumerate(self.late_values):
            v.check(where, f"late_values[{i}]", item, isinstance(item, tuple) and len(item) == 3
                    and ENV_VAR.fullmatch(str(item[1])) is not None, "(placeholder, VARIABLE_NAME, value)")
        v.check_labels(where, self.labels or {})
        v.check_kms_key(where, self.kms_key, self.run.region)
        if self.run.registration is not None:
            check_registration(where, self.run)
        if self.run.batch is not None:
            check_batch(where, self.run)
        if self.run.deploy is not None:
            check_deploy(where, self.run)


def check_registration(where: str, run: ScheduledRun) -> None:
    """What the Model Registry would refuse in the middle of a run, refused at synthesis instead."""
    reg, name = run.registration, "run.registration"
    v.check(where, name, reg, isinstance(reg, ScheduledRegistration),
            "an infra.schedules.ScheduledRegistration")
    v.check_str(where, f"{name}.model_id", reg.model_id, MODEL_ID,
                "a model id: a lowercase letter, then up to 62 lowercase letters, digits, '_' or '-'")
    v.check_text(where, f"{name}.display_name", reg.display_name, 128)
    v.check(where, f"{name}.aliases", reg.aliases, isinstance(reg.aliases, tuple)
            and len(reg.aliases) <= MAX_ALIASES and DEFAULT_ALIAS not in reg.aliases
            and all(v.matches(ALIAS, a) for a in reg.aliases) and len(set(reg.aliases)) == len(reg.aliases),
            f"a tuple of at most {MAX_ALIASES} distinct version aliases such as production ({ALIAS_RULE}), "
            f"not {DEFAULT_ALIAS} (it moves with the first)")
    # The metric names a label of each version (as a label key), beside the job's.
    v.check(where, f"{name}.metric", reg.metric, isinstance(reg.metric, str) and reg.metric != ""
            and v.matches(LABEL_KEY, metric_label_key(reg.metric)), "a metric id")
    v.check(where, f"{name}.goal", reg.goal, reg.goal in GOALS, " or ".join(GOALS))
    labels = dict(reg.labels) if isinstance(reg.labels, tuple) else None
    reserved = writer_labels(reg.metric)
    most = v.MAX_LABELS - len(reserved)
    v.check(where, f"{name}.labels", reg.labels, labels is not None and list(labels) == sorted(labels)
            and len(labels) == len(reg.labels) <= most and not set(reserved) & set(labels),
            f"(key, value) pairs sorted by key, at most {most}, none named {', '.join(reserved)}")
    v.check_labels(where, labels)
    try:
        spec = json.loads(reg.container_spec)
    except (TypeError, ValueError):
        spec = None
    v.check(where, f"{name}.container_spec", reg.container_spec,
            isinstance(spec, dict) and isinstance(spec.get("imageUri"), str),
            "a ModelContainerSpec as JSON text, with its imageUri")
    display = run.body_dict().get("displayName")
    v.check(where, "run.body.displayName", display,
            isinstance(display, str) and run.run_id_placeholder in display,
            "the run id (the placeholder): the registration's results and log lines name the run by it")


def check_batch(where: str, run: ScheduledRun) -> None:
    """A batch prediction predicts with the registry's first alias of this schedule's own model, in its
    project: what the runner's grants and the workflow's order (after registering) are for."""
    batch, reg = run.batch, run.registration
    v.check(where, "run.batch", batch, isinstance(batch, ScheduledBatch) and reg is not None
            and len(reg.aliases) > 0, "an infra.schedules.ScheduledBatch, of a run registered with an alias")
    model = f"{run.parent}/models/{reg.model_id}@{reg.aliases[0]}"
    v.check(where, "run.batch.body.model", batch.body_dict().get("model"),
            batch.body_dict().get("model") == model and batch.model == f"{reg.model_id}@{reg.aliases[0]}",
            f"{model}: the version the gate's first alias names")


def check_deploy(where: str, run: ScheduledRun) -> None:
    """A canary deploys the first alias of this schedule's own model, to an endpoint of its project."""
    canary, reg = run.deploy, run.registration
    v.check(where, "run.deploy", canary, isinstance(canary, ScheduledDeploy) and reg is not None
            and len(reg.aliases) > 0, "an infra.schedules.ScheduledDeploy, of a run registered with an alias")
    model = f"{run.parent}/models/{reg.model_id}@{reg.aliases[0]}"
    v.check(where, "run.deploy.deployed_model.model", canary.deployed_model_dict().get("model"),
            canary.deployed_model_dict().get("model") == model, f"{model}: the version the gate moved")
    v.check(where, "run.deploy.endpoint", canary.endpoint,
            canary.endpoint.startswith(f"{run.parent}/endpoints/"),
            f"{run.parent}/endpoints/<id>: an endpoint of this project and region")
    v.check(where, "run.deploy.traffic", canary.traffic, 1 <= canary.traffic <= 100, "1..100")


class ScheduledJob(Construct):
    """One schedule: a Cloud Workflows workflow that creates the compiled CustomJob and waits for its end (and
    with a registration, registers the model in the Model Registry), and the Cloud Scheduler job that starts
    an execution of it at each cron time.

    No Composer: a workflow waiting on a job costs a few billable polling steps, and an idle schedule nothing.
    Its identity (created in the bootstrap stack) may start executions, create and read Vertex AI jobs, act
    as the runtime account and, where a schedule registers, register models (and read the models bucket);
    this construct grants nothing (the provider has no workflow-level IAM resource).
    """

    def __init__(self, scope: Construct, id_: str, props: ScheduledJobProps) -> None:
        v.validate_props(type(self), id_, props)  # first: bad props leave nothing half-built in the stack
        super().__init__(scope, id_)
        run = props.run
        self.source = workflow_source(run, {placeholder: var for placeholder, var, _ in props.late_values})
        self.workflow = WorkflowsWorkflow(
            self, "workflow",
            project=props.project,
            region=run.region,
            name=props.name,
            description=f"Runs {run.job_file} on schedule {run.name!r} (managed by infra/)",
            service_account=props.service_account,
            # Terraform reads "${" and "%{" in any string as its own template syntax.
            source_contents=escape_terraform(self.source),
            user_env_vars={var: value for _, var, value in props.late_values} or None,
            call_log_level="LOG_ERRORS_ONLY",
            labels=dict(props.labels or {}),
            crypto_key_name=props.kms_key,
            # Code, not data: removing a schedule from the config removes its workflow.
            deletion_protection=False,
            depends_on=list(props.depends_on) or None,
        )
        self.scheduler = CloudSchedulerJob(
            self, "trigger",
            project=props.project,
            region=run.region,
            name=props.name,
            description=f"Starts workflow {props.name} ({run.job_file}) at {run.cron} {run.time_zone}",
            schedule=run.cron,
            time_zone=run.time_zone,
            paused=run.paused,
            attempt_deadline=f"{ATTEMPT_DEADLINE_S}s",
            retry_config=CloudSchedulerJobRetryConfig(
                retry_count=RETRY_COUNT, min_backoff_duration=f"{MIN_BACKOFF_S}s",
                max_backoff_duration=f"{MAX_BACKOFF_S}s", max_doublings=2,
                max_retry_duration=f"{MAX_RETRY_DURATION_S}s"),
            http_target=CloudSchedulerJobHttpTarget(
                uri=f"{EXECUTIONS_API}/{self.workflow.id}/executions",
                http_method="POST",
                headers={"Content-Type": "application/json"},
                body=base64.b64encode(json.dumps({"callLogLevel": "LOG_ERRORS_ONLY"}).encode()).decode(),
                oauth_token=CloudSchedulerJobHttpTargetOauthToken(
                    service_account_email=props.service_account, scope=CLOUD_PLATFORM_SCOPE),
            ),
            depends_on=list(props.depends_on) or None,
        )


def escape_terraform(text: str) -> str:
    return text.replace("${", "$${").replace("%{", "%%{")
