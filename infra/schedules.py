"""Scheduled retraining as data (pure: stdlib + yaml, no CDK): what a scheduled run sends, and the Cloud
Workflows program that sends it.

A schedule in `infra/environments/<env>.yaml` names a job file. The jobs layer compiles it exactly as
`run_job.py --dry-run` does (scripts/synth.py hands the result to the stack as a `ScheduledRun`, since infra/
never imports jobs/), with one difference: the job id is a placeholder that each run replaces with its own
id, `<job name>-<UTC yyyymmdd-hhmmss>-<first 6 chars of the execution id>`, the shape run_job.py gives
ids. So every run has its own display name and output directory, and no run overwrites another's model.

    workflow_source(run, {planned_tensorboard: "TENSORBOARD"})   # the program, as YAML

A retried trigger never starts a second run: Cloud Scheduler retries only a call of the Workflow Executions
API that failed or timed out, within `MAX_RETRY_DURATION_S`, and such a call may still have started an
execution. Before creating its job, each execution lists the jobs carrying this definition's
`submission_hash` label (the label run_job.py reuses live jobs by) and returns one that is still running
or was created within `DUPLICATE_WINDOW_S`. Schedules must run further apart than that window
(`MIN_SCHEDULE_GAP_MINUTES`, checked in infra.config), so a real next run is never taken for a retry; a run
still going when the next one is due is followed instead of doubled.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

# Cloud Scheduler's retries of the trigger (its default is none: a transient API error would skip a day).
RETRY_COUNT = 3
MIN_BACKOFF_S = 30
MAX_BACKOFF_S = 120
MAX_RETRY_DURATION_S = 600
ATTEMPT_DEADLINE_S = 60
# A job created this recently by the same definition is the run a retried trigger already started.
DUPLICATE_WINDOW_S = 900
assert DUPLICATE_WINDOW_S >= MAX_RETRY_DURATION_S + ATTEMPT_DEADLINE_S, "a retry may come after the window"
MIN_SCHEDULE_GAP_MINUTES = 2 * DUPLICATE_WINDOW_S // 60
# Vertex AI's CustomJob timeout when scheduling.timeout is absent, and how long a job may wait for capacity
# before it runs: the workflow waits (and looks back for live runs) at most their sum.
VERTEX_DEFAULT_TIMEOUT_S = 7 * 86400
QUEUE_ALLOWANCE_S = 86400
CONNECTOR_MAX_TIMEOUT_S = 365 * 86400
CREATE_CONNECTOR = "googleapis.aiplatform.v1.projects.locations.customJobs.create"
LIST_CONNECTOR = "googleapis.aiplatform.v1.projects.locations.customJobs.list"
EXECUTION_ID_VAR = "GOOGLE_CLOUD_WORKFLOW_EXECUTION_ID"  # set by Workflows in every execution
RUN_ID = "run_id"  # the workflow variable holding this run's job id


@dataclass(frozen=True)
class ScheduledRun:
    """One schedule, compiled: the CreateCustomJobRequest a run sends, with the job id left as a placeholder.

    `body` is the request's customJob as canonical JSON text (the dataclass stays frozen and hashable); every
    occurrence of `run_id_placeholder` in it is where the dry-run has its job id.
    """

    name: str
    env: str
    job_file: str
    cron: str
    time_zone: str
    paused: bool
    parent: str
    region: str
    body: str
    job_name: str
    run_id_placeholder: str
    submission_hash: str
    label: str  # the label key holding submission_hash (jobs.definition.compile.SUBMISSION_LABEL)
    timeout_s: int

    def body_dict(self) -> dict[str, Any]:
        return json.loads(self.body)


def wait_seconds(run: ScheduledRun) -> int:
    """How long an execution waits for its job: the job's own timeout plus time in the queue."""
    return min(run.timeout_s + QUEUE_ALLOWANCE_S, CONNECTOR_MAX_TIMEOUT_S)


def expression(text: str, substitutions: Mapping[str, str]) -> str:
    """A string of the request as a Workflows value: itself, or `${"a" + expr + "b"}` where it holds a
    placeholder (each substituted by its expression) or a literal `${` Workflows would otherwise evaluate."""
    marks = [m for m in substitutions if m in text]
    if not marks and "${" not in text:
        return text
    parts, rest = [], text
    while rest:
        found = [(rest.find(m), m) for m in marks if m in rest]
        if not found:
            parts.append(json.dumps(rest, ensure_ascii=False))
            break
        at, mark = min(found)
        if at:
            parts.append(json.dumps(rest[:at], ensure_ascii=False))
        parts.append(substitutions[mark])
        rest = rest[at + len(mark):]
    return "${" + " + ".join(parts) + "}"


def _substitute(value: Any, substitutions: Mapping[str, str]) -> Any:
    if isinstance(value, dict):
        return {k: _substitute(v, substitutions) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, substitutions) for v in value]
    if isinstance(value, str):
        return expression(value, substitutions)
    return value


def workflow_program(run: ScheduledRun, late_values: Mapping[str, str]) -> dict[str, Any]:
    """The workflow as data. `late_values` maps a planned placeholder in the body (the TensorBoard's
    PENDING_DEPLOY name) to the workflow environment variable the stack fills with the deployed value."""
    substitutions = {run.run_id_placeholder: RUN_ID,
                     **{placeholder: f'sys.get_env("{var}")' for placeholder, var in late_values.items()}}
    body = _substitute(run.body_dict(), substitutions)
    lookback = wait_seconds(run)
    recent_filter = (f'${{"labels.{run.label}=\\"{run.submission_hash}\\" AND create_time>\\"" + '
                     f'time.format(started - {lookback}) + "\\""}}')
    return {"main": {"steps": [
        {"init": {"assign": [
            {"parent": run.parent},
            {"started": "${sys.now()}"},
            # "2026-11-23T03:00:00.123Z" -> "20261123T030000.123Z"
            {"execution": f'${{sys.get_env("{EXECUTION_ID_VAR}")}}'},
            {"stamp": '${text.replace_all_regex(time.format(started), "[-:]", "")}'},
            {RUN_ID: f'${{"{run.job_name}-" + text.substring(stamp, 0, 8) + "-" + '
                     f'text.substring(stamp, 9, 15) + "-" + text.substring(execution, 0, 6)}}'},
            {"duplicate_of": None},
        ]}},
        {"list_recent_runs": {
            "call": LIST_CONNECTOR,
            "args": {"parent": "${parent}", "region": run.region, "filter": recent_filter, "pageSize": 100},
            "result": "recent",
        }},
        {"find_duplicate": {"for": {
            "value": "job",
            "in": '${default(map.get(recent, "customJobs"), [])}',
            "steps": [{"check_job": {"switch": [{
                # Vertex writes createTime with up to nine fractional digits and time.parse takes at most
                # six: compare whole seconds (the window is hours).
                "condition": f'${{not("endTime" in job) or '
                             f'time.parse(text.substring(job.createTime, 0, 19) + "Z") > started - '
                             f'{DUPLICATE_WINDOW_S}}}',
                # Any match will do (duplicates are rare), so no `break`: the loop is over a handful of jobs.
                "steps": [{"remember": {"assign": [{"duplicate_of": "${job}"}]}}],
            }]}}],
        }}},
        {"skip_duplicate": {"switch": [{
            "condition": "${duplicate_of != null}",
            "return": {"run": "${duplicate_of.name}", "state": "${duplicate_of.state}",
                       "duplicate": True},
        }]}},
        {"log_run": {"call": "sys.log", "args": {
            "severity": "INFO", "text": f'${{"starting " + {RUN_ID} + " ({run.job_file})"}}'}}},
        # Waits (polling) until the job ends; a job that fails raises OperationError: the execution fails.
        {"create_and_wait": {
            "call": CREATE_CONNECTOR,
            "args": {"parent": "${parent}", "region": run.region, "body": body,
                     "connector_params": {"timeout": lookback, "polling_policy": {
                         "initial_delay": 60, "multiplier": 1.5, "max_delay": 600}}},
            "result": "finished",
        }},
        {"check_state": {"switch": [{
            "condition": '${finished.state != "JOB_STATE_SUCCEEDED"}',
            "raise": '${"job " + finished.name + " ended " + finished.state}',
        }]}},
        {"done": {"return": {"run": "${finished.name}", "state": "${finished.state}", "duplicate": False}}},
    ]}}


def workflow_source(run: ScheduledRun, late_values: Mapping[str, str]) -> str:
    return yaml.safe_dump(workflow_program(run, late_values), sort_keys=False, width=1_000_000,
                          allow_unicode=True)
