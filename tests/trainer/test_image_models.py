"""trainer/models/image_classifier/model.py: the CNN, keras.applications backbones with user-supplied
weights, compile settings and the raw-bytes serving signature (exported, reloaded in a fresh interpreter).
MirroredStrategy over two logical CPUs runs through the generic loop in test_image_classifier.py."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from tests.helpers import subprocess_env  # noqa: E402
from tests.trainer.helpers import REPO_ROOT  # noqa: E402
from tests.trainer.image_helpers import FLOWERS, digit_images, png_records, write_records  # noqa: E402
from trainer.models.image_classifier import checks as image_checks  # noqa: E402
from trainer.models.image_classifier import data as image_data  # noqa: E402
from trainer.models.image_classifier import decoding as image_decoding  # noqa: E402
from trainer.models.image_classifier import model as image_models  # noqa: E402
from trainer.models.image_classifier.model import WeightsError  # noqa: E402


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    """Randomly initialised no-top backbones' weights, saved as a user would supply them (built once)."""
    root = tmp_path_factory.mktemp("weights")
    out = {}
    for name, cls in (("mobilenet_v2", keras.applications.MobileNetV2),
                      ("resnet50", keras.applications.ResNet50)):
        backbone = cls(input_shape=(32, 32, 3), include_top=False, weights=None)
        out[name] = (root / f"{name}.weights.h5", backbone.get_weights())
        backbone.save_weights(out[name][0])
    return out


def test_cnn_shape_and_pooling():
    model = image_models.build_cnn(28, 1, 10)
    assert model.input_shape == (None, 28, 28, 1) and model.output_shape == (None, 10)
    assert any(isinstance(layer, keras.layers.Flatten) for layer in model.layers)
    assert 300_000 < model.count_params() < 500_000
    big = image_models.build_cnn(96, 3, 5, num_units=64, filters=(16, 32, 64))
    assert any(isinstance(layer, keras.layers.GlobalAveragePooling2D) for layer in big.layers)
    probs = big.predict(np.zeros((2, 96, 96, 3), np.float32), verbose=0)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    with pytest.raises(ValueError, match="pooling"):
        image_models.build_cnn(28, 1, 10, pooling="max")


def test_cnn_learns_synthetic_digits(tmp_path):
    images, labels = digit_images(800, seed=5)
    scan = image_checks.scan_images(
        [str(write_records(tmp_path / "d.tfrecord", png_records(images, labels)))], channels=1)
    keras.utils.set_random_seed(0)
    model = image_models.compile_classifier(image_models.build_cnn(28, 1, 10, seed=0), num_classes=10)
    model.fit(image_data.image_dataset(scan, image_size=28, channels=1, batch_size=64, training=True),
              epochs=2, verbose=0)
    metrics = model.evaluate(image_data.image_dataset(scan, image_size=28, channels=1, batch_size=256),
                             verbose=0, return_dict=True)
    assert metrics["accuracy"] > 0.9 and metrics["top_k_accuracy"] >= metrics["accuracy"]


def test_compile_metrics_depend_on_class_count():
    five = image_models.compile_classifier(image_models.build_cnn(8, 1, 5, filters=(4,)), "sgd", 0.05,
                                           num_classes=5)
    assert isinstance(five.optimizer, keras.optimizers.SGD)
    assert float(five.optimizer.momentum) == pytest.approx(0.9)
    ten = image_models.compile_classifier(image_models.build_cnn(8, 1, 10, filters=(4,)), num_classes=10)
    x, y = np.zeros((4, 8, 8, 1), np.float32), np.array([0, 1, 2, 3])
    assert sorted(five.evaluate(x, y, verbose=0, return_dict=True)) == ["accuracy", "loss"]
    assert sorted(ten.evaluate(x, y, verbose=0, return_dict=True)) == ["accuracy", "loss", "top_k_accuracy"]
    with pytest.raises(ValueError, match="optimizer must be adam or sgd"):
        image_models.compile_classifier(ten, "rmsprop")


def test_backbone_input_scaling_matches_keras_preprocessing():
    pixels = np.random.default_rng(0).uniform(0, 255, (2, 4, 4, 3)).astype(np.float32)
    tf_mode = image_models.BackboneInput("tf", "unit")(pixels / 255.0)
    np.testing.assert_allclose(tf_mode, keras.applications.mobilenet_v2.preprocess_input(pixels.copy()),
                               atol=1e-5)
    caffe = image_models.BackboneInput("caffe", "raw")(pixels)
    np.testing.assert_allclose(caffe, keras.applications.resnet50.preprocess_input(pixels.copy()), atol=1e-3)
    sym = image_models.BackboneInput("caffe", "symmetric")(pixels / 127.5 - 1.0)
    np.testing.assert_allclose(sym, caffe, atol=1e-3)


@pytest.mark.parametrize("backbone", ["mobilenet_v2", "resnet50"])
def test_backbone_loads_supplied_weights(weights, backbone):
    path, expected = weights[backbone]
    model = image_models.build_backbone_model(backbone, 32, 5, base_weights=str(path))
    loaded = image_models.backbone_of(model).get_weights()
    assert len(loaded) == len(expected) and all(map(np.array_equal, loaded, expected))
    assert model.input_shape == (None, 32, 32, 3) and model.output_shape == (None, 5)
    # Frozen by default: only the head trains.
    assert [w.path for w in model.trainable_weights] == ["probabilities/kernel", "probabilities/bias"]


def test_backbone_weights_through_a_uri_are_copied_locally(weights):
    path, expected = weights["mobilenet_v2"]
    uri = "ram://base-weights/mobilenet_v2.weights.h5"  # TensorFlow's in-memory filesystem stands in for gs://
    tf.io.gfile.makedirs("ram://base-weights")
    tf.io.gfile.copy(str(path), uri, overwrite=True)
    model = image_models.build_backbone_model("mobilenet_v2", 32, 3, base_weights=uri)
    assert all(map(np.array_equal, image_models.backbone_of(model).get_weights(), expected))


def test_weights_that_do_not_fit_are_one_line_errors(weights, tmp_path):
    resnet = str(weights["resnet50"][0])
    with pytest.raises(WeightsError) as info:
        image_models.build_backbone_model("mobilenet_v2", 32, 5, base_weights=resnet)
    assert "\n" not in str(info.value)
    assert str(info.value).startswith(f"base weights {resnet} do not fit mobilenetv2_1.00_32: ")
    (tmp_path / "junk.weights.h5").write_bytes(b"not hdf5")
    cases = {
        str(tmp_path / "missing.weights.h5"): "no such file",
        str(tmp_path / "junk.weights.h5"): "do not fit",
        str(FLOWERS / "dataset_info.json"): "expected a .weights.h5 or .h5 file",
    }
    for path, reason in cases.items():
        with pytest.raises(WeightsError, match=reason) as info:
            image_models.build_backbone_model("mobilenet_v2", 32, 5, base_weights=path)
        assert "\n" not in str(info.value) and path in str(info.value)
    with pytest.raises(ValueError, match="backbone must be one of mobilenet_v2, resnet50"):
        image_models.build_backbone_model("vgg16", 32, 5)


def test_fine_tune_choices():
    full = image_models.build_backbone_model("mobilenet_v2", 32, 4, num_units=16, fine_tune=True)
    assert len(full.trainable_weights) == len(image_models.backbone_of(full).trainable_weights) + 4
    top = image_models.build_backbone_model("mobilenet_v2", 32, 4, fine_tune=10)
    backbone = image_models.backbone_of(top)
    trainable = [layer.name for layer in backbone.layers if layer.trainable and layer.weights]
    assert trainable and set(trainable) <= {layer.name for layer in backbone.layers[-10:]}
    assert not any(isinstance(backbone.get_layer(n), keras.layers.BatchNormalization) for n in trainable)
    # Random init, frozen: a model that still predicts (and compiles) fine.
    model = image_models.compile_classifier(top, num_classes=4)
    model.fit(np.zeros((4, 32, 32, 3), np.float32), np.arange(4), epochs=1, verbose=0)


SCORE = """
import json, sys
import numpy as np, tensorflow as tf
model_dir, *paths = sys.argv[1:]
serve = tf.saved_model.load(model_dir).signatures["serving_default"]
out = serve(image_bytes=tf.constant([open(p, "rb").read() for p in paths]))
print(json.dumps({"inputs": list(serve.structured_input_signature[1]),
                  **{k: (v.numpy().astype(str) if v.dtype == tf.string else v.numpy()).tolist()
                     for k, v in out.items()}}))
"""


def test_exported_serving_signature_takes_raw_bytes(tmp_path):
    flowers = image_checks.scan_images([str(next(FLOWERS.glob("*-test.*")))])
    keras.utils.set_random_seed(0)
    model = image_models.compile_classifier(image_models.build_cnn(40, 3, 5, num_units=32), num_classes=5)
    model.fit(image_data.image_dataset(flowers, image_size=40, channels=3, batch_size=25, training=True),
              epochs=1, verbose=0)
    raw = [r.numpy() for r in tf.data.TFRecordDataset(flowers.files).take(3)]
    jpegs = [tf.train.Example.FromString(r).features.feature["image/encoded"].bytes_list.value[0]
             for r in raw]
    rgb = np.random.default_rng(1).integers(0, 255, (30, 50, 3), dtype=np.uint8)
    pngs = [tf.io.encode_png(rgb).numpy(), tf.io.encode_png(rgb[..., :1]).numpy()]  # RGB and grayscale
    paths = []
    for i, data in enumerate(jpegs + pngs):
        paths.append(tmp_path / f"img{i}")
        paths[-1].write_bytes(data)
    image_models.export_image_model(model, str(tmp_path / "model"), 40, 3, flowers.class_names)
    done = subprocess.run([sys.executable, "-c", SCORE, str(tmp_path / "model"), *map(str, paths)],
                          cwd=REPO_ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["inputs"] == ["image_bytes"]
    images = np.stack([image_decoding.preprocess_image(b, 40, 3).numpy() for b in jpegs + pngs])
    expected = model.predict(images, verbose=0)
    probabilities = np.array(out["probabilities"])
    assert probabilities.shape == (5, 5)
    np.testing.assert_allclose(probabilities, expected, atol=1e-5)
    assert out["class_id"] == expected.argmax(axis=1).tolist()
    assert out["label"] == [flowers.class_names[i] for i in expected.argmax(axis=1)]
    assert out["classes"] == [list(flowers.class_names)] * 5


@pytest.mark.parametrize(
    "flags, note",
    [
        ([], "--backbone mobilenet_v2 is frozen at random weights (no --base-weights, no --fine-tune): only "
             "the new head trains, on random features, so expect accuracy near chance (0.20 for 5 classes)"),
        (["--fine-tune"], "--backbone mobilenet_v2 starts from random weights (no --base-weights) and trains "
                          "from scratch: on little data expect accuracy near chance (0.20 for 5 classes)"),
        (["--base-weights", "WEIGHTS"], None),
    ],
    ids=["frozen", "fine-tune", "pretrained"],
)
def test_a_backbone_without_base_weights_gets_a_note_the_console_shows(weights, flags, note):
    """The run's one line saying its backbone has no pretrained features (trainer.train logs it as a
    progress note; it is kept in metrics.json's data)."""
    from trainer.config import resolve_config
    from trainer.models import load_task
    from trainer.models.base import TaskData

    flags = [str(weights["mobilenet_v2"][0]) if f == "WEIGHTS" else f for f in flags]
    cfg = resolve_config(["--model", "image_classifier", "--train-files", "x.tfrecord", "--eval-files",
                          "y.tfrecord", "--backbone", "mobilenet_v2", "--image-size", "32", *flags])
    data = TaskData(train=None, eval=None, train_rows=10, eval_rows=10, train_steps=1,
                    report={"classes": list("abcde"), "image_size": 32, "channels": 3})
    load_task("image_classifier").build_model(cfg, data)
    notes = data.report.get("notes", [])
    assert len(notes) == (1 if note else 0)
    assert not note or (notes[0].startswith(note) and "pass --base-weights FILE" in notes[0])
