"""`run_job.py deploy / undeploy / rollback` against the fake EndpointService (tests/jobs/fake_endpoints.py):
the real generated EndpointServiceClient and PredictionServiceClient over REST. A canary keeps the other
models' shares, a retry never deploys a version twice, a failed deploy leaves traffic where it was, rollback
puts back the split recorded by the deploy it undoes; bad input is one line, exit 2, nothing deployed. The
pure rules (jobs.definition.deployment) are table-tested first."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
import yaml
from google.cloud.aiplatform_v1 import DeployModelRequest, UndeployModelRequest

from infra.config import ENVIRONMENTS_DIR_VAR, parse_environment
from infra.outputs import endpoint_resource_names
from jobs.cloud.client import LocalDirStorage
from jobs.definition.deployment import (
    DeployError,
    deploy_split,
    display_name,
    parse_ref,
    parse_settings,
    recorded_split,
    rollback_split,
    scaled,
)
from tests.jobs.fake_vertex import FakeVertex, FakeVertexServer
from tests.jobs.helpers import JOBS_DIR, OUTPUTS, make_repo, run_cli

# The environment the tests deploy in: the outputs of tests/jobs/helpers.py's project and region, with one
# endpoint, `census` (infra.config's endpoints map; its id is infra.naming's, from the names alone).
ENVIRONMENT = f"""\
project_id: {OUTPUTS['project']}
project_number: "{OUTPUTS['project_number']}"
region: {OUTPUTS['region']}
name_prefix: demo
state_bucket: demo-tfstate
github: {{owner: demo-org, repository: demo-repo, repository_id: 1}}
endpoints:
  census: {{description: the census model}}
"""
PARENT = f"projects/{OUTPUTS['project']}/locations/{OUTPUTS['region']}"
MODEL = f"{PARENT}/models/census"
ENDPOINT = endpoint_resource_names(parse_environment("dev", yaml.safe_load(ENVIRONMENT)))["census"]
ARTIFACT = "gs://demo-project-models/census-cpu/run/model"
CENSUS_JOB = JOBS_DIR / "census_cpu.yaml"


@pytest.fixture
def endpoints(tmp_path_factory, monkeypatch):
    """run_job.py's environment `dev` is ENVIRONMENT."""
    folder = tmp_path_factory.mktemp("environments")
    (folder / "dev.yaml").write_text(ENVIRONMENT, encoding="utf-8")
    monkeypatch.setenv(ENVIRONMENTS_DIR_VAR, str(folder))


def registry(fake: FakeVertex, versions: int = 2) -> None:
    """Model census with ``versions`` versions, the last holding alias production."""
    for i in range(versions):
        fake.add_version(MODEL, f"{ARTIFACT}{i}")
    fake.models[MODEL][-1]["versionAliases"].append("production")


def deploys(fake: FakeVertex) -> list:
    return [r for r in fake.requests if r.path.endswith(":deployModel")]


# --- the pure rules ---------------------------------------------------------------------------------------

SCALED = [
    ({"1": 100}, 90, {"1": 90}),
    ({"1": 50, "2": 50}, 90, {"1": 45, "2": 45}),
    ({"1": 1, "2": 1, "3": 1}, 100, {"1": 34, "2": 33, "3": 33}),  # largest remainders, ties to the lower id
    ({"1": 0, "2": 0}, 100, {"1": 0, "2": 100}),  # nothing to scale: the newest id takes it
    ({}, 100, {}),
]


@pytest.mark.parametrize("split, total, expected", SCALED)
def test_shares_scale_to_a_whole_total(split, total, expected):
    assert scaled(split, total) == expected
    assert sum(expected.values()) in (0, total)


def test_a_canary_takes_its_share_and_the_others_keep_theirs_of_the_rest():
    spec = parse_settings({"endpoint": "census", "traffic": 10})
    assert deploy_split(spec, {"1": 70, "2": 30}, ["1", "2"]) == {"1": 63, "2": 27, "0": 10}
    assert deploy_split(parse_settings({"endpoint": "census"}), {}, []) == {"0": 100}
    with pytest.raises(DeployError, match="serves nothing else"):
        deploy_split(spec, {}, [])
    whole = parse_settings({"endpoint": "census", "trafficSplit": "0=20,1=80"})
    assert deploy_split(whole, {"1": 100}, ["1"]) == {"0": 20, "1": 80}
    with pytest.raises(DeployError, match="'7' is not deployed"):
        deploy_split(parse_settings({"endpoint": "census", "trafficSplit": "0=20,7=80"}), {"1": 100}, ["1"])


def test_the_record_of_the_previous_split_reads_back_and_rollback_keeps_what_is_still_deployed():
    ref = parse_ref("census@production")
    assert recorded_split(display_name(ref, {"11": 90, "12": 10})) == {"11": 90, "12": 10}
    assert recorded_split(display_name(ref, {})) == {}
    assert recorded_split("deployed by hand") is None
    assert rollback_split({"11": 90, "12": 10}, ["11"]) == {"11": 100}
    with pytest.raises(DeployError, match="display name"):
        display_name(ref, {str(10**18 + i): 1 for i in range(6)})


REFUSED_SETTINGS = [
    ({"traffic": 0}, "traffic", "an integer from 1 to 100"),
    ({"traffic": "ten"}, "traffic", "an integer from 1 to 100"),
    ({"trafficSplit": "0=10,1=80"}, "trafficSplit", "summing to 100"),
    ({"trafficSplit": "1=100"}, "trafficSplit", "0 for the version"),
    ({"trafficSplit": "0=x"}, "trafficSplit", "summing to 100"),
    ({"traffic": 10, "trafficSplit": "0=100"}, "trafficSplit", "one of traffic or trafficSplit"),
    ({"machineType": "cloud-tpu"}, "machineType", "n1-standard-*"),
    ({"machineType": "n1-standard-3"}, "machineType", "n1-standard-2, n1-standard-4"),
    ({"acceleratorType": "NVIDIA_L4"}, "acceleratorType", "NVIDIA_TESLA_T4"),
    ({"acceleratorType": "NVIDIA_TESLA_T4", "acceleratorCount": 8}, "acceleratorCount", "1, 2, 4"),
    ({"machineType": "g2-standard-8"}, "acceleratorType", "NVIDIA_L4"),
    ({"minReplicaCount": 3, "maxReplicaCount": 2}, "maxReplicaCount", "an integer from 3 to 100"),
    ({"cpuUtilizationTarget": 101}, "cpuUtilizationTarget", "an integer from 1 to 100"),
    ({"replicas": 2}, "replicas", "machineType"),
]


@pytest.mark.parametrize("settings, field, allowed", REFUSED_SETTINGS)
def test_settings_the_catalogue_or_the_rules_refuse_name_their_field(settings, field, allowed):
    with pytest.raises(DeployError) as refused:
        parse_settings({"endpoint": "census", **settings})
    assert refused.value.path == field and allowed in refused.value.allowed, str(refused.value)


def test_serving_machines_are_the_prediction_catalogue_not_training_s():
    assert parse_settings({"endpoint": "e", "machineType": "n1-standard-2"}).machine_type == "n1-standard-2"
    assert parse_settings({"endpoint": "e", "machineType": "e2-standard-2"}).machine_type == "e2-standard-2"
    spec = parse_settings({"endpoint": "e", "machineType": "g2-standard-8", "acceleratorType": "NVIDIA_L4"})
    assert spec.accelerator_count == 1


@pytest.mark.parametrize("text", ["census", "census@", "@production", "Census@production", "census@prod@x",
                                  "census@-x", "census@production\n"])
def test_a_malformed_model_version_is_refused(text):
    with pytest.raises(DeployError, match="is not a registry model and alias"):
        parse_ref(text)


# --- the verbs against the fake EndpointService -----------------------------------------------------------


def test_dry_run_prints_the_exact_deploy_request_and_sends_nothing(endpoints, tmp_path):
    fake = FakeVertex()
    with FakeVertexServer(fake) as server:
        rc, out, err = run_cli(
            ["deploy", "census@production", "--endpoint", "census", "--dry-run", "--machine-type",
             "n1-standard-2", "--min-replicas", "1", "--max-replicas", "3", "--cpu-target", "70"],
            factory=server.factory(tmp_path),
        )
    assert (rc, err) == (0, "")
    assert fake.requests == []
    request = json.loads(out)
    DeployModelRequest.from_json(json.dumps({**request, "deployedModel": {
        **request["deployedModel"], "displayName": "x"}}))  # the aiplatform_v1 message takes it as is
    assert request["endpoint"] == ENDPOINT and request["trafficSplit"] == {"0": 100}
    resources = request["deployedModel"]["dedicatedResources"]
    assert request["deployedModel"]["model"] == f"{MODEL}@production"
    assert resources == {
        "machineSpec": {"machineType": "n1-standard-2"},
        "minReplicaCount": 1,
        "maxReplicaCount": 3,
        "autoscalingMetricSpecs": [
            {"metricName": "aiplatform.googleapis.com/prediction/online/cpu/utilization", "target": 70}
        ],
    }


def test_a_canary_deploy_keeps_the_rest_where_it_is_records_it_and_smoke_tests_the_new_model(
    endpoints, tmp_path
):
    fake = FakeVertex()
    registry(fake)
    fake.endpoints.add_endpoint(ENDPOINT)
    old = fake.endpoints.add_deployed(ENDPOINT, MODEL, "1", 100)
    with FakeVertexServer(fake) as server:
        rc, out, err = run_cli(
            ["deploy", "census@production", "--endpoint", "census", "--traffic", "10", "--instance",
             '{"user": "1"}'],
            factory=server.factory(tmp_path),
        )
    assert (rc, err) == (0, ""), err
    (sent,) = deploys(fake)
    assert sent.body["trafficSplit"] == {old: 90, "0": 10}
    assert sent.body["deployedModel"]["displayName"] == f"census@production; previous traffic {old}=100"
    new = fake.endpoints.endpoints[ENDPOINT]["deployedModels"][-1]
    assert new["modelVersionId"] == "2"
    assert fake.endpoints.split(ENDPOINT) == {old: 90, new["id"]: 10}
    assert f'smoke prediction answered by deployed model {new["id"]}: {{"echo": {{"user": "1"}}}}' in out


def test_a_retried_deploy_does_not_deploy_the_version_twice(endpoints, tmp_path):
    fake = FakeVertex()
    registry(fake)
    fake.endpoints.add_endpoint(ENDPOINT)
    argv = ["deploy", "census@production", "--endpoint", "census"]
    with FakeVertexServer(fake) as server:
        assert run_cli(argv, factory=server.factory(tmp_path))[0] == 0
        rc, out, _ = run_cli(argv, factory=server.factory(tmp_path))
    assert rc == 0 and len(deploys(fake)) == 1
    assert "deployed on census already" in out and "not deployed again" in out
    assert len(fake.endpoints.endpoints[ENDPOINT]["deployedModels"]) == 1


def test_a_failed_deploy_leaves_traffic_where_it_was_and_the_same_command_finishes_it(endpoints, tmp_path):
    fake = FakeVertex()
    registry(fake)
    fake.endpoints.add_endpoint(ENDPOINT)
    old = fake.endpoints.add_deployed(ENDPOINT, MODEL, "1", 100)
    fake.endpoints.deploy_errors.append("quota exceeded for n1-standard-4")
    argv = ["deploy", "census@production", "--endpoint", "census", "--traffic", "10"]
    with FakeVertexServer(fake) as server:
        rc, _, err = run_cli(argv, factory=server.factory(tmp_path))
        assert rc == 1 and len(err.splitlines()) == 1 and "Traceback" not in err
        assert "quota exceeded" in err and "traffic is where it was" in err
        assert fake.endpoints.split(ENDPOINT) == {old: 100}
        assert run_cli(argv, factory=server.factory(tmp_path))[0] == 0
    assert len(deploys(fake)) == 2 and len(fake.endpoints.endpoints[ENDPOINT]["deployedModels"]) == 2


def test_rollback_undeploys_the_last_deploy_and_puts_its_recorded_split_back(endpoints, tmp_path):
    fake = FakeVertex()
    registry(fake, versions=3)
    fake.endpoints.add_endpoint(ENDPOINT)
    first = fake.endpoints.add_deployed(ENDPOINT, MODEL, "1", 70)
    second = fake.endpoints.add_deployed(ENDPOINT, MODEL, "2", 30)
    with FakeVertexServer(fake) as server:
        factory = server.factory(tmp_path)
        assert run_cli(["deploy", "census@production", "--endpoint", "census"], factory=factory)[0] == 0
        assert set(fake.endpoints.split(ENDPOINT).values()) == {0, 100}  # all on the new one
        rc, out, err = run_cli(["rollback", "--endpoint", "census"], factory=factory)
        assert (rc, err) == (0, ""), err
        assert fake.endpoints.split(ENDPOINT) == {first: 70, second: 30}
        assert [d["id"] for d in fake.endpoints.endpoints[ENDPOINT]["deployedModels"]] == [first, second]
        (undo,) = [r for r in fake.requests if r.path.endswith(":undeployModel")]
        UndeployModelRequest.from_json(json.dumps(undo.body))
        assert undo.body["trafficSplit"] == {first: 70, second: 30}
        # Nothing left that a deploy recorded: one line, exit 2.
        rc, out, err = run_cli(["rollback", "--endpoint", "census"], factory=factory)
    assert rc == 2 and err.startswith("rollback: --endpoint: no model on census was deployed by run_job.py")


def test_undeploy_gives_the_version_s_traffic_to_the_others_and_a_retry_does_nothing(endpoints, tmp_path):
    fake = FakeVertex()
    registry(fake)
    fake.endpoints.add_endpoint(ENDPOINT)
    old = fake.endpoints.add_deployed(ENDPOINT, MODEL, "1", 60)
    fake.endpoints.add_deployed(ENDPOINT, MODEL, "2", 40)
    argv = ["undeploy", "census@production", "--endpoint", "census"]
    with FakeVertexServer(fake) as server:
        assert run_cli(argv, factory=server.factory(tmp_path))[0] == 0
        assert fake.endpoints.split(ENDPOINT) == {old: 100}
        rc, out, _ = run_cli(argv, factory=server.factory(tmp_path))
    assert rc == 0 and "is not deployed on census; nothing to do" in out


def test_undeploy_and_rollback_dry_runs_print_the_request_the_endpoint_decides_and_change_nothing(
    endpoints, tmp_path
):
    fake = FakeVertex()
    registry(fake, versions=3)
    fake.endpoints.add_endpoint(ENDPOINT)
    first = fake.endpoints.add_deployed(ENDPOINT, MODEL, "1", 70)
    with FakeVertexServer(fake) as server:
        factory = server.factory(tmp_path)
        assert run_cli(["deploy", "census@production", "--endpoint", "census", "--traffic", "20"],
                       factory=factory)[0] == 0
        new = fake.endpoints.endpoints[ENDPOINT]["deployedModels"][-1]["id"]
        before = fake.endpoints.split(ENDPOINT)
        sent = len(fake.requests)
        rc, out, err = run_cli(["rollback", "--endpoint", "census", "--dry-run"], factory=factory)
        assert (rc, err) == (0, ""), err
        request = json.loads(out[out.index("{"):])
        UndeployModelRequest.from_json(json.dumps(request))
        assert request == {"endpoint": ENDPOINT, "deployedModelId": new, "trafficSplit": {first: 100}}
        rc, out, err = run_cli(["undeploy", "census@production", "--endpoint", "census", "--dry-run"],
                               factory=factory)
        assert (rc, err) == (0, ""), err
        assert json.loads(out[out.index("{"):]) == request
        # Only reads went out; the endpoint serves what it served.
        assert all(r.method == "GET" for r in fake.requests[sent:])
        assert fake.endpoints.split(ENDPOINT) == before == {first: 80, new: 20}


def test_a_failed_smoke_prediction_exits_1_naming_the_rollback(endpoints, tmp_path):
    fake = FakeVertex()
    registry(fake)
    fake.endpoints.add_endpoint(ENDPOINT)
    fake.endpoints.predict_errors.append("the model refused the instance")
    with FakeVertexServer(fake) as server:
        rc, _, err = run_cli(["deploy", "census@production", "--endpoint", "census", "--instance", "{}"],
                             factory=server.factory(tmp_path))
    assert rc == 1 and len(err.splitlines()) == 1
    assert "smoke prediction failed" in err and "rollback --endpoint census" in err


BAD = [
    (["deploy", "census@production", "--endpoint", "nope"], "deploy: --endpoint: 'nope' is not an endpoint",
     "census"),
    (["deploy", "census", "--endpoint", "census"],
     "deploy: MODEL@ALIAS: 'census' is not a registry model and alias", "<model id>@<alias"),
    (["deploy", "census@production", "--endpoint", "census", "--traffic-split", "0=10,5000=80"],
     "deploy: --traffic-split: the shares sum to 90", "summing to 100"),
    (["deploy", "census@production", "--endpoint", "census", "--traffic-split", "0=10,77=90"],
     "deploy: --traffic-split: '77' is not deployed on the endpoint", "5000"),
    (["deploy", "census@staging", "--endpoint", "census"], "deploy: MODEL@ALIAS: the Model Registry has no "
     "version census@staging", "a registered model"),
    (["deploy", "census@production", "--endpoint", "census", "--instance", "{"],
     "deploy: --instance: not JSON", "one instance"),
    (["undeploy", "census@production", "--endpoint", "other"],
     "undeploy: --endpoint: 'other' is not", "census"),
]


@pytest.mark.parametrize("argv, line, allowed", BAD, ids=[b[1].split(":")[1].strip() for b in BAD])
def test_bad_input_is_one_line_exit_2_and_nothing_deployed(endpoints, tmp_path, argv, line, allowed):
    fake = FakeVertex()
    registry(fake)
    fake.endpoints.add_endpoint(ENDPOINT)
    fake.endpoints.add_deployed(ENDPOINT, MODEL, "1", 100)
    with FakeVertexServer(fake) as server:
        rc, out, err = run_cli(argv, factory=server.factory(tmp_path))
    assert rc == 2 and out == "" and len(err.splitlines()) == 1, err
    assert err.startswith(line) and allowed in err.partition("; allowed: ")[2], err
    assert deploys(fake) == [] and fake.endpoints.split(ENDPOINT) == {"5000": 100}


# --- a definition's deploy block, after registration ------------------------------------------------------

DEPLOY_BLOCK = """\
deploy:
  endpoint: census
  traffic: 10
  machineType: n1-standard-2
  maxReplicaCount: 2
  instance: {user: "1"}
"""


def with_block(tmp_path, block: str = DEPLOY_BLOCK):
    """jobs/census_cpu.yaml (registry: census, alias production) with ``block`` beside its registry."""
    path = tmp_path / "census_deploy.yaml"
    path.write_text(CENSUS_JOB.read_text().replace("registry:\n", block + "registry:\n", 1), encoding="utf-8")
    return path


def test_a_deploy_block_deploys_the_gated_alias_after_registration_as_dry_run_printed_it(
    endpoints, tmp_path, no_poll_sleep
):
    job = with_block(tmp_path)
    rc, out, plan = run_cli([job, "--dry-run"])
    assert rc == 0, plan
    step = "then deploy census@production to endpoint census (n1-standard-2, 1-2 replicas, 10% of traffic"
    assert step in plan
    preview = json.loads(re.search(r"^deploy request [^\n]*:\n(\{.*\n\})", plan, re.S | re.M).group(1))
    fake = FakeVertex()
    fake.endpoints.add_endpoint(ENDPOINT)
    old = fake.endpoints.add_deployed(ENDPOINT, MODEL, "1", 100)
    fake.add_version(MODEL, f"{ARTIFACT}0")["versionAliases"].append("production")
    with FakeVertexServer(fake) as server:
        (root := tmp_path / "gs").mkdir()
        name = "projects/demo-project/locations/us-central1/customJobs/1000"
        rc, out, err = run_cli([job], factory=server.factory(root))
    assert rc == 0, err
    # The new version is kept without the alias (no metrics.json to compare), so production's holder,
    # deployed already, is not deployed again; the smoke prediction still runs.
    assert "alias production stays on version 1" in out and "not deployed again" in out, out
    assert deploys(fake) == [] and name in fake.jobs
    assert f"smoke prediction answered by deployed model {old}" in out
    # Once the gate moves the alias, the same definition deploys the new version as the preview said.
    fake.models[MODEL][0]["versionAliases"].remove("production")
    fake.models[MODEL][1]["versionAliases"].append("production")
    with FakeVertexServer(fake) as server:
        rc, out, err = run_cli([job, "--follow", name], factory=server.factory(root))
    assert rc == 0, err
    (sent,) = deploys(fake)
    assert sent.body["trafficSplit"] == {old: 90, "0": 10}
    assert preview["trafficSplit"] == {"<each deployed model>": "<its share of 90, as now>", "0": 10}
    assert sent.body["deployedModel"]["dedicatedResources"] == preview["deployedModel"]["dedicatedResources"]
    assert sent.body["deployedModel"]["model"] == preview["deployedModel"]["model"] == f"{MODEL}@production"


@pytest.mark.parametrize(
    "block, path, allowed",
    [
        ("deploy:\n  endpoint: nope\n",
         "deploy.endpoint: 'nope' is not an endpoint of environment dev", "census"),
        ("deploy:\n  endpoint: census\n  alias: staging\n",
         "deploy.alias: 'staging' is not an alias", "production"),
        ("deploy:\n  endpoint: census\n  trafficSplit: {0: 50}\n",
         "deploy.trafficSplit: the shares sum to 50", "summing to 100"),
        ("deploy:\n  endpoint: census\n  machineType: cloud-tpu\n",
         "deploy.machineType: 'cloud-tpu' is not a", "n1-standard-*"),
    ],
)
def test_a_deploy_block_the_rules_refuse_is_one_line_naming_its_field(endpoints, tmp_path, block, path,
                                                                     allowed):
    job = with_block(tmp_path, block)
    rc, out, err = run_cli([job, "--dry-run"])
    assert rc == 2 and out == "" and len(err.splitlines()) == 1, err
    assert err.startswith(f"{job}: {path}") and allowed in err.partition("; allowed: ")[2], err


def test_without_an_instance_the_smoke_prediction_sends_the_export_s_example_request(endpoints, tmp_path):
    fake = FakeVertex()
    registry(fake)
    fake.endpoints.add_endpoint(ENDPOINT)
    example = LocalDirStorage(tmp_path).path(f"{ARTIFACT}1/example_request.json")
    example.parent.mkdir(parents=True)
    example.write_text(json.dumps({"instances": [{"user": "", "k": 1}]}), encoding="utf-8")
    with FakeVertexServer(fake) as server:
        rc, out, err = run_cli(["deploy", "census@production", "--endpoint", "census"],
                               factory=server.factory(tmp_path))
        assert (rc, err) == (0, ""), err
        answer = out.split("smoke prediction answered by deployed model 5000: ")[1].splitlines()[0]
        assert json.loads(answer) == {"echo": {"user": "", "k": 1}}
        example.unlink()  # a model exported before the trainer wrote one: deployed, and said so
        rc, out, err = run_cli(["deploy", "census@1", "--endpoint", "census", "--traffic", "50"],
                               factory=server.factory(tmp_path))
    assert (rc, err) == (0, ""), err
    assert f"no smoke prediction: {ARTIFACT}0/example_request.json does not exist" in out


def test_a_deploy_block_that_fails_after_registration_says_how_the_follow_command_finishes_it(
    endpoints, tmp_path, no_poll_sleep
):
    fake = FakeVertex()
    fake.endpoints.add_endpoint(ENDPOINT)
    fake.endpoints.deploy_errors.append("no capacity for n1-standard-2")
    fake.add_version(MODEL, f"{ARTIFACT}0")["versionAliases"].append("production")  # the gate keeps it there
    job = with_block(tmp_path, "deploy:\n  endpoint: census\n  machineType: n1-standard-2\n")
    name = "projects/demo-project/locations/us-central1/customJobs/1000"
    with FakeVertexServer(fake) as server:
        (root := tmp_path / "gs").mkdir()
        rc, out, err = run_cli([job], factory=server.factory(root))
        assert rc == 1 and len(err.splitlines()) == 1 and "Traceback" not in err, err
        assert "registry: registered" in out and "no capacity for n1-standard-2" in err
        assert f"The same command with --follow {name} finishes it" in err
        assert fake.endpoints.split(ENDPOINT) == {}
        rc, out, err = run_cli([job, "--follow", name], factory=server.factory(root))
    assert rc == 0, err
    assert "already this job's version" in out and "deploy: deployed model" in out
    assert len(fake.uploads()) == 1 and len(deploys(fake)) == 2
    assert fake.endpoints.split(ENDPOINT) == {"5000": 100}


def test_a_scheduled_definition_with_a_deploy_block_is_refused_not_silently_left_undeployed(
    endpoints, tmp_path, monkeypatch
):
    from infra.config import ConfigError, load_environment
    from jobs.schedule import compile_schedules

    repo = make_repo(tmp_path / "repo")  # a checkout whose jobs/ holds the definition
    (repo / "jobs").mkdir()
    with_block(tmp_path, "deploy:\n  endpoint: census\n").rename(repo / "jobs/census_deploy.yaml")
    (folder := tmp_path / "envs").mkdir()
    schedule = "schedules:\n  nightly: {job: jobs/census_cpu.yaml, cron: '0 3 * * *'}\nalerts: false\n"
    (folder / "dev.yaml").write_text(ENVIRONMENT + schedule, encoding="utf-8")
    monkeypatch.setenv(ENVIRONMENTS_DIR_VAR, str(folder))
    cfg = load_environment("dev")  # its job must be the repository's; the checkout's has the block
    nightly = dataclasses.replace(cfg.schedules[0], job="jobs/census_deploy.yaml")
    with pytest.raises(ConfigError, match="does not run a definition's deploy block") as refused:
        compile_schedules(dataclasses.replace(cfg, schedules=(nightly,)), repo_root=repo)
    assert refused.value.field == "deploy"
