"""A schedule's `batch_predict:` (jobs.schedule -> infra.schedules): the shipped dev schedule's program in the
Workflows test interpreter registers its run, then creates the BatchPredictionJob `run_job.py batch-predict
--dry-run` prints for the same model@alias, input and output (this run's id in both, its start time in the
display name), on whatever version the gate left the alias on; and a `batch_predict:` the verb would refuse
is one line naming the config's key."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone

import pytest
import yaml

import jobs.cloud.plan
from infra.config import ConfigError, load_environment, parse_environment
from infra.outputs import planned_outputs
from jobs.schedule import compile_schedules
from tests.common.test_model_registry import DAY, START, Project, dev  # noqa: F401 - dev: a fixture
from tests.jobs.fake_vertex import FakeVertex, FakeVertexServer
from tests.jobs.helpers import run_cli
from tests.jobs.test_schedule import CONFIG


def execute(project: Project, program: dict, index: int, value: float | None) -> tuple[dict, list[dict]]:
    """A scheduled execution that trains job `index` (its recall_at_k `value`): what it returns and the
    batch prediction requests it sent."""
    _, now = project.train(index, value)
    before = len(project.batches)
    return project.workflow(program, index, now, new=True), project.batches[before:]


def dry_run(outputs: dict, run_id: str, now: float) -> dict:
    """What `run_job.py batch-predict` prints for dev.yaml's batch_predict, this run's id, at its start."""
    rc, out, err = run_cli(
        ["batch-predict", "recommender@production", "--env", "dev", "--signature", "top_k", "--dry-run",
         "--input", f"{outputs['models_bucket']}/recommender/{run_id}/model/users.jsonl",
         "--output", f"{outputs['models_bucket']}/recommender-batch/{run_id}/"],
        outputs=outputs, now=datetime.fromtimestamp(now, timezone.utc))
    assert rc == 0, err
    return json.loads(out)


def test_a_scheduled_run_registers_then_predicts_with_what_the_alias_names(dev, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setattr(jobs.cloud.plan, "POLL_SECONDS", 0)
    run, program, outputs = dev
    assert run.batch is not None, "dev.yaml's recommender-daily has batch_predict"
    with FakeVertexServer(FakeVertex()) as server:
        project = Project(run, outputs, tmp_path, server)
        labels = []
        # The first run takes production; a worse one is kept without it; both batches run on production.
        for index, value, moved, version in ((0, 0.30, "moved", "1"), (1, 0.20, "kept", "1")):
            result, sent = execute(project, program, index, value)
            assert result["registered"][-1]["aliases"][0]["outcome"] == moved
            job = project.jobs[index]
            run_id = job["displayName"]
            assert [{"parent": args["parent"], "batchPredictionJob": args["body"]} for args in sent] == [
                dry_run(outputs, run_id, START + index * DAY)]
            assert sent[0]["body"]["displayName"] == (
                f"recommender-production-batch-{run_id.split('-', 1)[1][:15]}")
            assert result["batch_prediction"] == {
                "name": f"{run.parent}/batchPredictionJobs/{701 + index}", "state": "JOB_STATE_SUCCEEDED",
                "version": version,
                "output": f"{outputs['models_bucket']}/recommender-batch/{run_id}/prediction-x"}
            # Registered before it predicted: the request names the alias the gate had just decided.
            assert project.holder("production") == version
            labels.append(sent[0]["body"]["labels"]["submission_hash"])
    # Each run's request carries its own submission label (computed by the workflow), the one
    # `run_job.py batch-predict` gives it (compared above): a retry of that command reuses the run's job.
    assert len(set(labels)) == 2 and all(re.fullmatch("[a-z0-9]{16}", label) for label in labels)


def test_no_batch_while_the_alias_names_no_version(dev, tmp_path):  # noqa: F811
    """A first run without a metric is registered without the alias: there is nothing to predict with."""
    run, program, outputs = dev
    with FakeVertexServer(FakeVertex()) as server:
        project = Project(run, outputs, tmp_path, server)
        result, sent = execute(project, program, 0, None)
    assert sent == [] and result["batch_prediction"] is None
    assert result["registered"][-1]["aliases"][0] == {
        "alias": "production", "outcome": "kept", "holder": None, "holder_value": None}


# test_schedule's environment, its daily schedule predicting.
BATCH = {"input": "${infra.data_bucket}/users/*.jsonl", "output": "${infra.models_bucket}/b/${job.id}/"}


@pytest.mark.parametrize(("job", "key", "value", "field", "problem"), [
    ("jobs/recommender.yaml", "machine_type", "ct5lp-hightpu-4t", "machine_type", "is a TPU machine"),
    ("jobs/recommender.yaml", "max_replica_count", 0, "max_replica_count", "got 0; allowed: an integer >= 1"),
    ("jobs/recommender.yaml", "batch_size", 5000, "batch_size", "1..1000"),
    ("jobs/recommender.yaml", "signature", "top k", "signature", "is not a signature name"),
    ("jobs/recommender.yaml", "input", "${infra.models_bucket}/users.csv", "input",
     "is not a JSONL file in Cloud Storage"),
    ("jobs/recommender.yaml", "output", "${job.image_tag}/", "output", "unknown reference ${job.image_tag}"),
    ("jobs/census_gpu.yaml", "signature", "top_k", "", "moves no alias in the Model Registry"),
])
def test_a_batch_the_verb_refuses_names_the_config_key(tmp_path, monkeypatch, job, key, value, field,
                                                       problem):
    doc = yaml.safe_load(CONFIG)
    daily = {**doc["schedules"]["daily"], "job": job, "batch_predict": {**BATCH, key: value}}
    doc["schedules"] = {"daily": daily}
    (tmp_path / "sched.yaml").write_text(yaml.safe_dump(doc))
    monkeypatch.setenv("INFRA_ENVIRONMENTS_DIR", str(tmp_path))
    with pytest.raises(ConfigError) as refused:
        compile_schedules(parse_environment("sched", doc, tmp_path / "sched.yaml"))
    line = str(refused.value)
    where = "schedules.daily.batch_predict" + (f".{field}" if field else "")
    assert line.startswith(f"{tmp_path / 'sched.yaml'}: field '{where}': ") and problem in line, line
    assert "\n" not in line


def test_the_shipped_batch_reads_the_users_the_run_exported():
    cfg = load_environment("dev")
    (run,) = compile_schedules(cfg)
    models = planned_outputs(cfg)["models_bucket"]
    body = run.batch.body_dict()
    assert body["inputConfig"]["gcsSource"]["uris"] == [
        f"{models}/recommender/{run.run_id_placeholder}/model/users.jsonl"]
    assert run.body_dict()["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"] == (
        f"{models}/recommender/{run.run_id_placeholder}")
