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

A schedule whose definition has a `registry:` block (`ScheduledRun.registration`) also puts each successful
run's model into the Vertex AI Model Registry (`register` below) by the rule run_job.py follows
(common/model_registry.py): one version per run, found again by its `vertex_job` label, the job's id (so
neither an execution nor a `run_job.py --follow` of the run uploads it twice), and the definition's aliases
moved to it by the evaluation gate's rules (the first alias taking `default` along). A failed job
registers nothing. A run whose registration failed (the execution fails)
is registered by a later execution of the schedule that still lists it (`recent`): the next day's run, or one
started by hand. The duplicate path registers nothing: the execution that started that run is registering
it, and two executions registering one run at once could both upload.

A schedule with `batch_predict:` (`ScheduledRun.batch`) then creates a BatchPredictionJob of
`<model>@<first alias>`: the request `run_job.py batch-predict` builds for the same flags (compiled by the
jobs layer with this run's id and start time as placeholders), sent once this run is registered, whether or
not the gate moved the alias: it predicts with whatever version the alias names then. Only where the alias
names no version (this run has no metric and none held it) is there nothing to run; that is logged. The
request carries the `submission_hash` label `run_job.py batch-predict` gives the same request
(common/submission.py), computed by the workflow from the run's own request (it holds the run's id), so a
`run_job.py batch-predict` retry of it reuses the run's job. The workflow does not itself look for a live job
with the label before creating one: only the execution that started a run reaches its batch (a retried
trigger returns as a duplicate first), and a live job of an earlier run with the same label (a
`batch_predict:` without ${job.id}) is no stand-in for this run's, which predicts with the version the alias
names now.

A schedule with `deploy:` (`ScheduledRun.deploy`) deploys `<model>@<first alias>` to an endpoint as a canary
when the gate moved that alias to this run's version (not when it was kept or already held): the
DeployModelRequest `run_job.py deploy` sends (jobs.definition.deployment), its static part compiled by the
jobs layer, its split and rollback record computed here from the endpoint as read then, by the same rules
(the new version its `traffic`, the models there the rest in proportion by largest remainders, the split
before recorded in the display name); a version deployed there already is not deployed again. No smoke
prediction: that is `run_job.py deploy`'s.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from common.model_registry import (
    GATE,
    JOB_LABEL,
    JOB_NAME_PREFIX,
    KEPT,
    LABEL_FILTER,
    MAX_LABEL_CHARS,
    MOVED,
    NOT_LABEL_CHARS,
    aliases_to_merge,
    metric_label_key,
    version_description,
)
from common.submission import SUBMISSION_LABEL, canonical_text, workflows_digest

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
SUCCEEDED = "JOB_STATE_SUCCEEDED"

# Batch prediction after registration (schedules with batch_predict): the connector waits for the job's end.
BATCH_CONNECTOR = "googleapis.aiplatform.v1.projects.locations.batchPredictionJobs.create"
BATCH_TIMEOUT_S = 86400
# Where the batch request's display name has the run's start time (run_job.py's "%Y%m%d-%H%M%S").
BATCH_STAMP_PLACEHOLDER = "YYYYMMDD-HHMMSS"

# A canary deploy after the gate moved the alias (schedules with deploy:): the endpoint as it is, then
# deployModel, whose connector waits for the deployment.
GET_ENDPOINT_CONNECTOR = "googleapis.aiplatform.v1.projects.locations.endpoints.get"
DEPLOY_CONNECTOR = "googleapis.aiplatform.v1.projects.locations.endpoints.deployModel"
DEPLOY_TIMEOUT_S = 3600

# Model Registry (schedules with a registration). The upload connector waits for the upload's long-running
# operation; `models/<id>@<alias>` names the version holding an alias; mergeVersionAliases adds an alias to
# a version (moving it from the one holding it).
LIST_VERSIONS_CONNECTOR = "googleapis.aiplatform.v1.projects.locations.models.listVersions"
GET_MODEL_CONNECTOR = "googleapis.aiplatform.v1.projects.locations.models.get"
UPLOAD_CONNECTOR = "googleapis.aiplatform.v1.projects.locations.models.upload"
MERGE_ALIASES_CONNECTOR = "googleapis.aiplatform.v1.projects.locations.models.mergeVersionAliases"
READ_OBJECT_CONNECTOR = "googleapis.storage.v1.objects.get"
MODEL_DIR = "model"  # Vertex AI's AIP_MODEL_DIR: <baseOutputDirectory.outputUriPrefix>/model
METRICS_FILE = "metrics.json"  # the trainer's, in the model directory: {"eval": {metric: value}, ...}
GOALS = ("MAXIMIZE", "MINIMIZE")
UPLOAD_TIMEOUT_S = 1800
# An execution registers its run within this long after the job ends (the upload's wait, and a few calls
# around it); only a run that ended longer ago is one a later execution registers.
REGISTER_GRACE_S = UPLOAD_TIMEOUT_S + 600


@dataclass(frozen=True)
class ScheduledRegistration:
    """Where a schedule's runs go in the Model Registry (the definition's `registry:` block, compiled by the
    jobs layer): model `model_id` (created by the first run), `aliases` moved by the evaluation gate on
    `metric` (`goal` MAXIMIZE or MINIMIZE, read from each version's metrics.json), each version labelled with
    `labels`, served by `container_spec` (a ModelContainerSpec as canonical JSON text, so the dataclass
    stays frozen and hashable). The artifacts are each job's own model directory, read from the job."""

    model_id: str
    display_name: str
    aliases: tuple[str, ...]
    labels: tuple[tuple[str, str], ...]  # sorted by key
    metric: str
    goal: str
    container_spec: str

    def container_spec_dict(self) -> dict[str, Any]:
        return json.loads(self.container_spec)


@dataclass(frozen=True)
class ScheduledBatch:
    """A schedule's batch prediction (`batch_predict:`, compiled by the jobs layer): `body` is the
    BatchPredictionJob `run_job.py batch-predict --dry-run` prints for `model@alias` (canonical JSON text),
    with the run id placeholder in its input and output where the config has ${job.id}, and
    BATCH_STAMP_PLACEHOLDER where the dry-run has its time stamp. Its submission_hash label is that of this
    placeholder body: the workflow gives each run's request its own (common.submission)."""

    body: str
    model: str  # "<model id>@<alias>", as the body names it

    def body_dict(self) -> dict[str, Any]:
        return json.loads(self.body)


@dataclass(frozen=True)
class ScheduledDeploy:
    """A schedule's canary (`deploy:`, compiled by the jobs layer from `run_job.py deploy`'s rules): the
    DeployModelRequest's parts that do not depend on the endpoint (`deployed_model`, canonical JSON text
    without its displayName), the endpoint, the new version's `traffic`, and the rule's constants: the
    split's key for the new model and the display name's record (`record_prefix` + "<id>=<percent>,..."
    sorted by id, or `record_none`), at most `max_display_name` characters."""

    endpoint: str  # the endpoint's resource name
    endpoint_name: str  # its name in the environment's endpoints
    model: str  # "<model id>@<alias>", as deployed_model names it
    deployed_model: str
    traffic: int
    new_key: str
    record_prefix: str
    record_none: str
    max_display_name: int

    def deployed_model_dict(self) -> dict[str, Any]:
        return json.loads(self.deployed_model)


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
    label: str  # the label key holding submission_hash (common.submission.SUBMISSION_LABEL)
    timeout_s: int
    registration: ScheduledRegistration | None = None
    batch: ScheduledBatch | None = None
    deploy: ScheduledDeploy | None = None

    def body_dict(self) -> dict[str, Any]:
        return json.loads(self.body)


def check_compiled(cfg: Any, schedules: tuple[ScheduledRun, ...]) -> None:
    """`schedules` are the compiled schedules of `cfg` (an EnvironmentConfig), in its order: both stacks of
    an environment build from them."""
    compiled = tuple(run.name for run in schedules)
    if compiled != tuple(s.name for s in cfg.schedules) or any(run.env != cfg.name for run in schedules):
        raise ValueError(f"{cfg.source}: schedules compiled for {compiled} do not match the config's "
                         f"{tuple(s.name for s in cfg.schedules)} (compile with jobs.schedule)")


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
    steps = [
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
                "condition": f'${{not("endTime" in job) or {_seconds("job.createTime")} > started - '
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
                     "connector_params": {"timeout": lookback, "polling_policy": _polling()}},
            "result": "finished",
        }},
        {"check_state": {"switch": [{
            "condition": f'${{finished.state != "{SUCCEEDED}"}}',
            "raise": '${"job " + finished.name + " ended " + finished.state}',
        }]}},
    ]
    done = {"run": "${finished.name}", "state": "${finished.state}", "duplicate": False}
    if run.registration is None:
        return {"main": {"steps": [*steps, {"done": {"return": done}}]}}
    done = {**done, "registered": "${registered}"}
    after = [*(_deploy_steps(run) if run.deploy else []),
             *(_batch_predict(run, substitutions) if run.batch else [])]
    if run.deploy:
        done["deployed"] = "${deployed}"
    if run.batch:
        done["batch_prediction"] = "${batch_prediction}"
    # Only once the job succeeded (a failed one raised above): nothing of a failed run is registered.
    return {
        "main": {"steps": [*steps, *_register_runs(run), *after, {"done": {"return": done}}]},
        **({"deploy_canary": _deploy_canary(run.deploy)} if run.deploy else {}),
        "register": _register(run),
        "read_metric": _read_metric(run.registration.metric),
    }


def _polling() -> dict[str, Any]:
    """How a connector polls a Vertex AI job it waits for (a new dict each time: no YAML alias)."""
    return {"initial_delay": 60, "multiplier": 1.5, "max_delay": 600}


def _seconds(field: str) -> str:
    """A Vertex AI timestamp as whole seconds: Vertex writes up to nine fractional digits and time.parse
    takes at most six."""
    return f'time.parse(text.substring({field}, 0, 19) + "Z")'


def _run_id_of(run: ScheduledRun, job: str) -> str:
    """The run id of a job of this schedule: the request puts it at a fixed place in the display name."""
    start = run.body_dict()["displayName"].index(run.run_id_placeholder)
    return f"text.substring({job}.displayName, {start}, {start + len(run.run_id_placeholder)})"


def _literal(text: str) -> str:
    """`text` as a string literal inside an expression."""
    return json.dumps(text, ensure_ascii=False)


def _assign(step: str, **values: Any) -> dict[str, Any]:
    return {step: {"assign": [{name: value} for name, value in values.items()]}}


def _log(step: str, severity: str, text: str) -> dict[str, Any]:
    return {step: {"call": "sys.log", "args": {"severity": severity, "text": text}}}


def _on_not_found(step: str, then: list[dict[str, Any]]) -> dict[str, Any]:
    """An `except` that runs `then` on an HTTP 404 and raises anything else again (only an HttpError has a
    `code`; map.get is null on a missing key, and on an error that is a string)."""
    return {"as": "e", "steps": [{step: {"switch": [
        {"condition": '${map.get(e, "code") == 404}', "steps": then},
        {"condition": True, "raise": "${e}"},
    ]}}]}


def _register_runs(run: ScheduledRun) -> list[dict[str, Any]]:
    """Main's steps after the run's job succeeded: register the earlier runs of this schedule that `recent`
    listed and that ended long enough ago that the execution that ran each one is done with it (the one
    whose registration failed is registered now; one already registered is found again by its label and
    only gated again), then this run. An earlier run that cannot be registered is logged and left to a
    later execution; this run's failure fails the execution."""
    return [
        {"collect_earlier_runs": {"assign": [
            {"registered": []}, {"earlier": []}, {"outcome": None},
            {"settled": f"${{sys.now() - {REGISTER_GRACE_S}}}"},
        ]}},
        {"find_earlier_runs": {"for": {
            "value": "job",
            "in": '${default(map.get(recent, "customJobs"), [])}',
            # Two switches: a job that has not ended has no endTime.
            "steps": [{"check_succeeded": {"switch": [{
                "condition": f'${{job.state == "{SUCCEEDED}"}}',
                "steps": [{"check_settled": {"switch": [{
                    "condition": f"${{{_seconds('job.endTime')} < settled}}",
                    "steps": [{"add_earlier": {"assign": [{"earlier": "${list.concat(earlier, job)}"}]}}],
                }]}}],
            }]}}],
        }}},
        {"register_earlier_runs": {"for": {
            "value": "job",
            "in": "${earlier}",
            "steps": [
                {"register_earlier": {
                    "try": {"call": "register", "args": {"job": "${job}"}, "result": "outcome"},
                    "except": {"as": "e", "steps": [
                        {"note_failure": {"assign": [{"outcome": {
                            "run": f"${{{_run_id_of(run, 'job')}}}",
                            "error": '${default(map.get(e, "message"), e)}'}}]}},
                        _log("log_failure", "ERROR", '${"could not register " + outcome.run + ": " + '
                                                     'outcome.error + " (a later execution tries again)"}'),
                    ]},
                }},
                {"note_earlier": {"assign": [{"registered": "${list.concat(registered, outcome)}"}]}},
            ],
        }}},
        {"register_run": {"call": "register", "args": {"job": "${finished}"}, "result": "outcome"}},
        {"note_run": {"assign": [{"registered": "${list.concat(registered, outcome)}"}]}},
    ]


def _batch_predict(run: ScheduledRun, substitutions: Mapping[str, str]) -> list[dict[str, Any]]:
    """Main's steps after this run registered (`outcome`, its registration; a failed one raised): the batch
    prediction of what the first alias names now, run_job.py batch-predict's request with this run's id and
    start time. The alias names nothing only when the gate kept it and no version held it."""
    assert run.batch is not None and run.registration is not None
    first = "outcome.aliases[0]"
    body = _substitute(run.batch.body_dict(), {
        **substitutions,
        BATCH_STAMP_PLACEHOLDER: 'text.substring(stamp, 0, 8) + "-" + text.substring(stamp, 9, 15)'})
    # This run's own submission label (common.submission), as run_job.py batch-predict labels the same
    # request: the digest of the body with this run's id in it, so it is computed here, not at synthesis.
    body["labels"][SUBMISSION_LABEL] = "${batch_label}"
    name = _literal(run.batch.model)
    return [
        _assign("init_batch", batch_prediction=None, batch_version="${outcome.version}"),
        # Kept: the alias stays where it was (on nothing, if the gate found no holder).
        {"find_batch_version": {"switch": [{"condition": f'${{{first}.outcome == "{KEPT}"}}', "steps": [
            _assign("take_holder", batch_version=f"${{{first}.holder}}")]}]}},
        {"check_batch": {"switch": [
            {"condition": "${batch_version == null}", "steps": [_log("log_no_batch", "NOTICE", (
                f'${{"no batch prediction: " + {name} + " names no version (" + outcome.run + '
                '" has no metric)"}'))]},
            {"condition": True, "steps": [
                _log("log_batch", "INFO", f'${{"batch prediction of " + {name} + " (version " + '
                                          'batch_version + ") for " + outcome.run}'),
                *_batch_label(run.batch.body_dict(), substitutions),
                {"create_batch": {"call": BATCH_CONNECTOR, "result": "predicted", "args": {
                    "parent": "${parent}", "region": run.region, "body": body,
                    "connector_params": {"timeout": BATCH_TIMEOUT_S, "polling_policy": _polling()}}}},
                {"check_batch_state": {"switch": [{
                    "condition": f'${{predicted.state != "{SUCCEEDED}"}}',
                    "raise": '${"batch prediction " + predicted.name + " ended " + predicted.state}'}]}},
                _assign("note_batch", batch_prediction={
                    "name": "${predicted.name}", "state": "${predicted.state}", "version": "${batch_version}",
                    "output": '${map.get(predicted, ["outputInfo", "gcsOutputDirectory"])}'}),
            ]},
        ]}},
    ]


def _batch_label(body: dict[str, Any], substitutions: Mapping[str, str]) -> list[dict[str, Any]]:
    """Steps computing `batch_label`, the submission label of `body` once each placeholder is substituted:
    the canonical text's literal pieces as plain values (an expression's length is limited), then the digest
    of them joined by the placeholders' values."""
    text, parts, pieces = canonical_text(body), [], {}
    marks = [m for m in substitutions if m in text]
    for token in re.split("(" + "|".join(map(re.escape, marks)) + ")", text) if marks else [text]:
        if token in marks:
            parts.append(substitutions[token])
        elif token:
            parts.append(f"batch_text_{len(pieces)}")
            pieces[parts[-1]] = expression(token, {})
    return [_assign("batch_text", **pieces),
            _assign("label_batch", batch_label="${" + workflows_digest(" + ".join(parts)) + "}")]


def _deploy_steps(run: ScheduledRun) -> list[dict[str, Any]]:
    """Main's steps after this run registered: the canary, only when the gate moved the first alias to
    this run's version."""
    return [
        _assign("init_deploy", deployed=None),
        {"check_moved": {"switch": [{"condition": f'${{outcome.aliases[0].outcome == "{MOVED}"}}', "steps": [
            {"deploy": {"call": "deploy_canary", "args": {"version": "${outcome.version}"},
                        "result": "deployed"}}]}]}},
    ]


def _sorted_into(target: str, value: str, step: str) -> dict[str, Any]:
    """Steps inserting string `value` into the sorted list `target` (Workflows has no sort)."""
    return {step: {"steps": [
        _assign(f"{step}_init", before=[], after=[]),
        {f"{step}_split": {"for": {"value": "other", "in": f"${{{target}}}", "steps": [
            {f"{step}_side": {"switch": [
                {"condition": f"${{other < {value}}}", "steps": [
                    _assign(f"{step}_low", before="${list.concat(before, other)}")]},
                {"condition": True, "steps": [_assign(f"{step}_high", after="${list.concat(after, other)}")]},
            ]}}]}}},
        _assign(f"{step}_insert", **{target: f"${{list.concat(before, {value})}}"}),
        {f"{step}_rest": {"for": {"value": "other", "in": "${after}", "steps": [
            _assign(f"{step}_append", **{target: f"${{list.concat({target}, other)}}"})]}}},
    ]}}


def _deploy_canary(canary: ScheduledDeploy) -> dict[str, Any]:
    """Subworkflow `deploy_canary(version)`: run_job.py deploy's request for the endpoint as it is now
    (jobs.definition.deployment: deploy_split, scaled, display_name), sent once; returns what it did."""
    model = canary.deployed_model_dict()["model"].split("@")[0]
    total = 100 - canary.traffic
    share = "shares[key] * total / whole"  # a double, as Python's true division
    return {"params": ["version"], "steps": [
        {"read_endpoint": {"call": GET_ENDPOINT_CONNECTOR, "result": "state", "args": {
            "name": canary.endpoint, "region": canary.endpoint.split("/")[3]}}},
        _assign("init", current='${default(map.get(state, "trafficSplit"), {})}',
                served='${default(map.get(state, "deployedModels"), [])}', shares={}, ids=[], found=None,
                total=total, whole=0, split={}, keys_sorted=[], record=""),
        # The models there and their shares now; one of this model and version is this deploy's, done by an
        # earlier execution.
        {"read_served": {"for": {"value": "served_model", "in": "${served}", "steps": [
            _assign("note_served", **{
                "shares[served_model.id]": '${int(default(map.get(current, served_model.id), 0))}',
                "ids": "${list.concat(ids, served_model.id)}"}),
            {"check_same": {"switch": [{"condition": (
                f'${{text.split(served_model.model, "@")[0] == {_literal(model)} and '
                'served_model.modelVersionId == version}'), "steps": [
                    _assign("note_found", found="${served_model.id}")]}]}},
        ]}}},
        {"check_found": {"switch": [{"condition": "${found != null}", "steps": [
            _log("log_found", "NOTICE", (
                f'${{{_literal(canary.model + " version ")} + version + " is deployed on '
                f'{canary.endpoint_name} already (deployed model " + found + ")"}}')),
            {"already": {"return": {"deployed_model": "${found}", "version": "${version}",
                                    "deployed": False}}},
        ]}]}},
        {"check_room": {"switch": [{"condition": f"${{{canary.traffic} < 100 and len(ids) == 0}}", "raise": (
            f'{canary.traffic}%: endpoint {canary.endpoint_name} serves nothing else to keep the rest; the '
            'first version on an endpoint takes all its traffic (deploy: traffic: 100)')}]}},
        # scaled(shares, total): each model's share of `total` in proportion, by largest remainders (ties to
        # the lower id); shares that are all 0 go whole to the newest-looking id.
        {"sum_shares": {"for": {"value": "key", "in": "${ids}", "steps": [
            _assign("add_share", whole="${whole + shares[key]}")]}}},
        {"scale": {"switch": [
            {"condition": "${len(ids) == 0 or total <= 0}", "steps": [
                {"zero_all": {"for": {"value": "key", "in": "${ids}", "steps": [
                    _assign("zero", **{"split[key]": 0})]}}}]},
            {"condition": "${whole == 0}", "steps": [
                _assign("init_last", last="${ids[0]}"),
                {"find_last": {"for": {"value": "key", "in": "${ids}", "steps": [
                    {"check_last": {"switch": [{"condition": (
                        "${len(key) > len(last) or (len(key) == len(last) and key > last)}"), "steps": [
                            _assign("take_last", last="${key}")]}]}}]}}},
                {"give_last": {"for": {"value": "key", "in": "${ids}", "steps": [
                    {"check_give": {"switch": [
                        {"condition": "${key == last}", "steps": [
                            _assign("give_all", **{"split[key]": "${total}"})]},
                        {"condition": True, "steps": [_assign("give_none", **{"split[key]": 0})]},
                    ]}}]}}}]},
            {"condition": True, "steps": [
                _assign("init_floors", given=0, fractions={}),
                {"floors": {"for": {"value": "key", "in": "${ids}", "steps": [
                    _assign("floor", **{"split[key]": f"${{int({share})}}"}),
                    _assign("fraction", **{"fractions[key]": f"${{{share} - split[key]}}",
                                           "given": "${given + split[key]}"})]}}},
                {"remainders": {"for": {"value": "key", "in": "${ids}", "steps": [
                    _assign("init_rank", rank=0),
                    {"rank_key": {"for": {"value": "other", "in": "${ids}", "steps": [
                        {"check_before": {"switch": [{"condition": (
                            "${fractions[other] > fractions[key] or (fractions[other] == fractions[key] and "
                            "other < key)}"), "steps": [_assign("count_before", rank="${rank + 1}")]}]}}]}}},
                    {"check_rank": {"switch": [{"condition": "${rank < total - given}", "steps": [
                        _assign("add_one", **{"split[key]": "${split[key] + 1}"})]}]}},
                ]}}},
            ]},
        ]}},
        _assign("add_new", **{f"split[{_literal(canary.new_key)}]": canary.traffic}),
        # The record rollback reads: the split before, sorted by id.
        {"sort_keys": {"for": {"value": "key", "in": "${keys(current)}", "steps": [
            _sorted_into("keys_sorted", "key", "insert_key")]}}},
        {"write_record": {"for": {"value": "key", "in": "${keys_sorted}", "steps": [
            {"check_first": {"switch": [{"condition": '${record != ""}', "steps": [
                _assign("add_comma", record='${record + ","}')]}]}},
            _assign("add_record", record='${record + key + "=" + string(int(current[key]))}')]}}},
        {"check_record": {"switch": [{"condition": '${record == ""}', "steps": [
            _assign("no_record", record=canary.record_none)]}]}},
        _assign("name", display_name=f"${{{_literal(canary.record_prefix)} + record}}"),
        {"check_name": {"switch": [{"condition": f"${{len(display_name) > {canary.max_display_name}}}",
                                    "raise": (
            f"{canary.endpoint_name}: too many deployed models share its traffic for the split rollback "
            f"restores to fit the deployed model's display name ({canary.max_display_name} characters); "
            "undeploy the models that no longer take traffic first")}]}},
        _log("log_deploy", "INFO", f'${{"deploying " + {_literal(canary.model)} + " (version " + version + '
                                   f'") to {canary.endpoint_name}: " + display_name}}'),
        {"deploy_model": {"call": DEPLOY_CONNECTOR, "result": "response", "args": {
            "endpoint": canary.endpoint, "region": canary.endpoint.split("/")[3],
            "body": {"deployedModel": {**_substitute(canary.deployed_model_dict(), {}),
                                       "displayName": "${display_name}"},
                     "trafficSplit": "${split}"},
            "connector_params": {"timeout": DEPLOY_TIMEOUT_S, "polling_policy": _polling()}}}},
        {"deployed": {"return": {"deployed_model": '${map.get(response, ["deployedModel", "id"])}',
                                 "version": "${version}", "deployed": True}}},
    ]}


# A marker for a workflow value inside a text of common.model_registry's (see `expression`).
_MARK = "\x00{}\x00"


def _template(text: str, **variables: str) -> str:
    """A text of the shared rule with workflow expressions where `variables` name them: `text` is formatted
    with markers, which `expression` then replaces."""
    marks = {name: _MARK.format(name) for name in variables}
    return expression(text.format(**marks), {marks[name]: expr for name, expr in variables.items()})


def _gate_conditions(reg: ScheduledRegistration) -> dict[str, tuple[str, str]]:
    """Each rule of common.model_registry.GATE as this program states it: (condition, why)."""
    better = ">=" if reg.goal == "MAXIMIZE" else "<="
    values = f'{_literal(reg.metric + " ")} + string(value) + " is %s " + string(holder_value)'
    return {
        "already_held": ("${holder_version == version.versionId}", ""),
        "unknown_value": ("${value == null}", f"its {reg.metric} is unknown"),
        "first_holder": ("${holder == null}", "no version held it"),
        "newer_holder": ("${int(holder_version) > int(version.versionId)}",
                         '${"version " + holder_version + ", newer, holds it"}'),
        "unknown_holder_value": ("${holder_value == null}", (
            f'${{{_literal("the " + reg.metric + " of version ")} + holder_version + '
            '", which holds it, is unknown"}')),
        "no_worse": (f"${{value {better} holder_value}}",
                     f'${{{values % "no worse than"} + " of version " + holder_version}}'),
        "worse": (True,
                  f'${{{values % "worse than"} + " of version " + holder_version + ", which keeps it"}}'),
    }


def _gate_switch(reg: ScheduledRegistration) -> list[dict[str, Any]]:
    """The gate's steps for one alias: GATE's rules in their order, the first that holds deciding; the
    holder's metrics.json is read only once a rule needs it."""
    conditions = _gate_conditions(reg)

    def branch(rule) -> dict[str, Any]:
        condition, why = conditions[rule.name]
        return {"condition": condition, "steps": [_assign(rule.name, outcome=rule.outcome, why=why)]}

    early = [rule for rule in GATE if not rule.reads_holder]
    late = [rule for rule in GATE if rule.reads_holder]
    return [{"weigh": {"switch": [*map(branch, early), {"condition": True, "steps": [
        {"read_holder_value": {"call": "read_metric", "args": {"artifact_uri": "${holder.artifactUri}"},
                               "result": "holder_value"}},
        {"compare": {"switch": [branch(rule) for rule in late]}},
    ]}]}}]


def _register(run: ScheduledRun) -> dict[str, Any]:
    """Subworkflow `register(job)`: the succeeded job's model as a version of the registry model (the
    version labelled with its job's id if there is one, else a new upload), then the evaluation gate for each
    alias; returns what it did. The rule is common.model_registry's, run_job.py's too."""
    reg = run.registration
    assert reg is not None
    model = f"{run.parent}/models/{reg.model_id}"

    def list_versions() -> dict[str, Any]:
        # (New dicts at each use: a shared one would be a YAML alias in the source.)
        return {"call": LIST_VERSIONS_CONNECTOR, "result": "listed", "args": {
            "name": model, "region": run.region,
            "filter": _template(LABEL_FILTER.format(key=JOB_LABEL, value="{value}"), value="label")}}

    has_version = '${len(default(map.get(listed, "models"), [])) > 0}'
    encryption = run.body_dict().get("encryptionSpec")

    def upload(step: str, target: dict[str, str]) -> dict[str, Any]:
        # Aliases are never set here: the gate moves them once the version exists.
        model_spec = {
            "displayName": expression(reg.display_name, {}),
            "artifactUri": "${artifact_uri}",
            "containerSpec": _substitute(reg.container_spec_dict(), {}),
            "labels": "${labels}",
            "versionDescription": _template(version_description("{job_name}", "{display_name}"),
                                            job_name="job.name", display_name="job.displayName"),
            # Encrypted like the job that trained it.
            **({"encryptionSpec": _substitute(encryption, {})} if encryption else {}),
        }
        return {step: {"call": UPLOAD_CONNECTOR, "args": {
            "parent": run.parent, "region": run.region, "body": {**target, "model": model_spec},
            "connector_params": {"timeout": UPLOAD_TIMEOUT_S}}}}

    # 0.8712 -> "0_8712": the number's text, each character a label value may not hold as "_".
    metric_text = (f'${{text.replace_all_regex(text.to_lower(string(value)), {_literal(NOT_LABEL_CHARS)}, '
                   '"_")}')
    holder_of_alias = f"${{{_literal(model + '@')} + alias}}"
    return {"params": ["job"], "steps": [
        {"describe": {"assign": [
            {"run": f"${{{_run_id_of(run, 'job')}}}"},
            # The job's id: what run_job.py labels a version with too.
            {"label": (f'${{text.to_lower(text.replace_all_regex(job.name, {_literal(JOB_NAME_PREFIX)}, '
                       '""))}')},
            {"artifact_uri": f'${{job.jobSpec.baseOutputDirectory.outputUriPrefix + "/{MODEL_DIR}"}}'},
            {"labels": {**dict(reg.labels), JOB_LABEL: "${label}"}},
            {"listed": None}, {"model_exists": True}, {"version": None}, {"uploaded": False},
            {"aliases": []},
            # What moving each alias sends: the first takes `default` along.
            {"merges": {alias: aliases_to_merge(alias, reg.aliases) for alias in reg.aliases}},
        ]}},
        {"read_value": {"call": "read_metric", "args": {"artifact_uri": "${artifact_uri}"},
                        "result": "value"}},
        # A version labelled with this job exists when an earlier execution (or run_job.py) uploaded it:
        # never a second.
        {"find_version": {"try": list_versions(), "except": _on_not_found("check_model_missing", [
            {"no_model": {"assign": [{"model_exists": False}]}}])}},
        {"check_found": {"switch": [{"condition": has_version, "steps": [
            {"take_found": {"assign": [{"version": "${listed.models[0]}"}]}}]}]}},
        {"upload_new": {"switch": [{"condition": "${version == null}", "steps": [
            {"label_metric": {"switch": [{"condition": "${value != null}", "steps": [
                {"write_metric": {"assign": [{"metric_text": metric_text}]}},
                {"check_metric_fits": {"switch": [{
                    "condition": f"${{len(metric_text) <= {MAX_LABEL_CHARS}}}", "steps": [
                        {"add_metric_label": {"assign": [
                            {"metric_label": {metric_label_key(reg.metric): "${metric_text}"}},
                            {"labels": "${map.merge(labels, metric_label)}"}]}}]}]}}]}]}},
            # Waits for the upload's long-running operation: an upload that fails leaves no version and
            # raises (the execution fails); one that succeeds is the version labelled with this job.
            {"upload": {"switch": [
                {"condition": "${model_exists}", "steps": [upload("upload_version", {"parentModel": model})]},
                {"condition": True, "steps": [upload("create_model", {"modelId": reg.model_id})]},
            ]}},
            {"find_uploaded": list_versions()},
            {"check_uploaded": {"switch": [{"condition": f"${{not({has_version[2:-1]})}}", "raise": (
                f'${{"uploaded " + run + " but no version of {model} is labelled {JOB_LABEL}=" + label + '
                f'" yet: a later execution registers it"}}')}]}},
            {"take_uploaded": {"assign": [{"version": "${listed.models[0]}"}, {"uploaded": True}]}},
        ]}]}},
        {"gate": {"for": {"value": "alias", "in": list(reg.aliases), "steps": [
            {"reset": {"assign": [{"holder": None}, {"holder_version": None}, {"holder_value": None},
                                  {"outcome": KEPT}, {"why": ""}]}},
            {"find_holder": {
                "try": {"steps": [
                    {"get_holder": {"call": GET_MODEL_CONNECTOR, "result": "holder", "args": {
                        "name": holder_of_alias, "region": run.region}}},
                    {"note_holder": {"assign": [{"holder_version": "${holder.versionId}"}]}},
                ]},
                # No version holds the alias.
                "except": _on_not_found("check_holder_missing", [_assign("no_holder", holder=None)]),
            }},
            *_gate_switch(reg),
            {"move_alias": {"switch": [{"condition": f'${{outcome == "{MOVED}"}}', "steps": [
                {"merge_alias": {"call": MERGE_ALIASES_CONNECTOR, "args": {
                    "name": f"${{{_literal(model + '@')} + version.versionId}}", "region": run.region,
                    "body": {"versionAliases": "${merges[alias]}"}}}}]}]}},
            {"log_gate": {"switch": [
                {"condition": f'${{outcome == "{MOVED}"}}', "steps": [_log("log_moved", "INFO", (
                    f'${{{_literal(reg.model_id + " version ")} + version.versionId + " (" + run + "): '
                    f'moved alias " + alias + " to it: " + why}}'))]},
                {"condition": f'${{outcome == "{KEPT}"}}', "steps": [_log("log_kept", "NOTICE", (
                    f'${{{_literal(reg.model_id + " version ")} + version.versionId + " (" + run + "): '
                    f'kept without alias " + alias + ": " + why}}'))]},
            ]}},
            {"note_alias": {"assign": [
                {"entry": {"alias": "${alias}", "outcome": "${outcome}", "holder": "${holder_version}",
                           "holder_value": "${holder_value}"}},
                {"aliases": "${list.concat(aliases, entry)}"}]}},
        ]}}},
        {"registered": {"return": {
            "run": "${run}", "model": model, "version": "${version.versionId}", "uploaded": "${uploaded}",
            "metric": reg.metric, "value": "${value}", "aliases": "${aliases}"}}},
    ]}


def _read_metric(metric: str) -> dict[str, Any]:
    """Subworkflow `read_metric(artifact_uri)`: metrics.json["eval"][metric] of the model in `artifact_uri`,
    or null (logged) when the file or the value is missing or the file is not JSON."""
    missing = _literal(f"no eval.{metric} in ")
    return {"params": ["artifact_uri"], "steps": [
        {"locate": {"assign": [
            # gs://bucket/a/b/model[/] -> bucket, a/b/model/metrics.json
            {"path": '${text.replace_all_regex(text.substring(artifact_uri, 5, len(artifact_uri)), "/+$", '
                     '"")}'},
            {"parts": '${text.split(path, "/")}'},
            {"bucket": "${parts[0]}"},
            {"object": f'${{text.substring(path, len(bucket) + 1, len(path)) + "/{METRICS_FILE}"}}'},
            {"where": '${"gs://" + bucket + "/" + object}'},
            {"raw": None}, {"report": None}, {"value": None},
        ]}},
        {"read_file": {
            # The object name as one path segment: the connector does not encode its "/".
            "try": {"call": READ_OBJECT_CONNECTOR, "result": "raw", "args": {
                "bucket": "${bucket}", "object": "${text.url_encode(object)}", "alt": "media"}},
            "except": _on_not_found("check_file_missing", [
                _log("log_no_file", "WARNING", '${"no " + where}'), {"no_file": {"return": None}}]),
        }},
        {"decode": {
            "try": {"steps": [{"parse": {"assign": [{"report": "${json.decode(raw)}"}]}}]},
            "except": {"as": "e", "steps": [{"check_parsed": {"switch": [
                # alt=media returns the bytes; a file stored as application/json may come back parsed.
                {"condition": '${"TypeError" in e.tags}', "steps": [_assign("parsed", report="${raw}")]},
                {"condition": '${"ValueError" in e.tags}', "steps": [
                    _log("log_not_json", "WARNING", '${where + " is not JSON"}'),
                    {"not_json": {"return": None}}]},
                {"condition": True, "raise": "${e}"},
            ]}}]},
        }},
        {"pick": {"assign": [{"value": f'${{map.get(report, ["eval", {_literal(metric)}])}}'}]}},
        {"check_value": {"switch": [{"condition": "${value == null}", "steps": [
            _log("log_no_value", "WARNING", f"${{{missing} + where}}"), {"no_value": {"return": None}}]}]}},
        # As run_job.py reads it: a number, or no value (a string, a boolean or a list is none).
        {"check_number": {"switch": [{"condition": '${not(get_type(value) in ["integer", "double"])}',
                                      "steps": [
            _log("log_not_number", "WARNING",
                 f'${{{_literal(f"eval.{metric} is not a number in ")} + where}}'),
            {"not_number": {"return": None}}]}]}},
        {"found": {"return": "${value}"}},
    ]}


def workflow_source(run: ScheduledRun, late_values: Mapping[str, str]) -> str:
    return yaml.safe_dump(workflow_program(run, late_values), sort_keys=False, width=1_000_000,
                          allow_unicode=True)
