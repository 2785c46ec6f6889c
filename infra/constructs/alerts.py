"""Alerts on scheduled retraining (`alerts:` in the environment config): a run that failed, and a schedule
that has stopped producing models, each notify an email channel.

Both read Cloud Workflows' own metric, `workflows.googleapis.com/finished_execution_count` (a DELTA count
on the monitored resource `workflows.googleapis.com/Workflow`, labelled by `workflow_id` and `location`,
metric label `status`: SUCCEEDED, FAILED or CANCELLED), written when an execution ends. Vertex AI writes no
metric of a CustomJob's state; it needs none here: a schedule's execution fails whenever its job does (the
connector raises on a failed job and the workflow raises on any state but SUCCEEDED, infra.schedules), so a
FAILED execution is "the job or the workflow failed". A cancelled execution is someone's act and is not
alerted; if runs keep not succeeding, the second policy says so.

"No successful run in N days" cannot be a metric-absence condition (at most 23.5 hours) and MQL is
deprecated, so it is a PromQL condition, whose queries may read up to 2 years back: no SUCCEEDED point in
the last N days, while the workflow ran at some time in the year before that. The second half keeps a new
schedule quiet until it has had N days (and a schedule silent for a year stops alerting: its incident was
opened long before). A paused schedule gets no such policy: it is not meant to run.

Neither sees a trigger that cannot start an execution at all (Cloud Scheduler refused by the Workflow
Executions API: a missing grant, a deleted workflow) on a schedule that has never run, so a third policy
matches Cloud Scheduler's own log of a failed attempt (severity ERROR) of the schedule's job.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from infra.cdk import Construct, TerraformResource
from infra.config import EMAIL, MAX_NO_SUCCESS_DAYS, SCHEDULE_NAME
from infra.constructs import validation as v
from infra.constructs.scheduled_job import WORKFLOW_NAME
from infra.google import (
    MonitoringAlertPolicy,
    MonitoringAlertPolicyAlertStrategy,
    MonitoringAlertPolicyAlertStrategyNotificationRateLimit,
    MonitoringAlertPolicyConditions,
    MonitoringAlertPolicyConditionsConditionMatchedLog,
    MonitoringAlertPolicyConditionsConditionPrometheusQueryLanguage,
    MonitoringAlertPolicyConditionsConditionThreshold,
    MonitoringAlertPolicyConditionsConditionThresholdAggregations,
    MonitoringAlertPolicyConditionsConditionThresholdTrigger,
    MonitoringAlertPolicyDocumentation,
    MonitoringNotificationChannel,
)

# What the deployer needs to apply these (the bootstrap stack grants them with schedules and alerts): alert
# policies, and the channel they notify (creating a policy reads its channels).
ALERT_DEPLOYER_ROLES = ("roles/monitoring.alertPolicyEditor", "roles/monitoring.notificationChannelEditor")

WORKFLOW_RESOURCE = "workflows.googleapis.com/Workflow"
FINISHED_METRIC = "workflows.googleapis.com/finished_execution_count"
# The same metric as PromQL names it: the first '/' becomes ':', every other '.' and '/' '_'.
FINISHED_PROMQL = "workflows_googleapis_com:finished_execution_count"
# How far back the no-success query reads in all (Cloud Monitoring's PromQL alerting reads up to 2 years).
HISTORY_DAYS = 365
# A failed execution is one point; sum each series over this window and alert on any.
FAILED_WINDOW_S = 300
# Each failure its own incident (and email): the incident closes once no failure point is left in the
# window, and at the latest after this (Cloud Monitoring's minimum).
FAILED_AUTO_CLOSE_S = 1800
# The no-success query is about days: evaluating it every 5 minutes is plenty (a multiple of 30 s).
NO_SUCCESS_EVALUATION_S = 300
# A log-matching policy must limit its notifications: a failing trigger retries within 10 minutes
# (infra.schedules), so this is one email per failed tick.
TRIGGER_NOTIFY_PERIOD_S = 3600


@dataclass(frozen=True)
class AlertedSchedule:
    """A schedule as the alerts see it: its workflow (name and region), what it runs, and whether it is
    meant to run (a paused one is not missed)."""

    name: str  # the config's schedule name (construct ids)
    workflow: str  # the workflow's name (infra.naming)
    region: str
    job_file: str
    paused: bool = False


@dataclass(frozen=True)
class ScheduleAlertsProps:
    project: str
    display_name: str  # the channel's; policies are named by their workflow
    email: str
    no_success_days: int
    schedules: tuple[AlertedSchedule, ...]
    labels: Mapping[str, str] = None  # type: ignore[assignment]
    depends_on: Sequence[TerraformResource] = ()

    def validate(self, where: str) -> None:
        v.check_project(where, self.project)
        v.check_text(where, "display_name", self.display_name, 100)
        v.check_str(where, "email", self.email, EMAIL, "an email address")
        v.check_positive(where, "no_success_days", self.no_success_days, MAX_NO_SUCCESS_DAYS)
        v.check(where, "schedules", self.schedules, isinstance(self.schedules, tuple) and bool(self.schedules)
                and all(isinstance(s, AlertedSchedule) for s in self.schedules),
                "a non-empty tuple of AlertedSchedule")
        for i, schedule in enumerate(self.schedules):
            field = f"schedules[{i}]"
            v.check_str(where, f"{field}.name", schedule.name, SCHEDULE_NAME, "a schedule name")
            v.check_str(where, f"{field}.workflow", schedule.workflow, WORKFLOW_NAME, "a workflow name")
            v.check_region(where, f"{field}.region", schedule.region)
            v.check_text(where, f"{field}.job_file", schedule.job_file, 200)
            v.check(where, f"{field}.paused", schedule.paused, isinstance(schedule.paused, bool), "a bool")
            v.check_once(where, "schedules", [s.name for s in self.schedules], i, "schedule")
        v.check_labels(where, self.labels or {})


def failed_filter(schedule: AlertedSchedule) -> str:
    """The FAILED executions of the schedule's workflow (a Monitoring filter)."""
    return (f'resource.type = "{WORKFLOW_RESOURCE}" AND resource.label.workflow_id = "{schedule.workflow}" '
            f'AND resource.label.location = "{schedule.region}" AND metric.type = "{FINISHED_METRIC}" '
            'AND metric.label.status = "FAILED"')


def trigger_failed_filter(schedule: AlertedSchedule) -> str:
    """Cloud Scheduler's log entries of a failed attempt of the schedule's job (a Logging filter)."""
    return (f'resource.type = "cloud_scheduler_job" AND resource.labels.job_id = "{schedule.workflow}" '
            f'AND resource.labels.location = "{schedule.region}" AND severity >= ERROR')


def no_success_query(schedule: AlertedSchedule, days: int) -> str:
    """PromQL: a series when the workflow had no SUCCEEDED execution in `days` days but ran before them.
    No success is no point at all, or (should the service write zeros between executions) points that sum
    to 0."""
    executions = (f'{FINISHED_PROMQL}{{monitored_resource="{WORKFLOW_RESOURCE}",'
                  f'workflow_id="{schedule.workflow}",location="{schedule.region}"')
    succeeded = f'{executions},status="SUCCEEDED"}}[{days}d]'
    return (f'(absent_over_time({succeeded}) or sum(sum_over_time({succeeded})) < 1) '
            f'and on() count_over_time({executions}}}[{HISTORY_DAYS - days}d] offset {days}d)')


class ScheduleAlerts(Construct):
    """The email notification channel and, per schedule, a policy on its failed executions, one on its
    trigger's failed attempts and (unpaused) one on its missing successes. Grants nothing: the deployer's
    Monitoring roles are the bootstrap stack's (ALERT_DEPLOYER_ROLES)."""

    def __init__(self, scope: Construct, id_: str, props: ScheduleAlertsProps) -> None:
        v.validate_props(type(self), id_, props)  # first: bad props leave nothing half-built in the stack
        super().__init__(scope, id_)
        depends_on = list(props.depends_on) or None
        labels = dict(props.labels or {})
        self.channel = MonitoringNotificationChannel(
            self, "email", project=props.project, type="email", display_name=f"{props.display_name} (email)",
            labels={"email_address": props.email}, user_labels=labels or None, depends_on=depends_on)
        self._common = {"project": props.project, "combiner": "OR", "user_labels": labels or None,
                        "notification_channels": [self.channel.name], "depends_on": depends_on}
        self.failed: dict[str, MonitoringAlertPolicy] = {}
        self.trigger_failed: dict[str, MonitoringAlertPolicy] = {}
        self.no_success: dict[str, MonitoringAlertPolicy] = {}
        days = props.no_success_days
        for schedule in props.schedules:
            where = f"workflow `{schedule.workflow}` in `{schedule.region}`, job file `{schedule.job_file}`"
            executions = (f"gcloud workflows executions list {schedule.workflow} "
                          f"--location={schedule.region} --limit=5")
            self.failed[schedule.name] = self._policy(
                f"failed-{schedule.name}", f"{schedule.workflow}: a scheduled run failed", "ERROR",
                MonitoringAlertPolicyConditions(
                    display_name="a FAILED execution (the workflow, or the job it waits for)",
                    condition_threshold=MonitoringAlertPolicyConditionsConditionThreshold(
                        filter=failed_filter(schedule),
                        comparison="COMPARISON_GT", threshold_value=0, duration="0s",
                        aggregations=[MonitoringAlertPolicyConditionsConditionThresholdAggregations(
                            alignment_period=f"{FAILED_WINDOW_S}s", per_series_aligner="ALIGN_SUM")],
                        trigger=MonitoringAlertPolicyConditionsConditionThresholdTrigger(count=1),
                        evaluation_missing_data="EVALUATION_MISSING_DATA_INACTIVE")),
                f"A scheduled run of schedule `{schedule.name}` failed ({where}): its job failed or the "
                f"workflow did. The error is the failed execution's: `{executions} --filter=state=FAILED`.",
                alert_strategy=MonitoringAlertPolicyAlertStrategy(auto_close=f"{FAILED_AUTO_CLOSE_S}s"))
            self.trigger_failed[schedule.name] = self._policy(
                f"trigger-failed-{schedule.name}", f"{schedule.workflow}: the trigger could not start a run",
                "ERROR",
                MonitoringAlertPolicyConditions(
                    display_name="a failed Cloud Scheduler attempt",
                    condition_matched_log=MonitoringAlertPolicyConditionsConditionMatchedLog(
                        filter=trigger_failed_filter(schedule))),
                f"Cloud Scheduler could not start a run of schedule `{schedule.name}` ({where}): see the "
                f"attempt's status in `gcloud scheduler jobs describe {schedule.workflow} "
                f"--location={schedule.region}` and its log entry.",
                alert_strategy=MonitoringAlertPolicyAlertStrategy(
                    auto_close=f"{FAILED_AUTO_CLOSE_S}s",
                    notification_rate_limit=MonitoringAlertPolicyAlertStrategyNotificationRateLimit(
                        period=f"{TRIGGER_NOTIFY_PERIOD_S}s")))
            if schedule.paused:
                continue
            self.no_success[schedule.name] = self._policy(
                f"no-success-{schedule.name}", f"{schedule.workflow}: no successful run in {days} days",
                "WARNING",
                MonitoringAlertPolicyConditions(
                    display_name=f"no SUCCEEDED execution in {days} days",
                    condition_prometheus_query_language=(
                        MonitoringAlertPolicyConditionsConditionPrometheusQueryLanguage(
                            query=no_success_query(schedule, days), duration="0s",
                            evaluation_interval=f"{NO_SUCCESS_EVALUATION_S}s"))),
                f"Schedule `{schedule.name}` ({where}) has produced no model in {days} days: its runs fail "
                f"(`{executions}`) or none starts (`gcloud scheduler jobs describe {schedule.workflow} "
                f"--location={schedule.region}`: paused, or its last attempt's status).")

    def _policy(self, id_: str, display_name: str, severity: str, condition: MonitoringAlertPolicyConditions,
                documentation: str, **extra: object) -> MonitoringAlertPolicy:
        """One condition, notifying the channel; `documentation` is the email's text (markdown)."""
        return MonitoringAlertPolicy(
            self, id_, display_name=display_name, severity=severity, conditions=[condition],
            documentation=MonitoringAlertPolicyDocumentation(mime_type="text/markdown",
                                                             content=documentation),
            **self._common, **extra)
