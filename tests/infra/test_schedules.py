"""Scheduled retraining in the platform stack: the synthesized workflow, run by a small interpreter of the
Workflows subset it uses (tests/infra/workflows_interpreter.py) against a fake Vertex AI, and its trigger.

The request itself is compiled by the jobs layer; tests/scripts/test_synth.py proves the shipped schedule
carries exactly the `run_job.py --dry-run` request. Here the scenario's hand-built runs stand in for it.
"""

from __future__ import annotations

import base64
import json
import re
from datetime import datetime, timezone

import pytest
import yaml

from infra.naming import resource_names, service_account_email
from infra.outputs import planned_outputs
from infra.schedules import (
    ATTEMPT_DEADLINE_S,
    CREATE_CONNECTOR,
    DUPLICATE_WINDOW_S,
    LIST_CONNECTOR,
    MAX_RETRY_DURATION_S,
    MIN_SCHEDULE_GAP_MINUTES,
    expression,
    workflow_source,
)
from tests.infra.helpers import BASIC, CMEK, scenario_runs
from tests.infra.workflows_interpreter import Interpreter, WorkflowRaised, operation_error

NOW = datetime(2026, 11, 24, 2, 30, 5, tzinfo=timezone.utc).timestamp()
EXECUTION = "0f3a9c2e-5b1d-4e7a-9c3b-2d1e0f9a8b7c"
DEPLOYED_TENSORBOARD = "projects/p/locations/r/tensorboards/4242"


def resources(stack: dict, rtype: str) -> dict[str, dict]:
    return stack.get("resource", {}).get(rtype, {})


def unescape(text: str) -> str:
    """Terraform's escapes of its own template syntax, undone: what the Workflows API receives."""
    return text.replace("$${", "${").replace("%%{", "%{")


def synthesized(stacks, env: str) -> dict[str, tuple[dict, dict]]:
    """schedule workflow name -> (workflow resource, Cloud Scheduler job resource)."""
    workflows = {b["name"]: b for b in resources(stacks[env], "google_workflows_workflow").values()}
    triggers = {b["name"]: b for b in resources(stacks[env], "google_cloud_scheduler_job").values()}
    assert set(workflows) == set(triggers)
    return {name: (workflows[name], triggers[name]) for name in workflows}


class FakeVertex:
    """customJobs.list and customJobs.create as the connectors see them; create returns the job at its end
    (the connector waits), in `outcome`."""

    def __init__(self, jobs=(), outcome="JOB_STATE_SUCCEEDED") -> None:
        self.jobs = [dict(j) for j in jobs]
        self.outcome = outcome
        self.created: list[dict] = []
        self.now = NOW  # when the next job is created (it ends 10 minutes later)

    def list(self, args: dict) -> dict:
        found = re.fullmatch(r'labels\.([a-z_]+)="([^"]*)" AND create_time>"([^"]+)"', args["filter"])
        assert found, f"the fake understands this filter only: {args['filter']}"
        label, value, since = found.groups()
        after = datetime.fromisoformat(since.replace("Z", "+00:00"))
        matching = [j for j in self.jobs if j["labels"].get(label) == value
                    and datetime.fromisoformat(j["createTime"].replace("Z", "+00:00")) > after]
        return {"customJobs": matching} if matching else {}

    def create(self, args: dict) -> dict:
        assert args["connector_params"]["timeout"] > 0
        job = {**args["body"], "name": f"{args['parent']}/customJobs/{len(self.jobs) + 1}",
               "state": self.outcome, "createTime": iso(self.now), "endTime": iso(self.now + 600)}
        self.jobs.append(job)
        self.created.append(args)
        return job


def iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat().replace("+00:00", "Z")


def execute(workflow: dict, vertex: FakeVertex) -> tuple[object, Interpreter]:
    program = yaml.safe_load(unescape(workflow["source_contents"]))
    interpreter = Interpreter(
        program, now=NOW,
        # The environment Workflows gives every execution, plus the stack's deploy-time values.
        env={"GOOGLE_CLOUD_WORKFLOW_EXECUTION_ID": EXECUTION, "TENSORBOARD": DEPLOYED_TENSORBOARD},
        connectors={LIST_CONNECTOR: vertex.list, CREATE_CONNECTOR: vertex.create})
    return interpreter.run(), interpreter


@pytest.fixture(scope="module")
def nightly(stacks, configs):
    cfg = configs[BASIC]
    (run, _) = scenario_runs(cfg)
    workflow, trigger = synthesized(stacks, BASIC)[resource_names(cfg).schedule(run.name)]
    return cfg, run, workflow, trigger


def test_a_run_creates_the_compiled_job_under_its_own_id_and_waits_for_it(nightly):
    cfg, run, workflow, _ = nightly
    vertex = FakeVertex()
    result, interpreter = execute(workflow, vertex)
    ((sent,),) = [vertex.created]
    run_id = f"{run.job_name}-20261124-023005-0f3a9c"
    # The compiled request, with this run's id wherever the dry-run had the job id and the deployed
    # TensorBoard for the planned placeholder; nothing else changed (the literal "${" stays literal).
    expected = json.loads(run.body.replace(run.run_id_placeholder, run_id).replace(
        planned_outputs(cfg)["tensorboard"], DEPLOYED_TENSORBOARD))
    assert sent["body"] == expected
    assert sent["body"]["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"].endswith(f"/x/{run_id}")
    assert sent["body"]["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["args"][1] == "--literal=${not-me}"
    assert (sent["parent"], sent["region"]) == (run.parent, run.region)
    # It waits at least the job's own timeout (7200 s in the scenario) plus time in the queue.
    assert sent["connector_params"]["timeout"] >= 7200 + 3600
    assert result == {"run": f"{run.parent}/customJobs/1", "state": "JOB_STATE_SUCCEEDED", "duplicate": False}
    assert interpreter.logs == [{"severity": "INFO", "text": f"starting {run_id} ({run.job_file})"}]


def test_each_run_gets_its_own_id_and_output_directory(nightly):
    _, run, workflow, _ = nightly
    ids = set()
    for seconds, execution in ((NOW, EXECUTION), (NOW + 86400, "a1b2c3d4-0000"), (NOW + 86400, "ffffff-1")):
        vertex = FakeVertex()
        program = yaml.safe_load(unescape(workflow["source_contents"]))
        Interpreter(program, now=seconds, env={"GOOGLE_CLOUD_WORKFLOW_EXECUTION_ID": execution,
                                                "TENSORBOARD": DEPLOYED_TENSORBOARD},
                    connectors={LIST_CONNECTOR: vertex.list, CREATE_CONNECTOR: vertex.create}).run()
        ids.add(vertex.created[0]["body"]["displayName"])
    assert len(ids) == 3  # another day, or the same second in another execution
    assert all(re.fullmatch(rf"{run.job_name}-\d{{8}}-\d{{6}}-[0-9a-f-]{{6}}", i) for i in ids), ids


@pytest.mark.parametrize(
    ("existing", "duplicate"),
    [
        # A retried trigger: the first attempt's execution created the job moments ago (it may even be done).
        ({"age": 120, "ended": True}, True),
        ({"age": 30, "ended": False}, True),
        # Still running from an earlier day: followed, not doubled.
        ({"age": 20 * 3600, "ended": False}, True),
        # Yesterday's finished run, or a job of another definition: a new run.
        ({"age": 24 * 3600, "ended": True}, False),
        ({"age": DUPLICATE_WINDOW_S + 60, "ended": True}, False),
        ({"age": 60, "ended": False, "label": "another-definition"}, False),
    ],
    ids=["retry-finished", "retry-running", "still-running", "yesterday", "after-window", "other-job"],
)
@pytest.mark.parametrize("digits", [0, 3, 9])  # Vertex's createTime has up to nine fractional digits
def test_a_retried_trigger_never_starts_a_second_run(nightly, existing, duplicate, digits):
    _, run, workflow, _ = nightly
    created = iso(int(NOW - existing["age"]))
    if digits:
        created = created.replace("Z", "." + "123456789"[:digits] + "Z")
    job = {"name": f"{run.parent}/customJobs/77", "state": "JOB_STATE_RUNNING",
           "labels": {run.label: existing.get("label", run.submission_hash)}, "createTime": created}
    if existing["ended"]:
        job.update(state="JOB_STATE_SUCCEEDED", endTime=iso(NOW - existing["age"] + 60))
    vertex = FakeVertex([job])
    result, _ = execute(workflow, vertex)
    if duplicate:
        assert vertex.created == []
        assert result == {"run": job["name"], "state": job["state"], "duplicate": True}
    else:
        assert len(vertex.created) == 1 and result["duplicate"] is False


@pytest.mark.parametrize("state", ["JOB_STATE_FAILED", "JOB_STATE_CANCELLED", "JOB_STATE_EXPIRED"])
def test_a_failed_job_fails_the_execution(nightly, state):
    """What the failure alert relies on (infra/constructs/alerts.py): no job outcome but success ends the
    execution SUCCEEDED."""
    _, _, workflow, _ = nightly
    with pytest.raises(WorkflowRaised, match=rf"customJobs/1 ended {state}"):
        execute(workflow, FakeVertex(outcome=state))


def test_a_job_the_connector_reports_failed_fails_the_execution(nightly):
    """The real connector raises OperationError when the job it waits for fails: nothing catches it."""
    _, _, workflow, _ = nightly
    vertex = FakeVertex()
    created = vertex.create

    def create(args: dict) -> dict:
        job = created(args)
        raise operation_error("job failed", {"name": job["name"], "state": "JOB_STATE_FAILED"})

    vertex.create = create
    with pytest.raises(WorkflowRaised) as info:
        execute(workflow, vertex)
    assert info.value.value["tags"] == ["OperationError"] and len(vertex.created) == 1


def test_the_trigger_starts_the_workflow_as_the_schedule_account(stacks, configs):
    for env in (BASIC, CMEK):
        cfg = configs[env]
        names = resource_names(cfg)
        account = service_account_email(cfg, names.scheduler_account_id)
        runs = {names.schedule(run.name): run for run in scenario_runs(cfg)}
        found = synthesized(stacks, env)
        assert set(found) == set(runs) and runs
        (tensorboard_output,) = [stacks[env]["output"]["tensorboard"]["value"]]
        for name, (workflow, trigger) in found.items():
            run = runs[name]
            assert workflow["service_account"] == account
            # The deploy-time TensorBoard name, by the same expression as the stack's output.
            assert workflow["user_env_vars"] == {"TENSORBOARD": tensorboard_output}
            assert unescape(workflow["source_contents"]) == workflow_source(
                run, {planned_outputs(cfg)["tensorboard"]: "TENSORBOARD"})
            assert workflow["deletion_protection"] is False
            (wf_key,) = [k for k, b in resources(stacks[env], "google_workflows_workflow").items()
                         if b["name"] == name]
            target = trigger["http_target"]
            assert target["uri"] == (f"https://workflowexecutions.googleapis.com/v1/"
                                     f"${{google_workflows_workflow.{wf_key}.id}}/executions")
            assert target["http_method"] == "POST"
            assert target["oauth_token"]["service_account_email"] == account
            assert json.loads(base64.b64decode(target["body"])) == {"callLogLevel": "LOG_ERRORS_ONLY"}
            assert (trigger["schedule"], trigger["time_zone"], trigger["paused"]) == (
                run.cron, run.time_zone, run.paused)


def test_retries_end_inside_the_window_that_recognises_them(stacks):
    (trigger,) = [b for b in resources(stacks[CMEK], "google_cloud_scheduler_job").values()]
    retry = trigger["retry_config"]
    assert retry["retry_count"] >= 1
    seconds = int(retry["max_retry_duration"].rstrip("s")) + int(trigger["attempt_deadline"].rstrip("s"))
    assert seconds == MAX_RETRY_DURATION_S + ATTEMPT_DEADLINE_S <= DUPLICATE_WINDOW_S
    # ...and two real runs are always further apart than the window (checked on the config's cron).
    assert MIN_SCHEDULE_GAP_MINUTES * 60 > DUPLICATE_WINDOW_S


def test_environments_without_schedules_have_none_of_it(stacks, bootstraps, configs):
    cfg = configs["minimal"]
    assert not cfg.schedules
    text = json.dumps(stacks["minimal"]) + json.dumps(bootstraps["minimal"])
    for absent in ("google_workflows_workflow", "google_cloud_scheduler_job",
                   "google_project_iam_custom_role", "cloudscheduler", "workflows.googleapis.com",
                   "workflowexecutions", resource_names(cfg).scheduler_account_id):
        assert absent not in text


# Registering a run's model: list the versions, get the one holding an alias, upload one (polling its
# operation), move an alias (an update of the model).
REGISTRY = ["aiplatform.models.get", "aiplatform.models.list", "aiplatform.models.update",
            "aiplatform.models.upload"]


# ...and predicting with the registered alias afterwards: create the batch job and poll it.
BATCH = ["aiplatform.batchPredictionJobs.create", "aiplatform.batchPredictionJobs.get"]
# ...and deploying it as a canary: read the endpoint, deploy to it (never undeploy).
DEPLOY = ["aiplatform.endpoints.deploy", "aiplatform.endpoints.get"]


# The standard scenario has a schedule whose definition registers its model (then predicts with it and
# deploys it), the cmek scenario has not.
@pytest.mark.parametrize(("env", "registers"), [(BASIC, True), (CMEK, False)])
def test_the_schedule_account_holds_exactly_what_a_run_needs(bootstraps, stacks, configs, env, registers):
    cfg = configs[env]
    stack = bootstraps[env]
    names = resource_names(cfg)
    (account_key,) = [k for k, b in resources(stack, "google_service_account").items()
                      if b["account_id"] == names.scheduler_account_id]
    member = f"serviceAccount:${{google_service_account.{account_key}.email}}"
    (role_key, role), = [(k, b) for k, b in resources(stack, "google_project_iam_custom_role").items()
                         if b["role_id"] == names.scheduler_role_id]
    assert sorted(role["permissions"]) == sorted(
        ["aiplatform.customJobs.create", "aiplatform.customJobs.get", "aiplatform.customJobs.list",
         "workflows.executions.create"] + (REGISTRY + BATCH + DEPLOY if registers else []))
    # On resources (platform stack): reading the models bucket's objects (metrics.json), nothing else.
    account = f"serviceAccount:{service_account_email(cfg, names.scheduler_account_id)}"
    grants = [(rtype, b["role"], b.get("bucket")) for rtype, bodies in stacks[env]["resource"].items()
              if rtype.endswith("_iam_member") for b in bodies.values() if b["member"] == account]
    models = [k for k, b in resources(stacks[env], "google_storage_bucket").items()
              if b["labels"]["bucket-role"] == "models"]
    assert grants == ([("google_storage_bucket_iam_member", "roles/storage.objectViewer",
                        f"${{google_storage_bucket.{models[0]}.name}}")] if registers else [])
    project = sorted(b["role"] for b in resources(stack, "google_project_iam_member").values()
                     if b["member"] == member)
    custom = f"${{google_project_iam_custom_role.{role_key}.name}}"
    assert project == sorted([custom, "roles/logging.logWriter"])
    # It may act as the runtime account and nothing else; only the deployer may act as it.
    runtime = [k for k, b in resources(stack, "google_service_account").items()
               if b["account_id"] == names.runtime_account_id][0]
    acts_as = [b["service_account_id"] for b in resources(stack, "google_service_account_iam_member").values()
               if b["member"] == member]
    assert acts_as == [f"${{google_service_account.{runtime}.name}}"]
    on_it = [b for b in resources(stack, "google_service_account_iam_member").values()
             if b["service_account_id"] == f"${{google_service_account.{account_key}.name}}"]
    assert [(b["role"], "deployer" in b["member"]) for b in on_it] == [("roles/iam.serviceAccountUser", True)]


@pytest.mark.parametrize(
    ("text", "substitutions", "expected"),
    [
        ("plain", {}, "plain"),
        ("gs://b/RUN/model", {"RUN": "run_id"}, '${"gs://b/" + run_id + "/model"}'),
        ("RUN", {"RUN": "run_id"}, "${run_id}"),
        ("RUN-RUN", {"RUN": "run_id"}, '${run_id + "-" + run_id}'),
        ("a ${b} \"c\"", {}, '${"a ${b} \\"c\\""}'),
        ("TB", {"TB": 'sys.get_env("TENSORBOARD")'}, '${sys.get_env("TENSORBOARD")}'),
        ("übung-RUN", {"RUN": "run_id"}, '${"übung-" + run_id}'),
    ],
)
def test_request_strings_become_workflows_values(text, substitutions, expected):
    assert expression(text, substitutions) == expected


@pytest.mark.parametrize(("text", "accepted"), [
    ("2026-11-23T03:00:00Z", True), ("2026-11-23T03:00:00.123456Z", True),
    ("2026-11-23T03:00:00.123456789Z", False), ("2026-11-23T03:00:00+01:00", True), ("yesterday", False),
])
def test_the_interpreter_parses_times_as_strictly_as_workflows(text, accepted):
    from tests.infra.workflows_interpreter import _parse

    if accepted:
        assert _parse(text) > 0
    else:
        with pytest.raises(ValueError, match="at most microsecond precision"):
            _parse(text)


def test_the_interpreters_map_get_is_null_for_a_missing_key_or_a_non_map():
    from tests.infra.workflows_interpreter import _map_get

    assert _map_get({"a": 1}, "a") == 1 and _map_get({"a": 1}, "b") is None
    assert _map_get([1, 2], "a") is None and _map_get(None, "a") is None
