"""trainer/models/image_classifier/ records.py, checks.py and data.py: globs, the validating scan (bad records
fail or are skipped within the budget), and the pipeline (what it delivers equals what the scan counted;
shapes, scaling, batching, augmentation)."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from tests.trainer.helpers import damaged  # noqa: E402
from tests.trainer.image_helpers import (  # noqa: E402
    FLOWERS,
    digit_images,
    example,
    png_records,
    write_mnist_like,
    write_records,
)
from trainer.input_files import DataError, expand_files  # noqa: E402
from trainer.models.image_classifier import checks as image_checks  # noqa: E402
from trainer.models.image_classifier import data as image_data  # noqa: E402
from trainer.models.image_classifier import decoding as image_decoding  # noqa: E402
from trainer.models.image_classifier import records as image_records  # noqa: E402


@pytest.fixture(scope="module")
def flowers():
    files = expand_files([str(FLOWERS / "*.tfrecord-*")], "--train-files")
    return image_checks.scan_images(files)


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """A 300-record synthetic MNIST-like PNG shard."""
    return write_mnist_like(tmp_path_factory.mktemp("digits") / "digits.tfrecord", 300)


def good_png(value: int = 128, size: int = 8, channels: int = 1) -> bytes:
    return tf.io.encode_png(np.full((size, size, channels), value, np.uint8)).numpy()


def scan_one(tmp_path, records, **kwargs):
    path = write_records(tmp_path / "x.tfrecord", records)
    return image_checks.scan_images([str(path)], channels=1, **kwargs)


def test_globs_expand_and_no_match_names_the_flag(tmp_path):
    patterns = [str(FLOWERS / "*-test.*"), str(FLOWERS / "*.tfrecord-*")]
    files = expand_files(patterns, "--train-files")
    assert [f.rsplit("/", 1)[1].split(".")[0] for f in files] == [
        "image_classification_builder-test", "image_classification_builder-validation"]
    with pytest.raises(DataError, match=r"^--eval-files: no such file: .*/nothing-\*\.tfrecord$"):
        expand_files([str(tmp_path / "nothing-*.tfrecord")], "--eval-files")


def test_flowers_scan_counts_classes_from_the_data(flowers):
    assert flowers.records == flowers.total_records == 130
    # The label order is the data's (label -> image/class/text), not alphabetical.
    assert flowers.class_names == ("roses", "sunflowers", "daisy", "dandelion", "tulips")
    assert flowers.class_counts == (26,) * 5
    assert flowers.bad_records == () and flowers.excluded.size == 0
    assert flowers.summary() == "130 images in 5 classes from 2 file(s)"
    assert flowers.min_size[0] > 0 and flowers.max_size[1] >= flowers.min_size[1]


def test_flowers_pipeline_shapes_scale_and_labels(flowers):
    ds = image_data.image_dataset(flowers, image_size=32, channels=3, batch_size=32)
    batches = list(ds.as_numpy_iterator())
    assert [len(y) for _, y in batches] == [32, 32, 32, 32, 2]
    x = np.concatenate([b[0] for b in batches])
    y = np.concatenate([b[1] for b in batches])
    assert x.shape == (130, 32, 32, 3) and x.dtype == np.float32 and 0.0 <= x.min() < x.max() <= 1.0
    assert y.dtype == np.int32 and np.bincount(y).tolist() == [26] * 5
    gray = image_data.image_dataset(flowers, image_size=16, channels=1, batch_size=64, scale="symmetric",
                                    drop_remainder=True)
    shapes = [tuple(b.shape) for b, _ in gray.as_numpy_iterator()]
    assert shapes == [(64, 16, 16, 1)] * 2
    assert gray.element_spec[0].shape.as_list() == [64, 16, 16, 1]  # static: TPU-friendly
    raw = next(iter(image_data.image_dataset(flowers, image_size=16, channels=3, batch_size=8, scale="raw")))
    assert float(tf.reduce_max(raw[0])) > 1.5


def test_training_pipeline_shuffles_seeded_and_augments(digits):
    scan = image_checks.scan_images([str(digits)], channels=1)
    assert scan.class_names == tuple(str(i) for i in range(10))

    def labels(seed, **kw):
        ds = image_data.image_dataset(scan, image_size=28, channels=1, batch_size=100, training=True,
                                      seed=seed, **kw)
        return np.concatenate([y for _, y in ds.as_numpy_iterator()])

    first, again, other = labels(1), labels(1), labels(2)
    plain = np.concatenate([y for _, y in image_data.image_dataset(
        scan, image_size=28, channels=1, batch_size=100).as_numpy_iterator()])
    assert sorted(first) == sorted(plain) and not np.array_equal(first, plain)
    assert np.array_equal(first, again) and not np.array_equal(first, other)
    aug = image_data.image_dataset(scan, image_size=28, channels=1, batch_size=300, training=True,
                                   augment=("flip", "crop"), cache_limit_mb=0)
    x, _ = next(iter(aug))
    assert x.shape == (300, 28, 28, 1)
    with pytest.raises(ValueError, match="unknown augmentation"):
        image_data.image_dataset(scan, image_size=28, channels=1, batch_size=8, training=True,
                                 augment=("rotate",))


def test_cached_and_streaming_pipelines_and_in_memory_agree(digits):
    scan = image_checks.scan_images([str(digits)], channels=1)
    images, labels = image_data.read_arrays(scan, 1)
    assert images.shape == (300, 28, 28, 1) and images.dtype == np.uint8
    expected = digit_images(300)
    assert np.array_equal(images, expected[0]) and np.array_equal(labels, expected[1])
    outs = []
    for ds in (image_data.image_dataset(scan, image_size=20, channels=1, batch_size=64),
               image_data.image_dataset(scan, image_size=20, channels=1, batch_size=64, cache_limit_mb=0),
               image_data.array_dataset(images, labels, image_size=20, batch_size=64)):
        outs.append([np.concatenate(a) for a in zip(*ds.as_numpy_iterator(), strict=True)])
    for x, y in outs[1:]:
        np.testing.assert_allclose(x, outs[0][0], atol=1e-6)
        assert np.array_equal(y, outs[0][1])


def test_grayscale_png_converts_to_rgb(digits):
    scan = image_checks.scan_images([str(digits)], channels=3)
    x, _ = next(iter(image_data.image_dataset(scan, image_size=28, channels=3, batch_size=4)))
    assert x.shape == (4, 28, 28, 3)
    np.testing.assert_array_equal(x[..., 0], x[..., 2])


def test_not_a_tfrecord_file_is_one_line(tmp_path):
    bad = tmp_path / "photo.tfrecord"
    bad.write_bytes((FLOWERS / "dataset_info.json").read_bytes())
    with pytest.raises(DataError) as info:
        image_checks.scan_images([str(bad)])
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{bad}: not a TFRecord file, or record 0 is corrupt or truncated")


@pytest.mark.parametrize("cut", [5, 30])  # inside record 520's length header (TF reads it as EOF) / its data
def test_truncated_file_names_the_record(tmp_path, cut):
    path = write_records(tmp_path / "t.tfrecord", [example(good_png(), i % 2) for i in range(600)])
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 600 * 520 + cut])  # all records have the same size
    with pytest.raises(DataError, match=r"t\.tfrecord: not a TFRecord file, or record 520 is corrupt or "
                                        r"truncated \([^{\n]+\)$"):
        image_checks.scan_images([str(path)], channels=1)


BAD = [
    (example(b"not an image at all", 1), "undecodable image: not a 1-channel JPEG/PNG/GIF/BMP image"),
    (example(good_png(), 7), "bad label: label 7 is outside 0..4"),
    (example(good_png(), -1), "bad label: label -1 is outside 0..4"),
    (example(good_png(), 1, drop="image/encoded"), "malformed record: missing feature 'image/encoded'"),
    (example(good_png(), 1, drop="image/class/text"), "malformed record: missing feature 'image/class/text'"),
    (example(good_png(), 1, image__class__label=1.0),
     "malformed record: feature 'image/class/label' is a float_list, expected int64_list"),
    (b"\x01\x02garbage", "malformed record: not a tf.train.Example"),
    (example(good_png(), 1, text=b"other"), "bad label: text 'other' for label 1, but '1' at"),
]


@pytest.mark.parametrize(("record", "reason"), BAD, ids=[f"{r.split(':')[0]}-{i}" for i, (_, r) in
                                                         enumerate(BAD)])
def test_bad_record_fails_naming_file_and_record(tmp_path, record, reason):
    records = [example(good_png(), i % 5) for i in range(6)]
    records.insert(3, record)
    with pytest.raises(DataError) as info:
        scan_one(tmp_path, records, num_classes=5)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{tmp_path / 'x.tfrecord'}: record 3: {reason}")
    assert message.endswith("(set max_bad_records to skip bad records)")


def test_bad_records_within_budget_are_skipped_and_left_out_of_the_pipeline(tmp_path):
    images, labels = digit_images(40, seed=3)
    records = png_records(images, labels)
    bad_at = {5: example(b"\x89PNG broken", 2), 17: example(good_png(), 12),
              30: example(good_png(), 4, drop="image/class/label")}
    for index in sorted(bad_at):
        records.insert(index, bad_at[index])
    first = write_records(tmp_path / "a.tfrecord", records)
    second = write_records(tmp_path / "b.tfrecord", png_records(images[:10], labels[:10]))
    files = [str(first), str(second)]
    with pytest.raises(DataError, match=r"a\.tfrecord: record 30: .*\(more than max_bad_records=2 bad"):
        image_checks.scan_images(files, channels=1, num_classes=10, max_bad_records=2)
    scan = image_checks.scan_images(files, channels=1, num_classes=10, max_bad_records=3)
    assert (scan.records, scan.total_records) == (50, 53)
    assert [(b.file, b.record) for b in scan.bad_records] == [(str(first), i) for i in (5, 17, 30)]
    assert scan.bad_counts() == {"malformed": 1, "label": 1, "undecodable": 1}
    assert "skipped 3 bad record(s) (1 malformed, 1 label, 1 undecodable)" in scan.summary()
    for ds in (image_data.image_dataset(scan, image_size=28, channels=1, batch_size=16),
               image_data.image_dataset(scan, image_size=28, channels=1, batch_size=16, cache_limit_mb=0,
                                        training=True)):
        got = np.concatenate([y for _, y in ds.as_numpy_iterator()])
        assert sorted(got.tolist()) == sorted(labels.tolist() + labels[:10].tolist())
    x, y = image_data.read_arrays(scan, 1)
    assert np.array_equal(x, np.concatenate([images, images[:10]]))


def test_classes_from_explicit_names_or_count(tmp_path):
    records = [example(good_png(), i, text=f"c{i}".encode()) for i in (0, 2, 2)]
    with pytest.raises(DataError, match=r"no records with label\(s\) 1 of 0\.\.2: pass the class names"):
        scan_one(tmp_path, records)
    scan = scan_one(tmp_path, records, num_classes=4)
    assert scan.class_names == ("c0", "1", "c2", "3") and scan.class_counts == (1, 0, 2, 0)
    named = scan_one(tmp_path, records, class_names=["a", "b", "c"])
    assert named.class_names == ("a", "b", "c")
    with pytest.raises(DataError, match=r"x\.tfrecord: no usable records$"):
        scan_one(tmp_path, [example(b"junk", 0)], max_bad_records=5)


def test_bad_parameters_are_refused(flowers):
    with pytest.raises(ValueError, match="scale must be one of unit, symmetric, raw"):
        image_data.image_dataset(flowers, image_size=8, channels=3, batch_size=8, scale="imagenet")
    with pytest.raises(ValueError, match="channels must be 1 or 3"):
        image_checks.scan_images(flowers.files, channels=4)
    with pytest.raises(DataError, match="read_arrays needs one size"):
        image_data.read_arrays(flowers, 3)


def test_the_parallel_first_pass_finds_what_the_record_by_record_one_does(tmp_path, monkeypatch):
    # Shares over _SMALL_BYTES are parsed a batch at a time in tf.data; a batch that fails sends its file
    # through the exact Python path, and an undecodable image fails its batch in the second pass.
    records = [example(good_png(), i % 5) for i in range(20)]
    for offset, (record, _) in enumerate(BAD):
        records.insert(2 + 2 * offset, record)
    path = str(write_records(tmp_path / "x.tfrecord", records))
    scans = {}
    for small in (1 << 30, 0):
        monkeypatch.setattr(image_checks, "_SMALL_BYTES", small)
        scans[small] = image_checks.scan_images([path], channels=1, num_classes=5, max_bad_records=len(BAD))
    python, parallel = scans.values()
    assert [str(b) for b in parallel.bad_records] == [str(b) for b in python.bad_records]
    assert [(b.record, b.reason[:20]) for b in python.bad_records] == [
        (2 + 2 * i, reason[:20]) for i, (_, reason) in enumerate(BAD)]
    assert (parallel.records, parallel.class_counts) == (python.records, python.class_counts)
    assert (python.records, python.class_counts) == (20, (4,) * 5)


def run_two_workers(work):
    """``work(shard)`` as worker 0 and 1 of a two-worker cluster, in threads whose exchanges meet (an
    all-gather, JSON on the wire as Shard.exchange sends it): [result or exception] per worker. A worker
    left waiting (one exchange more on one side) fails the barrier instead of hanging."""
    import threading

    from trainer.sharding import Shard

    barrier = threading.Barrier(2, timeout=30)
    slots: list = [None, None]
    results: list = [None, None]

    def gather_for(index):
        def gather(payload):
            slots[index] = payload
            barrier.wait()
            gathered = list(slots)
            barrier.wait()
            return gathered
        return gather

    def run(index):
        try:
            results[index] = work(Shard(index=index, count=2, gather=gather_for(index)))
        except Exception as exc:  # noqa: BLE001 - returned to the test
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    return results


SHARD_RECORDS = 150


@pytest.fixture(scope="module")
def three_shards(tmp_path_factory):
    """Three MNIST-like PNG shards of ~85 KB (files 0 and 2 are worker 0's, file 1 worker 1's)."""
    root = tmp_path_factory.mktemp("shards")
    return [str(write_mnist_like(root / f"s{i}.tfrecord", SHARD_RECORDS, seed=i)) for i in range(3)]


@pytest.fixture
def mixed_paths(monkeypatch):
    # Worker 0's two files take the parallel path, worker 1's one file the record-by-record one.
    monkeypatch.setattr(image_checks, "_SMALL_BYTES", 100 << 10)


@pytest.mark.parametrize("files", [3, 1], ids=["by-file", "by-record"])
def test_two_workers_read_disjoint_shares_that_cover_the_data(three_shards, mixed_paths, files):
    shards = three_shards[:files]
    whole = image_checks.scan_images(shards, channels=1)

    def work(shard):
        scan = image_checks.scan_images(shards, channels=1, shard=shard)
        if files == 1:  # the pipeline follows the scan's share: checked once, by file
            return scan, np.zeros(scan.share_records)
        ds = image_data.image_dataset(scan, image_size=28, channels=1, batch_size=64, training=True)
        return scan, np.concatenate([y for _, y in ds.as_numpy_iterator()])

    (first, first_labels), (second, second_labels) = run_two_workers(work)
    for scan in (first, second):  # what every worker knows: the whole data's
        assert (scan.records, scan.total_records) == (whole.records, whole.total_records)
        assert (scan.class_names, scan.class_counts) == (whole.class_names, whole.class_counts)
        assert scan.records_read <= 0.7 * whole.records  # 2 files of 3 by file, 1 record of 2 by record
    assert first.good_keys.size + second.good_keys.size == whole.records
    assert np.array_equal(np.union1d(first.good_keys, second.good_keys), whole.good_keys)
    assert (first.share()["by_record"], second.stride) == ((files == 1), 2 if files == 1 else 1)
    assert len(first_labels) == first.share_records and len(second_labels) == second.share_records
    if files > 1:
        labels = np.concatenate([digit_images(SHARD_RECORDS, seed=i)[1] for i in range(files)])
        assert sorted(np.concatenate([first_labels, second_labels]).tolist()) == sorted(labels.tolist())


@pytest.mark.parametrize("kind", ["malformed", "undecodable", "text"])
def test_a_bad_record_in_the_second_workers_share_fails_every_worker_alike(
        tmp_path, three_shards, mixed_paths, kind):
    # The undecodable image passes the header check: only the second pass (the decode) sees it; it sits at
    # an odd record of the only file, which by-record sharding gives the second worker.
    bad = {"malformed": example(good_png(), 1, drop="image/class/label"),
           "undecodable": example(b"\x89PNG\r\n\x1a\n" + b"\0" * 40, 1),
           "text": example(good_png(), 3, text=b"drei")}[kind]
    records = list(tf.data.TFRecordDataset(three_shards[1]).as_numpy_iterator())
    records.insert(7, bad)
    second = str(write_records(tmp_path / "s1.tfrecord", records))
    files = [three_shards[0], second, three_shards[2]] if kind != "undecodable" else [second]
    results = run_two_workers(lambda shard: image_checks.scan_images(files, channels=1, shard=shard))
    assert all(isinstance(r, DataError) for r in results), results
    assert str(results[0]) == str(results[1])
    assert str(results[0]).startswith(f"{second}: record 7: ")
    assert "\n" not in str(results[0])
    assert str(results[0]).endswith("(set max_bad_records to skip bad records)")
    if kind == "text":
        assert "text 'drei' for label 3, but '3' at" in str(results[0])
    if kind != "undecodable":
        return
    # Within the budget every worker skips it and counts it once.
    scans = run_two_workers(lambda shard: image_checks.scan_images(files, channels=1, shard=shard,
                                                                  max_bad_records=1))
    assert [len(s.bad_records) for s in scans] == [1, 1]
    good = len(records) - 1 + SHARD_RECORDS * (len(files) - 1)
    assert scans[0].records == scans[1].records == sum(s.share_records for s in scans) == good


def test_a_later_run_reuses_the_cached_checks_of_the_same_files_and_flags(tmp_path, monkeypatch, caplog):
    """A study's later trial (same files, same flags) reads neither headers nor pixels to check them: it
    reports the same records, classes and skipped record, and still fills its in-memory cache. Changed data,
    or a damaged cached file, is checked again."""
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
    caplog.set_level("INFO", logger="trainer")

    def run():
        data = image_classifier.make_data(cfg, 8, 8, shard)
        if data.write_cache:  # what the loop does once the data and the model were accepted
            data.write_cache()
        return data.report, sum(int(y.shape[0]) for _, y in data.train)

    first, delivered = run()
    assert first["train"]["skipped"]["undecodable"] == 1 and first["train"]["share"]["cached"]
    with monkeypatch.context() as m:
        for name in ("scan_images", "load_images"):
            m.setattr(image_checks, name, lambda *a, **k: pytest.fail("checked the data again"))
        again, delivered_again = run()
    assert again == first and delivered_again == delivered == 30
    assert "the checks of a run before this one" in caplog.text

    (old,) = (tmp_path / "cache").iterdir()
    write_records(train, records[:29])  # changed data: a different key, checked anew
    changed, _ = run()
    assert changed["train"]["records"] == 29 and not changed["train"]["skipped_records"]
    (cached,) = set((tmp_path / "cache").iterdir()) - {old}
    whole = cached.read_bytes()
    # A damaged cached file: checked again with a warning, never a traceback, and replaced.
    for bad in damaged(whole):
        cached.write_bytes(bad)
        caplog.clear()
        assert run()[0] == changed
        assert "not reading the cached image scans" in caplog.text and cached.read_bytes() == whole


@pytest.mark.parametrize("small", [False, True], ids=["parallel", "record-by-record"])
def test_truncated_or_corrupt_jpegs_are_undecodable_in_the_scaled_check(tmp_path, monkeypatch, small):
    """The second pass checks JPEG photos decoded at 1/8 scale: the whole entropy-coded stream is still read,
    so a truncated or corrupt photo is still a bad record, with the same message."""
    from tests.trainer.image_helpers import FLOWERS_TRAIN, encoded_images

    def refused(encoded):  # by the model's own decode
        try:
            image_decoding.decode(encoded, 3)
        except tf.errors.InvalidArgumentError:
            return True
        return False

    def flip(photo):  # 64 bytes inverted mid-stream (refused for about half of the photos)
        at = len(photo) // 2
        return photo[:at] + bytes(b ^ 0xFF for b in photo[at:at + 64]) + photo[at + 64:]

    photos = encoded_images(FLOWERS_TRAIN)
    flipped = next(flip(p) for p in photos[12:] if refused(flip(p)))
    photos = photos[:12]
    cut = photos[3][:len(photos[3]) // 2]
    assert refused(cut)
    records = [example(p, i % 2) for i, p in enumerate(photos)]
    records[3], records[7] = example(cut, 1), example(flipped, 1)
    path = write_records(tmp_path / "photos.tfrecord", records)
    assert path.stat().st_size > image_checks._SMALL_BYTES  # photos: checked in parallel, one per element
    if small:
        monkeypatch.setattr(image_checks, "_SMALL_BYTES", path.stat().st_size)
    with pytest.raises(DataError) as info:
        image_checks.scan_images([str(path)], channels=3)
    assert str(info.value) == (f"{path}: record 3: undecodable image: not a 3-channel JPEG/PNG/GIF/BMP image "
                               "that decodes (set max_bad_records to skip bad records)")
    scan = image_checks.scan_images([str(path)], channels=3, max_bad_records=2)
    reasons = [(b.record, b.reason) for b in scan.bad_records]
    assert reasons == [(r, image_records.undecodable(3)) for r in (3, 7)]
    assert scan.records == 10


def _webps():
    import io

    from PIL import Image

    pixels = np.random.default_rng(0).integers(0, 255, (37, 53, 3), dtype=np.uint8)
    found = {}
    for name, options in (("lossy", {}), ("lossless", {"lossless": True}),
                          ("extended", {"exif": b"Exif\0\0MM\0*\0\0\0\x08\0\0"})):
        out = io.BytesIO()
        Image.fromarray(pixels).save(out, "WEBP", **options)
        found[name] = out.getvalue()
    return found


def test_header_sizes_read_webp_and_jpeg_in_python_as_tensorflow_decodes_them():
    """WebP (which tf.io.decode_image decodes) is sized from its header like the others, in Python and
    vectorised alike; a JPEG's start-of-frame is read without TensorFlow, as extract_jpeg_shape reads it."""
    from tests.trainer.image_helpers import FLOWERS_TRAIN, encoded_images, webp_header

    webps = _webps()
    assert {webps[k][12:16] for k in webps} == {b"VP8 ", b"VP8L", b"VP8X"}  # each kind of first chunk
    photos = encoded_images(FLOWERS_TRAIN)[:8]
    images = [*webps.values(), *photos, tf.io.encode_jpeg(np.zeros((9, 7, 1), np.uint8), progressive=True)
              .numpy()]
    for encoded in images:
        decoded = tuple(image_decoding.decode(encoded, 3).shape[:2])
        assert image_decoding.header_size(encoded) == decoded
    assert image_decoding.header_sizes(tf.constant(images)).numpy().tolist() == [
        list(image_decoding.header_size(e)) for e in images]
    for chunk in (b"VP8L", b"VP8X", b"VP8 "):  # the bombs' headers: 8000 x 6000 declared in 50 bytes
        bomb = webp_header(8000, 6000, chunk)
        assert image_decoding.header_size(bomb) == (6000, 8000)
        assert image_decoding.image_pixels(bomb) == 48_000_000
        assert image_decoding.header_sizes(tf.constant([bomb])).numpy().tolist() == [[6000, 8000]]
    # Magic bytes that decode_image takes for an image, but no size to read: refused, not "no image".
    for unreadable in (webp_header(8, 8, b"ALPH"), b"RIFF\0\0\0\0WEBPVP8L", b"\xff\xd8\xff\xd9",
                       photos[0][:20]):
        assert image_decoding.header_size(unreadable) == image_decoding.UNREADABLE
        assert image_decoding.image_pixels(unreadable) is None
    assert image_decoding.image_pixels(b"no image") == 0


@pytest.mark.parametrize("small", [False, True], ids=["parallel", "record-by-record"])
def test_a_webp_bomb_is_a_bad_record(tmp_path, monkeypatch, small):
    from tests.trainer.image_helpers import webp_header

    if small:
        monkeypatch.setattr(image_checks, "_SMALL_BYTES", 1 << 30)
    else:
        monkeypatch.setattr(image_checks, "_SMALL_BYTES", 0)
    records = [example(good_png(), i % 5) for i in range(6)]
    records.insert(2, example(webp_header(8000, 8000), 1))
    with pytest.raises(DataError, match="record 2: undecodable image: 8000x8000 .width x height. takes "
                                        "64000000 pixels to decode"):
        scan_one(tmp_path, records, num_classes=5)
