"""A schedule's `deploy:` canary (jobs.schedule -> infra.schedules): one rule, two writers of an endpoint's
traffic. A table of endpoint states run through the generated `deploy_canary` subworkflow (Workflows test
interpreter) and through run_job.py deploy's pure functions (jobs.definition.deployment): the same
DeployModelRequest, or the same refusal. Then the shipped dev schedule with a canary added: it deploys only
when the gate moved the alias to the run's version; and a `deploy:` the verb refuses is one line naming the
config key."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from infra.config import ConfigError, load_environment, parse_environment
from infra.outputs import endpoint_resource_names, planned_outputs
from infra.schedules import DEPLOY_CONNECTOR, GET_ENDPOINT_CONNECTOR, workflow_source
from jobs.definition.deployment import (
    DeployError,
    deploy_request,
    deploy_split,
    parse_ref,
    parse_settings,
    serving,
    traffic,
)
from jobs.schedule import compile_schedules
from tests.common.test_model_registry import START, Project, dev  # noqa: F401 - dev: a fixture
from tests.infra.workflows_interpreter import Interpreter, WorkflowRaised
from tests.jobs.fake_vertex import FakeVertex, FakeVertexServer

DEV = load_environment("dev")
ENDPOINT = endpoint_resource_names(DEV)["recommender"]
PARENT = f"projects/{DEV.project_id}/locations/{DEV.region}"
MODEL = f"{PARENT}/models/recommender"


def compiled(tmp_path, monkeypatch, canary: dict):
    """The shipped dev schedule with `deploy: canary` added, compiled as the stack compiles it."""
    doc = yaml.safe_load(open(DEV.source, encoding="utf-8"))
    doc["schedules"]["recommender-daily"]["deploy"] = canary
    (tmp_path / "dev.yaml").write_text(yaml.safe_dump(doc))
    monkeypatch.setenv("INFRA_ENVIRONMENTS_DIR", str(tmp_path))
    (run,) = compile_schedules(parse_environment("dev", doc, tmp_path / "dev.yaml"))
    return run


def served(*models: tuple[str, str, int | None]) -> dict:
    """An endpoint serving (deployed model id, version, share or None for no entry in the split)."""
    deployed = [{"id": i, "model": MODEL, "modelVersionId": v, "createTime": f"2026-11-2{n}T00:00:00Z"}
                for n, (i, v, _) in enumerate(models)]
    return {"name": ENDPOINT, "deployedModels": deployed,
            "trafficSplit": {i: share for i, _, share in models if share is not None}}


def by_workflow(program: dict, state: dict, version: str) -> dict | None:
    """The DeployModelRequest `deploy_canary(version)` sends for the endpoint `state` (None: none sent)."""
    sent = []
    connectors = {GET_ENDPOINT_CONNECTOR: lambda args: state,
                  DEPLOY_CONNECTOR: lambda args: sent.append(args) or {"deployedModel": {"id": "99"}}}
    program = {**program, "main": {"steps": [{"go": {"call": "deploy_canary", "args": {"version": version},
                                                     "result": "r"}}, {"done": {"return": "${r}"}}]}}
    Interpreter(program, now=START, env={}, connectors=connectors).run()
    if not sent:
        return None
    (args,) = sent
    assert args["region"] == DEV.region
    return {"endpoint": args["endpoint"], **args["body"]}


def by_cli(traffic_percent: int, state: dict) -> dict:
    """What run_job.py deploy recommender@production --endpoint recommender --traffic N sends for `state`."""
    spec = parse_settings({"endpoint": "recommender", "traffic": traffic_percent})
    current = traffic(state)
    split = deploy_split(spec, current, [s.id for s in serving(state)])
    return deploy_request(spec, parse_ref("recommender@production"), PARENT, ENDPOINT, split, current)


TABLE = [
    ("the first version on an empty endpoint takes it all", 100, served()),
    ("a canary beside one model", 10, served(("1", "1", 100))),
    ("the others keep their proportions (70/30 -> 63/27)", 10, served(("1", "1", 70), ("2", "2", 30))),
    ("largest remainders, ties to the lower id", 10, served(("1", "1", 33), ("2", "2", 33), ("3", "3", 34))),
    ("ids compare as text, as Python sorts them", 25, served(("9", "1", 50), ("10", "2", 50))),
    ("shares all 0 go to the newest-looking id", 20, served(("9", "1", 0), ("10", "2", None))),
    ("100 leaves the others deployed at 0", 100, served(("1", "1", 60), ("2", "2", 40))),
    ("a canary on an empty endpoint is refused", 10, served()),
    ("a record too long for the display name is refused", 10,
     served(*((str(10**18 + i), str(i + 1), 20) for i in range(5)))),
]


@pytest.mark.parametrize(("case", "percent", "state"), TABLE, ids=[row[0] for row in TABLE])
def test_the_canary_sends_what_run_job_deploy_sends(tmp_path, monkeypatch, case, percent, state):
    run = compiled(tmp_path, monkeypatch, {"endpoint": "recommender", "traffic": percent})
    program = yaml.safe_load(workflow_source(run, {}))
    try:
        expected = by_cli(percent, state)
    except DeployError:
        with pytest.raises(WorkflowRaised) as refused:
            by_workflow(program, state, "77")
        assert isinstance(refused.value.value, str)  # the program's own refusal, not an error of its steps
        return
    assert by_workflow(program, state, "77") == expected


def test_a_version_deployed_there_already_is_not_deployed_again(tmp_path, monkeypatch):
    run = compiled(tmp_path, monkeypatch, {"endpoint": "recommender", "traffic": 10})
    program = yaml.safe_load(workflow_source(run, {}))
    assert by_workflow(program, served(("1", "1", 90), ("5", "77", 10)), "77") is None


def test_the_schedule_deploys_only_when_the_gate_moved_the_alias(dev, tmp_path, monkeypatch):  # noqa: F811
    shipped, _, outputs = dev
    run = compiled(tmp_path, monkeypatch, {"endpoint": "recommender", "traffic": 100,
                                           "machine_type": "n1-standard-2"})
    assert dataclasses.replace(run, deploy=None) == shipped  # only the canary is new
    program = yaml.safe_load(workflow_source(run, {planned_outputs(DEV)["tensorboard"]: "TENSORBOARD"}))
    endpoint = served()
    deploys: list[dict] = []

    def deploy(args):
        deploys.append(args)
        new_id = str(100 + len(deploys))
        split = {new_id if k == "0" else k: v for k, v in args["body"]["trafficSplit"].items()}
        model = {"id": new_id, "model": MODEL, "modelVersionId": version_of(args)}
        endpoint.update(deployedModels=[*endpoint["deployedModels"], model], trafficSplit=split)
        return {"deployedModel": model}

    with FakeVertexServer(FakeVertex()) as server:
        project = Project(run, outputs, tmp_path / "gs", server)

        def version_of(args):
            return next(v["versionId"] for v in project.state() if "production" in v["versionAliases"])

        more = {GET_ENDPOINT_CONNECTOR: lambda args: endpoint, DEPLOY_CONNECTOR: deploy}
        outcomes = []
        for index, value in enumerate((0.30, 0.20, 0.35)):  # moved, kept, moved
            _, now = project.train(index, value)
            result = project.workflow(program, index, now, True, more)
            outcomes.append((result["registered"][-1]["aliases"][0]["outcome"], result["deployed"]))
    assert outcomes == [("moved", {"deployed_model": "101", "version": "1", "deployed": True}),
                        ("kept", None),
                        ("moved", {"deployed_model": "102", "version": "3", "deployed": True})]
    first, second = deploys
    assert second["body"]["deployedModel"] == {
        "model": f"{MODEL}@production", "displayName": "recommender@production; previous traffic 101=100",
        "dedicatedResources": {"machineSpec": {"machineType": "n1-standard-2"}, "minReplicaCount": 1,
                               "maxReplicaCount": 1}}
    assert second["body"]["trafficSplit"] == {"101": 0, "0": 100}
    assert first["body"]["deployedModel"]["displayName"] == "recommender@production; previous traffic none"


@pytest.mark.parametrize(("canary", "field", "problem"), [
    ({"endpoint": "nope"}, "endpoint", "'nope' is not an endpoint of this environment; allowed: recommender"),
    ({"endpoint": "recommender", "machine_type": "n1-standard-1"}, "machine_type",
     "is not a Vertex AI prediction machine"),
    ({"endpoint": "recommender", "min_replicas": 3, "max_replicas": 2}, "max_replicas",
     "below minReplicaCount"),
    ({"endpoint": "recommender", "traffic": 0}, "traffic", "an integer from 1 to 100"),
    ({"endpoint": "recommender", "traffic_split": "0=100"}, "traffic_split", "unknown key"),
])
def test_a_canary_the_verb_refuses_names_the_config_key(tmp_path, monkeypatch, canary, field, problem):
    with pytest.raises(ConfigError) as refused:
        compiled(tmp_path, monkeypatch, canary)
    line = str(refused.value)
    assert f"field 'schedules.recommender-daily.deploy.{field}': " in line and problem in line, line
    assert "\n" not in line
