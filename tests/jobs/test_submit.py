"""Submission end to end against a fake Vertex AI REST endpoint and a directory standing in for gs://.

Everything but the network is real: the definition is compiled and validated, the trainer sdist is built with
`python -m build`, and the generated JobServiceClient (REST transport) sends the request.
"""

from __future__ import annotations

import json
import tarfile

import pytest
from google.protobuf import json_format

import jobs.cloud.plan
from tests.jobs.fake_vertex import FakeVertex, FakeVertexServer, Request
from tests.jobs.helpers import CODE_HASH, IMAGE_HASH, JOBS_DIR, OUTPUTS, PLANNED_OUTPUTS, run_cli

# Followed jobs and builds are polled without waiting (tests/jobs/conftest.py).
pytestmark = pytest.mark.usefixtures("no_poll_sleep")

# The python-package path (sdist staging); the container path and image builds: tests/jobs/test_images.py.
CPU = JOBS_DIR / "census_prebuilt.yaml"
TUNING = JOBS_DIR / "census_tuning.yaml"
PACKAGE = f"demo-project-staging/packages/{CODE_HASH}/trainer-0.1.0.tar.gz"


@pytest.fixture(scope="module")
def gcs_root(tmp_path_factory):
    # Shared by the module's tests so the trainer sdist is built (for real) once, by the first submission.
    return tmp_path_factory.mktemp("gcs")


@pytest.fixture
def vertex():
    with FakeVertexServer(FakeVertex()) as server:
        yield server


def normalized(body: dict, kind: str) -> dict:
    """A job body as the proto sees it (enum ints/names, int64 strings, doubles) for exact comparison."""
    from google.cloud import aiplatform_v1

    cls = aiplatform_v1.CustomJob if kind == "customJobs" else aiplatform_v1.HyperparameterTuningJob
    message = cls()._pb
    json_format.ParseDict(body, message)
    return json_format.MessageToDict(message)


def dry_run_request(path, *args) -> dict:
    rc, out, err = run_cli([path, "--dry-run", *args])
    assert rc == 0, err
    return json.loads(out)


@pytest.mark.parametrize(
    "path, collection, field",
    [
        (CPU, "customJobs", "customJob"),
        (TUNING, "hyperparameterTuningJobs", "hyperparameterTuningJob"),
    ],
)
def test_submit_sends_exactly_the_dry_run_request(vertex, gcs_root, tmp_path, path, collection, field):
    # A followed tuning job writes its study report (by default into the checkout's .local/reports).
    report = ["--report-dir", tmp_path / "report"] if collection == "hyperparameterTuningJobs" else []
    rc, out, err = run_cli([path, *report], factory=vertex.factory(gcs_root))
    assert rc == 0, err

    expected = dry_run_request(path)
    posts = vertex.fake.created()
    assert len(posts) == 1
    assert posts[0].path == f"/v1/{expected['parent']}/{collection}"
    assert normalized(posts[0].body, collection) == normalized(expected[field], collection)
    # Idempotency check before the create: a list filtered by this submission's label.
    listing = [r for r in vertex.fake.requests if r.method == "GET" and r.path.endswith(collection)]
    digest = expected[field]["labels"]["submission_hash"]
    assert listing and listing[0].query["filter"] == [f'labels.submission_hash="{digest}"']

    name = vertex.fake.jobs and next(iter(vertex.fake.jobs))
    assert f"created {name}" in out
    assert (
        f"https://console.cloud.google.com/agent-platform/locations/us-central1/training/"
        f"{name.rsplit('/', 1)[1]}?project=demo-project"
    ) in out
    assert (
        "https://us-central1.tensorboard.googleusercontent.com/experiment/projects+demo-project+locations+"
        in out
    )
    assert "JOB_STATE_SUCCEEDED" in out
    assert "JOB_STATE_RUNNING" in out
    if report:
        assert json.loads((tmp_path / "report/study.json").read_text())["state"] == "SUCCEEDED"


def census_trial(trial_id: str, state: str, accuracy: float | None = None, **extra) -> dict:
    """A trial of census_tuning.yaml's study as Vertex AI reports it (numbers as doubles)."""
    values = {
        "first-layer-size": 128.0,
        "num-layers": 2.0,
        "scale-factor": 0.5,
        "learning-rate": 0.003,
        "numeric-bins": 64.0,
        "numeric-embedding-size": 16.0,
    }
    found = {
        "id": trial_id,
        "state": state,
        "parameters": [{"parameterId": k, "value": v} for k, v in values.items()],
    }
    if accuracy is not None:
        found["finalMeasurement"] = {
            "stepCount": "8",
            "metrics": [{"metricId": "accuracy", "value": accuracy}],
        }
    return {**found, **extra}


def test_a_followed_study_ends_with_its_report_whatever_its_end(gcs_root, tmp_path):
    trials = [
        census_trial("1", "SUCCEEDED", 0.851),
        census_trial("2", "SUCCEEDED", 0.857),
        census_trial("3", "INFEASIBLE", infeasibleReason="The replica workerpool0-0 exited with status 1."),
        census_trial("4", "ACTIVE"),
    ]
    fake = FakeVertex(states=["JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_CANCELLED"], trials=trials)
    folder = tmp_path / "report"
    with FakeVertexServer(fake) as server:
        rc, out, err = run_cli([TUNING, "--report-dir", folder], factory=server.factory(gcs_root))
        name = next(iter(server.fake.jobs))
    assert rc == 1 and f"{name} ended JOB_STATE_CANCELLED" in err
    study = json.loads((folder / "study.json").read_text())
    assert study["state"] == "CANCELLED"
    assert [t["state"] for t in study["trials"]] == ["SUCCEEDED", "SUCCEEDED", "FAILED", "INTERRUPTED"]
    assert study["trials"][3]["failure"] == "still ACTIVE when the job ended CANCELLED"
    job_id = study["displayName"]
    assert study["best"]["model_dir"] == f"gs://demo-project-models/census-tuning/{job_id}/2/model/"
    assert (folder / "study.png").is_file()
    assert out.index("JOB_STATE_CANCELLED") < out.index(f"Study of {name}:")  # after following, not before
    assert "Study cancelled: 2 succeeded, 1 failed, 1 interrupted" in out
    assert "Best trial 2: accuracy=0.8570" in out
    assert "Trial 3 failed: The replica workerpool0-0 exited with status 1." in out
    # A cancelled study's best model is a person's call: the command, no hold.
    assert ("Keep it past its folder's lifecycle: gcloud storage objects update --recursive --temporary-hold "
            f"gs://demo-project-models/census-tuning/{job_id}/2/model\n") in out


def test_a_submitted_study_followed_to_success_holds_its_best_model(gcs_root, tmp_path, monkeypatch):
    from jobs import study_report
    from jobs.cloud.client import LocalDirStorage

    monkeypatch.setattr(study_report, "plot_study", lambda summary, path: None)  # the hold needs no plot
    hold = LocalDirStorage.hold

    def trained_then_hold(self, prefix):
        # The trial wrote its SavedModel as the job ran; the job id (and so the folder) is known only now.
        self.path(prefix + "saved_model.pb").parent.mkdir(parents=True, exist_ok=True)
        self.path(prefix + "saved_model.pb").write_text("x")
        return hold(self, prefix)

    monkeypatch.setattr(LocalDirStorage, "hold", trained_then_hold)
    trials = [census_trial("1", "SUCCEEDED", 0.851), census_trial("2", "SUCCEEDED", 0.857)]
    fake = FakeVertex(states=["JOB_STATE_RUNNING", "JOB_STATE_SUCCEEDED"], trials=trials)
    with FakeVertexServer(fake) as server:
        factory = server.factory(gcs_root)
        rc, out, err = run_cli([TUNING, "--report-dir", tmp_path / "report"], factory=factory)
    assert rc == 0, err
    job_id = json.loads((tmp_path / "report/study.json").read_text())["displayName"]
    best = f"gs://demo-project-models/census-tuning/{job_id}/2/model"
    assert [c.storage.held for c in factory.made] == [[f"{best}/saved_model.pb"]]
    assert ("  Held its 1 object past its folder's lifecycle; to let them expire: "
            "gcloud storage objects update "
            f"--recursive --no-temporary-hold {best}\n") in out


def test_a_followed_study_that_succeeds_holds_its_best_model(tmp_path, monkeypatch):
    from jobs import study_report
    from tests.jobs.test_study_report import remote_job, trial

    monkeypatch.setattr(study_report, "plot_study", lambda summary, path: None)  # the hold needs no plot
    name = "projects/demo-project/locations/us-central1/hyperparameterTuningJobs/48"
    model = tmp_path / "demo-models/runs/s/2/model/saved_model.pb"
    model.parent.mkdir(parents=True)
    model.write_text("x")
    with FakeVertexServer(FakeVertex()) as server:
        server.fake.add_job(name, remote_job([trial("1", score=0.8), trial("2", score=0.9)]))
        factory = server.factory(tmp_path)
        rc, out, err = run_cli(["--follow", name], factory=factory, repo_root=tmp_path)
    assert rc == 0, err
    assert [c.storage.held for c in factory.made] == [["gs://demo-models/runs/s/2/model/saved_model.pb"]]
    assert ("  Held its 1 object past its folder's lifecycle; to let them expire: "
            "gcloud storage objects update "
            "--recursive --no-temporary-hold gs://demo-models/runs/s/2/model\n") in out


def test_following_an_earlier_study_writes_its_report_and_a_custom_job_takes_no_report_dir(tmp_path):
    from tests.jobs.test_study_report import remote_job

    name = "projects/demo-project/locations/us-central1/hyperparameterTuningJobs/44"
    with FakeVertexServer(FakeVertex()) as server:
        server.fake.add_job(name, remote_job([], "JOB_STATE_SUCCEEDED"))
        rc, out, err = run_cli(["--follow", name], factory=server.factory(tmp_path), repo_root=tmp_path)
        assert rc == 0, err
        assert json.loads((tmp_path / ".local/reports/44/study.json").read_text())["trials"] == []
        custom = "projects/demo-project/locations/us-central1/customJobs/45"
        rc, out, err = run_cli(
            ["--follow", custom, "--report-dir", tmp_path / "r"], factory=server.factory(tmp_path)
        )
        assert rc == 2 and err.startswith(
            f"--report-dir: {tmp_path / 'r'}: a CustomJob writes no study report"
        )
        assert not [r for r in server.fake.requests if r.path.endswith("/45")]


def test_uploaded_package_is_the_trainer_sdist_and_is_not_uploaded_twice(vertex, gcs_root, monkeypatch):
    rc, _, err = run_cli([CPU, "--no-wait"], factory=vertex.factory(gcs_root))
    assert rc == 0, err
    sdist = gcs_root / PACKAGE
    with tarfile.open(sdist) as tar:
        names = tar.getnames()
    assert "trainer-0.1.0/trainer/config.py" in names
    assert "trainer-0.1.0/pyproject.toml" in names
    assert not any("__pycache__" in n for n in names)

    def no_build(*args, **kwargs):
        raise AssertionError("identical code must not be rebuilt or re-uploaded")

    monkeypatch.setattr(jobs.cloud.plan, "build_sdist", no_build)
    before = sdist.stat().st_mtime_ns
    rc, out, err = run_cli(
        [CPU, "--no-wait", "--set", "jobSpec.scheduling.timeout=600s"], factory=vertex.factory(gcs_root)
    )
    assert rc == 0, err
    assert "already uploaded" in out
    assert sdist.stat().st_mtime_ns == before


def test_retried_submit_reuses_the_live_job(gcs_root):
    with FakeVertexServer(FakeVertex(states=["JOB_STATE_PENDING", "JOB_STATE_RUNNING"])) as server:
        first = run_cli([TUNING, "--no-wait"], factory=server.factory(gcs_root))
        assert first[0] == 0, first[2]
        # A retry a minute later (new job id, same definition/code/overrides) must not create a second job.
        later = jobs_now_plus_minutes(1)
        second = run_cli([TUNING, "--no-wait"], factory=server.factory(gcs_root), now=later)
        assert second[0] == 0, second[2]
        assert len(server.fake.created()) == 1
        assert (
            "reusing projects/demo-project/locations/us-central1/hyperparameterTuningJobs/1000" in second[1]
        )
        # A different override is a different submission.
        third = run_cli([TUNING, "--no-wait", "--set", "maxTrialCount=4"], factory=server.factory(gcs_root))
        assert third[0] == 0, third[2]
        assert len(server.fake.created()) == 2


def test_a_finished_job_is_not_reused(vertex, gcs_root):
    assert run_cli([CPU], factory=vertex.factory(gcs_root))[0] == 0
    assert run_cli([CPU], factory=vertex.factory(gcs_root))[0] == 0
    assert len(vertex.fake.created()) == 2


def test_failed_job_exits_nonzero_with_its_error(gcs_root):
    message = "The replica workerpool0-0 exited with a non-zero status of 1."
    fake = FakeVertex(
        states=["JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_FAILED"], error_message=message
    )
    with FakeVertexServer(fake) as server:
        rc, out, err = run_cli([CPU], factory=server.factory(gcs_root))
    assert rc == 1
    assert (
        err.strip()
        == f"projects/demo-project/locations/us-central1/customJobs/1000 ended JOB_STATE_FAILED: {message}"
    )
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "final, rc",
    [
        ("JOB_STATE_SUCCEEDED", 0),
        ("JOB_STATE_CANCELLED", 1),
        ("JOB_STATE_EXPIRED", 1),
        ("JOB_STATE_FAILED", 1),
    ],
)
def test_following_stops_at_the_first_terminal_state(gcs_root, final, rc):
    states = ["JOB_STATE_QUEUED", "JOB_STATE_PENDING", "JOB_STATE_RUNNING", final, "JOB_STATE_RUNNING"]
    with FakeVertexServer(FakeVertex(states=states)) as server:
        assert run_cli([CPU], factory=server.factory(gcs_root))[0] == rc
        name = next(iter(server.fake.jobs))
        assert server.fake.polls[name] == 3  # one GET per state change until the terminal one, none after


def test_no_wait_returns_without_polling(vertex, gcs_root):
    rc, out, _ = run_cli([CPU, "--no-wait"], factory=vertex.factory(gcs_root))
    assert rc == 0
    assert vertex.fake.polls[next(iter(vertex.fake.jobs))] == 0


def test_ctrl_c_stops_following_not_the_job(gcs_root, monkeypatch):
    def interrupt(seconds):
        raise KeyboardInterrupt

    monkeypatch.setattr(jobs.cloud.plan, "_sleep", interrupt)
    with FakeVertexServer(FakeVertex(states=["JOB_STATE_PENDING", "JOB_STATE_RUNNING"])) as server:
        rc, out, err = run_cli([CPU], factory=server.factory(gcs_root))
        name = next(iter(server.fake.jobs))
        assert rc == 130
        assert f"run_job.py --follow {name}" in err
        assert "keeps running" in err
        assert not [r for r in server.fake.requests if ":cancel" in r.path]
        # ... and following again picks it up.
        monkeypatch.setattr(jobs.cloud.plan, "_sleep", lambda seconds: None)
        server.fake.states = ["JOB_STATE_RUNNING", "JOB_STATE_SUCCEEDED"]
        rc, out, err = run_cli(["--follow", name], factory=server.factory(gcs_root))
        assert rc == 0, err
        assert "JOB_STATE_SUCCEEDED" in out


def test_tuning_progress_reports_trials_and_best(monkeypatch):
    lines = []

    class Jobs:
        def get(self, kind, name):
            return {
                "name": name,
                "state": "JOB_STATE_SUCCEEDED",
                "maxTrialCount": 4,
                "studySpec": {"metrics": [{"metricId": "accuracy", "goal": "MAXIMIZE"}]},
                "trials": [
                    {
                        "id": "1",
                        "state": "SUCCEEDED",
                        "finalMeasurement": {"metrics": [{"metricId": "accuracy", "value": 0.81}]},
                    },
                    {
                        "id": "2",
                        "state": "SUCCEEDED",
                        "finalMeasurement": {"metrics": [{"metricId": "accuracy", "value": 0.85}]},
                    },
                    {"id": "3", "state": "INFEASIBLE"},
                    {"id": "4", "state": "ACTIVE"},
                ],
            }

    class Out:
        def write(self, text):
            lines.append(text)

        def flush(self):
            pass

    remote = jobs.cloud.plan.follow(
        Jobs(), "HyperparameterTuningJob", {"name": "n", "state": "JOB_STATE_RUNNING"}, Out()
    )
    assert remote["state"] == "JOB_STATE_SUCCEEDED"
    text = "".join(lines)
    assert "trials: 2 succeeded, 1 failed, 1 active of 4; best accuracy=0.85 (trial 2)" in text


def test_planned_outputs_cannot_be_submitted(vertex, tmp_path):
    rc, out, err = run_cli([CPU], outputs=PLANNED_OUTPUTS, factory=vertex.factory(tmp_path))
    assert rc == 2
    assert err.count("\n") == 1
    assert err.startswith(f"{CPU}: jobSpec.tensorboard: ")
    assert "cdktn deploy" in err
    assert vertex.fake.requests == [] and not any(tmp_path.iterdir())


def test_cloud_errors_are_one_line(gcs_root):
    # A server that refuses everything: the client raises; run_job.py prints one line, exit 1.
    fake = FakeVertex()
    fake.handle = lambda *a: (
        fake.requests.append(a),
        (
            403,
            {
                "error": {
                    "code": 403,
                    "message": "Permission 'aiplatform.customJobs.create' denied",
                    "status": "PERMISSION_DENIED",
                }
            },
        ),
    )[1]
    with FakeVertexServer(fake) as server:
        rc, out, err = run_cli([CPU, "--no-wait"], factory=server.factory(gcs_root))
    assert rc == 1
    assert err.count("\n") == 1 and "Forbidden" in err and "denied" in err and "Traceback" not in err
    assert not [r for r in fake.requests if r[0] == "POST" and r[1].endswith("customJobs")]


def jobs_now_plus_minutes(minutes):
    from datetime import timedelta

    from tests.jobs.helpers import NOW

    return NOW + timedelta(minutes=minutes)


def test_outputs_fixture_is_complete():
    # The fixed outputs mirror Interface 1's keys, so the tests exercise every reference the definitions use.
    assert set(OUTPUTS) >= {
        "project",
        "region",
        "data_bucket",
        "staging_bucket",
        "models_bucket",
        "runtime_service_account",
        "tensorboard",
        "trainer_image",
    }


def test_missing_credentials_is_one_helpful_line(tmp_path):
    from google.auth.exceptions import DefaultCredentialsError

    def factory(project, region):
        raise DefaultCredentialsError("Your default credentials were not found.")

    rc, out, err = run_cli([CPU, "--no-wait"], factory=factory)
    assert rc == 1
    assert err.count("\n") == 1 and "gcloud auth application-default login" in err


def test_gcloud_container_config_submits_without_packaging(vertex, tmp_path, write_job):
    from tests.jobs.helpers import GCLOUD_CUSTOM

    path = write_job(GCLOUD_CUSTOM, "gcloud_job.yaml")
    rc, out, err = run_cli(
        [path, "--display-name", "nightly-census", "--no-wait"], factory=vertex.factory(tmp_path)
    )
    assert rc == 0, err
    (post,) = vertex.fake.created()
    assert post.body["displayName"] == "nightly-census"
    pool = post.body["jobSpec"]["workerPoolSpecs"][0]
    assert (
        pool["containerSpec"]["imageUri"]
        == f"us-central1-docker.pkg.dev/demo-project/ml/trainer:cpu-{IMAGE_HASH}"
    )
    assert "trainer package" not in out and not any(tmp_path.rglob("*.tar.gz"))


def test_ctrl_c_before_the_job_exists_says_a_rerun_is_safe(vertex, gcs_root, monkeypatch):
    def interrupted_list(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("jobs.cloud.client.VertexJobs.find_live", interrupted_list)
    rc, out, err = run_cli([CPU], factory=vertex.factory(gcs_root))
    assert rc == 130
    assert "running the same command again reuses the job" in err and "Traceback" not in err
    assert vertex.fake.created() == []


@pytest.mark.parametrize(
    "text, args",
    [
        (None, ["--set", "jobSpec.scheduling.timeut=60s"]),
        (None, ["--set", "jobSpec.workerPoolSpecs.0.machineSpec.machineType=n1-standard-5"]),
        ("kind: CustomJob\njobSpec:\n\tworkerPoolSpecs: []\n", []),
        ("{placeholder}", []),
        (None, ["--service-account", "other@demo-project.iam.gserviceaccount.com"]),
    ],
    ids=[
        "bad-set-path",
        "invalid-field",
        "tab-indentation",
        "unresolvable-reference",
        "flag-account-not-allowed",
    ],
)
def test_bad_input_touches_no_cloud(vertex, tmp_path, write_job, text, args):
    if text is None:
        path = CPU
    elif text == "{placeholder}":
        path = write_job(CPU.read_text().replace("${infra.tensorboard}", "${infra.tensorboard_name}"))
    else:
        path = write_job(text)
    factory = vertex.factory(tmp_path / "gcs")
    rc, out, err = run_cli([path, *args], factory=factory)
    assert rc == 2 and err.count("\n") == 1 and err.startswith(f"{path}: "), err
    assert factory.calls == [] and vertex.fake.requests == [] and not (tmp_path / "gcs").exists()


def test_a_failed_poll_names_the_running_job(gcs_root):
    # The job is created, then polls start failing (say, a revoked role): exit 1 with the
    # error, and say how to pick the job up again, because it keeps running and billing.
    fake = FakeVertex(states=["JOB_STATE_PENDING", "JOB_STATE_RUNNING"])
    served = fake.handle

    def handle(method, path, query, body):
        if method == "GET" and fake.jobs and path.removeprefix("/v1/") in fake.jobs:
            fake.requests.append(Request(method, path, query, body))
            return 403, {"error": {"code": 403, "message": "access revoked", "status": "PERMISSION_DENIED"}}
        return served(method, path, query, body)

    fake.handle = handle
    with FakeVertexServer(fake) as server:
        rc, out, err = run_cli([CPU], factory=server.factory(gcs_root))
    name = next(iter(fake.jobs))
    assert rc == 1, err
    assert "access revoked" in err and f"run_job.py --follow {name}" in err and "Traceback" not in err
    assert len(fake.created()) == 1
