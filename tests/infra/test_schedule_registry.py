"""Scheduled runs that register their model (infra/schedules.py `register`): the synthesized workflow of the
scenario schedule with a registration, run by the Workflows interpreter against a fake Vertex AI (jobs and
the Model Registry) and a fake Cloud Storage holding the models' metrics.json, as the connectors see them.
"""

from __future__ import annotations

import dataclasses
import json
import re
from urllib.parse import unquote

import pytest
import yaml

from infra.naming import resource_names
from infra.outputs import planned_outputs
from infra.schedules import (
    BATCH_CONNECTOR,
    CREATE_CONNECTOR,
    DEPLOY_CONNECTOR,
    GET_ENDPOINT_CONNECTOR,
    GET_MODEL_CONNECTOR,
    LIST_CONNECTOR,
    LIST_VERSIONS_CONNECTOR,
    MERGE_ALIASES_CONNECTOR,
    READ_OBJECT_CONNECTOR,
    REGISTER_GRACE_S,
    UPLOAD_CONNECTOR,
    workflow_source,
)
from tests.infra.helpers import BASIC, REGISTERING, scenario_runs
from tests.infra.test_schedules import (
    DEPLOYED_TENSORBOARD,
    EXECUTION,
    NOW,
    FakeVertex,
    iso,
    synthesized,
    unescape,
)
from tests.infra.workflows_interpreter import (
    Interpreter,
    WorkflowRaised,
    _json_decode,
    _map_get,
    _string,
    _url_encode,
    http_error,
    operation_error,
)

DAY = 86400
MODEL = "recommender"
LABEL = re.compile(r"^[a-z0-9_-]{0,63}$")


class FakeRegistry:
    """The Model Registry as the connectors see it: models.listVersions (404 for a missing model),
    models.get of `<model>@<alias>`, models.upload (waits for its operation; returns the operation's
    response) and models.mergeVersionAliases. `failures[connector]` lists errors the next calls raise:
    "lro" (the upload's operation fails, no version), "lro-timeout" (the connector stops waiting; the
    operation goes on and creates the version), or an error to raise."""

    def __init__(self, parent: str) -> None:
        self.parent = parent
        self.versions: dict[str, list[dict]] = {}
        self.uploads: list[dict] = []
        self.failures: dict[str, list] = {}

    def _model_id(self, name: str) -> str:
        found = re.fullmatch(re.escape(f"{self.parent}/models/") + r"([a-z][a-z0-9_-]*)(?:@(.+))?", name)
        assert found, name
        return found[1]

    def _fail(self, connector: str):
        pending = self.failures.get(connector) or []
        return pending.pop(0) if pending else None

    def add(self, artifact_uri: str, labels: dict, aliases=()) -> dict:
        """A version put there by someone else (run_job.py, a person): newest."""
        versions = self.versions.setdefault(MODEL, [])
        version = {"name": f"{self.parent}/models/{MODEL}", "versionId": str(len(versions) + 1),
                   "artifactUri": artifact_uri, "labels": dict(labels),
                   "versionAliases": ["default"] if not versions else []}
        versions.append(version)
        for alias in aliases:
            self._move(alias, version)
        return version

    def _move(self, alias: str, version: dict) -> None:
        for other in self.versions[MODEL]:
            if alias in other["versionAliases"]:
                other["versionAliases"].remove(alias)
        version["versionAliases"].append(alias)

    def holder(self, alias: str) -> str | None:
        return next((v["versionId"] for v in self.versions.get(MODEL, []) if alias in v["versionAliases"]),
                    None)

    def list_versions(self, args: dict) -> dict:
        error = self._fail(LIST_VERSIONS_CONNECTOR)
        if error:
            raise error
        model = self._model_id(args["name"])
        found = re.fullmatch(r'labels\.vertex_job="([^"]*)"', args["filter"])
        assert found, f"the fake understands this filter only: {args['filter']}"
        if model not in self.versions:
            raise http_error(404, f"Model {args['name']} not found")
        matching = [v for v in self.versions[model] if v["labels"].get("vertex_job") == found[1]]
        return {"models": [dict(v) for v in matching]} if matching else {}

    def get(self, args: dict) -> dict:
        model, alias = self._model_id(args["name"]), args["name"].partition("@")[2]
        assert alias, "the workflow gets a model by alias only"
        holder = next((v for v in self.versions.get(model, []) if alias in v["versionAliases"]), None)
        if holder is None:
            raise http_error(404, f"Model {args['name']} not found")
        return dict(holder)

    def upload(self, args: dict) -> dict:
        assert args["parent"] == self.parent and args["connector_params"]["timeout"] > 0
        body = args["body"]
        assert ("modelId" in body) != ("parentModel" in body), body.keys()
        model = body.get("modelId") or self._model_id(body["parentModel"])
        if "modelId" in body and model in self.versions:
            raise http_error(409, f"Model {model} already exists")
        if "parentModel" in body and model not in self.versions:
            raise http_error(404, f"Model {body['parentModel']} not found")
        spec = body["model"]
        assert "versionAliases" not in spec, "aliases move by the gate, never on the upload"
        assert spec["artifactUri"].startswith("gs://") and spec["containerSpec"]["imageUri"]
        assert len(spec["labels"]) <= 64 and all(LABEL.fullmatch(k) and LABEL.fullmatch(v) and k[:1].isalpha()
                                                 for k, v in spec["labels"].items()), spec["labels"]
        self.uploads.append(body)
        failure = self._fail(UPLOAD_CONNECTOR)
        if failure == "lro":
            raise operation_error("Model upload failed: the container image could not be pulled",
                                  {"name": f"{self.parent}/operations/1", "done": True, "error": {"code": 9}})
        version = self.add(spec["artifactUri"], spec["labels"])
        version.update(displayName=spec["displayName"], containerSpec=spec["containerSpec"])
        if failure == "lro-timeout":
            raise WorkflowRaised({"message": "Timeout waiting for the operation", "tags": ["TimeoutError"]})
        return {"model": version["name"], "modelVersionId": version["versionId"]}

    def merge(self, args: dict) -> dict:
        error = self._fail(MERGE_ALIASES_CONNECTOR)
        if error:
            raise error
        model, version_id = self._model_id(args["name"]), args["name"].partition("@")[2]
        (version,) = [v for v in self.versions[model] if v["versionId"] == version_id]
        for alias in args["body"]["versionAliases"]:
            assert re.fullmatch(r"[a-z][a-zA-Z0-9-]{0,126}[a-z0-9-]", alias), alias
            self._move(alias, version)
        return dict(version)


class FakeStorage:
    """objects.get with alt=media: the object's bytes, or its JSON already decoded when it was stored as
    application/json (a dict here). The object name must come percent-encoded (text.url_encode): the
    connector puts it into the URL path as it is, and an unencoded "/" makes it another path (a 404)."""

    def __init__(self) -> None:
        self.files: dict[str, bytes | dict] = {}

    def get(self, args: dict) -> bytes | dict:
        assert args["alt"] == "media"
        if "/" in args["object"]:
            raise http_error(404, "No such object (the name was not URL-encoded)")
        uri = f"gs://{args['bucket']}/{unquote(args['object'])}"
        if uri not in self.files:
            raise http_error(404, f"No such object: {uri}")
        return self.files[uri]


class TrainingVertex(FakeVertex):
    """customJobs whose successful job writes its model's metrics.json (`value`: recall@10, or None for no
    file), as the trainer does, into `storage`; `stored_as_json`: with Content-Type application/json."""

    def __init__(self, storage: FakeStorage, value, **kwargs) -> None:
        super().__init__(**kwargs)
        self.storage, self.value, self.stored_as_json = storage, value, False

    def create(self, args: dict) -> dict:
        job = super().create(args)
        if self.outcome == "JOB_STATE_SUCCEEDED" and self.value is not None:
            model_dir = job["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"] + "/model"
            content = metrics(self.value)
            self.storage.files[f"{model_dir}/metrics.json"] = (
                json.loads(content) if self.stored_as_json else content)
        return job


def metrics(value) -> bytes:
    return json.dumps({"eval": {"recall_at_10": value, "ndcg_at_10": 0.1}, "history": {}}).encode()


@pytest.fixture(scope="module")
def weekly(stacks, configs):
    """The registering schedule and its deployed program."""
    cfg = configs[BASIC]
    run = {r.name: r for r in scenario_runs(cfg)}[REGISTERING]
    workflow, _ = synthesized(stacks, BASIC)[resource_names(cfg).schedule(run.name)]
    return run, yaml.safe_load(unescape(workflow["source_contents"])), planned_outputs(cfg)


def test_the_workflow_source_repeats_its_steps_instead_of_yaml_aliases(stacks, configs):
    """The two lists of versions and the two uploads are written out in full: no `&id001`/`*id001` for
    Workflows' YAML reader to resolve."""
    name = resource_names(configs[BASIC]).schedule(REGISTERING)
    source = unescape(synthesized(stacks, BASIC)[name][0]["source_contents"])
    assert source.count(LIST_VERSIONS_CONNECTOR) == 2 and source.count(UPLOAD_CONNECTOR) == 2
    assert not re.search(r"[&*]id\d", source)


class Cloud:
    """One project's fakes, shared by the executions of a test."""

    def __init__(self, run, value=0.3, outcome="JOB_STATE_SUCCEEDED") -> None:
        self.run = run
        self.storage = FakeStorage()
        self.registry = FakeRegistry(run.parent)
        self.vertex = TrainingVertex(self.storage, value, outcome=outcome)
        self.batch_state = "JOB_STATE_SUCCEEDED"  # how the batch prediction after registration ends
        self.endpoint = {"deployedModels": [], "trafficSplit": {}}  # the canary's, serving nothing yet
        self.deploys: list[dict] = []

    def deploy(self, args: dict) -> dict:
        """endpoints.deployModel, once the model serves."""
        self.deploys.append(args)
        return {"deployedModel": {"id": str(len(self.deploys))}}

    def batch_predict(self, args: dict) -> dict:
        """batchPredictionJobs.create, returning the job once it ended (the connector waits for it)."""
        return {**args["body"], "name": f"{self.run.parent}/batchPredictionJobs/5", "state": self.batch_state}

    def execute(self, program, now=NOW, execution=EXECUTION):
        self.vertex.now = now
        interpreter = Interpreter(
            program, now=now,
            env={"GOOGLE_CLOUD_WORKFLOW_EXECUTION_ID": execution, "TENSORBOARD": DEPLOYED_TENSORBOARD},
            connectors={LIST_CONNECTOR: self.vertex.list, CREATE_CONNECTOR: self.vertex.create,
                        LIST_VERSIONS_CONNECTOR: self.registry.list_versions,
                        GET_MODEL_CONNECTOR: self.registry.get, UPLOAD_CONNECTOR: self.registry.upload,
                        MERGE_ALIASES_CONNECTOR: self.registry.merge,
                        READ_OBJECT_CONNECTOR: self.storage.get, BATCH_CONNECTOR: self.batch_predict,
                        GET_ENDPOINT_CONNECTOR: lambda args: self.endpoint, DEPLOY_CONNECTOR: self.deploy})
        try:
            return interpreter.run(), interpreter
        finally:
            self.interpreter = interpreter

    def labelled(self, run_id: str) -> list[dict]:
        """The versions labelled with the id of the job of run `run_id`."""
        (job,) = [j for j in self.vertex.jobs if run_id in j["displayName"]]
        job_id = job["name"].rsplit("/", 1)[1]
        return [v for v in self.registry.versions.get(MODEL, []) if v["labels"].get("vertex_job") == job_id]

    def calls(self, connector: str) -> list[dict]:
        return [args for name, args in self.interpreter.calls if name == connector]


def run_id(run, now=NOW, execution=EXECUTION) -> str:
    stamp = iso(now).replace("-", "").replace(":", "")
    return f"{run.job_name}-{stamp[:8]}-{stamp[9:15]}-{execution[:6]}"


def model_dir(planned, rid: str) -> str:
    return f"{planned['models_bucket']}/x/{rid}/model"


@pytest.mark.parametrize("stored_as", ["bytes", "json"])
def test_the_first_run_creates_the_model_and_gives_it_the_alias(weekly, stored_as):
    run, program, planned = weekly
    cloud = Cloud(run, value=0.3)
    cloud.vertex.stored_as_json = stored_as == "json"
    result, interpreter = cloud.execute(program)
    rid = run_id(run)
    assert result["registered"] == [{
        "run": rid, "model": f"{run.parent}/models/{MODEL}", "version": "1", "uploaded": True,
        "metric": "recall_at_10", "value": 0.3,
        "aliases": [{"alias": "production", "outcome": "moved", "holder": None, "holder_value": None}]}]
    ((upload,),) = [cloud.registry.uploads]
    assert upload["modelId"] == MODEL and "parentModel" not in upload
    spec = upload["model"]
    assert spec["artifactUri"] == model_dir(planned, rid)
    assert spec["containerSpec"] == run.registration.container_spec_dict()
    assert spec["displayName"] == "Recommender"
    assert spec["labels"] == {"team": "scenario-ml", "vertex_job": "1", "recall_at_10": "0_3"}
    assert rid in spec["versionDescription"] and f"{run.parent}/customJobs/1" in spec["versionDescription"]
    assert cloud.registry.holder("production") == "1"
    assert {"severity": "INFO", "text": f"recommender version 1 ({rid}): moved alias production to it: "
                                         "no version held it"} in interpreter.logs


@pytest.mark.parametrize(
    ("goal", "held", "new", "outcome"),
    [
        ("MAXIMIZE", 0.30, 0.31, "moved"),
        ("MAXIMIZE", 0.30, 0.30, "moved"),  # a tie moves it: the newer model, as good
        ("MAXIMIZE", 0.30, 0.29, "kept"),
        ("MINIMIZE", 0.50, 0.40, "moved"),
        ("MINIMIZE", 0.50, 0.60, "kept"),
    ],
)
def test_the_alias_moves_only_to_a_model_no_worse_by_the_definitions_metric(weekly, goal, held, new, outcome):
    run, program, planned = weekly
    if goal != run.registration.goal:
        run = dataclasses.replace(run, registration=dataclasses.replace(run.registration, goal=goal))
        program = yaml.safe_load(workflow_source(run, {planned["tensorboard"]: "TENSORBOARD"}))
    cloud = Cloud(run, value=new)
    old_dir = model_dir(planned, "recommender-20261117-023005-aaaaaa")
    cloud.registry.add(old_dir, {"vertex_job": "9"}, aliases=["production"])
    cloud.storage.files[f"{old_dir}/metrics.json"] = metrics(held)
    result, interpreter = cloud.execute(program)
    (registered,) = result["registered"]
    assert (registered["version"], registered["uploaded"], registered["value"]) == ("2", True, new)
    assert registered["aliases"] == [
        {"alias": "production", "outcome": outcome, "holder": "1", "holder_value": held}]
    ((upload,),) = [cloud.registry.uploads]
    assert upload["parentModel"] == f"{run.parent}/models/{MODEL}" and "modelId" not in upload
    assert cloud.registry.holder("production") == ("2" if outcome == "moved" else "1")
    # `default` moves with the first alias: a reference to the model without @alias serves the gated best.
    assert cloud.registry.holder("default") == ("2" if outcome == "moved" else "1")
    (log,) = [entry["text"] for entry in interpreter.logs if "alias production" in entry["text"]]
    if outcome == "kept":  # both values, and who keeps it
        assert log.endswith(f"kept without alias production: recall_at_10 {new} is worse than {held} of "
                            "version 1, which keeps it")
    else:
        assert log.endswith(f"moved alias production to it: recall_at_10 {new} is no worse than {held} "
                            "of version 1")


@pytest.mark.parametrize(
    ("written", "warning"),
    [
        (None, "no gs://"),
        (b'{"eval": {"ndcg_at_10": 0.4}}', "no eval.recall_at_10 in gs://"),
        (b"{not json", " is not JSON"),
        # run_job.py reads no value there either: the writers agree on what a metric is.
        (b'{"eval": {"recall_at_10": "0.3"}}', "eval.recall_at_10 is not a number in gs://"),
        (b'{"eval": {"recall_at_10": true}}', "eval.recall_at_10 is not a number in gs://"),
    ],
    ids=["no-file", "no-metric", "not-json", "string", "boolean"],
)
@pytest.mark.parametrize("holder", [True, False])
def test_a_model_without_its_metric_is_registered_without_the_alias(weekly, written, warning, holder):
    run, program, planned = weekly
    cloud = Cloud(run, value=None)
    rid = run_id(run)
    if written is not None:
        cloud.storage.files[f"{model_dir(planned, rid)}/metrics.json"] = written
    if holder:
        cloud.registry.add("gs://elsewhere/m", {}, aliases=["production"])
    result, interpreter = cloud.execute(program)
    (registered,) = result["registered"]
    assert registered["uploaded"] and registered["value"] is None
    assert registered["aliases"][0]["outcome"] == "kept"
    assert "recall_at_10" not in cloud.labelled(rid)[0]["labels"]
    assert cloud.registry.holder("production") == ("1" if holder else None)
    assert cloud.calls(MERGE_ALIASES_CONNECTOR) == []
    texts = [entry["text"] for entry in interpreter.logs]
    assert any(e["severity"] == "WARNING" and warning in e["text"] for e in interpreter.logs), texts
    assert any(t.endswith("kept without alias production: its recall_at_10 is unknown") for t in texts), texts


def test_a_failed_job_registers_nothing(weekly):
    run, program, _ = weekly
    cloud = Cloud(run, outcome="JOB_STATE_CANCELLED")
    with pytest.raises(WorkflowRaised, match="ended JOB_STATE_CANCELLED"):
        cloud.execute(program)
    assert cloud.registry.uploads == [] and not cloud.registry.versions
    assert [name for name, _ in cloud.interpreter.calls] == [LIST_CONNECTOR, "sys.log", CREATE_CONNECTOR]


@pytest.mark.parametrize(
    ("failure", "connector", "versions_after_failure"),
    [
        # The upload's operation fails: no version, the execution fails before any alias.
        ("lro", UPLOAD_CONNECTOR, 0),
        # The connector stops waiting while the operation goes on: the version exists, unlabelled by the gate.
        ("lro-timeout", UPLOAD_CONNECTOR, 1),
        # The version exists; moving the alias fails.
        (http_error(500, "Internal error"), MERGE_ALIASES_CONNECTOR, 1),
    ],
    ids=["upload-operation-fails", "upload-wait-times-out", "alias-move-fails"],
)
def test_a_failed_registration_is_completed_by_a_later_execution_without_a_second_version(
        weekly, failure, connector, versions_after_failure):
    run, program, _ = weekly
    cloud = Cloud(run, value=0.3)
    cloud.registry.failures[connector] = [failure]
    with pytest.raises(WorkflowRaised):
        cloud.execute(program)
    first = run_id(run)
    assert len(cloud.labelled(first)) == versions_after_failure
    assert cloud.registry.holder("production") is None  # no alias on a half-registered run

    # The next day's execution (or one started by hand, once the run has settled) registers the failed run,
    # then its own.
    cloud.vertex.value = 0.25
    later, execution = NOW + DAY, "1b2c3d4e-0000"
    result, _ = cloud.execute(program, now=later, execution=execution)
    second = run_id(run, later, execution)
    assert [(r["run"], r["version"], r["uploaded"]) for r in result["registered"]] == [
        (first, "1", versions_after_failure == 0), (second, "2", True)]
    assert len(cloud.labelled(first)) == len(cloud.labelled(second)) == 1
    assert cloud.registry.holder("production") == "1"  # 0.3 beats 0.25
    assert result["registered"][1]["aliases"][0] == {
        "alias": "production", "outcome": "kept", "holder": "1", "holder_value": 0.3}


def test_a_registered_run_listed_again_is_only_gated_and_never_takes_an_alias_back(weekly):
    run, program, planned = weekly
    cloud = Cloud(run, value=0.3)
    cloud.execute(program)
    first = run_id(run)
    assert cloud.registry.holder("production") == "1"
    # Then someone registers a newer version with a lower value and gives it the alias.
    newer = model_dir(planned, "manual")
    cloud.storage.files[f"{newer}/metrics.json"] = metrics(0.2)
    cloud.registry.add(newer, {"vertex_job": "manual"}, aliases=["production"])

    later, execution = NOW + DAY, "1b2c3d4e-0000"
    cloud.vertex.value = 0.1
    result, interpreter = cloud.execute(program, now=later, execution=execution)
    earlier, own = result["registered"]
    assert (earlier["run"], earlier["version"], earlier["uploaded"]) == (first, "1", False)
    assert earlier["aliases"][0]["outcome"] == "kept" and earlier["aliases"][0]["holder"] == "2"
    assert any(f"({first}): kept without alias production: version 2, newer, holds it" in e["text"]
               for e in interpreter.logs)
    assert (own["version"], own["aliases"][0]["outcome"]) == ("3", "kept")  # 0.1 is worse than 0.2
    assert len(cloud.registry.uploads) == 2 and cloud.registry.holder("production") == "2"


def test_runs_that_failed_or_ended_moments_ago_are_not_registered_by_a_later_execution(weekly):
    run, program, planned = weekly
    cloud = Cloud(run, value=0.3)
    ended_now = {"name": f"{run.parent}/customJobs/70", "state": "JOB_STATE_SUCCEEDED",
                 "displayName": "weekly-wide-20261124-003005-cccccc",
                 "labels": {run.label: run.submission_hash}, "createTime": iso(NOW - 7200),
                 # Its own execution may be registering it right now.
                 "endTime": iso(NOW - REGISTER_GRACE_S + 60),
                 "jobSpec": {"baseOutputDirectory": {"outputUriPrefix": "gs://b/x/weekly-wide-cccccc"}}}
    failed = {**ended_now, "name": f"{run.parent}/customJobs/71", "state": "JOB_STATE_FAILED",
              "endTime": iso(NOW - DAY / 2)}
    cloud.vertex.jobs += [ended_now, failed]
    result, _ = cloud.execute(program)
    assert [r["run"] for r in result["registered"]] == [run_id(run)]


def test_an_earlier_run_that_cannot_be_registered_is_logged_and_the_run_still_registers(weekly):
    run, program, _ = weekly
    cloud = Cloud(run, value=0.3)
    cloud.execute(program)
    cloud.registry.failures[LIST_VERSIONS_CONNECTOR] = [http_error(403, "Permission denied")]
    later, execution = NOW + DAY, "1b2c3d4e-0000"
    result, interpreter = cloud.execute(program, now=later, execution=execution)
    failed, own = result["registered"]
    assert failed == {"run": run_id(run), "error": "Permission denied"}
    assert own["run"] == run_id(run, later, execution) and own["version"] == "2"
    assert {"severity": "ERROR", "text": f"could not register {run_id(run)}: Permission denied "
                                          "(a later execution tries again)"} in interpreter.logs
    # The run's own registration is not forgiven: the same error fails the execution.
    cloud.registry.failures[LIST_VERSIONS_CONNECTOR] = [http_error(403, "Permission denied")] * 3
    with pytest.raises(WorkflowRaised) as raised:
        cloud.execute(program, now=later + DAY, execution="2c3d4e5f-0000")
    assert raised.value.value["code"] == 403


def test_a_duplicate_execution_registers_nothing(weekly):
    run, program, _ = weekly
    cloud = Cloud(run, value=0.3)
    cloud.execute(program)
    # A retried trigger's second execution, moments later: the first one registers the run.
    result, interpreter = cloud.execute(program, now=NOW + 120, execution="ffffff-1")
    assert result == {"run": f"{run.parent}/customJobs/1", "state": "JOB_STATE_SUCCEEDED", "duplicate": True}
    assert [name for name, _ in interpreter.calls] == [LIST_CONNECTOR]
    assert len(cloud.registry.uploads) == 1


# --- the interpreter is as strict as Workflows where the program relies on it


def test_the_interpreter_catches_connector_and_expression_errors_as_workflows_error_maps():
    steps = [
        {"init": {"assign": [{"caught": []}, {"empty": {}}]}},
        {"http": {"try": {"call": "fake.get", "args": {}, "result": "r"},
                  "except": {"as": "e", "steps": [{"note_http": {"assign": [
                      {"caught": "${list.concat(caught, e.code)}"}]}}]}}},
        {"key": {"try": {"steps": [{"missing": {"assign": [{"x": "${empty.nope}"}]}}]},
                 "except": {"as": "e", "steps": [{"note_key": {"assign": [
                     {"caught": "${list.concat(caught, e.tags)}"}, {"inner": 1}]}}]}}},
    ]

    def not_found(_args):
        raise http_error(404, "nope")

    def run(last: dict):
        return Interpreter({"main": {"steps": [*steps, last]}}, now=NOW, env={},
                           connectors={"fake.get": not_found}).run()

    assert run({"done": {"return": "${caught}"}}) == [404, ["KeyError"]]
    # A variable first assigned in an except block (or a loop body) does not outlive it.
    with pytest.raises(NameError):
        run({"done": {"return": "${inner}"}})
    with pytest.raises(AssertionError, match="repeated step names"):
        Interpreter({"main": {"steps": [{"a": {"assign": [{"x": 1}]}}, {"b": {"steps": [
            {"a": {"assign": [{"x": 2}]}}]}}]}}, now=NOW, env={}, connectors={})


def test_the_interpreters_functions_refuse_what_workflows_refuses():
    assert _url_encode("a/b/c?item=d+e f") == "a%2Fb%2Fc%3Fitem%3Dd%2Be%20f"  # the documented example
    assert _url_encode("x/model/metrics.json~") == "x%2Fmodel%2Fmetrics.json%7E"
    assert _json_decode(b'{"a": [1]}') == {"a": [1]} == _json_decode('{"a": [1]}')
    assert _map_get({"eval": {"m": 0.5}}, ["eval", "m"]) == 0.5
    assert _map_get({"eval": [1]}, ["eval", "m"]) is None and _map_get({}, ["eval", "m"]) is None
    assert (_string(0.8712), _string(3), _string(True)) == ("0.8712", "3", "true")
    for call, error in [(lambda: _json_decode(b"{"), ValueError), (lambda: _json_decode({"a": 1}), TypeError),
                        (lambda: _url_encode(None), TypeError), (lambda: _string(None), TypeError),
                        (lambda: _string("x"), TypeError)]:
        with pytest.raises(error):
            call()


def _registration(**changes):
    return lambda run: dataclasses.replace(run, registration=dataclasses.replace(run.registration, **changes))


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (_registration(model_id="9-recommender"), "run.registration.model_id"),
        (_registration(aliases=("Production",)), "run.registration.aliases"),
        (_registration(aliases=("production", "production")), "run.registration.aliases"),
        (_registration(labels=(("vertex_job", "mine"),)), "run.registration.labels"),
        (_registration(aliases=("default",)), "run.registration.aliases"),  # moves with the first alias
        (_registration(aliases=tuple(f"a{i}" for i in range(11))), "run.registration.aliases"),
        (_registration(labels=(("team", "ml"), ("app", "x"))), "run.registration.labels"),  # unsorted
        (_registration(goal="BIGGER"), "run.registration.goal"),
        (_registration(metric=""), "run.registration.metric"),
        (_registration(container_spec='{"command": []}'), "run.registration.container_spec"),
    ],
)
def test_a_registration_the_registry_would_refuse_fails_synthesis(weekly, configs, change, field):
    from infra.constructs.scheduled_job import ScheduledJobProps
    from infra.constructs.validation import PropsError

    run, _, _ = weekly
    props = ScheduledJobProps(project=configs[BASIC].project_id, name="scn-std-weekly-wide", run=change(run),
                              service_account="scn-std-schedule@scn-std-proj.iam.gserviceaccount.com")
    with pytest.raises(PropsError, match=re.escape(f"field '{field}'")):
        props.validate("ScheduledJob 'x'")
    dataclasses.replace(props, run=run).validate("ScheduledJob 'x'")  # the scenario's own passes


def test_a_batch_prediction_that_fails_fails_the_execution_after_the_registration(weekly):
    """The batch runs once the run is registered and gated: its failure leaves the version and the alias
    where the gate put them, and fails the execution (the batch is not retried by a later one)."""
    run, program, planned = weekly
    cloud = Cloud(run, value=0.3)
    cloud.batch_state = "JOB_STATE_FAILED"
    with pytest.raises(WorkflowRaised) as failed:
        cloud.execute(program)
    assert failed.value.value == f"batch prediction {run.parent}/batchPredictionJobs/5 ended JOB_STATE_FAILED"
    assert cloud.registry.holder("production") == "1"
    assert len(cloud.deploys) == 1  # the canary went first: the gate moved the alias
    (sent,) = cloud.calls(BATCH_CONNECTOR)
    rid = run_id(run)
    assert sent["body"]["model"] == f"{run.parent}/models/{MODEL}@production"
    assert sent["body"]["inputConfig"]["gcsSource"]["uris"] == [f"{model_dir(planned, rid)}/users.jsonl"]
    assert sent["body"]["displayName"] == f"recommender-production-batch-{rid[len(run.job_name) + 1:][:15]}"
