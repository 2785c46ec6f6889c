"""Image classifiers: a small CNN (the shape of Google's Keras codelabs) and keras.applications backbones
(MobileNetV2, ResNet50) with a new head, their compile settings, and a serving function that takes raw
encoded image bytes.

Backbones never download anything (``weights=None``): pretrained weights come from a user-supplied file
(``base_weights``, local or gs://), e.g. Keras's ``*_no_top.h5`` ImageNet files or a ``.weights.h5`` saved
from the same backbone. Inputs reach every model in the pipeline's ``scale``
(trainer.models.image_classifier.decoding); a backbone's own input scaling is a layer inside the model, so
serving feeds the same pixels as training.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import warnings
from collections.abc import Sequence

import keras
import tensorflow as tf

from trainer.input_files import op_reason
from trainer.models.image_classifier.decoding import SCALES, preprocess_image

BACKBONES = ("mobilenet_v2", "resnet50")
# ImageNet BGR channel means (0..255 pixels) of the caffe-style preprocessing ResNet50 was trained with.
_CAFFE_MEAN = (103.939, 116.779, 123.68)


class WeightsError(ValueError):
    """A base_weights file that is missing or does not fit the backbone; ``str()`` is one line."""


@keras.saving.register_keras_serializable(package="trainer")
class BackboneInput(keras.layers.Layer):
    """Pixels in the pipeline's ``scale`` -> what a keras.applications backbone expects: [-1, 1] for
    MobileNetV2 ("tf" mode), BGR minus the ImageNet mean on 0..255 for ResNet50 ("caffe" mode). A layer
    rather than a Lambda so the model saves and reloads without unsafe deserialization."""

    def __init__(self, mode: str, scale: str, **kwargs):
        super().__init__(**kwargs)
        if mode not in ("tf", "caffe") or scale not in SCALES:
            raise ValueError(f"bad BackboneInput mode {mode!r} / scale {scale!r}")
        self.mode, self.scale = mode, scale

    def call(self, x):
        pixels = {"unit": x * 255.0, "symmetric": (x + 1.0) * 127.5, "raw": x}[self.scale]
        if self.mode == "tf":
            return pixels / 127.5 - 1.0
        return keras.ops.flip(pixels, axis=-1) - keras.ops.convert_to_tensor(_CAFFE_MEAN, dtype=x.dtype)

    def get_config(self):
        return {**super().get_config(), "mode": self.mode, "scale": self.scale}


def build_cnn(image_size: int, channels: int, num_classes: int, num_units: int = 128, dropout: float = 0.25,
              filters: Sequence[int] = (32, 64), convs_per_block: int = 1, batch_norm: bool = True,
              pooling: str = "auto", seed: int | None = None) -> keras.Model:
    """A conv block per entry of ``filters`` (``convs_per_block`` x [Conv2D 3x3, BatchNorm, ReLU], then
    2x2 MaxPool), then Flatten or GlobalAveragePooling, Dense(num_units, relu), Dropout and
    Dense(num_classes, softmax).

    ``pooling="auto"`` flattens when the last feature map is at most 8x8 (MNIST: 7x7), else averages it,
    so the dense layer stays small at larger image sizes. Input: [image_size, image_size, channels] floats
    in the pipeline's scale (any; BatchNorm absorbs it). ~0.42M parameters at 28x28x1 (mostly the
    dense layer); one conv per block trains MNIST to >= 0.98 in ~6 epochs on 2 CPU cores.
    """
    if pooling not in ("auto", "flatten", "avg"):
        raise ValueError(f"pooling must be auto, flatten or avg, not {pooling!r}")
    init = keras.initializers.HeNormal(seed=seed)
    inputs = keras.Input((image_size, image_size, channels), name="image")
    x = inputs
    for f in filters:
        for _ in range(convs_per_block):
            x = keras.layers.Conv2D(f, 3, padding="same", use_bias=not batch_norm, kernel_initializer=init)(x)
            if batch_norm:
                x = keras.layers.BatchNormalization()(x)
            x = keras.layers.ReLU()(x)
        x = keras.layers.MaxPooling2D()(x)
    side = x.shape[1]
    if pooling == "flatten" or (pooling == "auto" and side <= 8):
        x = keras.layers.Flatten()(x)
    else:
        x = keras.layers.GlobalAveragePooling2D()(x)
    x = keras.layers.Dense(num_units, activation="relu", kernel_initializer=init)(x)
    x = keras.layers.Dropout(dropout, seed=seed)(x)
    outputs = keras.layers.Dense(num_classes, activation="softmax", name="probabilities")(x)
    return keras.Model(inputs, outputs, name="cnn")


def _local_copy(path: str, stack: contextlib.ExitStack) -> str:
    """``path``, or for gs:// (any URI) a temporary local copy: Keras loads weights from local files only."""
    try:
        exists = tf.io.gfile.exists(path) and not tf.io.gfile.isdir(path)
    except tf.errors.OpError as exc:
        raise WeightsError(f"base weights {path}: cannot read: {op_reason(exc)}") from None
    if not exists:
        raise WeightsError(f"base weights {path}: no such file")
    if "://" not in path:
        return path
    tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="base-weights-"))
    local = os.path.join(tmp, os.path.basename(path))  # keep the name: Keras picks the format by suffix
    try:
        tf.io.gfile.copy(path, local)
    except tf.errors.OpError as exc:
        raise WeightsError(f"base weights {path}: cannot copy: {op_reason(exc)}") from None
    return local


def load_backbone_weights(backbone: keras.Model, path: str) -> None:
    """Load ``path`` (a ``.weights.h5`` of this backbone or a Keras-2 style ``.h5``, e.g. ImageNet no-top
    weights) into ``backbone``; anything missing, unreadable or not fitting is a one-line WeightsError.

    Keras only warns when some of a ``.weights.h5`` file's variables do not match the model; a partial
    load would silently train from random weights, so those warnings are errors here.
    """
    if not path.endswith(".h5"):
        raise WeightsError(f"base weights {path}: expected a .weights.h5 or .h5 file")
    with contextlib.ExitStack() as stack:
        local = _local_copy(path, stack)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                backbone.load_weights(local)
        except Exception as exc:  # noqa: BLE001 - h5py OSError, ValueError, KeyError... all mean "does not fit"
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0].split(". Example")[0]
            raise WeightsError(f"base weights {path} do not fit {backbone.name}: {reason}") from None
        for w in caught:
            text = str(w.message)
            if "could not be loaded" in text or "mismatch" in text.lower() or "skipping" in text.lower():
                raise WeightsError(f"base weights {path} do not fit {backbone.name}: "
                                   f"{text.strip().splitlines()[0]}")


def build_backbone_model(backbone: str, image_size: int, num_classes: int, num_units: int = 0,
                         dropout: float = 0.2, base_weights: str | None = None, fine_tune: bool | int = False,
                         input_scale: str = "unit", seed: int | None = None) -> keras.Model:
    """A keras.applications ``backbone`` ("mobilenet_v2" or "resnet50", no top, global average pooled) with
    a new head: Dropout, [Dense(num_units, relu), Dropout if num_units], Dense(num_classes, softmax).

    Input: [image_size, image_size, 3] in the pipeline's ``input_scale`` (grayscale data: decode with
    channels=3). ``base_weights``: a weights file (local or gs://) loaded into the backbone, None for random
    init. ``fine_tune``: False trains the head only (backbone frozen, BatchNorm in inference mode); True
    trains everything; an int N trains the top N backbone layers (BatchNorm layers stay frozen, in inference
    mode, as the Keras transfer-learning guide advises: their statistics would drift on small batches).
    """
    if backbone not in BACKBONES:
        raise ValueError(f"backbone must be one of {', '.join(BACKBONES)}, not {backbone!r}")
    shape = (image_size, image_size, 3)
    if backbone == "mobilenet_v2":
        base = keras.applications.MobileNetV2(input_shape=shape, include_top=False, weights=None)
        mode = "tf"
    else:
        base = keras.applications.ResNet50(input_shape=shape, include_top=False, weights=None)
        mode = "caffe"
    if base_weights:
        load_backbone_weights(base, base_weights)
    if fine_tune is True:
        base.trainable = True
    elif fine_tune is False or fine_tune == 0:
        base.trainable = False
    else:
        base.trainable = True
        top = set(id(layer) for layer in base.layers[-int(fine_tune):])
        for layer in base.layers:
            layer.trainable = id(layer) in top and not isinstance(layer, keras.layers.BatchNormalization)
    inputs = keras.Input(shape, name="image")
    x = BackboneInput(mode, input_scale, name="backbone_input")(inputs)
    # A fully trained backbone runs BatchNorm in training mode (needed from random init); otherwise inference.
    x = base(x, training=None if fine_tune is True else False)
    x = keras.layers.GlobalAveragePooling2D()(x)
    x = keras.layers.Dropout(dropout, seed=seed)(x)
    if num_units:
        x = keras.layers.Dense(num_units, activation="relu")(x)
        x = keras.layers.Dropout(dropout, seed=seed)(x)
    outputs = keras.layers.Dense(num_classes, activation="softmax", name="probabilities")(x)
    return keras.Model(inputs, outputs, name=f"{backbone}_classifier")


def backbone_of(model: keras.Model) -> keras.Model:
    """The keras.applications backbone inside a :func:`build_backbone_model` model."""
    return next(layer for layer in model.layers if isinstance(layer, keras.Model))


def compile_classifier(model: keras.Model, optimizer: str = "adam", learning_rate: float = 1e-3,
                       momentum: float = 0.9, num_classes: int = 2, decay_steps: int = 0) -> keras.Model:
    """Sparse categorical cross-entropy on integer labels; metrics "accuracy" and, with more than 5 classes,
    "top_k_accuracy" (k = 5). ``momentum`` is used by SGD only. ``decay_steps`` > 0: cosine decay of the
    learning rate to 0 over that many steps (the whole training), which steadies the final accuracy (MNIST
    CNN, 3 seeds: 0.9675-0.9825 at a constant rate)."""
    rate = learning_rate
    if decay_steps:
        rate = keras.optimizers.schedules.CosineDecay(learning_rate, decay_steps)
    if optimizer == "adam":
        opt = keras.optimizers.Adam(rate)
    elif optimizer == "sgd":
        opt = keras.optimizers.SGD(rate, momentum=momentum)
    else:
        raise ValueError(f"optimizer must be adam or sgd, not {optimizer!r}")
    metrics = [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
    if num_classes > 5:
        metrics.append(keras.metrics.SparseTopKCategoricalAccuracy(k=5, name="top_k_accuracy"))
    model.compile(optimizer=opt, loss=keras.losses.SparseCategoricalCrossentropy(), metrics=metrics)
    return model


def serving_function(model: keras.Model, image_size: int, channels: int, class_names: Sequence[str],
                     scale: str = "unit"):
    """A tf.function for ``serving_default``: ``image_bytes`` (tf.string [None], JPEG/PNG/GIF/BMP; what
    Vertex AI's ``{"image_bytes": {"b64": ...}}`` instances decode to) -> a dict of

    - ``probabilities``: float32 [N, num_classes], in class index order;
    - ``classes``: string [N, num_classes], the class names in the same order (Vertex AI's convention);
    - ``class_id``: int64 [N], the most probable class; ``label``: string [N], its name.

    Each image is decoded, resized and scaled by trainer.models.image_classifier.decoding.preprocess_image, as
    in evaluation.
    """
    names = tf.constant(list(class_names), tf.string)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="image_bytes")])
    def serve(image_bytes):
        images = tf.map_fn(lambda b: preprocess_image(b, image_size, channels, scale), image_bytes,
                           fn_output_signature=tf.TensorSpec([image_size, image_size, channels], tf.float32))
        probabilities = model(images, training=False)
        class_id = tf.argmax(probabilities, axis=-1)
        return {"probabilities": probabilities,
                "classes": tf.tile(names[tf.newaxis], [tf.shape(image_bytes)[0], 1]),
                "class_id": class_id, "label": tf.gather(names, class_id)}

    return serve


def export_image_model(model: keras.Model, path: str, image_size: int, channels: int,
                       class_names: Sequence[str], scale: str = "unit") -> None:
    """Write a SavedModel whose ``serving_default`` is :func:`serving_function` (as trainer/export.py does
    for census: a Keras ExportArchive, written quietly on every Keras 3 version)."""
    from trainer.compat import write_export_archive

    serve = serving_function(model, image_size, channels, class_names, scale)
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint("serving_default", serve.python_function, input_signature=serve.input_signature)
    write_export_archive(archive, path)
