"""jobs.schedule: an environment's schedules compiled into the data the platform stack turns into a workflow
(infra.schedules.ScheduledRun), by the same compile and validation as `run_job.py --dry-run`."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
import yaml

from infra.config import ConfigError, parse_environment
from infra.outputs import planned_outputs
from infra.schedules import VERTEX_DEFAULT_TIMEOUT_S, ScheduledRegistration
from jobs.api import REPO_ROOT, compile_file
from jobs.schedule import compile_schedules, registration_of

CONFIG = """
project_id: sched-proj-1
project_number: "400000000004"
region: europe-west4
name_prefix: sched
state_bucket: sched-tfstate
github: {owner: o, repository: r, repository_id: 4}
alerts: {email: ml@sched.example}
schedules:
  daily:
    job: jobs/recommender.yaml
    cron: "0 3 * * *"
  wider:
    job: jobs/recommender.yaml
    cron: "0 4 * * SUN"
    set: {jobSpec.scheduling.timeout: 7200s, jobSpec.workerPoolSpecs.0.machineSpec.machineType: n1-standard-8}
"""


@pytest.fixture
def cfg(tmp_path, monkeypatch):
    # The environment must exist by name for the job's service-account check (infra.config's loader).
    (tmp_path / "sched.yaml").write_text(CONFIG)
    monkeypatch.setenv("INFRA_ENVIRONMENTS_DIR", str(tmp_path))
    return parse_environment("sched", yaml.safe_load(CONFIG), tmp_path / "sched.yaml")


def test_each_schedule_is_its_dry_run_request_with_a_placeholder_id(cfg, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the job files are the repository's, wherever the app runs
    daily, wider = compile_schedules(cfg)
    for run, schedule in ((daily, cfg.schedules[0]), (wider, cfg.schedules[1])):
        dry_run = compile_file(
            str(REPO_ROOT / schedule.job),
            env="sched",
            overrides=schedule.overrides,
            outputs=planned_outputs(cfg),
            repo_root=REPO_ROOT,
            now=datetime(2026, 11, 24, 3, 0, tzinfo=timezone.utc),
        )
        body = run.body_dict()
        assert run.run_id_placeholder == "recommender-yyyymmdd-hhmmss-xxxxxx"
        assert body["displayName"] == run.run_id_placeholder
        assert body["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"] == (
            f"gs://sched-models/recommender/{run.run_id_placeholder}"
        )
        assert json.loads(run.body.replace(run.run_id_placeholder, dry_run.job_id)) == dry_run.body
        assert (run.submission_hash, run.parent, run.region) == (
            dry_run.submission_hash,
            dry_run.parent,
            "europe-west4",
        )
        assert body["labels"][run.label] == run.submission_hash
        assert (run.name, run.env, run.job_file, run.cron) == (
            schedule.name,
            "sched",
            "jobs/recommender.yaml",
            schedule.cron,
        )
    # The overrides are part of what runs, so of its hash; the job's timeout bounds the workflow's wait.
    assert wider.submission_hash != daily.submission_hash
    assert wider.body_dict()["jobSpec"]["workerPoolSpecs"][0]["machineSpec"]["machineType"] == "n1-standard-8"
    assert (daily.timeout_s, wider.timeout_s) == (3600, 7200)


def test_without_a_job_timeout_the_wait_is_vertex_default(cfg):
    doc = yaml.safe_load(CONFIG)
    doc["schedules"] = {"daily": {**doc["schedules"]["daily"], "set": {"jobSpec.scheduling": {}}}}
    (run,) = compile_schedules(parse_environment("sched", doc))
    assert "scheduling" not in run.body_dict()["jobSpec"] or not run.body_dict()["jobSpec"]["scheduling"]
    assert run.timeout_s == VERTEX_DEFAULT_TIMEOUT_S


def test_a_bad_override_names_the_job_file_field_and_schedule(cfg):
    doc = yaml.safe_load(CONFIG)
    doc["schedules"]["daily"]["set"] = {
        "jobSpec.serviceAccount": "someone@else-project.iam.gserviceaccount.com"
    }
    with pytest.raises(ConfigError) as caught:
        compile_schedules(parse_environment("sched", doc, "envs/sched.yaml"))
    message = str(caught.value)
    assert message.startswith("jobs/recommender.yaml: field 'jobSpec.serviceAccount': ")
    assert "(scheduled by envs/sched.yaml schedules.daily.job)" in message and "\n" not in message


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"displayName": "nightly-recommender"}, "displayName"),
        (
            {"jobSpec.baseOutputDirectory.outputUriPrefix": "gs://sched-models/recommender/latest"},
            "jobSpec.baseOutputDirectory.outputUriPrefix",
        ),
    ],
)
def test_a_fixed_name_or_output_directory_is_refused(cfg, override, field):
    """Every run would reuse it, and the next run would overwrite the last one's model."""
    doc = yaml.safe_load(CONFIG)
    doc["schedules"]["daily"]["set"] = override
    with pytest.raises(ConfigError) as caught:
        compile_schedules(parse_environment("sched", doc, "envs/sched.yaml"))
    message = str(caught.value)
    assert message.startswith(f"jobs/recommender.yaml: field '{field}': ")
    assert "would be the same for every scheduled run" in message and "${job.id}" in message


class StandInRegistry:
    """A compiled definition's `registry` (model_registry.RegistrySpec), by its attribute names."""

    model_id = "recommender"
    display_name = "MovieLens recommender"
    aliases = ["production", "candidate"]
    labels = {"team": "ml", "app": "movielens"}
    metric = "recall_at_10"
    goal = "MAXIMIZE"
    container_spec = {
        "imageUri": "r/trainer:cpu-abc",
        "command": ["python", "-m", "serving"],
        "ports": [{"containerPort": 8080}],
        "predictRoute": "/predict",
        "healthRoute": "/health",
    }


def test_a_definitions_registry_block_becomes_the_runs_registration(cfg, monkeypatch):
    expected = ScheduledRegistration(
        model_id="recommender", display_name="MovieLens recommender", aliases=("production", "candidate"),
        # Sorted: the same definition always synthesizes the same workflow.
        labels=(("app", "movielens"), ("team", "ml")), metric="recall_at_10", goal="MAXIMIZE",
        container_spec=json.dumps(StandInRegistry.container_spec, sort_keys=True))
    assert registration_of(StandInRegistry()) == expected
    assert registration_of(None) is None
    assert json.loads(expected.container_spec) == StandInRegistry.container_spec
    hash(expected)  # frozen and hashable, like the rest of ScheduledRun

    # The shipped daily job's own block, through the very compile `run_job.py --dry-run` does.
    daily = compile_schedules(cfg)[0]
    spec = json.loads(daily.registration.container_spec)
    assert daily.registration == ScheduledRegistration(
        model_id="recommender", display_name="recommender", aliases=("production",),
        labels=(("app", "movielens"),), metric="recall_at_k", goal="MAXIMIZE",
        container_spec=daily.registration.container_spec)
    assert spec["command"] == ["python", "-m", "serving"] and ":cpu-" in spec["imageUri"]
    assert daily.job_file == "jobs/recommender.yaml"
