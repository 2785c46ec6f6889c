"""`run_job.py report RESOURCE_NAME [--report-dir DIR]` against the fake Vertex AI endpoint (the real
generated JobServiceClient over REST) with a directory standing in for gs://; and --report-dir's refusals
when submitting. One plot is drawn in this file (the study report)."""

from __future__ import annotations

import json

import pytest

from tests.jobs.fake_vertex import FakeVertex, FakeVertexServer
from tests.jobs.helpers import CUSTOM, TUNING, run_cli
from tests.jobs.test_study_report import remote_job, trial

PARENT = "projects/demo-project/locations/us-central1"
STUDY = f"{PARENT}/hyperparameterTuningJobs/42"
CUSTOM_JOB = f"{PARENT}/customJobs/7"
MODELS = "demo-project-models/census/run-1"


@pytest.fixture(scope="module")
def vertex():
    with FakeVertexServer(FakeVertex()) as server:
        yield server


def study_trials() -> list[dict]:
    units = [16.0, 32.0, 64.0, 128.0]
    found = [trial(str(i + 1), score=0.8 + 0.02 * i) for i in range(4)]
    for t, value in zip(found, units, strict=True):
        t["parameters"][0]["value"] = value
    found[1]["parameters"][3]["value"] = "adam"
    found.append(trial("5", state="INFEASIBLE", score=None, infeasibleReason="The replica ran out of memory"))
    found.append(trial("6", state="ACTIVE", score=None))
    return found


def test_a_study_gets_the_local_report(vertex, tmp_path):
    vertex.fake.add_job(STUDY, remote_job(study_trials(), "JOB_STATE_RUNNING"))
    folder = tmp_path / "reports" / "census"
    (tmp_path / "demo-models/runs/s/4/model").mkdir(parents=True)
    (tmp_path / "demo-models/runs/s/4/model/saved_model.pb").write_text("x")
    factory = vertex.factory(tmp_path)
    rc, out, err = run_cli(["report", STUDY, "--report-dir", folder], factory=factory)
    assert rc == 0, err
    assert [c.storage.held for c in factory.made] == [[]]  # the best so far may not be the study's best
    assert sorted(p.name for p in folder.iterdir()) == ["study.json", "study.png"]
    study = json.loads((folder / "study.json").read_text())
    assert study["state"] == "RUNNING" and study["displayName"] == "fake-study"
    assert [t["state"] for t in study["trials"]] == ["SUCCEEDED"] * 4 + ["FAILED", "ACTIVE"]
    assert study["best"]["id"] == "4" and study["best"]["parameters"]["units"] == 128
    assert study["best"]["model_dir"] == "gs://demo-models/runs/s/4/model/"
    assert set(study["importance"]) == {"units", "momentum", "scale", "opt"}
    assert (folder / "study.png").stat().st_size > 10_000
    lines = out.splitlines()
    assert lines[0] == f"Study of {STUDY}:"
    header = lines[2].split()
    assert header == ["trial", "units", "momentum", "scale", "opt", "score", "state", "duration"]
    assert lines[6].split() == ["4", "128", "0.9", "0.5", "sgd", "0.86", "SUCCEEDED", "-"]
    assert "Study running: 4 succeeded, 1 failed, 1 active" in out
    assert "Best trial 4: score=0.8600 with units=128 momentum=0.9 scale=0.5 opt=sgd" in out
    assert (f"  Once the study has SUCCEEDED, `run_job.py report {STUDY}` holds its best model past its "
            "folder's lifecycle\n") in out
    assert "Parameter importance (PED-ANOVA): " in out
    assert f"Results: {folder / 'study.json'}" in out and f"Plot: {folder / 'study.png'}" in out
    assert "Trial 5 failed: The replica ran out of memory" in out
    assert [r.path for r in vertex.fake.requests][-1] == f"/v1/{STUDY}"  # on the job's own region endpoint


def test_a_study_without_trials_is_reported_not_a_crash(vertex, tmp_path):
    vertex.fake.add_job(f"{PARENT}/hyperparameterTuningJobs/43", remote_job([], "JOB_STATE_CANCELLED"))
    rc, out, err = run_cli(
        ["report", f"{PARENT}/hyperparameterTuningJobs/43"],
        factory=vertex.factory(tmp_path),
        repo_root=tmp_path,
    )
    assert rc == 0, err
    study = json.loads((tmp_path / ".local/reports/43/study.json").read_text())  # the default folder
    assert study["trials"] == [] and study["best"] is None and study["state"] == "CANCELLED"
    assert "No trial succeeded: no best trial and no parameter importance." in out
    assert not (tmp_path / ".local/reports/43/study.png").exists()  # nothing to draw


BEST = "demo-models/runs/s/4/model"  # trial 4 of study_trials() scores best


def model_files(root):
    """The best trial's SavedModel, beside a worse trial's and a sibling folder that shares its prefix."""
    for name in (f"{BEST}/saved_model.pb", f"{BEST}/variables/variables.index",
                 "demo-models/runs/s/3/model/x", "demo-models/runs/s/4/model_old/x",
                 "demo-models/runs/s/4/logs/x"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("x")


@pytest.fixture
def no_plot(monkeypatch):
    """The hold needs no plot; drawing one per report is most of a report's time."""
    from jobs import study_report

    monkeypatch.setattr(study_report, "plot_study", lambda summary, path: None)


def test_a_succeeded_study_holds_its_best_model_and_says_how_to_release_it(vertex, tmp_path, no_plot):
    name = f"{PARENT}/hyperparameterTuningJobs/46"
    vertex.fake.add_job(name, remote_job(study_trials(), "JOB_STATE_SUCCEEDED"))
    model_files(tmp_path)
    factory = vertex.factory(tmp_path)
    rc, out, err = run_cli(["report", name, "--report-dir", tmp_path / "r"], factory=factory)
    assert rc == 0, err
    (clients,) = factory.made
    assert clients.storage.held == [f"gs://{BEST}/saved_model.pb", f"gs://{BEST}/variables/variables.index"]
    assert ("  SavedModel: gs://demo-models/runs/s/4/model/\n"
            "  Held its 2 objects past its folder's lifecycle; to let them expire: "
            f"gcloud storage objects update --recursive --no-temporary-hold gs://{BEST}\n") in out
    assert "--temporary-hold gs://" not in out.replace("--no-temporary-hold", "")  # no manual hold asked


def test_a_hold_that_fails_says_why_on_one_line_and_the_report_goes_on(
    vertex, tmp_path, no_plot, monkeypatch
):
    from google.api_core.exceptions import Forbidden

    from jobs.cloud.client import LocalDirStorage

    def refused(self, prefix):
        raise Forbidden("caller does not have storage.objects.update access\n" + "detail " * 200)

    monkeypatch.setattr(LocalDirStorage, "hold", refused)
    name = f"{PARENT}/hyperparameterTuningJobs/47"
    vertex.fake.add_job(name, remote_job(study_trials(), "JOB_STATE_SUCCEEDED"))
    folder = tmp_path / "r"
    rc, out, err = run_cli(["report", name, "--report-dir", folder], factory=vertex.factory(tmp_path))
    assert rc == 0, err
    assert json.loads((folder / "study.json").read_text())["best"]["id"] == "4"
    (line,) = [x for x in out.splitlines() if x.startswith("  Not held")]
    assert line.startswith(
        "  Not held (Forbidden: 403 caller does not have storage.objects.update access detail")
    assert line.endswith("); keep it past its folder's lifecycle: gcloud storage objects update --recursive "
                         f"--temporary-hold gs://{BEST}")
    assert len(line) < 400
    assert "Parameter importance" in out and f"Results: {folder / 'study.json'}" in out  # the rest follows


@pytest.mark.parametrize(
    "metrics, shown",
    [
        (
            b'{"eval": {"accuracy": 0.8616, "auc": 0.9189}, "history": []}',
            "  eval: accuracy 0.8616  auc 0.9189",
        ),
        (  # the task's baselines on the same eval data, loss first then by name, and its notes
            b'{"eval": {"loss": 7.369, "recall_at_k": 0.2958, "ndcg_at_k": 0.298}, "data": {"baselines": '
            b'{"popularity": {"ndcg_at_k": 0.16, "recall_at_k": 0.1582}}, "notes": ["from random weights"]}}',
            "  eval: loss 7.3690  ndcg_at_k 0.2980  recall_at_k 0.2958\n"
            "  baseline popularity (same eval data): ndcg_at_k 0.1600  recall_at_k 0.1582\n"
            "  note: from random weights\nResults: ",
        ),
        (None, f"  gs://{MODELS}/model/metrics.json: not found"),
        (b"{not json", f"  gs://{MODELS}/model/metrics.json: not JSON"),
        (b" " * (1 << 20) + b"{}", f"  gs://{MODELS}/model/metrics.json: over 1048576 bytes, not read"),
    ],
    ids=["metrics", "baselines", "no-metrics", "not-json", "too-big"],
)
def test_a_custom_job_gets_its_state_times_model_and_metrics(vertex, tmp_path, metrics, shown):
    gcs = tmp_path / "gcs"
    if metrics is not None:
        (gcs / MODELS / "model").mkdir(parents=True)
        (gcs / MODELS / "model/metrics.json").write_bytes(metrics)
    vertex.fake.add_job(
        CUSTOM_JOB,
        {
            "displayName": "census-cpu-1",
            "state": "JOB_STATE_SUCCEEDED",
            "createTime": "2026-01-02T03:00:00Z",
            "startTime": "2026-01-02T03:01:00Z",
            "endTime": "2026-01-02T03:11:30.250Z",
            "jobSpec": {
                "workerPoolSpecs": [{"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": "1"}],
                "baseOutputDirectory": {"outputUriPrefix": f"gs://{MODELS}/"},
            },
        },
    )
    folder = tmp_path / "report"
    rc, out, err = run_cli(["report", CUSTOM_JOB, "--report-dir", folder], factory=vertex.factory(gcs))
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == f"CustomJob census-cpu-1 ({CUSTOM_JOB}): SUCCEEDED"
    assert lines[1] == (
        "  create 2026-01-02T03:00:00Z, start 2026-01-02T03:01:00Z, end 2026-01-02T03:11:30.250Z (630s)"
    )
    assert lines[2] == f"  SavedModel: gs://{MODELS}/model/"
    assert "\n".join(lines[3:]).startswith(shown)
    report = json.loads((folder / "job.json").read_text())
    assert report["modelDir"] == f"gs://{MODELS}/model/" and report["duration_s"] == 630.25
    assert report["metrics"] == (json.loads(metrics) if shown.startswith("  eval") else None)


TOO_LONG = "projects/p/locations/r/customJobs/" + "1" * 100_000


@pytest.mark.parametrize(
    "name, problem",
    [
        ("", "'' is not a job resource name"),
        ("projects/p/locations/r/models/1", "'projects/p/locations/r/models/1' is not a job resource name"),
        ("projects/../locations/r/customJobs/1", "is not a job resource name"),
        ("projects/p/locations/r/customJobs/abc", "is not a job resource name"),
        ("projects/p/locations/r/customJobs/1/", "is not a job resource name"),
        (
            "projects/p/locations/r/customJobs/1\x1b[2J",
            "'projects/p/locations/r/customJobs/1\\x1b[2J' is not",
        ),
        (TOO_LONG, "'projects/p/locations/r/customJobs/11111111111111111111111111'... (100034 characters)"),
        (f"{PARENT}/customJobs/999", f"Vertex AI has no job {PARENT}/customJobs/999 (404)"),
    ],
    ids=["empty", "model", "dot-dot", "id", "slash", "control", "huge", "404"],
)
def test_a_name_that_is_not_a_job_is_one_line_and_writes_nothing(vertex, tmp_path, name, problem):
    before = len(vertex.fake.requests)
    rc, out, err = run_cli(["report", name, "--report-dir", tmp_path / "r"], factory=vertex.factory(tmp_path))
    assert rc == 2 and out == ""
    (line,) = err.splitlines()
    assert line.startswith("report: RESOURCE_NAME: ") and problem in line.split("; allowed: ")[0]
    assert "; allowed: " in line and len(line) < 400
    assert not (tmp_path / "r").exists()
    assert len(vertex.fake.requests) == before + (name.endswith("/999"))  # only the 404 asked anything


def _read_only(path):
    path.mkdir()
    path.chmod(0o500)


@pytest.mark.parametrize(
    "make, problem",
    [
        (lambda p: p.write_text("x"), "{dir} is a regular file"),
        (lambda p: p.parent.joinpath("file").write_text("x"), "Not a directory"),
        (_read_only, "{dir} is not writable"),
        (lambda p: p.symlink_to(p.parent / "nowhere"), "{dir} is a dangling symlink"),
    ],
    ids=["file", "under-a-file", "read-only", "dangling-link"],
)
def test_a_report_folder_that_cannot_be_written_is_refused_before_asking(
    vertex, tmp_path, owner_permissions, make, problem
):
    folder = tmp_path / "out"
    make(folder)
    given = tmp_path / "file" / "r" if problem == "Not a directory" else folder
    before = len(vertex.fake.requests)
    rc, out, err = run_cli(["report", STUDY, "--report-dir", given], factory=vertex.factory(tmp_path))
    assert rc == 2 and out == ""
    assert err.strip().startswith(f"--report-dir: {given}: {problem.format(dir=folder)}; allowed: a writable")
    assert len(vertex.fake.requests) == before


def test_report_help_and_a_missing_name(capsys):
    rc, out, err = run_cli(["report", "--help"])
    assert rc == 0
    assert "run_job.py report RESOURCE_NAME" in capsys.readouterr().out
    rc, out, err = run_cli(["report"])
    assert rc == 2
    assert "the following arguments are required: RESOURCE_NAME" in capsys.readouterr().err


@pytest.mark.parametrize(
    "text, args, says",
    [
        (TUNING, ["--no-wait"], "run_job.py: error: --report-dir is for a tuning job followed to its end"),
        (TUNING, ["--local"], "run_job.py: error: --report-dir is for a tuning job followed to its end"),
        (CUSTOM, [], "--report-dir: {dir}: a CustomJob writes no study report when it ends; allowed:"),
        (CUSTOM, ["--dry-run"], "--report-dir: {dir}: a CustomJob writes no study report when it ends"),
    ],
    ids=["no-wait", "local", "custom-job", "custom-job-dry-run"],
)
def test_report_dir_is_only_for_a_followed_tuning_job(vertex, tmp_path, write_job, capsys, text, args, says):
    job = write_job(text)
    folder = tmp_path / "r"
    rc, out, err = run_cli([job, "--report-dir", folder, *args], factory=vertex.factory(tmp_path))
    assert rc == 2
    assert (err or capsys.readouterr().err).strip().startswith(says.format(dir=folder))
    assert not vertex.fake.created()
