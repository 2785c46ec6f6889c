"""`run_job.py batch-predict`: MODEL@ALIAS parsing, the BatchPredictionJob request (--dry-run prints what the
submit sends), submitting and following it against the fake Vertex AI, bad input (one line, exit 2,
nothing sent or written), and --local: the server on a toy SavedModel, JSONL streamed through it in
batches, Vertex AI's output layout with refused instances in the errors file."""

from __future__ import annotations

import json
import os
import re
from datetime import datetime, timezone
from pathlib import Path

import pytest

from jobs.definition.model_registry import RegistryError, parse_model_ref
from tests.jobs.fake_vertex import FakeVertex, FakeVertexServer
from tests.jobs.helpers import OUTPUTS, run_cli
from tests.serving.helpers import export_toy

pytestmark = pytest.mark.usefixtures("no_poll_sleep")
MODEL = "projects/demo-project/locations/us-central1/models/recommender"
ARGS = ["batch-predict", "recommender@production", "--input", "gs://demo-project-data/users/*.jsonl",
        "--output", "gs://demo-project-models/batch/", "--signature", "top_k"]


@pytest.mark.parametrize("text, expected", [
    ("recommender@production", ("recommender", "production")),
    ("census_v2@default", ("census_v2", "default")),
    ("recommender@3", ("recommender", "3")),
    ("recommender", None),
    ("recommender@", None),
    ("@production", None),
    ("Recommender@production", None),
    ("recommender@Production", None),
    ("recommender@prod@x", None),
    ("recommender@0", None),
    ("recommender@-x", None),
    ("projects/p/locations/r/models/recommender@production", None),
    ("x" * 100_000 + "@production", None),
])
def test_parse_model_ref(text, expected):
    if expected is not None:
        assert parse_model_ref(text) == expected
        return
    with pytest.raises(RegistryError) as refused:
        parse_model_ref(text)
    line = str(refused.value)
    assert line.startswith("MODEL@ALIAS: ") and "allowed: <model id>@<alias or version id>" in line
    assert len(line) < 600 and "\n" not in line


def test_dry_run_prints_the_request(cli):
    rc, out, err = cli([*ARGS, "--machine-type", "n1-highmem-8", "--starting-replica-count", "2",
                        "--max-replica-count", "5", "--batch-size", "100", "--dry-run"])
    assert rc == 0, err
    request = json.loads(out)
    label = request["batchPredictionJob"]["labels"].pop("submission_hash")
    assert request == {
        "parent": "projects/demo-project/locations/us-central1",
        "batchPredictionJob": {
            "displayName": "recommender-production-batch-20260102-030405",
            "model": f"{MODEL}@production",
            "inputConfig": {"instancesFormat": "jsonl",
                            "gcsSource": {"uris": ["gs://demo-project-data/users/*.jsonl"]}},
            "outputConfig": {"predictionsFormat": "jsonl",
                             "gcsDestination": {"outputUriPrefix": "gs://demo-project-models/batch/"}},
            "dedicatedResources": {"machineSpec": {"machineType": "n1-highmem-8"},
                                   "startingReplicaCount": 2, "maxReplicaCount": 5},
            "manualBatchTuningParameters": {"batchSize": 100},
            "serviceAccount": OUTPUTS["runtime_service_account"],
            "labels": {"model": "recommender"},
            "modelParameters": {"signature": "top_k"},
        },
    }
    assert err.splitlines() == [
        "plan (not executed):",
        f"  reuse the newest live BatchPredictionJob labelled submission_hash={label}, if one exists",
        "  otherwise create the BatchPredictionJob (the model version's own serving container)",
        "  follow it until it ends"]


def _label(argv, now=None) -> str:
    rc, out, err = run_cli([*argv, "--dry-run"], **({} if now is None else {"now": now}))
    assert rc == 0, err
    return json.loads(out)["batchPredictionJob"]["labels"]["submission_hash"]


def test_the_submission_label_is_the_request_but_its_time():
    label = _label(ARGS)
    assert re.fullmatch(r"[a-z0-9]{16}", label)  # a label value: lowercase, at most 63 characters
    # A retry later (another display name) is the same submission...
    assert _label(ARGS, now=datetime(2026, 3, 4, 5, 6, 7, tzinfo=timezone.utc)) == label
    # ...anything else the job does is another.
    others = [_label([*ARGS[:5], "gs://demo-project-models/batch2/", *ARGS[6:]]),
              _label(["batch-predict", "recommender@3", *ARGS[2:]]),
              _label([*ARGS[:-1], "serving_default"]),
              _label([*ARGS, "--input", "gs://demo-project-data/more/*.jsonl"]),
              _label([*ARGS, "--batch-size", "32"])]
    assert len({label, *others}) == 6


def _fake_with_model() -> FakeVertex:
    fake = FakeVertex()
    fake.add_version(MODEL, "gs://demo-project-models/recommender/1/model")
    version = fake.add_version(MODEL, "gs://demo-project-models/recommender/2/model")
    version["versionAliases"].append("production")
    return fake


def test_submit_creates_the_dry_runs_request_and_follows_it(cli, tmp_path):
    _, printed, _ = cli([*ARGS, "--dry-run"])
    fake = _fake_with_model()
    with FakeVertexServer(fake) as server:
        rc, out, err = cli(ARGS, factory=server.factory(tmp_path))
    assert rc == 0, err
    (created,) = [r for r in fake.requests if r.method == "POST"]
    assert created.path == "/v1/projects/demo-project/locations/us-central1/batchPredictionJobs"
    assert created.body == json.loads(printed)["batchPredictionJob"]
    name = "projects/demo-project/locations/us-central1/batchPredictionJobs/7000"
    assert f"created {name}" in out and "batch-predictions/7000?project=demo-project" in out
    assert "JOB_STATE_PENDING" in out and "JOB_STATE_SUCCEEDED" in out
    assert "output: gs://demo-project-models/batch/prediction-recommender-2026-01-02T03:04:05Z" in out


BATCH_JOBS = "/v1/projects/demo-project/locations/us-central1/batchPredictionJobs"


def test_a_retry_reuses_the_live_job_and_creates_none(cli, tmp_path):
    """The first submit lost its terminal after creating the job (--no-wait stands in for it): the same
    command again follows that job instead of creating a second one."""
    fake = _fake_with_model()
    with FakeVertexServer(fake) as server:
        rc, out, err = cli([*ARGS, "--no-wait"], factory=server.factory(tmp_path))
        assert rc == 0, err
        (name,) = fake.batch.jobs
        label = fake.batch.jobs[name]["labels"]["submission_hash"]
        rc, out, err = cli(ARGS, factory=server.factory(tmp_path))
    assert rc == 0, err
    assert [r.path for r in fake.requests if r.method == "POST"] == [BATCH_JOBS]
    assert out.splitlines()[0] == (
        f"reusing {name}: same submission (submission_hash={label}) is already JOB_STATE_PENDING")
    assert "created" not in out and "JOB_STATE_SUCCEEDED" in out
    assert "output: gs://demo-project-models/batch/prediction-recommender-2026-01-02T03:04:05Z" in out
    listed = [r for r in fake.requests if r.method == "GET" and r.path == BATCH_JOBS][-1]
    assert listed.query["filter"] == [f'labels.submission_hash="{label}"']


def test_the_newest_live_job_is_reused(cli, tmp_path):
    """Two live jobs of one submission (two created at once, before either was listed): the newest is taken,
    whatever order the list gives them in."""
    _, printed, _ = cli([*ARGS, "--dry-run"])
    body = json.loads(printed)["batchPredictionJob"]
    fake = _fake_with_model()
    for job_id, created in (("11", "2026-01-02T03:05:00Z"), ("10", "2026-01-02T03:04:00Z")):
        fake.batch.jobs[f"{BATCH_JOBS[4:]}/{job_id}"] = {
            **body, "name": f"{BATCH_JOBS[4:]}/{job_id}", "state": "JOB_STATE_RUNNING", "createTime": created}
    with FakeVertexServer(fake) as server:
        rc, out, err = cli([*ARGS, "--no-wait"], factory=server.factory(tmp_path))
    assert rc == 0, err
    assert out.startswith(f"reusing {BATCH_JOBS[4:]}/11: ") and "is already JOB_STATE_RUNNING" in out
    assert [r for r in fake.requests if r.method == "POST"] == []


@pytest.mark.parametrize("ended", ["JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED"])
def test_an_ended_job_of_the_same_submission_does_not_block_a_new_one(ended, cli, tmp_path):
    fake = _fake_with_model()
    with FakeVertexServer(fake) as server:
        cli([*ARGS, "--no-wait"], factory=server.factory(tmp_path))
        (first,) = fake.batch.jobs.values()
        first["state"] = ended
        rc, out, err = cli([*ARGS, "--no-wait"], factory=server.factory(tmp_path))
    assert rc == 0, err
    assert [r.path for r in fake.requests if r.method == "POST"] == [BATCH_JOBS] * 2
    assert out.startswith(f"created {BATCH_JOBS[4:]}/7001\n") and "reusing" not in out


def test_follow_an_existing_job_to_its_end(cli, tmp_path):
    fake = _fake_with_model()
    with FakeVertexServer(fake) as server:
        cli([*ARGS, "--no-wait"], factory=server.factory(tmp_path))
        (name,) = fake.batch.jobs
        rc, out, err = cli(["batch-predict", "--follow", name], factory=server.factory(tmp_path))
    assert rc == 0, err
    assert [r.method for r in fake.requests].count("POST") == 1
    assert out.splitlines()[:2] == [f"following {name}",
                                    "  console: https://console.cloud.google.com/vertex-ai/locations/"
                                    "us-central1/batch-predictions/7000?project=demo-project"]
    assert "JOB_STATE_RUNNING" in out and "JOB_STATE_SUCCEEDED" in out
    assert out.splitlines()[-1] == (
        "output: gs://demo-project-models/batch/prediction-recommender-2026-01-02T03:04:05Z "
        "(610 predictions, 0 errors)")


def test_follow_a_job_that_fails(cli, tmp_path):
    fake = _fake_with_model()
    fake.batch.states = ["JOB_STATE_RUNNING", "JOB_STATE_FAILED"]
    with FakeVertexServer(fake) as server:
        cli([*ARGS, "--no-wait"], factory=server.factory(tmp_path))
        (name,) = fake.batch.jobs
        rc, out, err = cli(["batch-predict", "--follow", name], factory=server.factory(tmp_path))
    assert rc == 1 and err == f"{name} ended JOB_STATE_FAILED: the serving container exited\n"


def test_follow_a_job_that_does_not_exist_is_one_line(cli, tmp_path):
    name = f"{BATCH_JOBS[4:]}/404"
    with FakeVertexServer(_fake_with_model()) as server:
        rc, out, err = cli(["batch-predict", "--follow", name], factory=server.factory(tmp_path))
    assert rc == 1 and out == "" and len(err.splitlines()) == 1 and "NotFound" in err, err


@pytest.mark.parametrize("argv, expected", [
    (["--follow", "projects/demo-project/locations/us-central1/customJobs/7000"],
     "batch-predict: --follow: 'projects/demo-project/locations/us-central1/customJobs/7000' is not a batch "
     "prediction job's resource name; allowed: projects/<project>/locations/<region>/batchPredictionJobs/"
     "<numeric id>"),
    (["--follow", "projects/demo-project/locations/us-central1/batchPredictionJobs/../7000"],
     "is not a batch prediction job's resource name"),
    (["--follow", "batchPredictionJobs/7000"], "is not a batch prediction job's resource name"),
    (["--follow", "projects/p/locations/r/batchPredictionJobs/1" + "1" * 100_000],
     "is not a batch prediction job's resource name"),
    (["--follow", "projects/p/locations/r/batchPredictionJobs/1\x1b[2J"],
     "is not a batch prediction job's resource name"),
    (["recommender@production", "--follow", "projects/p/locations/r/batchPredictionJobs/1"],
     "MODEL@ALIAS is for a new job, not with --follow"),
    (["--output", "gs://b/o/", "--follow", "projects/p/locations/r/batchPredictionJobs/1"],
     "--output is for a new job, not with --follow"),
    (["--follow", "projects/p/locations/r/batchPredictionJobs/1", "--dry-run"], "not allowed with"),
    (["--follow", "projects/p/locations/r/batchPredictionJobs/1", "--machine-type", "n1-standard-8"],
     "--machine-type is for a new job, not with --follow"),
    (["--follow", "projects/p/locations/r/batchPredictionJobs/1", "--env", "prod"],
     "--env is for a new job, not with --follow"),
    (["--follow", "projects/p/locations/r/batchPredictionJobs/1", "--signature", "top_k"],
     "--signature is for a new job, not with --follow"),
    (["--input", "gs://b/a.jsonl", "--output", "gs://b/o/"],
     "the following arguments are required: MODEL@ALIAS"),
    (["recommender@production", "--output", "gs://b/o/"], "the following arguments are required: --input"),
])
def test_bad_follow_is_one_line_and_nothing_is_sent(argv, expected, cli, tmp_path, capsys):
    fake = _fake_with_model()
    with FakeVertexServer(fake) as server:
        rc, out, err = cli(["batch-predict", *argv], factory=server.factory(tmp_path))
    err += capsys.readouterr().err  # argparse writes to sys.stderr itself
    assert rc == 2 and out == "", err
    assert len(err.splitlines()) == 1 and expected in err and len(err) < 700, err
    assert fake.requests == []


@pytest.mark.parametrize("case", ["unknown-alias", "failed", "no-wait"])
def test_submit_outcomes(case, cli, tmp_path):
    fake = _fake_with_model()
    args = list(ARGS)
    if case == "unknown-alias":
        args[1] = "recommender@staging"
    elif case == "failed":
        fake.batch.states = ["JOB_STATE_RUNNING", "JOB_STATE_FAILED"]
    else:
        args.append("--no-wait")
    with FakeVertexServer(fake) as server:
        rc, out, err = cli(args, factory=server.factory(tmp_path))
    if case == "unknown-alias":
        assert rc == 1 and len(err.splitlines()) == 1 and "recommender@staging" in err and "not found" in err
    elif case == "failed":
        assert rc == 1 and "ended JOB_STATE_FAILED: the serving container exited" in err
    else:
        assert rc == 0 and "created" in out and "JOB_STATE" not in out
        assert list(fake.batch.polls.values()) == [0]


@pytest.mark.parametrize("args, path, expected", [
    (["batch-predict", "recommender"], "MODEL@ALIAS", "'recommender' is not a registry model and alias"),
    (["batch-predict", "recommender@Prod"], "MODEL@ALIAS", "is not a registry model and alias"),
    (["--input", "gs://demo-project-data/users/part.csv"], "--input", "is not a JSONL file in Cloud Storage"),
    (["--input", "/tmp/users.jsonl"], "--input", "is not a JSONL file"),
    (["--input", "gs://demo-project-data/../users.jsonl"], "--input", "is not a JSONL file"),
    (["--output", "/tmp/out/"], "--output", "is not a Cloud Storage folder"),
    (["--output", "gs://demo-project-models/a/../b/"], "--output", "is not a Cloud Storage folder"),
    (["--machine-type", "n1-standard-5"], "--machine-type", "unknown machine type 'n1-standard-5'"),
    (["--machine-type", "ct5lp-hightpu-4t"], "--machine-type", "is a TPU machine"),
    (["--starting-replica-count", "0"], "--starting-replica-count", "0"),
    (["--max-replica-count", "0"], "--max-replica-count", "0 is below --starting-replica-count 1"),
    (["--batch-size", "1001"], "--batch-size", "1001"),
    (["--signature", "top k"], "--signature", "'top k' is not a signature name"),
])
def test_bad_input_is_one_line_and_nothing_is_sent(args, path, expected, cli, tmp_path):
    argv = list(ARGS)
    if args[0] == "batch-predict":
        argv[:2] = args
    else:
        argv += args
    fake = _fake_with_model()
    with FakeVertexServer(fake) as server:
        rc, out, err = cli(argv, factory=server.factory(tmp_path))
    assert rc == 2 and out == "", err
    assert len(err.splitlines()) == 1 and err.startswith(f"batch-predict: {path}: "), err
    assert expected in err.split("; allowed: ")[0] and "; allowed: " in err
    assert fake.requests == []


# --- --local ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return export_toy(tmp_path_factory.mktemp("toy") / "model")


def _local(cli, model, root: Path, *extra):
    return cli(["batch-predict", str(model), "--local", "--local-root", str(root), "--input",
                "gs://data/in/*.jsonl", "--output", "gs://out/batch/", *extra])


def _write(root: Path, name: str, text: str | bytes) -> Path:
    path = root / "gs" / "data" / "in" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


@pytest.mark.parametrize("case", ["not-json", "nan", "long-line", "fifo", "no-match", "output-file",
                                  "output-under-file", "model-missing", "outside-root"])
def test_local_bad_input_is_one_line_and_nothing_is_written(case, cli, tmp_path):
    root = tmp_path / "local"
    model = tmp_path / "model"
    (model / "variables").mkdir(parents=True)
    (model / "saved_model.pb").write_bytes(b"")
    _write(root, "a.jsonl", '{"x": 1, "name": "a"}\n')
    extra = []
    if case == "not-json":
        _write(root, "b.jsonl", '{"x": 1}\n{"x": 2,\n')
        expected = "--input: " + str(root / "gs/data/in/b.jsonl") + " line 2 is not JSON"
    elif case == "nan":
        _write(root, "b.jsonl", '{"x": NaN}\n')
        expected = "--input: " + str(root / "gs/data/in/b.jsonl") + " line 1 is not JSON"
    elif case == "long-line":
        _write(root, "b.jsonl", b'{"x": 1}\n{"name": "' + b"a" * 3_000_000 + b'"}\n')
        expected = "--input: " + str(root / "gs/data/in/b.jsonl") + " line 2 is over 1,499,"
    elif case == "fifo":
        os.mkfifo(root / "gs/data/in/b.jsonl")  # never opened: a read would block
        expected = "--input: " + str(root / "gs/data/in/b.jsonl") + " is a FIFO"
    elif case == "no-match":
        extra = ["--input", "gs://data/none/*.jsonl"]
        expected = "--input: 'gs://data/none/*.jsonl' matches no file"
    elif case == "output-file":
        (root / "gs/out").mkdir(parents=True)
        (root / "gs/out/batch").write_text("a file")
        expected = f"--output: {root / 'gs/out/batch'} is a file"
    elif case == "output-under-file":
        (root / "gs/out").mkdir(parents=True)
        (root / "gs/out/batch").write_text("a file")
        extra = ["--output", "gs://out/batch/deeper/"]
        expected = f"--output: {root / 'gs/out/batch/deeper'} lies under a file"
    elif case == "model-missing":
        model = tmp_path / "nothing"
        expected = f"MODEL_DIR: {model}: no such file or directory"
    else:
        (root / "gs").mkdir(parents=True, exist_ok=True)
        (root / "gs" / "out").symlink_to(tmp_path)
        expected = "--output: "
    rc, out, err = _local(cli, model, root, *extra)
    assert rc == 2 and out == "", err
    assert len(err.splitlines()) == 1 and err.startswith(f"batch-predict: {expected}"), err
    assert "; allowed: " in err or "--local writes only under it" in err
    assert not list(root.glob("gs/out/**/prediction-*")) and not list(tmp_path.glob("prediction-*"))


def test_local_streams_through_the_server_in_vertex_layout(cli, toy, tmp_path):
    root = tmp_path / "local"
    first = [{"x": float(i), "name": f"u{i}"} for i in range(5)]
    first[3] = {"x": "three", "name": "u3"}  # the server refuses this instance, and only it
    _write(root, "a.jsonl", "".join(json.dumps(i) + "\n" for i in first) + "\n")
    _write(root, "b.jsonl", json.dumps({"x": 10.5, "name": "v"}))  # no newline at the end
    rc, out, err = _local(cli, toy, root, "--batch-size", "2")
    assert rc == 0, err
    assert "6 instances: 5 predictions, 1 errors" in out.splitlines()[-1]
    (folder,) = (root / "gs/out/batch").iterdir()
    assert folder.name.startswith("prediction-model-")
    assert sorted(p.name for p in folder.iterdir()) == [
        "prediction.errors_stats-00000-of-00002", "prediction.errors_stats-00001-of-00002",
        "prediction.results-00000-of-00002", "prediction.results-00001-of-00002",
    ]

    def lines(name):
        return [json.loads(line) for line in (folder / name).read_text().splitlines()]

    results = lines("prediction.results-00000-of-00002")
    assert [r["instance"] for r in results] == [first[0], first[1], first[2], first[4]]  # input order
    assert [r["prediction"]["double"] for r in results] == [0.0, 2.0, 4.0, 8.0]
    assert [r["prediction"]["name"] for r in results] == ["u0", "u1", "u2", "u4"]
    (error,) = lines("prediction.errors_stats-00000-of-00002")
    assert error["instance"] == first[3] and error["error"]["status"] == "INVALID_ARGUMENT"
    assert "x" in error["error"]["message"]
    assert lines("prediction.results-00001-of-00002") == [
        {"instance": {"x": 10.5, "name": "v"}, "prediction": {"double": 21.0, "name": "v", "batch": 1}}
    ]  # alone in its request: the server batches concurrent requests, and the first file's were done
    assert lines("prediction.errors_stats-00001-of-00002") == []


@pytest.mark.parametrize("args", [["--help"], [*ARGS[1:], "--dry-run"]])
def test_help_and_dry_run_are_light(args, script_env):
    from tests.scripts.test_run_job import heavy_modules, probe

    result = probe(["batch-predict", *args], script_env)
    assert result.returncode == 0, result.stderr
    assert heavy_modules(result.stderr) == ""


@pytest.mark.parametrize("extra, expected", [
    (["--local", "--machine-type", "n1-standard-8"],
     "--machine-type is for a job on Vertex AI, not with --local"),
    (["--local", "--env", "prod"], "--env is for a job on Vertex AI, not with --local"),
    (["--local-root", "/tmp"], "--local-root is for --local"),
])
def test_flags_of_the_other_mode_are_refused(extra, expected, cli, capsys):
    rc, out, err = cli([*ARGS, *extra])
    err += capsys.readouterr().err  # argparse writes to sys.stderr itself
    assert rc == 2 and out == ""
    assert err.splitlines() == [f"run_job.py batch-predict: error: {expected} (see --help)"]


def test_a_padded_line_over_the_limit_is_refused_by_its_length(cli, tmp_path):
    root = tmp_path / "local"
    model = tmp_path / "model"
    (model / "variables").mkdir(parents=True)
    (model / "saved_model.pb").write_bytes(b"")
    # Whitespace the line's JSON does not need still makes it more than a request may carry.
    _write(root, "a.jsonl", b'{"x": 1}\n' + b" " * 2_000_000 + b'{"x": 2}\n{"x": 3}\n')
    rc, out, err = _local(cli, model, root)
    assert rc == 2 and " line 2 is over 1,499," in err, err


def test_local_refuses_a_signature_the_model_lacks_before_writing(cli, toy, tmp_path):
    root = tmp_path / "local"
    _write(root, "a.jsonl", '{"x": 1, "name": "a"}\n')
    rc, out, err = _local(cli, toy, root, "--signature", "top_k")
    assert rc == 2, err
    assert err.splitlines() == ["batch-predict: --signature: the model has no signature 'top_k'; allowed: "
                                "serving_default, sum"]
    assert not (root / "gs/out").exists()
