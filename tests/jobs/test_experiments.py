"""Runs of a definition as Vertex AI Experiments runs (jobs.definition.experiments): the ids and request
bodies (table-tested against the aiplatform_v1 request messages), what the fake MetadataService receives
once a cloud job ends (and again on a second --follow), the local store a --local run writes (run folders
written by hand: no training here; tests/scripts/test_run_job_local.py checks a real run's record),
`run_job.py runs` best first, --compare, and bad input as one line and exit status 2."""

from __future__ import annotations

import io
import json
import os
import re
from datetime import timedelta

import pytest
from google.cloud import aiplatform_v1

from jobs.cloud.experiments import RecordRun
from jobs.definition import experiments as ex
from jobs.local.experiments import base_folder, record_run, to_gs
from tests.jobs.fake_vertex import FakeVertex, FakeVertexServer
from tests.jobs.helpers import JOBS_DIR, NOW, OUTPUTS, compile_text, run_cli

pytestmark = pytest.mark.usefixtures("no_poll_sleep")

CENSUS = JOBS_DIR / "census_cpu.yaml"
TUNING = JOBS_DIR / "census_tuning.yaml"
PARENT = "projects/demo-project/locations/us-central1"
STORE = f"{PARENT}/metadataStores/default"
BOARD = OUTPUTS["tensorboard"]
DATA = "gs://demo-project-data/census/adult.data"
ADULT = b"39, State-gov, 77516, Bachelors, 13, Never-married, <=50K\n"


@pytest.mark.parametrize("file, experiment", [
    ("jobs/census_cpu.yaml", "census-cpu"),
    ("jobs/Image_TUNING.v2.yaml", "image-tuning-v2"),
    ("x.yaml", "x-runs"),  # Vertex AI ids have at least 4 characters
    ("a" * 90 + ".yaml", "a" * 40),  # job names keep 40
])
def test_the_experiment_is_named_after_the_file_as_a_valid_id(file, experiment):
    assert ex.experiment_id(file) == experiment
    assert ex.ID_PATTERN.fullmatch(experiment)


@pytest.mark.parametrize("run_name, run_id", [
    ("census-cpu-20261128-053000-abc123", "census-cpu-20261128-053000-abc123"),  # a job id names it already
    ("1234567890123456789", "census-cpu-1234567890123456789"),  # a Vertex AI job's numeric id
    ("My_Run #2", "census-cpu-my-run-2"),
    ("", "census-cpu-run"),
    ("x" * 200, ("census-cpu-" + "x" * 200)[:121]),  # the SDK's bound, so that its -tb-run fits in 128
])
def test_run_ids_are_the_sdks_experiment_dash_run_and_valid(run_name, run_id):
    assert ex.run_id("census-cpu", run_name) == run_id
    assert ex.ID_PATTERN.fullmatch(run_id) and len(run_id) <= ex.MAX_RUN_ID


@pytest.mark.parametrize("config, params", [
    ({"num_epochs": 8, "learning_rate": 0.01, "model": "wide_deep"},
     {"learning_rate": 0.01, "model": "wide_deep", "num_epochs": 8}),
    ({"train_files": ["gs://b/a", "gs://b/c"], "eval_files": []}, {"eval_files": "", "train_files": "gs://b/a,gs://b/c"}),
    ({"job_dir": None, "shuffle": True}, {"shuffle": True}),  # unset flags are left out
    ({"model": "recommender", "task": {"factors": 32, "ranking_k": 10}},
     {"factors": 32, "model": "recommender", "ranking_k": 10}),  # a task's own flags beside the generic ones
])
def test_the_trainers_resolved_flags_become_flat_parameters(config, params):
    assert ex.flat_params(config) == params


@pytest.mark.parametrize("document, metrics", [
    ({"eval": {"auc": 0.9, "loss": 1}, "history": []}, {"auc": 0.9, "loss": 1.0}),
    ({"eval": {"auc": float("nan"), "ok": True, "x": "high"}}, {}),  # finite numbers only
    ({"history": []}, {}),
    (None, {}),
])
def test_metrics_are_the_finite_eval_figures(document, metrics):
    assert ex.eval_metrics(document) == metrics


def census_record(**lineage) -> ex.RunRecord:
    data = ex.DataFile("gs://demo-project-data/census/adult.data", {"size": 3, "crc32c": "AAAAAA=="})
    return ex.run_record(
        file="jobs/census_cpu.yaml",
        run_name="1000",
        display_name="census-cpu-20260102-030405-abcdef",
        state=ex.COMPLETE,
        params={"num_epochs": 8},
        metrics={"auc": 0.91},
        lineage=ex.Lineage(code={"image": "trainer:cpu-fedcba9876543210"}, data=(data,),
                           job=f"{PARENT}/customJobs/1000", model="gs://m/census-cpu/x/model", **lineage),
        tensorboard=BOARD,
        console_uri="https://console/1000",
    )


def test_the_requests_are_aiplatform_v1_messages_in_the_sdks_shapes():
    calls = ex.metadata_requests(census_record(registry_version=f"{PARENT}/models/census@3"), PARENT)
    for method, request in calls:  # each parses, unknown fields refused, as the client sends it
        message = "".join(p.title() for p in method.split("_")) + "Request"
        getattr(aiplatform_v1, message).from_json(json.dumps(request), ignore_unknown_fields=False)
    methods = [m for m, _ in calls]
    assert methods == ["create_context", "create_context", "add_context_children", "create_artifact",
                       "create_artifact", "create_execution", "add_execution_events",
                       "add_context_artifacts_and_executions"]
    experiment, run = calls[0][1], calls[1][1]
    assert experiment == {"parent": STORE, "contextId": "census-cpu", "context": {
        "displayName": "census-cpu", "schemaTitle": "system.Experiment", "schemaVersion": "0.0.1",
        "description": "runs of census_cpu.yaml (run_job.py)",
        "metadata": {"experiment_deleted": False, "backing_tensorboard_resource": BOARD}}}
    assert run["contextId"] == "census-cpu-1000" and run["context"]["schemaTitle"] == "system.ExperimentRun"
    metadata = run["context"]["metadata"]
    assert metadata["_params"] == {"num_epochs": 8} and metadata["_metrics"] == {"auc": 0.91}
    assert metadata["_state"] == "COMPLETE"
    assert metadata["_custom_jobs"] == [{"custom_job_resource_name": f"{PARENT}/customJobs/1000",
                                         "custom_job_console_uri": "https://console/1000"}]
    assert metadata["lineage"]["registry_version"] == f"{PARENT}/models/census@3"
    data_id = ex.data_artifact_id(DATA, {"size": 3, "crc32c": "AAAAAA=="})
    assert calls[6][1] == {"execution": f"{STORE}/executions/census-cpu-1000", "events": [
        {"artifact": f"{STORE}/artifacts/{data_id}", "type": "INPUT"},
        {"artifact": f"{STORE}/artifacts/census-cpu-1000", "type": "OUTPUT"}]}
    assert calls[2][1] == {"context": f"{STORE}/contexts/census-cpu",
                           "childContexts": [f"{STORE}/contexts/census-cpu-1000"]}
    # The same bytes are the same data artifact, in every run that reads them; other bytes another.
    assert data_id == ex.data_artifact_id(DATA, {"crc32c": "AAAAAA==", "size": 3})
    assert data_id != ex.data_artifact_id(DATA, {"size": 4})


# What the SDK takes for a TensorBoard run id (TensorboardRun.create's tensorboard_run_id).
TENSORBOARD_RUN_ID = r"[a-z0-9][a-z0-9-]{0,127}"


@pytest.mark.parametrize("run_name, display_name", [
    ("1000", "census-cpu-20260102-030405-abcdef"),  # a Vertex AI job: its id, its display name
    ("census-cpu-20260102-030405-abcdef", "census-cpu-20260102-030405-abcdef"),  # a --local run
    ("1000", "My Census run #2"),  # a definition's own displayName
])
def test_a_runs_display_name_is_the_name_the_sdk_finds_it_by(run_name, display_name):
    """aiplatform.ExperimentRun(name, experiment) reads context <experiment>-<name>, and get_experiment_df
    lists runs by their display name and makes each a TensorBoard run of that name in the backing
    TensorBoard: the display name is the run's id without its experiment, a valid TensorBoard run id."""
    record = ex.run_record(file="jobs/census_cpu.yaml", run_name=run_name, display_name=display_name,
                           state=ex.COMPLETE, params={}, metrics={}, lineage=ex.Lineage(code={}))
    name = record.run["displayName"]
    assert f"{record.experiment_id}-{name}" == record.run_id
    assert re.fullmatch(TENSORBOARD_RUN_ID, name), name
    assert record.execution["displayName"] == display_name  # the job's own name stays on its execution


def write_outputs(root, prefix: str, epochs: int, auc: float) -> None:
    """What the trainer leaves in a run's model folder (gs:// under ``root``), and the data it read."""
    model = root / prefix.removeprefix("gs://") / "model"
    model.mkdir(parents=True, exist_ok=True)
    config = {"model": "wide_deep", "num_epochs": epochs, "train_files": [DATA], "eval_files": [],
              "job_dir": None}
    (model / "trainer_config.json").write_text(json.dumps(config))
    (model / "metrics.json").write_text(json.dumps({"eval": {"auc": auc, "loss": 0.3}, "history": []}))
    (root / "demo-project-data/census").mkdir(parents=True, exist_ok=True)
    (root / "demo-project-data/census/adult.data").write_bytes(ADULT)


def metadata_requests(fake):
    return [(r.method, r.path.removeprefix("/v1/"), r.query, r.body) for r in fake.requests
            if "/metadataStores" in r.path]


def test_a_cloud_job_that_ended_is_recorded_in_vertex_ai_experiments_once(tmp_path):
    job = compile_text(CENSUS.read_text(), file=str(CENSUS))  # the submission run_cli makes
    prefix = job.body["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"]
    write_outputs(tmp_path, prefix, epochs=8, auc=0.93)  # what the job will have left when it ends
    fake = FakeVertex()
    with FakeVertexServer(fake) as server:
        factory = server.factory(tmp_path)
        rc, out, err = run_cli([CENSUS], factory=factory)
        assert rc == 0, err
        name = next(iter(fake.jobs))
        assert "experiments: recorded run census-cpu-1000 of experiment census-cpu" in out
        sent = metadata_requests(fake)
        assert [(m, p.rsplit("/", 1)[-1]) for m, p, _, _ in sent] == [
            ("GET", "default"),  # the region's store: missing, so made
            ("POST", "metadataStores"),
            ("POST", "contexts"), ("POST", "contexts"), ("POST", "census-cpu:addContextChildren"),
            ("POST", "artifacts"), ("POST", "artifacts"),
            ("POST", "executions"), ("POST", "census-cpu-1000:addExecutionEvents"),
            ("POST", "census-cpu-1000:addContextArtifactsAndExecutions"),
        ]
        run = fake.metadata.contexts()[f"{STORE}/contexts/census-cpu-1000"]
        assert run["parentContexts"] == [f"{STORE}/contexts/census-cpu"]
        assert run["displayName"] == "1000"  # aiplatform.ExperimentRun("1000", experiment="census-cpu")
        metadata = run["metadata"]
        assert metadata["_params"]["num_epochs"] == 8 and metadata["_metrics"] == {"auc": 0.93, "loss": 0.3}
        assert metadata["lineage"]["registry_version"] == f"{PARENT}/models/census@1"
        assert metadata["lineage"]["job"] == name and metadata["lineage"]["model"] == prefix + "/model"
        adult = tmp_path / "demo-project-data/census/adult.data"
        assert metadata["lineage"]["data"] == [{"uri": "gs://demo-project-data/census/adult.data",
                                                **ex.file_identity(adult)}]
        assert ex.file_identity(adult)["size"] == len(ADULT)
        assert metadata["lineage"]["tensorboard"] == f"{BOARD}/experiments/1000"
        experiment = fake.metadata.contexts()[f"{STORE}/contexts/census-cpu"]
        assert experiment["metadata"]["backing_tensorboard_resource"] == BOARD

        # What was sent is what --dry-run prints, placeholders filled in.
        rc, _, plan = run_cli([CENSUS, "--dry-run"])
        preview = json.loads(plan[plan.index("[", plan.index("Vertex AI Experiments requests")):
                                  plan.index("\n]\n", plan.index("Vertex AI Experiments requests")) + 2])
        assert [p["method"] for p in preview] == [
            "create_context", "create_context", "add_context_children", "create_artifact",
            "create_artifact", "create_execution", "add_execution_events",
            "add_context_artifacts_and_executions"]
        assert preview[0]["request"]["context"] == sent[2][3] and sent[2][2]["contextId"] == ["census-cpu"]
        shown = preview[1]["request"]["context"]["metadata"]
        assert set(shown) == set(metadata) and set(shown["lineage"]) == set(metadata["lineage"])
        assert preview[1]["request"]["contextId"] == "census-cpu-<job id>" and sent[3][2]["contextId"] == [
            "census-cpu-1000"]

        # Followed again (after a failure, or by hand): the run is updated, nothing is added twice.
        before = len(fake.requests)
        rc, out, err = run_cli([CENSUS, "--follow", name], factory=factory)
        assert rc == 0 and "experiments: recorded run census-cpu-1000" in out, err
        again = [(r.method, r.path.rsplit("/", 1)[-1]) for r in fake.requests[before:]
                 if "/metadataStores" in r.path]
        assert ("PATCH", "census-cpu-1000") in again
        # The events are sent again (Vertex AI skips those it holds): each is there once.
        assert ("POST", "census-cpu-1000:addExecutionEvents") in again
        assert fake.metadata.events[f"{STORE}/executions/census-cpu-1000"] == sent[8][3]["events"]
        assert run["parentContexts"] == [f"{STORE}/contexts/census-cpu"]

        # runs --env lists it from Vertex AI, with its parameters and metrics.
        rc, out, err = run_cli(["runs", CENSUS, "--env", "dev"], factory=factory)
        assert rc == 0, err
        assert out.splitlines()[1].split()[:5] == ["run", "state", "created", "auc", "loss"]
        assert out.splitlines()[2].split()[:2] == ["census-cpu-1000", "COMPLETE"]


def test_a_failed_recording_is_one_line_and_leaves_the_job_alone(tmp_path):
    """The experiment's id is taken by another kind of context: the job is followed to its end, its model
    registered and the exit status 0 all the same; the recording's failure is one line."""
    job = compile_text(CENSUS.read_text(), file=str(CENSUS))
    write_outputs(tmp_path, job.body["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"], epochs=8, auc=0.93)
    fake = FakeVertex()
    fake.metadata.stores[STORE] = {"name": STORE}
    fake.metadata.resources[("contexts", f"{STORE}/contexts/census-cpu")] = {
        "name": f"{STORE}/contexts/census-cpu", "schemaTitle": "system.PipelineRun"}
    with FakeVertexServer(fake) as server:
        rc, out, err = run_cli([CENSUS], factory=server.factory(tmp_path))
    assert rc == 0, err
    (name,) = fake.jobs
    assert fake.models, "the model is registered before the run is recorded"
    (line,) = [line for line in out.splitlines() if line.startswith("experiments:")]
    assert line.startswith(f"experiments: recording {name} failed (ValueError: ")
    assert "is a system.PipelineRun context, not an experiment" in line
    assert not [c for c in fake.metadata.contexts() if c.endswith("census-cpu-1000")]  # nothing half-written


def test_a_job_whose_registration_failed_is_recorded_all_the_same(tmp_path):
    """The job ended and its model could not be registered (Vertex AI could not read the artifacts): the run
    is recorded without a version, and the exit status is registration's."""
    job = compile_text(CENSUS.read_text(), file=str(CENSUS))
    write_outputs(tmp_path, job.body["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"], epochs=8, auc=0.93)
    fake = FakeVertex(upload_errors=["cannot read the artifacts"])
    with FakeVertexServer(fake) as server:
        rc, out, err = run_cli([CENSUS], factory=server.factory(tmp_path))
    assert rc != 0 and "cannot read the artifacts" in err, err
    assert "experiments: recorded run census-cpu-1000 of experiment census-cpu" in out
    run = fake.metadata.contexts()[f"{STORE}/contexts/census-cpu-1000"]
    assert run["metadata"]["_metrics"]["auc"] == 0.93 and "registry_version" not in run["metadata"]["lineage"]


def test_a_recording_cut_short_after_its_execution_gets_its_events_when_followed_again(tmp_path):
    """The first recording made the execution and stopped (a network error) before its lineage events: the
    next one finds the execution there and still adds them."""
    job = compile_text(CENSUS.read_text(), file=str(CENSUS))
    prefix = job.body["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"]
    write_outputs(tmp_path, prefix, epochs=8, auc=0.93)
    remote = {**job.body, "name": f"{PARENT}/customJobs/7", "state": "JOB_STATE_SUCCEEDED"}
    execution = f"{STORE}/executions/census-cpu-7"
    fake = FakeVertex()
    fake.metadata.stores[STORE] = {"name": STORE}
    fake.metadata.resources[("executions", execution)] = {"name": execution,
                                                          "schemaTitle": ex.EXECUTION_SCHEMA}
    out = io.StringIO()
    with FakeVertexServer(fake) as server:
        clients = server.factory(tmp_path)("demo-project", "us-central1")
        RecordRun(BOARD).record(clients, job, remote, None, out)
    assert out.getvalue() == "experiments: recorded run census-cpu-7 of experiment census-cpu\n"
    events = fake.metadata.events[execution]
    assert sorted(e["type"] for e in events) == [aiplatform_v1.Event.Type.INPUT,
                                                  aiplatform_v1.Event.Type.OUTPUT]
    assert f"{STORE}/artifacts/census-cpu-7" in {e["artifact"] for e in events}  # the model folder


def test_a_recording_cut_short_still_lists_the_run(tmp_path):
    """Its artifacts could not be made (an outage): the run, made a child of its experiment at once, is
    listed with its parameters and metrics all the same."""
    job = compile_text(CENSUS.read_text(), file=str(CENSUS))
    write_outputs(tmp_path, job.body["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"], epochs=8, auc=0.93)
    remote = {**job.body, "name": f"{PARENT}/customJobs/7", "state": "JOB_STATE_SUCCEEDED"}
    fake = FakeVertex()
    fake.metadata.failing.add("artifacts")
    out = io.StringIO()
    with FakeVertexServer(fake) as server:
        factory = server.factory(tmp_path)
        RecordRun(BOARD).record(factory("demo-project", "us-central1"), job, remote, None, out)
        assert out.getvalue().startswith(f"experiments: recording {PARENT}/customJobs/7 failed")
        rc, listed, err = run_cli(["runs", CENSUS, "--env", "dev"], factory=factory)
    assert rc == 0, err
    assert listed.splitlines()[2].split()[:5] == ["census-cpu-7", "COMPLETE", "2026-01-02T03:08:01", "0.93",
                                                  "0.3"]


def test_a_study_is_recorded_as_one_run_with_its_best_trial(tmp_path):
    job = compile_text(TUNING.read_text(), file=str(TUNING))
    prefix = job.body["trialJobSpec"]["baseOutputDirectory"]["outputUriPrefix"]
    trials = [{"id": str(i), "state": "SUCCEEDED", "parameters": [],
               "finalMeasurement": {"metrics": [{"metricId": "accuracy", "value": v}]}}
              for i, v in ((1, 0.81), (2, 0.86), (3, 0.84))]
    remote = {**job.body, "name": f"{PARENT}/hyperparameterTuningJobs/9", "state": "JOB_STATE_SUCCEEDED",
              "trials": trials}
    write_outputs(tmp_path, f"{prefix}/2", epochs=5, auc=0.9)
    fake = FakeVertex()
    with FakeVertexServer(fake) as server:
        RecordRun(BOARD).record(server.factory(tmp_path)("demo-project", "us-central1"), job, remote, None,
                                io.StringIO())
    (run,) = [c for c in fake.metadata.contexts().values() if c["schemaTitle"] == "system.ExperimentRun"]
    assert run["name"] == f"{STORE}/contexts/census-tuning-9"
    lineage = run["metadata"]["lineage"]
    assert lineage["trial"] == "2" and lineage["model"] == f"{prefix}/2/model"
    assert run["metadata"]["_params"]["num_epochs"] == 5


# --- the local store --------------------------------------------------------------------------------------


def local_runs(root, figures):
    """Runs of census_cpu.yaml as --local leaves them (run folders written by hand), each recorded."""
    ids = []
    for minutes, (epochs, auc) in enumerate(figures):
        now = NOW + timedelta(minutes=minutes)
        job = compile_text(CENSUS.read_text(), file="jobs/census_cpu.yaml", now=now)
        base = base_folder(job, root)
        write_outputs(root / "gs", "gs://" + str(base.relative_to(root / "gs")), epochs, auc)
        record_run(job, root, 0, now.isoformat(), io.StringIO())
        ids.append(job.job_id)
    return ids


@pytest.mark.parametrize("value, uri", [
    ("ROOT/gs/b/census/adult.data", "gs://b/census/adult.data"),
    ("ROOT/gs/b/x,ROOT/gs/b/y*", "gs://b/x,gs://b/y*"),  # the file flags' comma lists, item by item
    ("/elsewhere/file", "/elsewhere/file"),
    ("", ""),
])
def test_local_paths_in_the_trainers_flags_go_back_to_their_gs_uris(tmp_path, value, uri):
    assert to_gs(value.replace("ROOT", str(tmp_path)), tmp_path) == uri


def test_local_runs_are_listed_best_first_and_compared(tmp_path):
    ids = local_runs(tmp_path, [(8, 0.90), (4, 0.88), (12, 0.91)])
    store = tmp_path / "experiments" / "census-cpu"
    assert sorted(p.name for p in store.iterdir()) == sorted(f"{i}.json" for i in ids)
    document = json.loads((store / f"{ids[0]}.json").read_text())
    assert set(document) == {"experimentId", "runId", "experiment", "run", "execution", "artifacts", "events"}
    # The same bodies a cloud run sends (the local one has no job, so no _custom_jobs).
    adult = tmp_path / "gs/demo-project-data/census/adult.data"
    assert document["run"]["metadata"]["lineage"]["data"] == [{"uri": DATA, **ex.file_identity(adult)}]

    rc, out, err = run_cli(["runs", CENSUS, "--local", "--local-root", tmp_path])
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == "experiment census-cpu:"
    assert lines[1].split() == ["run", "state", "created", "auc", "loss", "num_epochs"]
    assert [line.split()[0] for line in lines[2:5]] == [ids[2], ids[0], ids[1]]  # auc 0.91, 0.90, 0.88
    assert [line.split()[-1] for line in lines[2:5]] == ["12", "8", "4"]
    assert lines[5].startswith("3 run(s), best first by auc (MAXIMIZE); 1 parameter(s) differ")

    rc, out, err = run_cli(["runs", CENSUS, "--local", "--local-root", tmp_path, "--compare", ids[2], ids[1]])
    assert rc == 0, err
    rows = [line.split() for line in out.splitlines()[2:]]
    assert rows == [["param", "num_epochs", "12", "4"], ["metric", "auc", "0.91", "0.88"],
                    ["lineage", "model", f"gs://demo-project-models/census-cpu/{ids[2]}/model",
                     f"gs://demo-project-models/census-cpu/{ids[1]}/model"]]


def test_a_data_path_that_cannot_be_read_is_left_out_of_the_lineage_not_a_crash(tmp_path):
    """The run's flags name a path the file system refuses (a name too long): the run is recorded all the
    same, with the data it could identify; recording never turns a run's exit status into a traceback."""
    (run,) = local_runs(tmp_path, [(8, 0.9)])
    job = compile_text(CENSUS.read_text(), file="jobs/census_cpu.yaml", now=NOW)
    config = base_folder(job, tmp_path) / "model" / "trainer_config.json"
    flags = json.loads(config.read_text())
    flags["train_files"] = [str(tmp_path / "gs/demo-project-data") + "/" + "x" * 5000, DATA]
    config.write_text(json.dumps(flags))
    out = io.StringIO()
    record_run(job, tmp_path, 0, NOW.isoformat(), out)
    assert out.getvalue().startswith(f"experiments: recorded run {run} of census-cpu"), out.getvalue()
    document = json.loads((tmp_path / "experiments/census-cpu" / f"{run}.json").read_text())
    assert [d["uri"] for d in document["run"]["metadata"]["lineage"]["data"]] == [DATA]


def test_a_run_over_many_listed_files_keeps_its_context_within_vertex_ais_200_kb(tmp_path):
    """--train-files lists 300 shards by name (each its own glob of one): the first MAX_RUN_DATA_FILES are
    identified, so the run context's metadata stays under the 200 KB Vertex AI takes."""
    job = compile_text(CENSUS.read_text(), file=str(CENSUS))
    prefix = job.body["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"]
    write_outputs(tmp_path, prefix, epochs=8, auc=0.93)
    shards = [f"gs://demo-project-data/census/shards/{'part-' * 10}{i:05d}.csv" for i in range(300)]
    for shard in shards:
        path = tmp_path / shard.removeprefix("gs://")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
    config = tmp_path / prefix.removeprefix("gs://") / "model/trainer_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "train_files": shards,
                                  "eval_files": shards}))
    remote = {**job.body, "name": f"{PARENT}/customJobs/7", "state": "JOB_STATE_SUCCEEDED"}
    fake = FakeVertex()
    with FakeVertexServer(fake) as server:
        RecordRun(BOARD).record(server.factory(tmp_path)("demo-project", "us-central1"), job, remote, None,
                                io.StringIO())
    run = fake.metadata.contexts()[f"{STORE}/contexts/census-cpu-7"]
    assert [d["uri"] for d in run["metadata"]["lineage"]["data"]] == shards[:ex.MAX_RUN_DATA_FILES]
    assert len(json.dumps(run["metadata"])) < 200_000


def test_a_local_study_is_recorded_as_one_run_with_its_best_trial(tmp_path):
    job = compile_text(TUNING.read_text(), file="jobs/census_tuning.yaml")
    base = base_folder(job, tmp_path)
    best = {"id": "2", "state": "SUCCEEDED", "metric": 0.86}
    base.mkdir(parents=True)
    (base / "study.db").write_text("")  # Optuna's storage: the study ran here
    (base / "study.json").write_text(json.dumps({"best": best, "trials": [best]}))
    for trial, epochs in (("1", 3), ("2", 5)):
        uri = "gs://" + str((base / trial).relative_to(tmp_path / "gs"))
        write_outputs(tmp_path / "gs", uri, epochs, 0.9)
    record_run(job, tmp_path, 0, NOW.isoformat(), io.StringIO())
    (path,) = (tmp_path / "experiments" / "census-tuning").iterdir()
    metadata = json.loads(path.read_text())["run"]["metadata"]
    assert metadata["lineage"]["trial"] == "2" and metadata["_params"]["num_epochs"] == 5
    assert metadata["lineage"]["model"].endswith(f"{job.job_id}/2/model")


@pytest.mark.parametrize("argv, words", [
    (["--compare", "X"], "run_job.py runs: error: argument --compare: expected 2 arguments"),
    (["--compare", "census-cpu-nope", "RUN0"],
     "jobs/census_cpu.yaml: --compare: experiment census-cpu has no run 'census-cpu-nope'"),
])
def test_bad_compare_is_one_line(tmp_path, capsys, argv, words):
    (run,) = local_runs(tmp_path, [(8, 0.9)])
    rc, out, err = run_cli(["runs", "jobs/census_cpu.yaml", "--local", "--local-root", tmp_path,
                            *[run if a == "RUN0" else a for a in argv]])
    err += capsys.readouterr().err  # argparse's usage errors go to sys.stderr
    assert (rc, out) == (2, "") and err.count("\n") == 1 and err.startswith(words), err


@pytest.mark.parametrize("make, words", [
    (None, "no run of experiment census-cpu under"),
    (lambda s: (s / "big.json").write_bytes(b" " * (2 << 20)), "big.json: (file): 2097152 bytes; allowed:"),
    (lambda s: os.mkfifo(s / "pipe.json"), "pipe.json: (file): not a regular file (a FIFO)"),
    (lambda s: (s / "list.json").write_text("[1, 2]"), "list.json: run: runId must be the file's name"),
    (lambda s: (s / "x.json").write_text(json.dumps({"runId": "x", "run": {"schemaTitle": "system.Run"}})),
     "x.json: run: not a system.ExperimentRun context"),
    (lambda s: (s / "deep.json").write_text("[" * 5000 + "]" * 5000), "deep.json: (parse): nested too deep"),
])
def test_a_store_without_runs_or_with_something_else_is_one_line(tmp_path, make, words):
    store = tmp_path / "experiments" / "census-cpu"
    store.mkdir(parents=True)
    if make is not None:
        local_runs(tmp_path, [(8, 0.9)])
        make(store)
    rc, out, err = run_cli(["runs", CENSUS, "--local", "--local-root", tmp_path])
    assert (rc, out) == (2, "") and err.count("\n") == 1 and "Traceback" not in err, err
    assert words in err


def test_what_a_store_holds_is_printed_escaped_and_bounded(tmp_path):
    """A hand-edited store (or a context someone else wrote) may hold control characters or 100 KB values:
    the table and --compare print them escaped, each row on one line of bounded length."""
    ids = local_runs(tmp_path, [(8, 0.9), (4, 0.8)])
    path = tmp_path / "experiments" / "census-cpu" / f"{ids[0]}.json"
    document = json.loads(path.read_text())
    metadata = document["run"]["metadata"]
    metadata["_params"]["model"] = "wide\x1b[2J\nsecond line"
    metadata["_metrics"]["a\x1b]0;title\x07"] = 1.0
    metadata["_params"]["train_files"] = "gs://b/" + "x" * 100_000
    metadata["_state"] = "COMPLETE\r"
    path.write_text(json.dumps(document))
    for argv in ([], ["--compare", *ids]):
        rc, out, err = run_cli(["runs", CENSUS, "--local", "--local-root", tmp_path, *argv])
        assert rc == 0, err
        assert not any(c in out for c in "\x1b\x07\r"), out
        lines = out.splitlines()
        # A row per run; per difference (model, num_epochs, train_files, two metrics, the model, state).
        assert len(lines) == (5 if not argv else 9), out
        assert max(len(line) for line in lines) < 1000
        assert "wide\\x1b[2J\\nsecond line" in out


def test_a_store_too_large_to_read_is_one_line_before_any_file_is_parsed(tmp_path, monkeypatch):
    from jobs.local import experiments as local_store

    ids = local_runs(tmp_path, [(8, 0.9), (4, 0.8)])
    one = (tmp_path / "experiments" / "census-cpu" / f"{ids[0]}.json").stat().st_size
    monkeypatch.setattr(local_store, "MAX_STORE_BYTES", one + 1)  # two runs are more than that
    monkeypatch.setattr(local_store, "plain_json", None)  # parsing one would fail loudly
    rc, out, err = run_cli(["runs", CENSUS, "--local", "--local-root", tmp_path])
    assert (rc, out) == (2, "") and err.count("\n") == 1 and "Traceback" not in err, err
    assert "census-cpu: more than 0 MiB of run files; allowed: a folder of run files" in err


def test_runs_on_vertex_ai_without_a_run_is_one_line(tmp_path):
    with FakeVertexServer(FakeVertex()) as server:
        rc, out, err = run_cli(["runs", "jobs/census_cpu.yaml"], factory=server.factory(tmp_path))
    assert (rc, out) == (2, "")
    assert err == (f"jobs/census_cpu.yaml: --env: no run of experiment census-cpu in {PARENT}; allowed: an "
                   "environment where `run_job.py jobs/census_cpu.yaml` ran and ended\n")


# What roles/aiplatform.user holds of the metadata store, whole families ("Vertex AI User" in
# https://cloud.google.com/iam/docs/roles-permissions/aiplatform and the Vertex AI access-control page).
AIPLATFORM_USER_FAMILIES = ("aiplatform.metadataStores.", "aiplatform.contexts.", "aiplatform.artifacts.",
                            "aiplatform.executions.")


def test_whoever_submits_jobs_may_record_runs_without_a_new_grant():
    """Recording runs from the client needs the metadata permissions of the calls it makes, all inside
    roles/aiplatform.user, which job submitters and the CI deployer hold already: no grant is added."""
    import inspect

    from infra.constructs.ci_identity import DEPLOYER_PROJECT_ROLES
    from infra.constructs.job_submitters import SUBMITTER_PROJECT_ROLES
    from jobs.cloud import experiments
    from jobs.cloud.client import VertexMetadata

    assert "roles/aiplatform.user" in SUBMITTER_PROJECT_ROLES
    assert "roles/aiplatform.user" in DEPLOYER_PROJECT_ROLES
    called = {m for m, _ in ex.metadata_requests(census_record(), PARENT)}
    # Every other MetadataService call the client and the writer make, by name, so that a new one without
    # its permission here fails (not only those PERMISSIONS lists already).
    source = inspect.getsource(VertexMetadata) + inspect.getsource(experiments)
    for client_call, named_call in re.findall(
            r"self\.client\.(\w+)\(|(?:self|metadata)\.(?:call|get)\(\"(\w+)\"", source):
        called.add(client_call or named_call)
    assert {"get_metadata_store", "create_metadata_store", "list_contexts", "update_context",
            "get_context"} <= called
    assert called <= set(experiments.PERMISSIONS), called - set(experiments.PERMISSIONS)
    assert all(p.startswith(AIPLATFORM_USER_FAMILIES) for p in experiments.PERMISSIONS.values())


def test_compare_shows_figures_the_table_rounds_alike_and_nothing_that_is_the_same():
    a = ex.Run("a", "a", "COMPLETE", "", params={"n": 8.0, "lr": 0.1}, metrics={"auc": 0.912361},
               lineage={"data": [{"uri": "gs://b/x", "crc32c": "A"}], "code": {"image": "i:1"}})
    b = ex.Run("b", "b", "FAILED", "", params={"n": 8, "lr": 0.1}, metrics={"auc": 0.912362},
               lineage={"data": [{"uri": "gs://b/x", "crc32c": "B"}], "code": {"image": "i:1"}})
    assert ex.show(a.metrics["auc"]) == ex.show(b.metrics["auc"])  # the table's 4 places
    assert ex.differences(a, b) == [
        ("metric", "auc", "0.912361", "0.912362"),
        ("lineage", "data gs://b/x", '{"crc32c": "A"}', '{"crc32c": "B"}'),  # the same file, other bytes
        ("state", "state", "COMPLETE", "FAILED"),
    ]  # 8.0 from Vertex AI's Struct and 8 from the local store are the same parameter


def test_a_failed_local_run_is_recorded_and_listed_after_the_runs_with_the_metric(tmp_path):
    (done,) = local_runs(tmp_path, [(8, 0.9)])
    job = compile_text(CENSUS.read_text(), file="jobs/census_cpu.yaml", now=NOW + timedelta(hours=1))
    (base_folder(job, tmp_path) / "replica-logs").mkdir(parents=True)  # it started, and wrote no model
    record_run(job, tmp_path, 1, (NOW + timedelta(hours=1)).isoformat(), io.StringIO())
    rc, out, err = run_cli(["runs", CENSUS, "--local", "--local-root", tmp_path])
    assert rc == 0, err
    rows = [line.split() for line in out.splitlines()[2:4]]
    assert rows[0][:2] == [done, "COMPLETE"] and rows[1][:2] == [job.job_id, "FAILED"] and "-" in rows[1]
    never = compile_text(CENSUS.read_text(), file="jobs/census_cpu.yaml", now=NOW + timedelta(hours=2))
    record_run(never, tmp_path, 1, NOW.isoformat(), io.StringIO())  # refused before it made its folder
    assert len(list((tmp_path / "experiments" / "census-cpu").iterdir())) == 2
