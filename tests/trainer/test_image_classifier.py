"""`python -m trainer.task --model image_classifier` end to end: flags, training on the shipped TFRecord
shards through the generic loop, the raw-bytes serving signature, and bad input (one line, exit 2, nothing
written)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.helpers import subprocess_env
from tests.trainer.helpers import REPO_ROOT, error_lines, run_trainer

FLOWERS = REPO_ROOT / "data" / "flowers"
FLOWERS_TRAIN = str(FLOWERS / "image_classification_builder-validation.tfrecord-*")
FLOWERS_EVAL = str(FLOWERS / "image_classification_builder-test.tfrecord-*")
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
    job_dir = tmp_path_factory.mktemp("flowers")
    out = run_trainer(image_args(job_dir, "--augment", "flip"), timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return job_dir


@pytest.mark.training
def test_flowers_trains_reports_and_exports(flowers_run):
    model = flowers_run / "model"
    metrics = json.loads((model / "metrics.json").read_text())
    assert set(metrics["eval"]) == {"accuracy", "loss"}  # 5 classes: no top-5 accuracy
    # Names by label index, as the records label them (roses is label 0 in these shards).
    assert sorted(metrics["data"]["classes"]) == ["daisy", "dandelion", "roses", "sunflowers", "tulips"]
    assert metrics["data"]["train"]["records"] == 80 and metrics["data"]["eval"]["records"] == 50
    config = json.loads((model / "trainer_config.json").read_text())
    assert config["model"] == "image_classifier" and config["task"]["image_size"] == 32


SERVE = textwrap.dedent("""\
    import glob, json, sys
    import numpy as np
    import tensorflow as tf
    model = tf.saved_model.load(sys.argv[1])
    serve = model.signatures["serving_default"]
    spec = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
            "image/class/text": tf.io.FixedLenFeature([], tf.string)}
    records = [tf.io.parse_single_example(r, spec)
               for r in tf.data.TFRecordDataset(sorted(glob.glob(sys.argv[2]))).take(4)]
    out = serve(image_bytes=tf.stack([r["image/encoded"] for r in records]))
    print(json.dumps({"probabilities": out["probabilities"].numpy().tolist(),
                      "classes": [c.decode() for c in out["classes"].numpy()[0]],
                      "label": [c.decode() for c in out["label"].numpy()],
                      "jpeg": all(r["image/encoded"].numpy()[:2] == b"\\xff\\xd8" for r in records)}))
    """)


@pytest.mark.training
def test_the_export_serves_raw_jpeg_bytes(flowers_run):
    # A fresh process with no trainer code imported: what a prediction server has.
    out = subprocess.run([sys.executable, "-c", SERVE, str(flowers_run / "model"), FLOWERS_EVAL],
                         capture_output=True, text=True, env=subprocess_env(), timeout=120, cwd="/")
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["jpeg"]
    trained = json.loads((flowers_run / "model" / "metrics.json").read_text())["data"]["classes"]
    assert result["classes"] == trained
    for row, label in zip(result["probabilities"], result["label"], strict=True):
        assert abs(sum(row) - 1) < 1e-4
        assert label == result["classes"][max(range(5), key=row.__getitem__)]


def _not_a_tfrecord(tmp_path):
    path = tmp_path / "shard.tfrecord"
    path.write_bytes(b"this is not a TFRecord file at all, just text\n" * 4)
    return str(path)


@pytest.mark.parametrize("case", ["no-match", "not-a-tfrecord", "missing-weights", "weights-on-cnn",
                                  "top-k-on-5-classes", "grayscale-backbone"])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(case, tmp_path):
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
    out = run_trainer(image_args(job, *extra, train=train), timeout=120)
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
