"""trainer/models/image_classifier/data.py: the in-memory cache filled by the first pass over the share (no
decode for it before the first step): it holds each record decoded and prepared to the model's size
(checked against an oracle built here, record by record, from the files), later passes decode nothing, a
pass cut short or a run resumed at a later epoch still fills it, and it is held once."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from tests.helpers import subprocess_env  # noqa: E402
from tests.trainer.helpers import REPO_ROOT  # noqa: E402
from tests.trainer.image_helpers import (  # noqa: E402
    FLOWERS,
    digit_images,
    example,
    png_records,
    write_mnist_like,
    write_records,
)
from trainer.input_files import expand_files  # noqa: E402
from trainer.models.image_classifier import checks as image_checks  # noqa: E402
from trainer.models.image_classifier import data as image_data  # noqa: E402
from trainer.models.image_classifier import decoding as image_decoding  # noqa: E402


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    path = write_mnist_like(tmp_path_factory.mktemp("digits") / "digits.tfrecord", 300)
    return image_checks.scan_images([str(path)], channels=1)


@pytest.fixture(scope="module")
def flowers():
    return image_checks.scan_images(expand_files([str(FLOWERS / "*.tfrecord-*")],
                                                               "--train-files"))


@pytest.fixture
def decodes(monkeypatch):
    """A variable counting every image decode that runs (eager or inside tf.data), not those traced."""
    count = tf.Variable(0, dtype=tf.int64, trainable=False)
    real = image_decoding.decode

    def counting(encoded, channels):
        with tf.control_dependencies([count.assign_add(1)]):
            return real(tf.identity(encoded), channels)

    monkeypatch.setattr(image_decoding, "decode", counting)
    return count


def expected_cache(scan, channels: int, size: int):
    """The oracle: (images, int32 labels) the share's cache must hold, built here record by record without
    the module's pipeline. Each record of the scan's files, in file order (the cache's positions are its
    records' keys' ranks), skipping the scan's bad records, is parsed with the schema's two features,
    decoded with ``tf.io.decode_image`` (the module's documented decode: its channels, first frame, uint8)
    and prepared to ``size`` as ``finish`` (what serving runs) documents: unchanged uint8 when every image
    already has that size (the cache then scales per batch), else float32 0..255, cast where the image has
    the size and bilinearly resized (no antialiasing) where not. The same ops on the same bytes: exact."""
    assert scan.stride == 1 and len(scan.local_files) == len(scan.files)  # one worker: the whole split
    skipped = {(bad.file, bad.record) for bad in scan.bad_records}
    uint8 = scan.min_size == scan.max_size == (size, size)
    spec = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
            "image/class/label": tf.io.FixedLenFeature([], tf.int64)}
    images, labels = [], []
    for path in scan.files:
        for record, raw in enumerate(tf.data.TFRecordDataset(path).as_numpy_iterator()):
            if (path, record) in skipped:
                continue
            features = tf.io.parse_single_example(raw, spec)
            image = tf.io.decode_image(features["image/encoded"], channels=channels, expand_animations=False,
                                       dtype=tf.uint8)
            if uint8:
                assert image.shape == (size, size, channels)
            elif image.shape[:2] == (size, size):
                image = tf.cast(image, tf.float32)
            else:
                image = tf.image.resize(image, [size, size], method="bilinear", antialias=False)
            images.append(image.numpy())
            labels.append(int(features["image/class/label"]))
    assert len(images) == scan.share_records
    return np.stack(images), np.array(labels, np.int32)


def passes(ds, n):
    return [[np.concatenate(a) for a in zip(*ds.as_numpy_iterator(), strict=True)] for _ in range(n)]


def rows(x, y):
    """Each (label, image) as one sortable row: compares what a pass delivered regardless of its order."""
    flat = np.concatenate([y[:, None].astype(np.float64), x.reshape(len(x), -1)], axis=1)
    return flat[np.lexsort(flat.T[::-1])]


@pytest.mark.parametrize(("which", "size"), [("digits", 28), ("digits", 20), ("flowers", 32)],
                         ids=["uint8", "resized", "photos"])
def test_the_first_pass_fills_the_cache_with_each_record_decoded_and_prepared(request, which, size):
    scan = request.getfixturevalue(which)
    channels = 1 if which == "digits" else 3
    expected_images, expected_labels = expected_cache(scan, channels, size)
    assert expected_images.dtype == (np.uint8 if size == 28 else np.float32)  # the scenario still holds
    indices, images, labels = image_data._filling_cache(scan, channels=channels, image_size=size,
                                                        training=False, seed=0, shuffle_buffer=64)
    assert images.dtype.as_numpy_dtype == expected_images.dtype
    ds = image_data._cached_dataset(indices, images, labels, batch_size=64, seed=0, augment=(),
                                    image_size=size, scale="unit", drop_remainder=False, repeat=False)
    unit = expected_images.astype(np.float32) / np.float32(255)
    for x, y in passes(ds, 2):  # the filling pass, then one from memory: both in file order
        np.testing.assert_array_equal(x, unit)
        np.testing.assert_array_equal(y, expected_labels)
    np.testing.assert_array_equal(images.numpy(), expected_images)
    np.testing.assert_array_equal(labels.numpy(), expected_labels)


def test_training_reads_a_shuffled_share_every_pass_and_repeats_with_its_seed(digits, decodes):
    expected_images, expected_labels = expected_cache(digits, 1, 28)
    every = rows(expected_images.astype(np.float32) / np.float32(255), expected_labels)
    decodes.assign(0)

    def dataset(seed):
        return image_data.image_dataset(digits, image_size=28, channels=1, batch_size=64, training=True,
                                        seed=seed, cached=True)

    ds = dataset(1)
    assert int(decodes.numpy()) == 0  # built, nothing decoded
    first = passes(ds, 3)
    assert int(decodes.numpy()) == digits.share_records  # the first pass decoded each record once
    for x, y in first:
        np.testing.assert_array_equal(rows(x, y), every)
    orders = [y.tolist() for _, y in first]
    assert orders[0] != orders[1] != orders[2]
    again = passes(dataset(1), 3)
    assert [y.tolist() for _, y in again] == orders
    assert [y.tolist() for _, y in passes(dataset(2), 1)] != orders[:1]


def test_a_pass_cut_short_or_resumed_at_a_later_epoch_still_fills_the_cache(digits, decodes):
    """A restart (BackupAndRestore) resumes at epoch > 0 with an empty cache; with --steps-per-epoch the
    dataset repeats and passes straddle epochs."""
    import keras

    expected_images, expected_labels = expected_cache(digits, 1, 28)
    decodes.assign(0)
    indices, images, labels = image_data._filling_cache(digits, channels=1, image_size=28, training=True,
                                                        seed=3, shuffle_buffer=64)
    ds = image_data._cached_dataset(indices, images, labels, batch_size=64, seed=3, augment=(),
                                    image_size=28, scale="unit", drop_remainder=False, repeat=True)
    next(iter(ds))  # a pass cut short after one batch: not every record was written
    assert 0 < int(decodes.numpy())
    model = keras.Sequential([keras.Input((28, 28, 1)), keras.layers.Flatten(), keras.layers.Dense(10)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    # 300 records are 4.7 batches of 64: the resumed epochs 3 and 4 run a filling pass and one from memory.
    history = model.fit(ds, epochs=4, initial_epoch=2, steps_per_epoch=4, verbose=0)
    assert history.epoch == [2, 3] and all(np.isfinite(history.history["loss"]))
    np.testing.assert_array_equal(images.numpy(), expected_images)
    np.testing.assert_array_equal(labels.numpy(), expected_labels)
    decoded = int(decodes.numpy())
    assert decoded <= 2 * digits.share_records + 64
    for _ in zip(range(20), ds, strict=False):  # four more passes, all from memory
        pass
    assert int(decodes.numpy()) == decoded


def test_a_run_decodes_each_record_once_before_its_first_step_and_a_reused_check_none(tmp_path, decodes):
    """A study's first trial decodes each record once to check it (none for the in-memory cache); a later
    trial that reuses its cached checks decodes nothing before training reads the first batch."""
    from trainer.config import resolve_config
    from trainer.models import image_classifier
    from trainer.sharding import Shard

    images, labels = digit_images(40, seed=3)
    records = png_records(images, labels)
    train = write_records(tmp_path / "train.tfrecord", records[:30] + [example(b"not an image", 1)])
    evaluation = write_records(tmp_path / "eval.tfrecord", records[30:])
    cfg = resolve_config(["--model", "image_classifier", "--train-files", str(train), "--eval-files",
                          str(evaluation), "--channels", "1", "--max-bad-records", "1"])
    shard = Shard(cache_dir=str(tmp_path / "cache"))
    batches = {}
    for trial in (1, 2):
        decodes.assign(0)
        data = image_classifier.make_data(cfg, 8, 8, shard)
        report = data.report
        assert (report["train"]["records"], report["eval"]["records"]) == (30, 9)  # eval's label 9: no class
        checked = 30 + 9 if trial == 1 else 0
        assert int(decodes.numpy()) == checked, trial
        assert report["train"]["share"]["cached"] and report["eval"]["share"]["cached"]
        if data.write_cache:
            data.write_cache()
        batches[trial] = [y.numpy().tolist() for _, y in data.train]
        assert int(decodes.numpy()) == checked + 30  # the first epoch filled the in-memory cache
        assert [y.numpy().tolist() for _, y in data.train] != batches[trial]
        assert int(decodes.numpy()) == checked + 30
    assert batches[1] == batches[2]  # the same seed: the same order, checks cached or not


_HELD = """
import json, sys
import numpy as np
import tensorflow as tf
from tests.trainer.image_helpers import example, write_records
from trainer.models.image_classifier import checks as image_checks
from trainer.models.image_classifier import data as image_data

side, n = 256, 1300  # 244 MiB of uint8 pixels, from PNGs of a few hundred bytes
png = [tf.io.encode_png(np.full((side, side, 3), v, np.uint8)).numpy() for v in range(10)]
write_records(sys.argv[1], [example(png[i % 10], i % 10) for i in range(n)])
scan = image_checks.scan_images([sys.argv[1]], channels=3)


def status_bytes(field):
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(field)) * 1024


# The checks' own peak (a batch of decoded images) is not the cache's: reset the peak to the current RSS
# (Linux >= 4.0), which the allocator may have brought far below the checks' peak.
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
base = status_bytes("VmRSS:")
ds = image_data.image_dataset(scan, image_size=side, channels=3, batch_size=1, training=True, cached=True)
for _ in range(2):  # the filling pass, then one from memory
    for _ in ds:
        pass
peak = status_bytes("VmHWM:")
print(json.dumps({"cache": n * side * side * 3, "grew": peak - base}))
"""


def test_the_cache_is_held_once(tmp_path):
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(_HELD), str(tmp_path / "big.tfrecord")],
                         capture_output=True, text=True, env=subprocess_env(), timeout=300, cwd=REPO_ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    # One copy and the pipeline's buffers (~0.2-0.5x of this cache); a second copy would be 2x or more (an
    # up-front decode into an array, then a tensor of it, made 3.2x).
    assert figures["grew"] < 1.7 * figures["cache"], figures
