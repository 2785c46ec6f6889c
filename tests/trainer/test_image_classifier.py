"""`python -m trainer.task --model image_classifier` end to end: flags, training on the shipped TFRecord
shards through the generic loop, the raw-bytes serving signature, and bad input (one line, exit 2, nothing
written)."""

from __future__ import annotations

import base64
import json
import re
import sys
from pathlib import Path

import pytest

from tests.helpers import subprocess_env
from tests.serving.helpers import serving
from tests.trainer.helpers import REPO_ROOT, error_lines, run_cases, run_trainer
from tests.trainer.image_helpers import (
    FLOWERS_EVAL,
    FLOWERS_TRAIN,
    encoded_images,
    png_header,
    serve_records,
)

MNIST_EVAL = str(REPO_ROOT / "data" / "mnist" / "mnist-eval.tfrecord-*")


def image_args(job_dir, *extra, train=FLOWERS_TRAIN, eval_=FLOWERS_EVAL) -> list[str]:
    return [sys.executable, "-m", "trainer.task", "--model", "image_classifier", "--train-files", train,
            "--eval-files", eval_, "--image-size", "32", "--num-epochs", "1", "--train-batch-size", "16",
            "--job-dir", str(job_dir), *extra]


def test_help_lists_the_image_flags_not_the_census_ones():
    out = run_trainer([sys.executable, "-m", "trainer.task", "--model", "image_classifier", "--help"])
    assert out.returncode == 0
    for flag in ("--image-size", "--backbone", "--base-weights", "--fine-tune", "--momentum", "--num-units",
                 "--max-bad-records", "IMAGE_BYTES"):
        assert flag in out.stdout
    assert "--embedding-size" not in out.stdout and "--max-bad-rows" not in out.stdout


@pytest.fixture(scope="module")
def flowers_run(tmp_path_factory):
    """Flowers through the generic loop under MirroredStrategy, over two logical CPU devices standing in for
    two GPUs (as `run_job.py --local` runs a two-GPU pool on this machine)."""
    job_dir = tmp_path_factory.mktemp("flowers")
    out = run_trainer(image_args(job_dir, "--augment", "flip", "--distribution", "mirrored"),
                      env=subprocess_env(TRAINER_CPU_REPLICAS="2"), timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    (job_dir / "stderr.txt").write_text(out.stderr)
    return job_dir


@pytest.mark.training
def test_a_pass_whose_last_batch_is_shorter_than_the_replicas_trains(tmp_path):
    """17 images, a global batch of 16 over two replicas: tf.distribute cut the last batch of one image into
    that image and an empty piece, BatchNorm's statistics of no images were NaN, and the job stopped as
    diverged. Every training batch is now a full global batch (trainer.train)."""
    from tests.trainer.image_helpers import write_mnist_like

    train = write_mnist_like(tmp_path / "train.tfrecord", 17)
    evaluation = write_mnist_like(tmp_path / "eval.tfrecord", 8, seed=1)
    out = run_trainer(image_args(tmp_path / "job", "--channels", "1", "--num-classes", "10", "--num-epochs",
                                 "2", "--train-batch-size", "8", "--image-size", "28", train=str(train),
                                 eval_=str(evaluation)),
                      env=subprocess_env(TRAINER_CPU_REPLICAS="2"), timeout=300)
    assert out.returncode == 0, error_lines(out.stderr)
    assert "mirrored, 2 replica(s), global batch 16" in out.stderr
    assert (tmp_path / "job" / "model" / "saved_model.pb").exists()


@pytest.mark.training
def test_flowers_trains_reports_and_exports(flowers_run):
    model = flowers_run / "model"
    metrics = json.loads((model / "metrics.json").read_text())
    # Two replicas of 16: each step's global batch of 32 is split between the logical devices.
    assert (metrics["distribution"], metrics["replicas"]) == ("mirrored", 2)
    log = (flowers_run / "stderr.txt").read_text()
    assert "strategy: mirrored, 2 replica(s), global batch 32" in log and "Reduce to" not in log
    assert set(metrics["eval"]) == {"accuracy", "loss"}  # 5 classes: no top-5 accuracy
    # Names by label index, as the records label them (roses is label 0 in these shards).
    assert sorted(metrics["data"]["classes"]) == ["daisy", "dandelion", "roses", "sunflowers", "tulips"]
    assert metrics["data"]["train"]["records"] == 80 and metrics["data"]["eval"]["records"] == 50
    config = json.loads((model / "trainer_config.json").read_text())
    assert config["model"] == "image_classifier" and config["task"]["image_size"] == 32


@pytest.fixture(scope="module")
def scored_images(flowers_run) -> dict:
    """The 50 evaluation images through the signature in a fresh interpreter (score_image_model.py)."""
    return serve_records(flowers_run / "model", FLOWERS_EVAL, limit=0)


@pytest.mark.training
def test_the_export_serves_raw_jpeg_bytes(flowers_run, scored_images):
    result = scored_images
    assert result["jpeg"] and result["inputs"] == ["image_bytes"]
    metrics = json.loads((flowers_run / "model" / "metrics.json").read_text())
    assert result["classes"] == metrics["data"]["classes"]
    for row, label in zip(result["probabilities"], result["label"], strict=True):
        assert abs(sum(row) - 1) < 1e-4
        assert label == result["classes"][max(range(5), key=row.__getitem__)]
    # The signature decodes, resizes and scales as evaluation did: raw bytes score as the trainer scored.
    # The loss is the sensitive check (a resize or scaling difference moves it by far more); it and the
    # accuracy differ only by float rounding between two replicas' batched evaluation and serving, where a
    # one-epoch model's near-equal probabilities can swap one image's class.
    assert len(result["label"]) == 50
    assert result["loss"] == pytest.approx(metrics["eval"]["loss"], rel=2e-3)
    assert result["accuracy"] == pytest.approx(metrics["eval"]["accuracy"], abs=1 / 50 + 1e-6)


# Vertex AI's routes when a Model names none (the deployed model's own path); its gs:// model copy is stood in
# by a file:// URI: the server copies any scheme:// URI with tf.io.gfile before loading, as it copies gs://.
VERTEX_ROUTES = {"AIP_HEALTH_ROUTE": "/v1/endpoints/123/deployedModels/456",
                 "AIP_PREDICT_ROUTE": "/v1/endpoints/123/deployedModels/456:predict"}


@pytest.fixture(scope="module")
def image_server(flowers_run, tmp_path_factory):
    """The export served as Vertex AI starts the container: `python -m serving` with no flags, all it
    needs from AIP_* variables; leaving it sends SIGTERM, which must stop it cleanly."""
    uri = (flowers_run / "model").as_uri() + "/"
    env = subprocess_env(AIP_STORAGE_URI=uri, AIP_HTTP_PORT="0", **VERTEX_ROUTES)
    with serving([sys.executable, "-m", "serving"], env=env, log_dir=tmp_path_factory.mktemp("serve"),
                 health_route=VERTEX_ROUTES["AIP_HEALTH_ROUTE"],
                 predict_route=VERTEX_ROUTES["AIP_PREDICT_ROUTE"]) as server:
        yield server
    copy = re.search(r"copied file://\S+ to (\S+) ", server.log.read_text())
    assert copy and not Path(copy[1]).exists()  # the local copy went with the server


@pytest.mark.training
def test_the_served_export_classifies_as_the_saved_model_does(image_server, scored_images):
    images = [base64.b64encode(image).decode() for image in encoded_images(FLOWERS_EVAL)]
    # Ten photos a request (~1.2 MB of base64, under Vertex AI's 1.5 MB), in both of Vertex AI's forms.
    instances = [{"b64": b} if i % 2 else {"image_bytes": {"b64": b}} for i, b in enumerate(images)]
    served = [p for start in range(0, len(images), 10)
              for p in image_server.predictions(instances[start:start + 10])]
    assert [p["label"] for p in served] == scored_images["label"]
    for got, expected in zip(served, scored_images["probabilities"], strict=True):
        assert got["probabilities"] == pytest.approx(expected, abs=1e-5)
        assert got["classes"] == scored_images["classes"] and got["label"] == got["classes"][got["class_id"]]


@pytest.mark.training
def test_bytes_that_are_no_image_or_a_decompression_bomb_are_400(image_server):
    status, body = image_server.predict([{"b64": base64.b64encode(b"not an image").decode()}])
    assert (status, body["field"]) == (400, "instances")
    assert body["error"].startswith("instances: the model refused them: Unknown image file format")
    bomb = base64.b64encode(png_header(30_000, 30_000)).decode()  # 900 MP declared in 33 bytes
    status, body = image_server.predict([{"b64": bomb}])
    assert (status, body["field"]) == (400, "image_bytes")
    assert "images of over 50000000 pixels" in body["error"]
    status, body = image_server.request("GET", image_server.health_route)
    assert status == 200 and body["signatures"]["serving_default"] == {
        "inputs": {"image_bytes": "string [N]"}, "outputs": ["class_id", "classes", "label", "probabilities"]}


def _not_a_tfrecord(tmp_path):
    path = tmp_path / "shard.tfrecord"
    path.write_bytes(b"this is not a TFRecord file at all, just text\n" * 4)
    return str(path)


BAD_INPUT = ["no-match", "not-a-tfrecord", "missing-weights", "weights-on-cnn", "top-k-on-5-classes",
             "grayscale-backbone"]


def _bad_input(case: str, tmp_path) -> tuple[list[str], str]:
    """A bad-input case's command line (its files under ``tmp_path``, its job dir tmp_path/job) and the start
    of the one error line it must print."""
    job = tmp_path / "job"
    train, extra = FLOWERS_TRAIN, []
    if case == "no-match":
        train = str(tmp_path / "nothing-*.tfrecord")
        expected = f"trainer.task: error: --train-files: no such file: {train}"
    elif case == "not-a-tfrecord":
        train = _not_a_tfrecord(tmp_path)
        expected = f"trainer.task: error: {train}: not a TFRecord file"
    elif case == "missing-weights":
        extra = ["--backbone", "mobilenet_v2", "--base-weights", str(tmp_path / "none.weights.h5")]
        expected = "trainer.task: error: --base-weights:"
    elif case == "weights-on-cnn":
        extra = ["--base-weights", str(tmp_path / "w.h5")]
        expected = "trainer.task: error: argument --base-weights: must be used with --backbone mobilenet_v2"
    elif case == "top-k-on-5-classes":
        extra = ["--hypertune-metric", "top_k_accuracy"]
        expected = "trainer.task: error: --hypertune-metric top_k_accuracy: top-5 accuracy needs more than 5"
    else:
        extra = ["--backbone", "resnet50", "--channels", "1"]
        expected = "trainer.task: error: argument --channels: must be 3 for --backbone resnet50"
    return image_args(job, *extra, train=train), expected


@pytest.fixture(scope="module")
def bad_input_runs(tmp_path_factory) -> dict[str, tuple]:
    """Every bad-input case run in one process (tests/trainer/cli_batch.py: TensorFlow imported once):
    {case: (job dir, expected error line start, CompletedProcess)}."""
    return run_cases(BAD_INPUT, _bad_input, tmp_path_factory)


@pytest.mark.parametrize("case", BAD_INPUT)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(case, bad_input_runs):
    job, expected, out = bad_input_runs[case]
    assert out.returncode == 2, out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    lines = error_lines(out.stderr)
    assert len(lines) == 1 and lines[0].startswith(expected), out.stderr[-2000:]
    assert not job.exists()


def test_discrete_tuning_values_reach_integer_flags():
    from trainer.config import resolve_config

    cfg = resolve_config(["--model", "image_classifier", "--train-files", "a", "--eval-files", "b",
                          "--num-units=512.0", "--momentum=0.5"])
    assert cfg.task.num_units == 512 and isinstance(cfg.task.num_units, int)
    with pytest.raises(ValueError, match="--num-units"):
        resolve_config(["--model", "image_classifier", "--train-files", "a", "--eval-files", "b",
                        "--num-units=64.5"])
