"""Image classification input: TFRecord shards of tf.train.Examples in the flowers schema, a validating scan
and the tf.data pipeline (plus an in-memory variant with the same preprocessing).

The schema (TF-Slim / TFDS ``image_classification_builder``, also used for MNIST here): ``image/encoded``
(JPEG/PNG/GIF/BMP bytes), ``image/class/label`` (int64) and ``image/class/text`` (bytes) are required; the
optional ``image/filename``, ``image/format``, ``image/height``, ``image/width``, ``image/channels`` and
``image/colorspace`` are ignored (the decoded image is the truth).

Like the census CSV reader (trainer/data.py), :func:`scan_images` runs once before training: it reads every
record, checks the features, the label and that the image decodes (with the op and arguments the pipeline
uses, so what the model sees is exactly what the scan counted), derives the classes, and raises a one-line
:class:`~trainer.data.DataError` naming the file and record of the first bad record, or skips and reports up
to ``max_bad_records`` of them. Skipped records are left out of the pipeline by (file, record) key. A file
that is not a TFRecord file (or has a corrupt/truncated record) always fails: nothing after the damage can
be read reliably.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trainer.data import DataError, op_reason

ENCODED, LABEL, TEXT = "image/encoded", "image/class/label", "image/class/text"
REQUIRED = ((ENCODED, "bytes_list"), (LABEL, "int64_list"), (TEXT, "bytes_list"))
MALFORMED = "malformed record: "
BAD_LABEL = "bad label: "
UNDECODABLE = "undecodable image: "
SCALES = ("unit", "symmetric", "raw")  # pixels to [0, 1], to [-1, 1], or kept in [0, 255]
AUGMENTATIONS = ("flip", "crop")
# Records whose images are decoded together by the scan (bounds its memory on large shards).
_CHUNK = 4096
# Record keys are file_index << _KEY_BITS | record_index (a shard holds far fewer than 2**40 records).
_KEY_BITS = 40
_READ_BATCH = 256  # records parsed together by the pipeline


@dataclass(frozen=True)
class BadRecord:
    file: str
    record: int  # 0-based position in the file, as TFRecordDataset yields it
    reason: str  # starts with MALFORMED, BAD_LABEL or UNDECODABLE

    def __str__(self) -> str:
        return f"{self.file}: record {self.record}: {self.reason}"


@dataclass(frozen=True)
class ImageScan:
    files: tuple[str, ...]
    records: int  # good records: what the pipeline delivers per epoch
    total_records: int  # every record in the files, bad ones included
    total_bytes: int
    class_names: tuple[str, ...]
    class_counts: tuple[int, ...]  # good records per class
    excluded: np.ndarray  # sorted int64 keys (file_index << 40 | record) of the skipped records
    bad_records: tuple[BadRecord, ...] = ()
    min_size: tuple[int, int] = (0, 0)  # smallest decoded (height, width) seen
    max_size: tuple[int, int] = (0, 0)

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def decoded_bytes(self, image_size: int, channels: int) -> int:
        """Memory the preprocessed float32 images take, e.g. to decide whether to cache them."""
        return self.records * image_size * image_size * channels * 4

    def bad_counts(self) -> dict[str, int]:
        counts = {"malformed": 0, "label": 0, "undecodable": 0}
        for bad in self.bad_records:
            key = ("label" if bad.reason.startswith(BAD_LABEL) else
                   "undecodable" if bad.reason.startswith(UNDECODABLE) else "malformed")
            counts[key] += 1
        return counts

    def summary(self) -> str:
        text = f"{self.records} images in {self.num_classes} classes from {len(self.files)} file(s)"
        if self.bad_records:
            shown = "; ".join(str(b) for b in self.bad_records[:3])
            more = f" (+{len(self.bad_records) - 3} more)" if len(self.bad_records) > 3 else ""
            counts = ", ".join(f"{n} {k}" for k, n in self.bad_counts().items() if n)
            text += f", skipped {len(self.bad_records)} bad record(s) ({counts}): {shown}{more}"
        return text


def expand_globs(patterns: Sequence[str], flag: str) -> tuple[str, ...]:
    """Files matching paths or globs (local or gs://), sorted per pattern, de-duplicated."""
    import tensorflow as tf

    files: list[str] = []
    for pattern in patterns:
        try:
            matches = sorted(m for m in tf.io.gfile.glob(pattern) if not tf.io.gfile.isdir(m))
        except tf.errors.OpError as exc:  # e.g. gs:// without network or credentials
            raise DataError(f"{flag}: cannot list {pattern}: {op_reason(exc)}") from None
        if not matches:
            raise DataError(f"{flag}: no files match {pattern}")
        files.extend(m for m in matches if m not in files)
    return tuple(files)


def decode(encoded, channels: int):
    """Encoded bytes -> uint8 [H, W, channels]; the one decode the scan, pipeline and serving all use.

    ``channels`` converts on decode (grayscale PNG -> RGB for a backbone, RGB JPEG -> grayscale).
    """
    import tensorflow as tf

    image = tf.io.decode_image(encoded, channels=channels, expand_animations=False, dtype=tf.uint8)
    image.set_shape([None, None, channels])
    return image


def finish(image, image_size: int, scale: str):
    """uint8 [.., H, W, C] -> float32 [.., image_size, image_size, C] in the ``scale`` range (a batch too)."""
    import tensorflow as tf

    size = image.shape[-3:-1]
    if size == (image_size, image_size):
        image = tf.cast(image, tf.float32)
    elif None in size:
        # Resizing to the same size changes nothing but costs ~15% of an MNIST-sized pipeline: skip it.
        same = tf.reduce_all(tf.equal(tf.shape(image)[-3:-1], image_size))
        image = tf.cond(same, lambda: tf.cast(image, tf.float32),
                        lambda: tf.image.resize(image, [image_size, image_size]))
        image.set_shape(image.shape[:-3].concatenate([image_size, image_size]).concatenate(image.shape[-1:]))
    else:
        image = tf.image.resize(image, [image_size, image_size])  # bilinear, float32, values still 0..255
    if scale == "unit":
        return image / 255.0
    if scale == "symmetric":
        return image / 127.5 - 1.0
    if scale == "raw":
        return image
    raise ValueError(f"scale must be one of {', '.join(SCALES)}, not {scale!r}")


def preprocess_image(encoded, image_size: int, channels: int, scale: str = "unit"):
    """Encoded bytes -> the float32 [image_size, image_size, channels] image the model sees (eval/serving)."""
    return finish(decode(encoded, channels), image_size, scale)


def _check_example(raw: bytes, classes: int | None) -> tuple[str | None, int, bytes, bytes]:
    """(reason or None, label, encoded, text) for one serialized record, checked in Python (fast, precise)."""
    import tensorflow as tf
    from google.protobuf.message import DecodeError

    try:
        example = tf.train.Example.FromString(raw)
    except DecodeError:
        return MALFORMED + "not a tf.train.Example", 0, b"", b""
    feature = example.features.feature
    values = []
    for key, kind in REQUIRED:
        if key not in feature:
            return MALFORMED + f"missing feature {key!r}", 0, b"", b""
        found = feature[key].WhichOneof("kind")
        if found != kind:
            found = found or "feature without values"
            return MALFORMED + f"feature {key!r} is a {found}, expected {kind}", 0, b"", b""
        value = getattr(feature[key], kind).value
        if len(value) != 1:
            return MALFORMED + f"feature {key!r} has {len(value)} values, expected 1", 0, b"", b""
        values.append(value[0])
    encoded, label, text = values
    if label < 0 or (classes is not None and label >= classes):
        allowed = f"0..{classes - 1}" if classes is not None else "0 or more"
        return BAD_LABEL + f"label {label} is outside {allowed}", 0, b"", b""
    return None, label, encoded, text


def _decode_sizes(encoded: list[bytes], channels: int) -> dict[int, tuple[int, int]]:
    """{position: (height, width)} of the images that decode; the others are missing. Parallel, in tf.data."""
    import tensorflow as tf

    def size(i, data):
        shape = tf.shape(decode(data, channels))
        # An empty image would decode but fail to resize: make it fail here like an undecodable one.
        tf.debugging.assert_positive(shape[0] * shape[1], message="empty image")
        return i, shape[0], shape[1]

    ds = tf.data.Dataset.from_tensor_slices(tf.constant(encoded, tf.string)).enumerate()
    ds = ds.map(size, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False).ignore_errors()
    return {int(i): (int(h), int(w)) for i, h, w in ds.batch(1024).as_numpy_iterator()
            for i, h, w in zip(i, h, w, strict=True)}


def _op_reason(exc) -> str:
    """An iterator error's first line without TensorFlow's "{{function_node ...}}" and "[Op:...]" noise."""
    return re.sub(r"\{\{[^}]*\}\}\s*|\s*\[Op:.*$", "", op_reason(exc)).strip() or type(exc).__name__


def _records(path: str, size: int, flag: str):
    """Yield the serialized records of one file; a damaged file is a one-line DataError."""
    import tensorflow as tf

    index = offset = 0
    try:
        # Batched reads: per-element iteration in eager mode costs more than the checks.
        for block in tf.data.TFRecordDataset(path).batch(256).as_numpy_iterator():
            yield from block
            index += len(block)
            offset += sum(len(r) for r in block) + 16 * len(block)  # length, 2 CRCs and data per record
    except tf.errors.DataLossError as exc:
        # The batch being read when the damage was found is lost: find the exact record by reading one by one.
        index = 0
        try:
            for _ in tf.data.TFRecordDataset(path).as_numpy_iterator():
                index += 1
        except tf.errors.DataLossError:
            pass
        raise DataError(f"{path}: not a TFRecord file, or record {index} is corrupt or truncated "
                        f"({_op_reason(exc)})") from None
    except tf.errors.OpError as exc:
        raise DataError(f"{flag + ': ' if flag else ''}cannot read {path}: {_op_reason(exc)}") from None
    if offset != size:  # TFRecordDataset reads a file cut inside a record's length header as a clean end
        raise DataError(f"{path}: not a TFRecord file, or record {index} is corrupt or truncated "
                        f"({size - offset} stray bytes at the end)")


def scan_images(files: Sequence[str], *, channels: int = 3, num_classes: int | None = None,
                class_names: Sequence[str] | None = None, max_bad_records: int = 0,
                flag: str = "") -> ImageScan:
    """Validate every record of ``files``; raise DataError at the first bad record beyond ``max_bad_records``.

    The classes come from ``class_names`` (their number fixes the label range), else ``num_classes`` (names
    from the records' text), else the data: labels must then cover 0..max without gaps. One label with two
    different texts is a bad label (the first text seen wins). ``channels`` is the decode the pipeline will
    use (1 or 3).
    """
    import tensorflow as tf

    if channels not in (1, 3):
        raise ValueError(f"channels must be 1 or 3, not {channels}")
    if class_names is not None:
        if num_classes is not None and num_classes != len(class_names):
            raise ValueError(f"num_classes {num_classes} != {len(class_names)} class names")
        num_classes = len(class_names)
    texts: dict[int, tuple[bytes, str]] = {}  # label -> (text, where it was first seen)
    counts: dict[int, int] = {}
    bad: list[BadRecord] = []
    excluded: list[int] = []
    total = total_bytes = 0
    lo, hi = [2**31, 2**31], [0, 0]

    def budget_check():
        if len(bad) > max_bad_records:
            hint = (f"more than max_bad_records={max_bad_records} bad records" if max_bad_records
                    else "set max_bad_records to skip bad records")
            raise DataError(f"{bad[max_bad_records]} ({hint})")

    for file_index, path in enumerate(files):
        try:
            size = tf.io.gfile.stat(path).length
        except tf.errors.OpError as exc:
            raise DataError(f"{flag + ': ' if flag else ''}cannot read {path}: {op_reason(exc)}") from None
        total_bytes += size
        stream = _records(path, size, flag)
        index = 0
        while True:
            chunk = []  # (record index, label, encoded) of records that passed the feature checks
            chunk_bad: list[BadRecord] = []
            for raw in stream:
                reason, label, encoded, text = _check_example(raw, num_classes)
                if reason is None:
                    first = texts.setdefault(label, (text, f"{path}: record {index}"))
                    if first[0] != text:
                        reason = (BAD_LABEL + f"text {text.decode(errors='replace')!r} for label {label}, "
                                  f"but {first[0].decode(errors='replace')!r} at {first[1]}")
                if reason is None:
                    chunk.append((index, label, encoded))
                else:
                    chunk_bad.append(BadRecord(path, index, reason))
                index += 1
                if len(chunk) == _CHUNK:
                    break
            sizes = _decode_sizes([c[2] for c in chunk], channels) if chunk else {}
            for position, (record, label, _) in enumerate(chunk):
                if position in sizes:
                    counts[label] = counts.get(label, 0) + 1
                    h, w = sizes[position]
                    lo, hi = [min(lo[0], h), min(lo[1], w)], [max(hi[0], h), max(hi[1], w)]
                else:
                    chunk_bad.append(BadRecord(path, record, UNDECODABLE + f"not a {channels}-channel "
                                               "JPEG/PNG/GIF/BMP image that decodes"))
            chunk_bad.sort(key=lambda b: b.record)
            bad.extend(chunk_bad)
            excluded.extend(file_index << _KEY_BITS | b.record for b in chunk_bad)
            budget_check()
            if len(chunk) < _CHUNK:
                break
        total += index
    records = sum(counts.values())
    where = f"{flag + ': ' if flag else ''}{', '.join(files)}"
    if records == 0:
        raise DataError(f"{where}: no usable records")
    if class_names is None:
        if num_classes is None:
            num_classes = max(counts) + 1
            missing = sorted(set(range(num_classes)) - set(counts))
            if missing:
                raise DataError(f"{where}: no records with label(s) {', '.join(map(str, missing[:10]))} "
                                f"of 0..{num_classes - 1}: pass the class names or the number of classes")
        class_names = [texts[i][0].decode(errors="replace") if i in texts else str(i)
                       for i in range(num_classes)]
    return ImageScan(
        files=tuple(files), records=records, total_records=total, total_bytes=total_bytes,
        class_names=tuple(class_names), class_counts=tuple(counts.get(i, 0) for i in range(num_classes)),
        excluded=np.asarray(sorted(excluded), dtype=np.int64), bad_records=tuple(bad),
        min_size=tuple(lo), max_size=tuple(hi),
    )


def _encoded_records(scan: ImageScan, *, shuffle_files: bool, seed: int, in_order: bool = False):
    """(encoded image, int32 label) of the good records: files read in parallel (interleaved a read batch
    at a time, in a fixed order unless shuffling), or one after the other with ``in_order``.

    Records are parsed and the skipped ones dropped a whole read batch at a time (vectorized: per-record
    parsing would cost more than decoding an MNIST image).
    """
    import tensorflow as tf

    spec = {ENCODED: tf.io.FixedLenFeature([], tf.string), LABEL: tf.io.FixedLenFeature([], tf.int64)}
    excluded = tf.constant(scan.excluded if scan.excluded.size else np.array([-1], np.int64))

    def read(path, file_index):
        return tf.data.TFRecordDataset(path).batch(_READ_BATCH).enumerate().map(
            lambda b, raw: (tf.bitwise.left_shift(file_index, _KEY_BITS) + b * _READ_BATCH, raw))

    def parse(first_key, raw):
        if scan.excluded.size:  # before parsing: a skipped record may not parse at all
            keys = first_key + tf.range(tf.size(raw, out_type=tf.int64), dtype=tf.int64)
            pos = tf.minimum(tf.searchsorted(excluded, keys), tf.size(excluded) - 1)
            raw = tf.boolean_mask(raw, tf.not_equal(tf.gather(excluded, pos), keys))
        parsed = tf.io.parse_example(raw, spec)
        return parsed[ENCODED], tf.cast(parsed[LABEL], tf.int32)

    files = tf.data.Dataset.from_tensor_slices((list(scan.files), tf.range(len(scan.files), dtype=tf.int64)))
    if shuffle_files:
        files = files.shuffle(len(scan.files), seed=seed, reshuffle_each_iteration=True)
    ds = files.interleave(read, cycle_length=1 if in_order else min(len(scan.files), 8),
                          num_parallel_calls=tf.data.AUTOTUNE, deterministic=not shuffle_files)
    return ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).unbatch()


def _augmenter(augment: Sequence[str], image_size: int, seed: int):
    """A per-image map: random left-right flip and/or a random crop of 80-100% of the side, resized back."""
    import tensorflow as tf

    unknown = set(augment) - set(AUGMENTATIONS)
    if unknown:
        raise ValueError(f"unknown augmentation(s) {sorted(unknown)}; choose from {', '.join(AUGMENTATIONS)}")

    def apply(image, label):
        if "flip" in augment:
            image = tf.image.random_flip_left_right(image, seed=seed)
        if "crop" in augment:
            side = tf.cast(tf.random.uniform([], 0.8, 1.0, seed=seed + 1) * image_size, tf.int32)
            image = tf.image.random_crop(image, tf.stack([side, side, tf.shape(image)[-1]]), seed=seed + 2)
            image = tf.image.resize(image, [image_size, image_size])
        return image, label

    return apply


def _finalize(ds, *, records: int, batch_size: int, shuffle: bool, buffer: int, seed: int, augment,
              image_size: int, drop_remainder: bool, repeat: bool, deterministic: bool = True):
    import tensorflow as tf

    if shuffle:
        ds = ds.shuffle(buffer, seed=seed, reshuffle_each_iteration=True)
    if augment:
        ds = ds.map(_augmenter(augment, image_size, seed), num_parallel_calls=tf.data.AUTOTUNE)
    if repeat:
        ds = ds.repeat()
    ds = ds.batch(batch_size, drop_remainder=drop_remainder, num_parallel_calls=tf.data.AUTOTUNE)
    options = tf.data.Options()
    # Every worker reads all files and keeps its share: image datasets often have fewer shards than workers.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    # A seeded shuffle repeats exactly; only streaming (uncached) training trades that for throughput.
    options.deterministic = deterministic
    return ds.with_options(options).prefetch(tf.data.AUTOTUNE)


def image_dataset(scan: ImageScan, *, image_size: int, channels: int, batch_size: int, scale: str = "unit",
                  training: bool = False, augment: Sequence[str] = (), seed: int = 0,
                  cache_limit_mb: int = 1024, shuffle_buffer: int = 4096, drop_remainder: bool = False,
                  repeat: bool = False):
    """Batches of (float32 [B, image_size, image_size, channels], int32 [B] labels) from the scanned files.

    ``batch_size`` is the GLOBAL batch (a distribution strategy splits it across replicas);
    ``drop_remainder`` gives static batch shapes (TPU). ``training`` shuffles (seeded) and applies ``augment``
    (a subset of ``AUGMENTATIONS``; never at eval). When the preprocessed images fit ``cache_limit_mb`` they
    are decoded once and cached in memory, shuffled across the whole set; otherwise records are shuffled
    (``shuffle_buffer`` of them, still encoded) before decoding, every epoch. A seeded cached pipeline
    repeats its order exactly; an uncached training one lets parallel decoding reorder for throughput.
    """
    import tensorflow as tf

    if scale not in SCALES:
        raise ValueError(f"scale must be one of {', '.join(SCALES)}, not {scale!r}")
    cache = scan.decoded_bytes(image_size, channels) <= cache_limit_mb << 20

    def load(encoded, label):
        return preprocess_image(encoded, image_size, channels, scale), label

    ds = _encoded_records(scan, shuffle_files=training and not cache, seed=seed)
    if training and not cache:
        ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    ds = ds.map(load, num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.apply(tf.data.experimental.assert_cardinality(scan.records))
    if cache:
        ds = ds.cache()
    return _finalize(ds, records=scan.records, batch_size=batch_size, shuffle=training and cache,
                     buffer=scan.records, seed=seed, augment=augment if training else (),
                     image_size=image_size, drop_remainder=drop_remainder, repeat=repeat,
                     deterministic=cache or not training)


def read_arrays(scan: ImageScan, channels: int):
    """The scan's good records decoded into memory: (uint8 [N, H, W, channels], int32 [N] labels), in file
    order. Every image must have the same size (e.g. MNIST); for small data and benchmarks."""
    import tensorflow as tf

    if scan.min_size != scan.max_size:
        raise DataError(f"images range from {scan.min_size} to {scan.max_size} (height, width): "
                        "read_arrays needs one size")

    def load(encoded, label):
        return decode(encoded, channels), label

    ds = _encoded_records(scan, shuffle_files=False, seed=0, in_order=True)
    ds = ds.map(load, num_parallel_calls=tf.data.AUTOTUNE)
    images, labels = [], []
    for x, y in ds.batch(1024).as_numpy_iterator():
        images.append(x)
        labels.append(y)
    return np.concatenate(images), np.concatenate(labels)


def array_dataset(images, labels, *, image_size: int, batch_size: int, scale: str = "unit",
                  training: bool = False, augment: Sequence[str] = (), seed: int = 0,
                  drop_remainder: bool = False, repeat: bool = False):
    """:func:`image_dataset` for images already in memory (uint8 [N, H, W, C] as :func:`read_arrays` gives):
    the same resize, scale, shuffle, augmentation and batching, with the preprocessing done once up front."""
    import tensorflow as tf

    x = finish(tf.convert_to_tensor(images), image_size, scale)
    ds = tf.data.Dataset.from_tensor_slices((x, tf.convert_to_tensor(labels, tf.int32)))
    return _finalize(ds, records=len(labels), batch_size=batch_size, shuffle=training, buffer=len(labels),
                     seed=seed, augment=augment if training else (), image_size=image_size,
                     drop_remainder=drop_remainder, repeat=repeat)
