"""Registering a finished job's model (jobs.cloud.register) against the fake ModelService: the real generated
ModelServiceClient over REST, metrics.json in a directory standing in for gs://. The first version creates the
model, the gate moves an alias only to a version no worse than its holder, a study registers its best trial,
and a failed upload or a crash before the gate is finished by `run_job.py JOB_FILE --follow NAME` without a
second version."""

from __future__ import annotations

import io
import json
import re
import shlex

import pytest

import jobs.cloud.plan
from jobs.cloud.client import LocalDirStorage
from jobs.cloud.register import register
from jobs.definition.model_registry import metrics_uri
from tests.jobs.fake_vertex import FakeVertex, FakeVertexServer
from tests.jobs.helpers import JOBS_DIR, TUNING, compile_text, run_cli

# Followed jobs and builds are polled without waiting (tests/jobs/conftest.py).
pytestmark = pytest.mark.usefixtures("no_poll_sleep")

CENSUS = JOBS_DIR / "census_cpu.yaml"
PARENT = "projects/demo-project/locations/us-central1"
MODEL = f"{PARENT}/models/census"
OLD = "gs://demo-project-models/census-cpu/earlier-run/model"


def write_metrics(root, artifact_uri: str, **evaluation) -> None:
    """The metrics.json the trainer writes beside its SavedModel, reduced to what the gate reads."""
    path = LocalDirStorage(root).path(metrics_uri(artifact_uri))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"eval": evaluation, "history": []}), encoding="utf-8")


def finished(job, state="JOB_STATE_SUCCEEDED", trials=None) -> dict:
    """The job as Vertex AI returns it once it ended."""
    collection = "hyperparameterTuningJobs" if trials is not None else "customJobs"
    return {**job.body, "name": f"{PARENT}/{collection}/1000", "state": state, "trials": trials or []}


def census_job():
    return compile_text(CENSUS.read_text(), file=str(CENSUS))


GATE = [
    (
        "better",
        0.90,
        0.91,
        "2",
        "alias production moved to version 2 (auc 0.91 is no worse than the holder's 0.9",
    ),
    (
        "tie",
        0.90,
        0.90,
        "2",
        "alias production moved to version 2 (auc 0.9 is no worse than the holder's 0.9",
    ),
    (
        "worse",
        0.90,
        0.89,
        "1",
        "alias production stays on version 1: auc 0.89 is worse than the holder's 0.9 (MAXIMIZE); "
        "version 2 is kept without it",
    ),
    ("holder-unreadable", None, 0.95, "1", "stays on version 1: the holder's metric is unknown: "),
    ("new-unreadable", 0.90, None, "1", "stays on version 1: the new version's metric is unknown: "),
]


@pytest.mark.parametrize("held, new, holder, words", [g[1:] for g in GATE], ids=[g[0] for g in GATE])
def test_the_alias_moves_only_to_a_version_no_worse_than_its_holder(tmp_path, held, new, holder, words):
    job = census_job()
    remote = finished(job)
    artifact = remote["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"] + "/model"
    fake = FakeVertex()
    fake.add_version(MODEL, OLD)["versionAliases"].append("production")  # version 1 holds production
    if held is not None:
        write_metrics(tmp_path, OLD, auc=held)
    if new is not None:
        write_metrics(tmp_path, artifact, auc=new, loss=0.3)
    out = io.StringIO()
    with FakeVertexServer(fake) as server:
        clients = server.factory(tmp_path)("demo-project", "us-central1")
        assert register(clients.models, clients.storage, job, remote, out) == f"{MODEL}@2"
    assert fake.holder(MODEL, "production") == holder
    # `default` moves with the first alias, in the same call: an alias-less reference serves the gated best.
    assert fake.holder(MODEL, "default") == holder
    merged = [m.body["versionAliases"] for m in fake.merges()]
    assert merged == ([["production", "default"]] if holder == "2" else [])
    assert words in out.getvalue(), out.getvalue()
    (upload,) = fake.uploads()
    assert upload.body["parentModel"] == MODEL and "modelId" not in upload.body  # a version of the model
    assert upload.body["model"]["artifactUri"] == artifact
    labels = upload.body["model"]["labels"]
    assert labels["vertex_job"] == "1000" and labels["app"] == "census"
    assert labels.get("auc") == (None if new is None else repr(new).replace(".", "_"))
    assert "versionAliases" not in upload.body["model"]


def test_a_study_registers_its_best_trial_as_the_first_version(tmp_path):
    job = compile_text(TUNING, {"registry": {"model": "census", "aliases": ["production"]}})

    def trial(trial_id, state, accuracy):
        return {
            "id": trial_id,
            "state": state,
            "finalMeasurement": {"metrics": [{"metricId": "accuracy", "value": accuracy}]},
        }

    remote = finished(job, trials=[trial("1", "SUCCEEDED", 0.84), trial("2", "SUCCEEDED", 0.86)])
    best = remote["trialJobSpec"]["baseOutputDirectory"]["outputUriPrefix"] + "/2/model"
    write_metrics(tmp_path, best, accuracy=0.861)
    fake, out = FakeVertex(), io.StringIO()
    with FakeVertexServer(fake) as server:
        clients = server.factory(tmp_path)("demo-project", "us-central1")
        assert register(clients.models, clients.storage, job, remote, out) == f"{MODEL}@1"
    (upload,) = fake.uploads()
    assert upload.body["modelId"] == "census" and "parentModel" not in upload.body  # creates the model
    assert upload.body["model"]["artifactUri"] == best
    assert upload.body["model"]["labels"] == {"vertex_job": "1000", "vertex_trial": "2", "accuracy": "0_861"}
    assert fake.holder(MODEL, "production") == "1" and fake.holder(MODEL, "default") == "1"
    assert "alias production moved to version 1 (accuracy 0.861; no version held it)" in out.getvalue()


@pytest.mark.parametrize(
    "state, trials, words",
    [
        ("JOB_STATE_FAILED", None, f"{PARENT}/customJobs/1000 ended JOB_STATE_FAILED"),
        ("JOB_STATE_CANCELLED", None, "ended JOB_STATE_CANCELLED"),
        ("JOB_STATE_SUCCEEDED", [{"id": "1", "state": "INFEASIBLE"}], "no trial of"),
    ],
    ids=["failed", "cancelled", "study-without-success"],
)
def test_a_job_that_did_not_succeed_registers_nothing_and_says_so(tmp_path, state, trials, words):
    if trials is None:
        job = census_job()
    else:
        job = compile_text(TUNING, {"registry": {"model": "census"}})
    out = io.StringIO()
    with FakeVertexServer(FakeVertex()) as server:
        clients = server.factory(tmp_path)("demo-project", "us-central1")
        assert register(clients.models, clients.storage, job, finished(job, state, trials), out) is None
        assert server.fake.requests == []
    assert words in out.getvalue() and "nothing registered in model census" in out.getvalue()


def test_a_failed_upload_and_a_crash_before_the_gate_are_finished_by_follow_without_a_second_version(
    tmp_path,
):
    fake = FakeVertex(states=["JOB_STATE_PENDING"])
    with FakeVertexServer(fake) as server:
        factory = server.factory(tmp_path)
        rc, out, err = run_cli([CENSUS, "--no-wait"], factory=factory)
        assert rc == 0, err
        name = next(iter(fake.jobs))
        command = out.split("register it with: ")[1].strip()
        assert command == f"python scripts/run_job.py {CENSUS} --env dev --follow {name}"
        argv = shlex.split(command)[2:]
        fake.states = ["JOB_STATE_SUCCEEDED"]  # the job ended, and its model folder holds metrics.json
        artifact = fake.jobs[name]["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"] + "/model"
        write_metrics(tmp_path, artifact, auc=0.93)

        # 1. The upload's operation fails: one line saying so and how to finish; nothing registered.
        fake.upload_errors = ["artifacts could not be read"]
        rc, out, err = run_cli(argv, factory=factory)
        assert rc == 1 and err.count("\n") == 1 and "Traceback" not in err, err
        assert "registering model census failed" in err and "artifacts could not be read" in err
        assert err.strip().endswith(f"To finish (a version already uploaded is found by its job label, not "
                                    f"uploaded again): {command}")  # fmt: skip
        assert fake.models == {} and fake.merges() == []

        # 2. The upload lands, then the service is lost before the alias is merged (as if the process died).
        fake.merge_errors = ["connection reset"]
        rc, out, err = run_cli(argv, factory=factory)
        assert rc == 1 and "connection reset" in err and command in err, err
        assert "registry: registered " + MODEL + "@1" in out
        assert fake.holder(MODEL, "production") is None  # kept without the alias: never one it did not earn

        # 3. Finds its version by the job label: no upload, the gate applied.
        rc, out, err = run_cli(argv, factory=factory)
        assert rc == 0, err
        assert f"{MODEL}@1 is already this job's version (vertex_job=1000); not uploaded again" in out
        assert "alias production moved to version 1 (auc 0.93; no version held it)" in out
        assert len(fake.uploads()) == 2 and len(fake.models[MODEL]) == 1
        assert fake.holder(MODEL, "production") == "1"

        # What was sent is the request --dry-run prints, with the values only the finished job knows.
        rc, _, plan = run_cli([CENSUS, "--dry-run"])
        preview = re.search(r"model upload request .*?:\n(\{.*\n\})", plan, re.S).group(1)
        preview = json.loads(
            preview.replace("<job id>", "1000").replace("<metrics.json value, e.g. 0_8712>", "0_93")
        )
        sent = fake.uploads()[-1]
        assert sent.path == f"/v1/{preview.pop('parent')}/models:upload" and sent.body == preview


def test_follow_with_another_definition_or_kind_registers_nothing(tmp_path):
    name = f"{PARENT}/customJobs/77"
    fake = FakeVertex()
    fake.jobs[name], fake.polls[name] = {"name": name, "labels": {"submission_hash": "0123456789abcdef"}}, 0
    with FakeVertexServer(fake) as server:
        rc, out, err = run_cli([CENSUS, "--follow", name], factory=server.factory(tmp_path))
        assert (rc, err.count("\n")) == (2, 1), err
        assert err.startswith(f"{CENSUS}: --follow: {name} is not a submission of this definition")
        assert not [r for r in fake.requests if "/models" in r.path]

    def no_client(project, region):
        raise AssertionError("no client for bad input")

    study = f"{PARENT}/hyperparameterTuningJobs/5"
    rc, out, err = run_cli([CENSUS, "--follow", study], factory=no_client)
    assert rc == 2 and f"--follow: {study} is a HyperparameterTuningJob" in err, err


def test_ctrl_c_while_following_names_the_command_that_also_registers(tmp_path, monkeypatch):
    def interrupt(seconds):
        raise KeyboardInterrupt

    monkeypatch.setattr(jobs.cloud.plan, "_sleep", interrupt)
    with FakeVertexServer(FakeVertex(states=["JOB_STATE_PENDING", "JOB_STATE_RUNNING"])) as server:
        rc, out, err = run_cli(
            [CENSUS, "--set", "jobSpec.scheduling.timeout=60s"], factory=server.factory(tmp_path)
        )
        name = next(iter(server.fake.jobs))
        assert server.fake.uploads() == []
    assert rc == 130
    flags = "--env dev --set jobSpec.scheduling.timeout=60s"  # the ones the submission hash depends on
    assert err.endswith(f"  python scripts/run_job.py {CENSUS} {flags} --follow {name}\n")
