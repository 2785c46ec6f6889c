"""Vertex AI endpoints: `endpoints:` of the config -> ids known before a deploy -> `endpoint_<name>`
outputs -> the platform stack's endpoints (CMEK, request-response logging, Private Service Connect) and the
bootstrap stack's predict-only role. The scenarios: `standard` has a logging endpoint with predictors and a
PSC one, `cmek` one under CMEK logging to another project's dataset, `minimal` none."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from infra import outputs
from infra.config import ConfigError, load_environment
from infra.constructs.endpoint_predictors import PREDICT_PERMISSIONS
from infra.naming import endpoint_id, resource_names
from infra.outputs import (
    endpoint_resource_names,
    endpoints_in,
    output_keys,
    planned_outputs,
    resolve_outputs,
)
from tests.infra.helpers import BASIC, CMEK

VERTEX_AGENT = "serviceAccount:service-{}@gcp-sa-aiplatform.iam.gserviceaccount.com"


def resources(stack: dict, rtype: str) -> dict[str, dict]:
    return stack.get("resource", {}).get(rtype, {})


def endpoints_of(stack: dict) -> dict[str, tuple[str, dict]]:
    """Config name -> (logical id, body) of each google_vertex_ai_endpoint, by its `endpoint` label."""
    return {body["labels"]["endpoint"]: (name, body)
            for name, body in resources(stack, "google_vertex_ai_endpoint").items()}


def skips(body: dict) -> dict[str, str]:
    return {s["id"]: s["comment"] for s in body.get("//", {}).get("checkov", {}).get("skip", [])}


# --- config, ids and outputs, from the config alone
# -----------------------------------------------------------------------------------------


def test_endpoints_load_with_their_defaults(configs):
    recommender, ranker = configs[BASIC].endpoints
    assert (recommender.name, recommender.display_name, recommender.description) == (
        "recommender", "scn-std-recommender", "")
    assert recommender.predictors == ("serviceAccount:scn-frontend@scn-std-proj.iam.gserviceaccount.com",
                                      "user:analyst@scenario.example")
    assert recommender.request_response_logging.table == ("scn-std-proj", "prediction_logs", "recommender")
    assert recommender.request_response_logging.sampling_rate == 0.25
    assert recommender.private_service_connect is None
    assert (ranker.predictors, ranker.request_response_logging) == ((), None)
    assert ranker.private_service_connect == ("scn-std-proj", "scn-app-proj")
    # An integer rate is a float like any other (the provider's sampling_rate is a number).
    assert isinstance(configs[CMEK].endpoints[0].request_response_logging.sampling_rate, float)
    with pytest.raises(dataclasses.FrozenInstanceError):
        recommender.name = "other"


def test_endpoint_ids_are_numeric_deterministic_and_per_environment_and_name(configs):
    std, cmek = configs[BASIC], configs[CMEK]
    for cfg in configs.values():
        names = endpoint_resource_names(cfg)
        assert tuple(names) == tuple(e.name for e in cfg.endpoints)
        for name, resource in names.items():
            parent, id_ = resource.rsplit("/", 1)
            assert parent == f"projects/{cfg.project_id}/locations/{cfg.region}/endpoints"
            # The provider's endpoint name: digits only, at most 10, no leading zero.
            assert re.fullmatch(r"[1-9][0-9]{0,9}", id_) and id_ == endpoint_id(cfg, name)
            # From the environment and the name only: another project or region keeps the id.
            moved = dataclasses.replace(cfg, project_id="other-project", region="europe-west4")
            assert endpoint_id(moved, name) == id_
    assert endpoint_id(std, "recommender") != endpoint_id(cmek, "recommender")
    assert endpoint_id(std, "recommender") != endpoint_id(std, "ranker_v2")
    ids = {endpoint_id(std, f"e{i}") for i in range(5000)}
    assert len(ids) == 5000 and all(re.fullmatch(r"[1-9][0-9]{9}", i) for i in ids)
    assert endpoint_resource_names(configs["minimal"]) == {}


def test_two_names_with_one_id_are_refused_in_one_line(configs, monkeypatch):
    monkeypatch.setattr(outputs, "endpoint_id", lambda cfg, name: "1234567890")
    with pytest.raises(ConfigError) as info:
        planned_outputs(configs[BASIC])
    assert str(info.value) == (f"{configs[BASIC].source}: field 'endpoints.ranker_v2': its endpoint id "
                               "1234567890 is also endpoints.recommender's; allowed: another name")


def test_planned_outputs_name_each_endpoint_and_look_up_by_name(configs):
    std = configs[BASIC]
    planned = planned_outputs(std)
    assert planned["endpoint_recommender"] == endpoint_resource_names(std)["recommender"]
    parent = "projects/scn-std-proj/locations/us-central1/endpoints"
    assert endpoints_in(planned) == endpoint_resource_names(std) == {
        "recommender": f"{parent}/{endpoint_id(std, 'recommender')}",
        "ranker_v2": f"{parent}/{endpoint_id(std, 'ranker_v2')}",
    }
    assert endpoints_in(planned_outputs(configs["minimal"])) == {}
    assert not outputs.is_pending(planned["endpoint_recommender"])  # known before any deploy


def _outputs_file(tmp_path, env: str, values: dict):
    path = tmp_path / f"{env}.json"
    path.write_text(json.dumps({env: values}))
    return path


def test_resolve_outputs_reads_endpoints_from_a_deploy_and_refuses_a_stale_or_foreign_file(tmp_path):
    cfg = load_environment(BASIC)
    deployed = {**planned_outputs(cfg), "tensorboard": planned_outputs(cfg)["tensorboard"].replace(
        outputs.PENDING_DEPLOY, "77")}
    assert endpoints_in(resolve_outputs(BASIC, _outputs_file(tmp_path, BASIC, deployed))) == \
        endpoint_resource_names(cfg)
    # Deployed before ranker_v2 was added to the config: redeploy, not a silent miss.
    stale = {k: v for k, v in deployed.items() if k != "endpoint_ranker_v2"}
    with pytest.raises(ConfigError, match=r"field 'standard.endpoint_ranker_v2': got None; allowed: a "
                                          r"non-empty string \(redeploy the stack"):
        resolve_outputs(BASIC, _outputs_file(tmp_path, BASIC, stale))
    # An endpoint with another id is another config's endpoint.
    foreign = {**deployed, "endpoint_recommender": "projects/scn-std-proj/locations/us-central1/endpoints/42"}
    with pytest.raises(ConfigError, match=r"field 'standard.endpoint_recommender': got '.*/endpoints/42' "
                                          r"but .* says '.*/endpoints/\d{10}'"):
        resolve_outputs(BASIC, _outputs_file(tmp_path, BASIC, foreign))
    assert tuple(resolve_outputs(BASIC, _outputs_file(tmp_path, BASIC, deployed))) == output_keys(cfg)


# --- the platform stack
# -----------------------------------------------------------------------------------------


def test_each_configured_endpoint_is_created_with_its_planned_id(stacks, configs):
    for env, stack in stacks.items():
        cfg = configs[env]
        created = endpoints_of(stack)
        assert set(created) == {e.name for e in cfg.endpoints}, env
        for endpoint in cfg.endpoints:
            name, body = created[endpoint.name]
            assert body["name"] == endpoint_resource_names(cfg)[endpoint.name].rsplit("/", 1)[1]
            assert (body["project"], body["location"], body["region"]) == (
                cfg.project_id, cfg.region, cfg.region)
            assert body["display_name"] == endpoint.display_name
            assert body["labels"] == {**cfg.all_labels, "endpoint": endpoint.name}
            # Traffic is the deploy verb's (deployModel): an apply leaves the split alone.
            assert body["lifecycle"] == {"ignore_changes": ["traffic_split"]}
            assert "traffic_split" not in body
            # The output is the resource's own name, so the outputs file reports what was created.
            assert stack["output"][f"endpoint_{endpoint.name}"]["value"] == (
                f"projects/{cfg.project_id}/locations/{cfg.region}/endpoints/"
                f"${{google_vertex_ai_endpoint.{name}.name}}")
    std = endpoints_of(stacks[BASIC])
    assert std["recommender"][1]["display_name"] == "scn-std-recommender"  # the default: <prefix>-<name>
    assert "description" not in std["recommender"][1]
    assert (std["ranker_v2"][1]["display_name"], std["ranker_v2"][1]["description"]) == (
        "Ranker (private)", "reached from the app project only")


def test_cmek_endpoints_use_the_key_once_the_vertex_ai_agent_may(stacks, configs):
    cfg = configs[CMEK]
    stack = stacks[CMEK]
    (agent_grant,) = [n for n, b in resources(stack, "google_kms_crypto_key_iam_member").items()
                      if b["member"] == VERTEX_AGENT.format(cfg.project_number)]
    for _, body in endpoints_of(stack).values():
        assert body["encryption_spec"] == {"kms_key_name": cfg.kms_key}
        assert f"google_kms_crypto_key_iam_member.{agent_grant}" in body["depends_on"]
        assert "CKV2_GCP_24" not in skips(body)
    # Without a key: Google-managed encryption, and the CMEK check says why it is skipped.
    for _, body in endpoints_of(stacks[BASIC]).values():
        assert "encryption_spec" not in body
        assert "kms_key: null" in skips(body)["CKV2_GCP_24"]


def test_request_response_logging_writes_to_the_configured_table_through_a_dataset_grant(stacks, configs):
    expected = {  # env -> endpoint -> (table URI, rate, dataset project, dataset)
        BASIC: {"recommender": ("bq://scn-std-proj.prediction_logs.recommender", 0.25, "scn-std-proj",
                                "prediction_logs")},
        CMEK: {"recommender": ("bq://scn-analytics.vertex_logs.cmek_recommender", 1, "scn-analytics",
                               "vertex_logs")},
    }
    for env, stack in stacks.items():
        cfg = configs[env]
        grants = resources(stack, "google_bigquery_dataset_iam_member")
        # One grant per logging endpoint, none for the others: on the dataset (Vertex AI creates the table),
        # to this project's Vertex AI agent only, with the one role that creates the table and writes rows.
        assert len(grants) == len(expected.get(env, {})), env
        for endpoint, (_, body) in endpoints_of(stack).items():
            if endpoint not in expected.get(env, {}):
                assert "predict_request_response_logging_config" not in body
                continue
            uri, rate, project, dataset = expected[env][endpoint]
            assert body["predict_request_response_logging_config"] == {
                "enabled": True, "sampling_rate": rate, "bigquery_destination": {"output_uri": uri}}
            # The endpoint exists only once Vertex AI may write its logs.
            (grant,) = [b for g, b in grants.items()
                        if f"google_bigquery_dataset_iam_member.{g}" in body.get("depends_on", [])]
            assert (grant["project"], grant["dataset_id"], grant["role"], grant["member"]) == (
                project, dataset, "roles/bigquery.dataEditor", VERTEX_AGENT.format(cfg.project_number))
    assert "table_id" not in json.dumps(resources(stacks[BASIC], "google_bigquery_dataset_iam_member"))


def test_private_service_connect_only_where_configured(stacks):
    created = endpoints_of(stacks[BASIC])
    ranker, recommender = created["ranker_v2"][1], created["recommender"][1]
    assert ranker["private_service_connect_config"] == {
        "enable_private_service_connect": True, "project_allowlist": ["scn-std-proj", "scn-app-proj"]}
    assert "network" not in ranker  # exclusive with PSC
    assert "private_service_connect_config" not in recommender
    # checkov's privacy check knows VPC peering only: each endpoint says which case it is.
    assert "Private Service Connect" in skips(ranker)["CKV2_GCP_33"]
    assert "no private_service_connect" in skips(recommender)["CKV2_GCP_33"]


def test_no_iam_on_endpoints_in_the_platform_stack(stacks):
    for env, stack in stacks.items():
        assert not [t for t in stack["resource"] if t.startswith("google_vertex_ai_endpoint_iam")], env
        assert "google_project_iam_custom_role" not in stack["resource"], env


# --- the bootstrap stack: who may predict
# -----------------------------------------------------------------------------------------


def test_predictors_hold_exactly_the_predict_role_at_project_level(bootstraps, configs):
    for env, stack in bootstraps.items():
        cfg = configs[env]
        predictors = {m for e in cfg.endpoints for m in e.predictors}
        roles = {n: b for n, b in resources(stack, "google_project_iam_custom_role").items()
                 if b["role_id"] == resource_names(cfg).predictor_role_id}
        if not predictors:
            assert roles == {}, env
            continue
        ((role_name, role),) = roles.items()
        assert role["permissions"] == ["aiplatform.endpoints.get", "aiplatform.endpoints.predict"] == list(
            PREDICT_PERMISSIONS)
        ref = f"${{google_project_iam_custom_role.{role_name}.name}}"
        holders = [b for b in resources(stack, "google_project_iam_member").values() if b["role"] == ref]
        assert sorted(b["member"] for b in holders) == sorted(predictors)
        assert {b["project"] for b in holders} == {cfg.project_id}
        # ...and nothing else: a caller is not a job submitter (no aiplatform.user, no deploy).
        for member in predictors - set(cfg.job_submitters):
            assert [b["role"] for b in resources(stack, "google_project_iam_member").values()
                    if b["member"] == member] == [ref]
    assert configs[BASIC].endpoints[0].predictors and configs["minimal"].endpoints == ()
