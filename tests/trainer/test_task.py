"""End to end: ``python -m trainer.task`` in a subprocess, as Vertex AI runs it, on a slice of census data."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys

import pytest

from tests.serving.helpers import serving
from tests.trainer.helpers import (
    REPO_ROOT,
    error_lines,
    run_trainer,
    run_trainers,
    subprocess_env,
    trainer_args,
)

pytestmark = [pytest.mark.training, pytest.mark.timeout(240)]

BAD_ROW = ("39, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family, White, Male, "
           "oops, 0, 40, United-States, <=50K")
# Parses (it fits int64) but is no age: it would train silently and skew the normalisation statistics.
IMPLAUSIBLE_ROW = BAD_ROW.replace("39,", "-9000000000000000000,").replace("oops", "0")

# Reloads each SavedModel in a fresh interpreter and scores raw adult.test rows in its format.
SCORE = REPO_ROOT / "tests" / "trainer" / "score_saved_model.py"


@pytest.fixture(scope="module")
def runs(tmp_path_factory, census_slice) -> dict:
    """The module's trainings. The Vertex-style run has a process of its own (Vertex AI's environment),
    started first so its single-threaded parts (TensorFlow import, data scan, export) overlap with the rest:
    the CSV and EXAMPLE runs and the three runs the trainer refuses or stops (``stopped``, below) one after
    another in ONE other process (cli_batch: TensorFlow imported once, not five times). "vertex", "csv" and
    "example" are (root, CompletedProcess, extra); "stopped" is {case: (job dir, bad data file or None,
    CompletedProcess)}."""
    roots = {name: tmp_path_factory.mktemp(name) for name in ("vertex", "csv", "example")}
    # Vertex-style run: AIP_* directories, a tuning trial id and metric file, no --job-dir.
    vertex = roots["vertex"]
    vertex_env = subprocess_env(
        AIP_MODEL_DIR=str(vertex / "out/7/model"), AIP_CHECKPOINT_DIR=str(vertex / "out/7/checkpoints"),
        AIP_TENSORBOARD_LOG_DIR=str(vertex / "out/7/logs"), CLOUD_ML_TRIAL_ID="7",
        CLOUD_ML_HP_METRIC_FILE=str(vertex / "hypertune/output.metrics"))
    # A training file with one malformed and one implausible row, allowed by --max-bad-rows.
    lines = census_slice["train"].read_text().split("\n")
    lines.insert(99, BAD_ROW)
    lines.insert(1499, IMPLAUSIBLE_ROW)
    bad = roots["csv"] / "with-bad-row.data"
    bad.write_text("\n".join(lines))
    stopping = {}
    for case in STOPPING:
        folder = tmp_path_factory.mktemp(case)
        stopping[case] = (folder / "job", *_stopping_run(census_slice, case, folder))
    batch = {
        "csv": trainer_args({"train": bad, "eval": census_slice["eval"]}, roots["csv"] / "job",
                            "--export-format", "csv", "--max-bad-rows", "2"),
        "example": trainer_args(census_slice, roots["example"] / "job", "--num-epochs", "1",
                                "--export-format", "EXAMPLE"),
        **{case: args for case, (_, args, _) in stopping.items()},
    }
    vertex_args = trainer_args(census_slice, None, "--num-epochs", "3", "--hypertune-metric", "auc",
                               "--first_layer_size=32", "--num_layers=2", "--export-format", "JSON")
    proc = subprocess.Popen(vertex_args, cwd=REPO_ROOT, env=vertex_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        outs = run_trainers(batch, tmp_path_factory.mktemp("runs"))
        stdout, stderr = proc.communicate(timeout=200)
    finally:
        if proc.poll() is None:  # a failed or timed-out batch: leave no trainer behind
            proc.kill()
            proc.wait()
    done = {"vertex": subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr), **outs}
    for name in ("vertex", "csv", "example"):
        assert done[name].returncode == 0, f"{name}: {done[name].stderr[-3000:]}"
    return {"vertex": (vertex, done["vertex"], None), "csv": (roots["csv"], done["csv"], bad),
            "example": (roots["example"], done["example"], None),
            "stopped": {case: (job, expected, done[case]) for case, (job, _, expected) in stopping.items()}}


@pytest.fixture(scope="module")
def example_run(runs):
    return runs["example"][0]


@pytest.fixture(scope="module")
def predictions(json_run, csv_run, example_run, census_slice) -> dict[str, dict]:
    """Every exported model, reloaded in one fresh process and fed raw adult.test rows in its format."""
    models = {"JSON": json_run[0] / "out/7/model", "CSV": csv_run[0] / "job/model",
              "EXAMPLE": example_run / "job/model"}
    args = [str(census_slice["eval"])] + [x for fmt, path in models.items() for x in (str(path), fmt)]
    out = subprocess.run([sys.executable, str(SCORE), *args], cwd=REPO_ROOT, env=subprocess_env(),
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    scores = json.loads(out.stdout.strip().splitlines()[-1])
    return {fmt: {**scores[fmt], "eval": json.loads((path / "metrics.json").read_text())["eval"]}
            for fmt, path in models.items()}


@pytest.mark.parametrize("fmt, inputs", [("JSON", None), ("CSV", ["csv_row"]), ("EXAMPLE", ["examples"])])
def test_export_reloaded_predicts_like_evaluate(predictions, fmt, inputs):
    got = predictions[fmt]
    assert got["accuracy"] == pytest.approx(got["eval"]["accuracy"], abs=1e-3)
    assert got["auc"] == pytest.approx(got["eval"]["auc"], abs=1e-3)
    assert got["class_ids_match"] and got["probability_is_the_labels"]
    assert set(got["labels"]) <= {"<=50K", ">50K"}
    if inputs is None:  # JSON: one named input per raw feature column
        assert "capital_gain" in got["signature_inputs"] and len(got["signature_inputs"]) == 14
    else:
        assert got["signature_inputs"] == inputs


@pytest.fixture(scope="module")
def json_run(runs):
    return runs["vertex"][:2]


@pytest.fixture(scope="module")
def csv_run(runs):
    return runs["csv"]


def test_outputs_follow_aip_variables(json_run):
    root, _ = json_run
    model = root / "out/7/model"
    assert (model / "saved_model.pb").is_file() and (model / "variables").is_dir()
    assert list((root / "out/7/logs").rglob("events.out.tfevents.*"))
    assert not (root / "out/7/checkpoints" / "training_metadata.json").exists()  # backup removed when done
    config = json.loads((model / "trainer_config.json").read_text())
    assert (config["task"]["first_layer_size"], config["task"]["num_layers"], config["hypertune_metric"]) == (
        32, 2, "auc")
    from trainer.config import config_from_json  # the saved config reads back into the run's settings
    assert config_from_json((model / "trainer_config.json").read_text()).task.first_layer_size == 32


def test_hypertune_metric_file_is_what_vertex_reads(json_run):
    root, _ = json_run
    records = [json.loads(line) for line in (root / "hypertune/output.metrics").read_text().splitlines()]
    assert [r["global_step"] for r in records] == ["1", "2", "3"]
    history = json.loads((root / "out/7/model/metrics.json").read_text())["history"]
    for record, epoch in zip(records, history, strict=True):
        assert set(record) >= {"auc", "global_step", "timestamp", "trial"}
        assert record["trial"] == "7"
        assert isinstance(record["auc"], str) and float(record["auc"]) == pytest.approx(epoch["val_auc"])


def test_tensorboard_scalars_and_hparams(json_run):
    tf = pytest.importorskip("tensorflow")
    root, _ = json_run
    logs = root / "out/7/logs"
    tags: dict[str, set] = {}
    plugins = set()
    hparams_text = b""
    for path in logs.rglob("events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                run = path.parent.name
                tags.setdefault(run, set()).add((value.tag, event.step))
                plugins.add(value.metadata.plugin_data.plugin_name)
                hparams_text += value.metadata.plugin_data.content
    for run in ("train", "validation"):
        assert {("epoch_accuracy", s) for s in range(3)} <= tags[run]
        assert {("epoch_auc", s) for s in range(3)} <= tags[run]
    pytest.importorskip("tensorboard", reason="tensorboard not installed: the trainer skips HParams")
    assert "hparams" in plugins
    assert b"first_layer_size" in hparams_text and b"learning_rate" in hparams_text


def test_skipped_rows_are_reported(csv_run):
    root, out, bad = csv_run
    assert f"skipped 2 bad row(s) (1 malformed, 1 implausible): {bad}:100:" in out.stderr
    report = json.loads((root / "job/model/metrics.json").read_text())
    assert report["data"]["train"]["rows"] == 2000
    assert report["data"]["train"]["skipped_rows"] == [
        f"{bad}:100: malformed row: field 'capital_gain': 'oops' is not an integer",
        f"{bad}:1500: implausible value: field 'age': -9000000000000000000 is outside the plausible range "
        "0..150"]
    assert report["data"]["train"]["skipped"] == {"malformed": 1, "implausible": 1}
    assert report["data"]["eval"]["skipped"] == {"malformed": 0, "implausible": 0}


@pytest.mark.parametrize("extra, names", [
    (["--model", "resnet"], "--model"),
    (["--train-batch-size", "-8"], "--train-batch-size"),
    (["--num-layers", "0"], "--num-layers"),
    (["--export-format", "XML"], "--export-format"),
])
def test_bad_flags_exit_2_with_one_line(tmp_path, census_slice, extra, names):
    out = run_trainer(trainer_args(census_slice, tmp_path / "job", *extra), timeout=60)
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and names in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "job").exists()


def test_missing_data_file(tmp_path, census_slice):
    args = trainer_args({"train": tmp_path / "nope.data", "eval": census_slice["eval"]}, tmp_path / "job")
    out = run_trainer(args, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip() == f"trainer.task: error: --train-files: no such file: {tmp_path / 'nope.data'}"
    assert not (tmp_path / "job").exists()


STOPPING = ["malformed", "implausible", "diverged"]


def _stopping_run(census_slice, case: str, folder) -> tuple[list[str], object]:
    """A run the trainer refuses or stops, its files under ``folder`` (job dir folder/job): (command line, the
    bad data file or None)."""
    job = folder / "job"
    if case == "malformed":
        lines = census_slice["eval"].read_text().split("\n")
        lines.insert(41, "45, Private, 1, 2, 3")
        bad = folder / "bad.test"
        bad.write_text("\n".join(lines))
        return trainer_args({"train": census_slice["train"], "eval": bad}, job), bad
    if case == "implausible":
        lines = census_slice["train"].read_text().split("\n")
        lines.insert(1233, IMPLAUSIBLE_ROW)
        bad = folder / "implausible.data"
        bad.write_text("\n".join(lines))
        return trainer_args({"train": bad, "eval": census_slice["eval"]}, job), bad
    # A learning rate this large (finite, so accepted) overflows the weights within two Adam steps: the loss
    # turns NaN. Keras alone would train on and the trainer would export the NaN model with exit status 0.
    return trainer_args(census_slice, job, "--learning-rate", "1e10"), None


@pytest.fixture(scope="module")
def stopped(runs) -> dict[str, tuple]:
    """The three runs below, from the module's batch (``runs``): {case: (job dir, bad data file or None,
    CompletedProcess)}."""
    return runs["stopped"]


def test_malformed_row_stops_before_writing(stopped):
    job, bad, out = stopped["malformed"]
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert error_lines(out.stderr) == [
        f"trainer.task: error: {bad}:42: malformed row: expected 15 fields, got 5 "
        "(use --max-bad-rows N to skip up to N malformed or implausible rows)"]
    assert not job.exists()


def test_implausible_value_stops_before_writing(stopped):
    job, bad, out = stopped["implausible"]
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert error_lines(out.stderr) == [
        f"trainer.task: error: {bad}:1234: implausible value: field 'age': -9000000000000000000 is outside "
        "the plausible range 0..150 (use --max-bad-rows N to skip up to N malformed or implausible rows)"]
    assert not job.exists()


def test_diverged_training_exits_1_and_exports_nothing(stopped):
    job, _, out = stopped["diverged"]
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-3000:]
    errors = error_lines(out.stderr)
    assert len(errors) == 1 and re.fullmatch(
        r"trainer\.task: error: training diverged: the training loss is nan at epoch 1/2, step \d+; nothing "
        r"was exported \(lower --learning-rate or check the data\)", errors[0]), out.stderr[-3000:]
    assert not (job / "model").exists()
    assert "epoch 1/2" not in out.stderr.replace(errors[0], "")  # the diverged epoch was never logged


def test_bad_tf_config(tmp_path, census_slice):
    out = run_trainer(trainer_args(census_slice, tmp_path / "job"), env=subprocess_env(TF_CONFIG="{oops"),
                      timeout=60)
    assert out.returncode == 2 and out.stderr.strip().startswith("trainer.task: error: environment variable "
                                                                 "TF_CONFIG: not valid JSON")


# --- the JSON export served over HTTP (serving/), started with `run_job.py serve` as a user does ---------

RUN_JOB = REPO_ROOT / "scripts" / "run_job.py"


@pytest.fixture(scope="module")
def census_server(json_run, tmp_path_factory):
    """One server for the module's serving tests; leaving it sends Ctrl-C's SIGINT to run_job.py and its
    server, which must stop cleanly."""
    command = [sys.executable, str(RUN_JOB), "serve", str(json_run[0] / "out/7/model"), "--port", "0"]
    with serving(command, log_dir=tmp_path_factory.mktemp("serve"), stop=signal.SIGINT) as server:
        yield server


def census_instances(path) -> tuple[list[dict], list[str]]:
    """The raw rows of an adult.* file (as score_saved_model.py reads them) as JSON instances, and labels."""
    from trainer.models.census.data import SCHEMA

    lines = [line for line in path.read_text().splitlines() if line.strip() and not line.startswith("|")]
    rows = [[field.strip() for field in line.split(",")] for line in lines]
    instances = [{c.name: int(v) if c.kind == "int" else v
                  for c, v in zip(SCHEMA.features, row[:14], strict=True)} for row in rows]
    return instances, [row[14].rstrip(".") for row in rows]


def test_the_served_export_predicts_as_the_saved_model_does(census_server, predictions, census_slice):
    assert census_server.loading_answers >= 1  # the health route said 503 until the model was loaded
    instances, labels = census_instances(census_slice["eval"])
    served = [p for start in range(0, len(instances), 250) for p in census_server.predictions(
        instances[start:start + 250])]
    direct = predictions["JSON"]  # the same rows through the signature in a fresh interpreter
    assert served[0]["probability"] == pytest.approx(direct["first"]["probability"], abs=1e-6)
    assert served[0]["label"] == direct["first"]["label"]
    accuracy = sum(p["label"] == label for p, label in zip(served, labels, strict=True)) / len(labels)
    assert len(served) == direct["rows"] and accuracy == pytest.approx(direct["accuracy"], abs=1e-9)
    for p in served:
        # `probability` is the chosen label's; `scores` has each class's, in the order `classes` names them.
        assert p["classes"] == ["<=50K", ">50K"] and p["label"] == p["classes"][p["class_id"]]
        assert p["probability"] >= 0.5 and p["probability"] == p["scores"][p["class_id"]]
        assert sum(p["scores"]) == pytest.approx(1.0, abs=1e-6)
    # One instance, as Vertex AI's console sends it: the same answer as inside a batch.
    alone = census_server.predictions(instances[:1])[0]
    assert alone["probability"] == pytest.approx(served[0]["probability"], abs=1e-6)



def test_the_export_writes_an_example_request_the_served_model_answers(json_run, census_server):
    # What `run_job.py deploy` sends as its smoke prediction when given no instance.
    request = json.loads((json_run[0] / "out/7/model/example_request.json").read_text())
    assert len(request["instances"]) == 1 and len(request["instances"][0]) == 14  # every raw feature
    (prediction,) = census_server.predictions(request["instances"])
    assert prediction["label"] in ("<=50K", ">50K")
