"""Shared by the infra tests: the scenarios they synthesize (fixtures stay in conftest.py; checkov runs
through infra.policy, as `make scan` runs it)."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SCENARIOS_DIR = Path(__file__).resolve().parent / "scenarios"
# The roles the tests give the scenarios: a stack with every default, and one with CMEK.
BASIC = "standard"
CMEK = "cmek"
SCENARIOS = ("cmek", "minimal", "standard")


def scenario_runs(cfg) -> tuple:
    """The scenario's schedules as compiled requests, built by hand: the infra tests never import jobs/ (the
    real compile is tested in tests/scripts/test_synth.py). The body has what the stack must rewrite per run:
    the job id (display name, output directory) and the planned TensorBoard."""
    import json

    from infra.outputs import planned_outputs
    from infra.schedules import ScheduledRun

    planned = planned_outputs(cfg)
    runs = []
    for schedule in cfg.schedules:
        placeholder = f"{schedule.name}-yyyymmdd-hhmmss-xxxxxx"
        body = {
            "displayName": placeholder,
            "labels": {"submission_hash": f"hash-{schedule.name}"},
            "jobSpec": {
                "workerPoolSpecs": [{
                    "machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": 1,
                    "containerSpec": {"imageUri": f"{planned['trainer_image']}:cpu-abc",
                                      "args": ["--model=recommender", "--literal=${not-me}"]}}],
                "baseOutputDirectory": {"outputUriPrefix": f"{planned['models_bucket']}/x/{placeholder}"},
                "serviceAccount": planned["runtime_service_account"],
                "tensorboard": planned["tensorboard"],
                "scheduling": {"timeout": "7200s"},
            },
        }
        runs.append(ScheduledRun(
            name=schedule.name, env=cfg.name, job_file=schedule.job, cron=schedule.cron,
            time_zone=schedule.time_zone, paused=schedule.paused,
            parent=f"projects/{cfg.project_id}/locations/{cfg.region}", region=cfg.region,
            body=json.dumps(body, sort_keys=True), job_name=schedule.name, run_id_placeholder=placeholder,
            submission_hash=f"hash-{schedule.name}", label="submission_hash", timeout_s=7200,
            registration=scenario_registration(planned) if schedule.name == REGISTERING else None,
            batch=scenario_batch(planned, cfg, placeholder) if schedule.name == REGISTERING else None,
            deploy=scenario_deploy(cfg) if schedule.name == REGISTERING else None))
    return tuple(runs)


def scenario_deploy(cfg):
    """The registering schedule's canary, as jobs.schedule compiles `deploy:` (all the traffic of the first
    endpoint: a share below 100 is refused on an endpoint that serves nothing yet)."""
    import json

    from infra.outputs import endpoint_resource_names
    from infra.schedules import ScheduledDeploy

    name, endpoint = next(iter(endpoint_resource_names(cfg).items()))
    parent = f"projects/{cfg.project_id}/locations/{cfg.region}"
    return ScheduledDeploy(
        endpoint=endpoint, endpoint_name=name, model="recommender@production", traffic=100, new_key="0",
        deployed_model=json.dumps({"model": f"{parent}/models/recommender@production", "dedicatedResources": {
            "machineSpec": {"machineType": "n1-standard-4"}, "minReplicaCount": 1, "maxReplicaCount": 1}}),
        record_prefix="recommender@production; previous traffic ", record_none="none", max_display_name=128)


def scenario_batch(planned, cfg, placeholder):
    """The registering schedule's batch prediction, as jobs.schedule compiles `batch_predict:` (the run id
    in its output, the display name's time a placeholder)."""
    import json

    from infra.schedules import BATCH_STAMP_PLACEHOLDER, ScheduledBatch

    parent = f"projects/{cfg.project_id}/locations/{cfg.region}"
    return ScheduledBatch(model="recommender@production", body=json.dumps({
        "displayName": f"recommender-production-batch-{BATCH_STAMP_PLACEHOLDER}",
        "model": f"{parent}/models/recommender@production",
        "inputConfig": {"instancesFormat": "jsonl", "gcsSource": {
            "uris": [f"{planned['models_bucket']}/x/{placeholder}/model/users.jsonl"]}},
        "outputConfig": {"predictionsFormat": "jsonl", "gcsDestination": {
            "outputUriPrefix": f"{planned['models_bucket']}/b/{placeholder}/"}},
        "dedicatedResources": {"machineSpec": {"machineType": "n1-standard-4"}, "startingReplicaCount": 1,
                               "maxReplicaCount": 1},
        "manualBatchTuningParameters": {"batchSize": 64},
        "serviceAccount": planned["runtime_service_account"],
        "labels": {"model": "recommender"}, "modelParameters": {"signature": "top_k"}}, sort_keys=True))


# The one scenario schedule whose definition registers its model (the standard scenario's second): its
# environment's schedule account gets the registry's permissions, the other scenarios' do not.
REGISTERING = "weekly-wide"


def scenario_registration(planned):
    import json

    from infra.schedules import ScheduledRegistration

    return ScheduledRegistration(
        model_id="recommender", display_name="Recommender", aliases=("production",),
        labels=(("team", "scenario-ml"),), metric="recall_at_10", goal="MAXIMIZE",
        container_spec=json.dumps({
            "imageUri": f"{planned['trainer_image']}:cpu-abc",
            "command": ["python", "-m", "serving"], "ports": [{"containerPort": 8080}],
            "predictRoute": "/predict", "healthRoute": "/health"}, sort_keys=True))
