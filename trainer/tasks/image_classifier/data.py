"""Image classification input: TFRecord shards of tf.train.Examples in the flowers schema, a validating scan
and the tf.data pipeline (plus an in-memory variant with the same preprocessing).

The schema (TF-Slim / TFDS ``image_classification_builder``, also used for MNIST here): ``image/encoded``
(JPEG/PNG/GIF/BMP bytes), ``image/class/label`` (int64) and ``image/class/text`` (bytes) are required; the
optional ``image/filename``, ``image/format``, ``image/height``, ``image/width``, ``image/channels`` and
``image/colorspace`` are ignored (the decoded image is the truth).

Validation runs before training, in two passes over this worker's share of the files (see
:mod:`trainer.sharding`; every worker checks only its own records and the workers combine what they found
with ``Shard.exchange``):

1. :func:`scan_images` parses every record a read batch at a time in parallel tf.data (no Python per
   record): the features, the label (range, one text per label), and the image's format and size from its
   header (PNG/GIF/BMP header fields, ``tf.io.extract_jpeg_shape``), which fixes the image size and what a
   cache would hold before anything is decoded. A file whose batch fails to parse is re-read record by
   record in Python to name the exact record and reason.
2. :func:`load_images` decodes every record once to check it (a JPEG at 1/8 scale, with the same verdict:
   see :func:`_checked`) and keeps no pixels. When the preprocessed images fit the cache budget, the
   training pipeline's first pass over the share decodes them with :func:`decode` as it trains and fills
   the cache, which later passes gather from (:func:`image_dataset`): nothing is decoded for the cache
   before the first step, in a run that checks the data or one that reuses kept checks
   (:func:`load_kept_scans`).
   ``scan_images(decode=True)`` runs both passes.

Every record's cost is bounded before it is paid: each file's record length headers are read before
TensorFlow reads the file (at most MAX_RECORD_BYTES a record, none past the end; a GZIP file is named as
one), an image's header size (and a GIF's frames) must be within MAX_IMAGE_PIXELS before it is decoded,
and labels without declared classes below MAX_CLASSES: an image or label over its bound is a bad record.

A bad record is a one-line :class:`~trainer.data.DataError` naming the file and record, or is skipped and
reported while at most ``max_bad_records`` are bad (across all workers). Malformed and mislabelled records
are found by the first pass, undecodable images by the second: with several bad records and no budget the
one named is the first of the earliest pass that found any. Skipped records are left out of the pipeline
by (file, record) key. A file that is not a TFRecord file (or has a corrupt/truncated record) always fails:
nothing after the damage can be read reliably.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from trainer.data import DataError, cache_budget, check_file_count, local_files, name_files, op_reason
from trainer.sharding import PREFETCH_BATCHES, UNSHARDED, Shard, dataset_options, untuned

ENCODED, LABEL, TEXT = "image/encoded", "image/class/label", "image/class/text"
REQUIRED = ((ENCODED, "bytes_list"), (LABEL, "int64_list"), (TEXT, "bytes_list"))
MALFORMED = "malformed record: "
BAD_LABEL = "bad label: "
UNDECODABLE = "undecodable image: "
SCALES = ("unit", "symmetric", "raw")  # pixels to [0, 1], to [-1, 1], or kept in [0, 255]
AUGMENTATIONS = ("flip", "crop")
# Record keys are file_index << _KEY_BITS | record_index (a shard holds far fewer than 2**40 records); the
# file index is the file's position in the whole split's list, the same on every worker.
_KEY_BITS = 40
_READ_BATCH = 256  # records the training pipeline reads and parses together
# Records larger than this on average are photos, decoded one per tf.data element (see _decoded).
_PHOTO_BYTES = 8 << 10
_FILL_BYTES = 4 << 20  # decoded bytes a batch of the cache's filling pass holds at most (see _filling_cache)
_CHECK_BATCH = 1024  # records the two checking passes read, parse and check together (~15% less CPU than 256)
# A share of at most this many bytes is checked record by record in Python: building and starting the
# parallel pipelines costs ~0.5 s of tracing each, more than checking a few hundred small records.
_SMALL_BYTES = 256 << 10
# Magic bytes tf.io.decode_image recognises (tensorflow/core/kernels/image/decode_image_op.cc).
_JPEG, _PNG, _GIF, _BMP = b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"GIF8", b"BM"
_GZIP = b"\x1f\x8b"
# The largest TFRecord record read (an encoded image and its labels): checked from the length headers
# before TensorFlow reads a file (see _check_framing).
MAX_RECORD_BYTES = 64 << 20
# The most pixels one image may take to decode, from its header before it is decoded (a GIF: its screen and
# every frame, which giflib decodes before TensorFlow keeps the first). 50 megapixels is a 48 MP camera's
# photo, 150 MB as RGB; a decompression bomb (a 1.5 MB PNG of 23000x23000) is a bad record instead.
MAX_IMAGE_PIXELS = 50_000_000
# The most classes labels may imply when neither the names nor the number of classes are given (a label of
# 2**62 would otherwise make a class list of that length).
MAX_CLASSES = 100_000


@dataclass(frozen=True)
class BadRecord:
    file: str
    record: int  # 0-based position in the file, as TFRecordDataset yields it
    reason: str  # starts with MALFORMED, BAD_LABEL or UNDECODABLE

    def __str__(self) -> str:
        return f"{self.file}: record {self.record}: {self.reason}"


@dataclass(frozen=True)
class ImageScan:
    files: tuple[str, ...]  # the whole split's files (every worker's)
    records: int  # good records of all workers: what one epoch delivers across the cluster
    total_records: int  # every record in the files, bad ones included
    total_bytes: int
    class_names: tuple[str, ...]
    class_counts: tuple[int, ...]  # good records per class
    excluded: np.ndarray  # sorted int64 keys (file_index << 40 | record) of this worker's skipped records
    bad_records: tuple[BadRecord, ...] = ()  # every worker's, in file order
    min_size: tuple[int, int] = (0, 0)  # smallest (height, width) seen
    max_size: tuple[int, int] = (0, 0)
    # This worker's share: the files it reads (indices into ``files``), and in by-record sharding the
    # records it keeps (record % stride == offset, decided before parsing).
    file_indices: tuple[int, ...] | None = None  # None: all
    stride: int = 1
    offset: int = 0
    file_records: tuple[int, ...] = ()  # records in each of this worker's files
    local_records: int | None = None  # good records in this worker's share (None: all of them)
    records_read: int = 0  # records this worker parsed and checked (its share)
    decoded: bool = False  # every good record's image decoded (load_images ran)
    # Between the passes: this worker's good keys, and its text conflicts still to be reported.
    good_keys: np.ndarray | None = field(default=None, repr=False, compare=False)
    pending: tuple = field(default=(), repr=False, compare=False)

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def share_records(self) -> int:
        return self.records if self.local_records is None else self.local_records

    @property
    def local_files(self) -> tuple[tuple[int, str], ...]:
        indices = range(len(self.files)) if self.file_indices is None else self.file_indices
        return tuple((i, self.files[i]) for i in indices)

    def held_bytes(self, image_size: int, channels: int) -> int:
        """Memory this worker's cache of preprocessed images takes: uint8 pixels when every image already
        has the model's size (nothing to resize: the cache keeps the decoded bytes and scales per batch),
        else the resized float32 images."""
        same = self.min_size == self.max_size == (image_size, image_size)
        return self.share_records * image_size * image_size * channels * (1 if same else 4)

    def bad_counts(self) -> dict[str, int]:
        counts = {"malformed": 0, "label": 0, "undecodable": 0}
        for bad in self.bad_records:
            key = ("label" if bad.reason.startswith(BAD_LABEL) else
                   "undecodable" if bad.reason.startswith(UNDECODABLE) else "malformed")
            counts[key] += 1
        return counts

    def share(self) -> dict:
        """This worker's share, for the report and the log."""
        return {"files": len(self.local_files), "of_files": len(self.files), "records": self.share_records,
                "of_records": self.records, "records_read": self.records_read,
                "by_record": self.stride > 1}

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

    files: dict[str, None] = {}  # insertion-ordered and de-duplicated in linear time
    for pattern in patterns:
        try:
            matches = sorted(tf.io.gfile.glob(pattern))
            # Local matches: regular files only (a FIFO would block the reader forever); see local_files.
            if "://" in pattern:
                check_file_count(matches, [pattern], flag)
                matches = [m for m in matches if not tf.io.gfile.isdir(m)]
            else:
                matches = local_files(matches, pattern, flag)
        except tf.errors.OpError as exc:  # e.g. gs:// without network or credentials
            raise DataError(f"{flag}: cannot list {pattern}: {op_reason(exc)}") from None
        if not matches:
            raise DataError(f"{flag}: no files match {pattern}")
        files.update(dict.fromkeys(matches))
        check_file_count(files, patterns, flag)
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
    if label < 0 or label >= (MAX_CLASSES if classes is None else classes):
        return _label_reason(label, classes), 0, b"", b""
    return None, label, encoded, text


def _label_reason(label: int, classes: int | None) -> str:
    if classes is None:
        return BAD_LABEL + f"label {label} is outside 0..{MAX_CLASSES - 1} (at most {MAX_CLASSES} classes)"
    return BAD_LABEL + f"label {label} is outside 0..{classes - 1}"


def _undecodable(channels: int) -> str:
    return UNDECODABLE + f"not a {channels}-channel JPEG/PNG/GIF/BMP image that decodes"


def _header_size(encoded: bytes) -> tuple[int, int]:
    """(height, width) from an image's header, as :func:`_header_sizes` reads it; (0, 0) when the bytes are
    no JPEG/PNG/GIF/BMP image or its header is damaged."""
    data = encoded + b"\0" * 26
    if encoded.startswith(_PNG):
        return int.from_bytes(data[20:24], "big"), int.from_bytes(data[16:20], "big")
    if encoded.startswith(_GIF):
        return int.from_bytes(data[8:10], "little"), int.from_bytes(data[6:8], "little")
    if encoded.startswith(_BMP):
        height = int.from_bytes(data[22:26], "little", signed=True)
        return abs(height), int.from_bytes(data[18:22], "little", signed=True)
    if encoded.startswith(_JPEG):
        import tensorflow as tf  # for JPEGs only: the server (serving/) checks every string a request sends

        try:
            height, width, _ = tf.io.extract_jpeg_shape(encoded).numpy().tolist()
            return height, width
        except tf.errors.OpError:
            return 0, 0
    return 0, 0


def _decode_pixels(encoded: bytes, height: int, width: int) -> int:
    """Pixels decoding ``encoded`` takes: height x width from its header, and for a GIF its screen plus
    every frame's raster (each frame descriptor's own size; see :func:`_gif_frames`)."""
    if encoded.startswith(_GIF):
        return height * width + sum(w * h for w, h in _gif_frames(encoded))
    return height * width


def image_pixels(encoded: bytes) -> int:
    """Pixels ``tf.io.decode_image`` would allocate for ``encoded``, read from its header without decoding
    (0 for bytes that are no JPEG/PNG/GIF/BMP image): what the prediction server (serving/) holds a
    request's images to, as the scan holds a record to MAX_IMAGE_PIXELS."""
    return _decode_pixels(encoded, *_header_size(encoded))


def _gif_frames(data: bytes) -> list[tuple[int, int]]:
    """(width, height) of each frame of a GIF, from its image descriptors (the data sub-blocks are skipped,
    not decoded). Stops where the structure is damaged: the decode then fails on it."""
    frames = []
    end = len(data)
    pos = 13
    if end > 10 and data[10] & 0x80:  # a global colour table
        pos += 3 * (2 << (data[10] & 7))

    def skip_blocks(pos):
        while pos < end:
            size = data[pos]
            pos += 1 + size
            if not size:
                break
        return pos

    while pos < end:
        kind = data[pos]
        if kind == 0x21:  # an extension: label, then sub-blocks
            pos = skip_blocks(pos + 2)
        elif kind == 0x2C and pos + 10 <= end:  # an image descriptor
            frames.append((int.from_bytes(data[pos + 5:pos + 7], "little"),
                           int.from_bytes(data[pos + 7:pos + 9], "little")))
            flags = data[pos + 9]
            pos += 10 + (3 * (2 << (flags & 7)) if flags & 0x80 else 0)
            pos = skip_blocks(pos + 1)  # after the LZW code size
        else:  # the trailer, or damage
            break
    return frames


def _header_sizes(encoded):
    """int64 [N, 2] (height, width) of a batch of encoded images from their headers, vectorised; (0, 0) for
    bytes that are no JPEG/PNG/GIF/BMP image. A damaged JPEG header fails the whole batch (its file is then
    checked record by record with :func:`_header_size`)."""
    import tensorflow as tf

    head = tf.cast(tf.io.decode_raw(tf.strings.substr(tf.strings.join([encoded, b"\0" * 26]), 0, 26),
                                    tf.uint8), tf.int64)  # [N, 26]: the first bytes, zero-padded

    def number(offset, length, big_endian):
        weights = 256 ** tf.range(length, dtype=tf.int64)
        return tf.reduce_sum(head[:, offset:offset + length] * (weights[::-1] if big_endian else weights), 1)

    def signed32(value):
        return tf.where(value >= 2**31, value - 2**32, value)

    def starts(magic):
        return tf.equal(tf.strings.substr(encoded, 0, len(magic)), magic)

    png, gif, bmp = starts(_PNG), starts(_GIF), starts(_BMP)
    zero = tf.zeros_like(png, tf.int64)
    height = tf.where(png, number(20, 4, True), tf.where(gif, number(8, 2, False), tf.where(
        bmp, tf.abs(signed32(number(22, 4, False))), zero)))
    width = tf.where(png, number(16, 4, True), tf.where(gif, number(6, 2, False), tf.where(
        bmp, signed32(number(18, 4, False)), zero)))
    where = tf.where(starts(_JPEG))
    shapes = tf.map_fn(lambda e: tf.io.extract_jpeg_shape(e, tf.int64)[:2], tf.gather_nd(encoded, where),
                       fn_output_signature=tf.TensorSpec([2], tf.int64))
    return tf.tensor_scatter_nd_update(tf.stack([height, width], axis=1), where, shapes)


def _plain(fn):
    """``fn`` for tf.data without AutoGraph: its Python control flow is all decided while tracing, and
    converting it costs more than the tracing itself (a second per pipeline on small data)."""
    import tensorflow as tf

    return tf.autograph.experimental.do_not_convert(fn)


def _op_reason(exc) -> str:
    """An iterator error's first line without TensorFlow's "{{function_node ...}}" and "[Op:...]" noise."""
    return re.sub(r"\{\{[^}]*\}\}\s*|\s*\[Op:.*$", "", op_reason(exc)).strip() or type(exc).__name__


def _damaged(path: str, record: int, reason: str) -> DataError:
    return DataError(f"{path}: not a TFRecord file, or record {record} is corrupt or truncated ({reason})")


def _check_framing(path: str, size: int, flag: str) -> None:
    """Walk the file's record headers (an 8-byte little-endian length, its 4-byte CRC, then the data and its
    CRC) before TensorFlow reads it: a length over MAX_RECORD_BYTES, or past the end of the file, is refused
    here. TFRecordDataset allocates whatever a length header claims before reading the data (a claim of
    6 GB, 1 TB or 2 EB ends the process with signal 11). The CRCs stay TensorFlow's to check. A file cut
    inside a header is left to :func:`_records`, which words it. Costs a seek and a 12-byte read a record."""
    import struct

    import tensorflow as tf

    offset = record = 0
    try:
        with (tf.io.gfile.GFile(path, "rb") if "://" in path else open(path, "rb")) as f:
            while offset + 12 <= size:
                f.seek(offset)
                head = f.read(12)
                if record == 0 and head.startswith(_GZIP):
                    raise DataError(f"{path}: not a TFRecord file: it starts with GZIP's magic bytes; a "
                                    "compressed TFRecord file is not read, decompress it (gunzip) first")
                if len(head) < 12:
                    return
                (length,) = struct.unpack("<Q", head[:8])
                if length > MAX_RECORD_BYTES:
                    raise _damaged(path, record, f"its length header claims {length} bytes, more than the "
                                                 f"{MAX_RECORD_BYTES} a record may hold")
                if offset + 16 + length > size:
                    raise _damaged(path, record, f"its length header claims {length} bytes, past the end of "
                                                 f"the file ({size - offset - 16} left)")
                offset += 16 + length
                record += 1
    except (OSError, tf.errors.OpError) as exc:
        reason = op_reason(exc) if isinstance(exc, tf.errors.OpError) else exc.strerror or str(exc)
        raise DataError(f"{flag + ': ' if flag else ''}cannot read {path}: {reason}") from None


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


def _budget_error(bad: list, n_bad: int, max_bad_records: int) -> DataError | None:
    """The error for ``n_bad`` bad records (``bad``: the first ones in file order) beyond the budget."""
    if n_bad <= max_bad_records:
        return None
    hint = (f"more than max_bad_records={max_bad_records} bad records" if max_bad_records
            else "set max_bad_records to skip bad records")
    return DataError(f"{bad[max_bad_records]} ({hint})")


def _exchange(shard: Shard, value: dict) -> list[dict]:
    """``shard.exchange`` of ``value``, then the first worker's error (if any worker had one) raised on every
    worker alike, so that none is left waiting in a later collective."""
    values = shard.exchange(value)
    errors = [v["error"] for v in values if v.get("error")]
    if errors:
        raise DataError(errors[0])
    return values


@dataclass
class _Found:
    """What one worker's first pass found in its share."""

    keys: list = field(default_factory=list)  # int64 arrays of good records
    labels: list = field(default_factory=list)
    hashes: list = field(default_factory=list)
    heights: list = field(default_factory=list)
    widths: list = field(default_factory=list)
    bad: list = field(default_factory=list)  # (key, reason)
    candidates: dict = field(default_factory=dict)  # (label, text hash) -> (first key, text)
    total: int = 0
    read: int = 0

    def add(self, file_index: int, path: str, records, labels, hashes, texts, sizes, pixels, classes,
            channels):
        """One file's (or batch's) parsed records: label range and header checks (``pixels``: what each
        image takes to decode, see :func:`_decode_pixels`), vectorised."""
        keys = (np.int64(file_index) << _KEY_BITS) + records
        self.read += len(keys)
        bad_label = (labels < 0) | (labels >= (MAX_CLASSES if classes is None else classes))
        empty = ~bad_label & ((sizes[:, 0] <= 0) | (sizes[:, 1] <= 0))
        huge = ~bad_label & ~empty & (pixels > MAX_IMAGE_PIXELS)
        for i in np.flatnonzero(bad_label):
            self.bad.append((int(keys[i]), _label_reason(int(labels[i]), classes)))
        for i in np.flatnonzero(empty):
            self.bad.append((int(keys[i]), _undecodable(channels)))
        for i in np.flatnonzero(huge):
            self.bad.append((int(keys[i]), UNDECODABLE + f"{sizes[i, 1]}x{sizes[i, 0]} (width x height) "
                             f"takes {int(pixels[i])} pixels to decode, more than the {MAX_IMAGE_PIXELS} an "
                             "image may take"))
        good = ~(bad_label | empty | huge)
        keys, labels, hashes, sizes = keys[good], labels[good], hashes[good], sizes[good]
        texts = np.asarray(texts, dtype=object)[good]
        self.keys.append(keys)
        self.labels.append(labels)
        self.hashes.append(hashes)
        self.heights.append(sizes[:, 0])
        self.widths.append(sizes[:, 1])
        if len(keys):
            _, first = np.unique(np.stack([labels, hashes], axis=1), axis=0, return_index=True)
            for i in first:
                pair = (int(labels[i]), int(hashes[i]))
                if pair not in self.candidates or self.candidates[pair][0] > keys[i]:
                    self.candidates[pair] = (int(keys[i]), bytes(texts[i]))

    def arrays(self):
        def cat(parts, dtype=np.int64):
            return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)

        order = np.argsort(cat(self.keys), kind="stable")
        return tuple(cat(p)[order] for p in (self.keys, self.labels, self.hashes, self.heights, self.widths))


def _text_hashes(texts):
    import tensorflow as tf

    return tf.strings.to_hash_bucket_fast(texts, 2**62)


def _scan_files(files: Sequence[str], local: Sequence[tuple[int, str]], stride: int, offset: int,
                classes: int | None, channels: int, flag: str) -> tuple[_Found, list[int], int]:
    """First pass over this worker's files: (what it found, records per file, bytes read)."""
    import tensorflow as tf

    if not local:
        return _Found(), [], 0
    sizes = {}
    for index, path in local:
        try:
            sizes[index] = tf.io.gfile.stat(path).length
        except tf.errors.OpError as exc:
            raise DataError(f"{flag + ': ' if flag else ''}cannot read {path}: {op_reason(exc)}") from None
        _check_framing(path, sizes[index], flag)
    if sum(sizes.values()) <= _SMALL_BYTES:
        found, counts = _Found(), []
        for index, path in local:
            counts.append(_scan_file_slowly(found, index, path, sizes[index], stride, offset, classes,
                                            channels, flag))
            found.total += counts[-1] if stride == 1 else len(range(offset, counts[-1], stride))
        return found, counts, sum(sizes.values())
    spec = {ENCODED: tf.io.FixedLenFeature([], tf.string), LABEL: tf.io.FixedLenFeature([], tf.int64),
            TEXT: tf.io.FixedLenFeature([], tf.string)}

    def read(path, index):
        return tf.data.TFRecordDataset(path).batch(_CHECK_BATCH).enumerate().map(
            lambda b, raw: (index, b, raw))

    def check(index, batch, raw):
        count = tf.size(raw, out_type=tf.int64)
        nbytes = tf.reduce_sum(tf.cast(tf.strings.length(raw), tf.int64)) + 16 * count
        records = batch * _CHECK_BATCH + tf.range(count, dtype=tf.int64)
        if stride > 1:  # by-record sharding: keep this worker's records before parsing them
            mine = tf.equal(records % stride, offset)
            raw, records = tf.boolean_mask(raw, mine), tf.boolean_mask(records, mine)
        parsed = tf.io.parse_example(raw, spec)
        # GIFs come back whole: their frames are counted in Python (see _decode_pixels).
        gif = tf.equal(tf.strings.substr(parsed[ENCODED], 0, len(_GIF)), _GIF)
        return (index, batch, count, nbytes, records, parsed[LABEL], _text_hashes(parsed[TEXT]), parsed[TEXT],
                _header_sizes(parsed[ENCODED]), tf.where(gif)[:, 0], tf.boolean_mask(parsed[ENCODED], gif))

    read, check = _plain(read), _plain(check)
    # Any failure (a damaged file, a record that does not parse) drops its batch: the bookkeeping below
    # finds the file, which is then checked record by record in Python for the exact record and reason.
    ds = tf.data.Dataset.from_tensor_slices(([p for _, p in local], [i for i, _ in local]))
    ds = ds.interleave(read, cycle_length=max(1, min(len(local), 8)), num_parallel_calls=tf.data.AUTOTUNE,
                       deterministic=False)
    ds = ds.map(check, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False).ignore_errors()
    parts: dict[int, list] = {i: [] for i, _ in local}
    for item in untuned(ds.prefetch(8)).as_numpy_iterator():
        parts[int(item[0])].append(item[1:])
    found = _Found()
    counts, read_bytes = [], 0
    for index, path in local:
        batches = sorted(parts[index], key=lambda p: p[0])
        complete = ([int(p[0]) for p in batches] == list(range(len(batches)))
                    and sum(int(p[2]) for p in batches) == sizes[index])
        if complete:
            records = 0
            for _, count, _, recs, labels, hashes, texts, shape, gif_at, gifs in batches:
                shape = shape.reshape(-1, 2)
                pixels = shape[:, 0].astype(np.float64) * shape[:, 1]  # sides up to 2**32: no int64 overflow
                for i, encoded in zip(gif_at, gifs, strict=True):
                    pixels[i] = _decode_pixels(encoded, *map(int, shape[i]))
                found.add(index, path, recs, labels, hashes, texts, shape, pixels, classes, channels)
                records += int(count)
        else:
            records = _scan_file_slowly(found, index, path, sizes[index], stride, offset, classes, channels,
                                        flag)
        counts.append(records)
        found.total += records if stride == 1 else len(range(offset, records, stride))
        read_bytes += sizes[index]
    return found, counts, read_bytes


def _scan_file_slowly(found: _Found, index: int, path: str, size: int, stride: int, offset: int,
                      classes: int | None, channels: int, flag: str) -> int:
    """The first pass over one file in Python, a record at a time: exact reasons (and the damage of a file
    that is not a TFRecord file, as a DataError). Returns the file's record count."""
    rows = []
    count = 0
    for record, raw in enumerate(_records(path, size, flag)):
        count += 1
        if record % stride != offset:
            continue
        reason, label, encoded, text = _check_example(raw, classes)
        if reason is not None:
            found.bad.append(((index << _KEY_BITS) + record, reason))
            found.read += 1
            continue
        height, width = _header_size(encoded)
        rows.append((record, label, text, (height, width), float(_decode_pixels(encoded, height, width))))
    if rows:
        records = np.array([r[0] for r in rows], np.int64)
        labels = np.array([r[1] for r in rows], np.int64)
        texts = [r[2] for r in rows]
        hashes = _text_hashes(texts).numpy()
        sizes = np.array([r[3] for r in rows], np.int64)
        found.add(index, path, records, labels, hashes, texts, sizes, np.array([r[4] for r in rows]), classes,
                  channels)
    return count


def _where(files: Sequence[str], key: int) -> tuple[str, int]:
    return files[key >> _KEY_BITS], key & ((1 << _KEY_BITS) - 1)


def _bad(files: Sequence[str], key: int, reason: str) -> BadRecord:
    path, record = _where(files, key)
    return BadRecord(path, record, reason)


def _merged_bad(files: Sequence[str], values: list[dict]) -> tuple[list[tuple[int, str]], int]:
    entries = sorted((int(k), r) for v in values for k, r in v["bad"])
    return entries, sum(v["n_bad"] for v in values)


def scan_images(files: Sequence[str], *, channels: int = 3, num_classes: int | None = None,
                class_names: Sequence[str] | None = None, max_bad_records: int = 0,
                flag: str = "", shard: Shard = UNSHARDED, decode: bool = True) -> ImageScan:
    """Check every record of this worker's share of ``files``; raise DataError at the first bad record
    beyond ``max_bad_records`` (counted over all workers).

    ``files`` is the whole split; this worker reads the files ``shard.files`` deals it (or, with fewer
    files than workers, all files, keeping every ``shard.count``-th record before parsing it). The classes
    come from ``class_names`` (their number fixes the label range), else ``num_classes`` (names from the
    records' text), else the data: labels must then cover 0..max without gaps. One label with two different
    texts is a bad label (the text of the label's first record in file order wins). ``channels`` is the
    decode the pipeline will use (1 or 3). ``decode=False`` stops after the first pass (headers only);
    :func:`load_images` must then decode before training.
    """
    if channels not in (1, 3):
        raise ValueError(f"channels must be 1 or 3, not {channels}")
    if class_names is not None:
        if num_classes is not None and num_classes != len(class_names):
            raise ValueError(f"num_classes {num_classes} != {len(class_names)} class names")
        num_classes = len(class_names)
    files = tuple(files)
    mine, by_record = shard.files(files, flag)
    mine = set(mine)  # once: a set per file would make this quadratic in the number of files
    local = [(i, f) for i, f in enumerate(files) if f in mine]
    stride, offset = (shard.count, shard.index) if by_record else (1, 0)

    value: dict = {"error": None}
    try:
        found, file_records, read_bytes = _scan_files(files, local, stride, offset, num_classes, channels,
                                                      flag)
    except DataError as exc:
        found, file_records, read_bytes = _Found(), [0] * len(local), 0
        value["error"] = str(exc)
    keys, labels, hashes, heights, widths = found.arrays()
    found.bad.sort()
    value.update(
        bad=found.bad[:max_bad_records + 1], n_bad=len(found.bad), total=found.total,
        bytes=read_bytes if stride == 1 or offset == 0 else 0,
        counts={str(k): int(v) for k, v in zip(*np.unique(labels, return_counts=True), strict=True)},
        sizes=[int(heights.min()), int(widths.min()), int(heights.max()), int(widths.max())] if len(keys)
        else None,
        candidates=[[label, str(h), key, text.decode("latin-1")]
                    for (label, h), (key, text) in found.candidates.items()])
    values = _exchange(shard, value)
    bad, n_bad = _merged_bad(files, values)
    error = _budget_error([_bad(files, k, r) for k, r in bad], n_bad, max_bad_records)
    if error:
        raise error

    # The text of each label is its first record's, in file order over all workers.
    canonical: dict[int, tuple[int, int, bytes]] = {}  # label -> (key, hash, text)
    for v in values:
        for label, h, key, text in v["candidates"]:
            if label not in canonical or key < canonical[label][0]:
                canonical[label] = (key, int(h), text.encode("latin-1"))
    counts: dict[int, int] = {}
    for v in values:
        for label, n in v["counts"].items():
            counts[int(label)] = counts.get(int(label), 0) + n
    # This worker's records whose text differs from their label's: bad labels, reported after decoding.
    pending = []
    if len(keys):
        unique, inverse = np.unique(labels, return_inverse=True)
        expected = np.array([canonical[int(label)][1] for label in unique], np.int64)
        for i in np.flatnonzero(expected[inverse] != hashes):
            label = int(labels[i])
            text = found.candidates[(label, int(hashes[i]))][1]
            first_key, _, first = canonical[label]
            path, record = _where(files, first_key)
            pending.append((int(keys[i]), label, BAD_LABEL + f"text {text.decode(errors='replace')!r} for "
                            f"label {label}, but {first.decode(errors='replace')!r} at {path}: "
                            f"record {record}"))
    where = f"{flag + ': ' if flag else ''}{name_files(files)}"
    records = sum(counts.values())
    if records == 0:
        raise DataError(f"{where}: no usable records")
    if class_names is None:
        if num_classes is None:
            num_classes = max(counts) + 1
            missing = sorted(set(range(num_classes)) - set(counts))
            if missing:
                raise DataError(f"{where}: no records with label(s) {', '.join(map(str, missing[:10]))} "
                                f"of 0..{num_classes - 1}: pass the class names or the number of classes")
        class_names = [canonical[i][2].decode(errors="replace") if i in canonical else str(i)
                       for i in range(num_classes)]
    sizes = [v["sizes"] for v in values if v["sizes"]]
    pending_keys = np.array(sorted(k for k, _, _ in pending), np.int64)
    scan = ImageScan(
        files=files, records=records, total_records=sum(v["total"] for v in values),
        total_bytes=sum(v["bytes"] for v in values), class_names=tuple(class_names),
        class_counts=tuple(counts.get(i, 0) for i in range(num_classes)),
        excluded=np.union1d(np.array([k for k, _ in found.bad], np.int64), pending_keys),
        bad_records=tuple(_bad(files, k, r) for k, r in bad),
        min_size=(min(s[0] for s in sizes), min(s[1] for s in sizes)),
        max_size=(max(s[2] for s in sizes), max(s[3] for s in sizes)),
        file_indices=tuple(i for i, _ in local), stride=stride, offset=offset,
        file_records=tuple(file_records), local_records=len(keys) - len(pending), records_read=found.read,
        pending=tuple(pending), good_keys=np.setdiff1d(keys, pending_keys),
    )
    if decode:
        scan = load_images(scan, channels=channels, shard=shard, max_bad_records=max_bad_records)
    return scan


def load_images(scan: ImageScan, *, channels: int, shard: Shard = UNSHARDED,
                max_bad_records: int = 0) -> ImageScan:
    """Second pass: decode every good record of this worker's share once, in parallel, to check that it
    decodes (no pixels are kept; the cache is filled by training's first pass, see :func:`_filling_cache`);
    the final scan.

    Undecodable records and the first pass's text conflicts count against ``max_bad_records`` together with
    the first pass's bad records (over all workers); the one-line DataError names the first beyond it in
    file order.
    """
    import tensorflow as tf

    pending, good = scan.pending, scan.good_keys
    value: dict = {"error": None}
    undecodable: list[tuple[int, int, str]] = []
    try:
        if good is None:
            raise ValueError("load_images needs a scan from scan_images")
        if scan.total_bytes <= _SMALL_BYTES:  # see _SMALL_BYTES
            undecodable = _check_decodes(scan, np.setdiff1d(good, scan.excluded), channels)[0]
        else:
            undecodable = _decode_share(scan, good, channels)
    except DataError as exc:
        value["error"] = str(exc)
    except tf.errors.OpError as exc:
        value["error"] = f"cannot read {name_files(scan.files)}: {_op_reason(exc)}"
    bad = sorted([(k, r) for k, _, r in (*pending, *undecodable)])
    removed: dict[str, int] = {}
    for _, label, _ in (*pending, *undecodable):
        removed[str(label)] = removed.get(str(label), 0) + 1
    value.update(bad=bad[:max_bad_records + 1], n_bad=len(bad), removed=removed,
                 records=int(len(good) - len(undecodable)) if good is not None else 0)
    values = _exchange(shard, value)
    later, n_later = _merged_bad(scan.files, values)
    first = [(int(_key(scan.files, b)), b.reason) for b in scan.bad_records]
    every = sorted(first + later)
    error = _budget_error([_bad(scan.files, k, r) for k, r in every], len(scan.bad_records) + n_later,
                          max_bad_records)
    if error:
        raise error
    counts = list(scan.class_counts)
    for v in values:
        for label, n in v["removed"].items():
            if int(label) < len(counts):
                counts[int(label)] -= n
    records = scan.records - sum(sum(v["removed"].values()) for v in values)
    if records <= 0:
        raise DataError(f"{name_files(scan.files)}: no usable records")
    final = replace(scan, records=records, class_counts=tuple(counts),
                    excluded=np.union1d(scan.excluded, np.array([k for k, _, _ in undecodable], np.int64)),
                    bad_records=tuple(_bad(scan.files, k, r) for k, r in every),
                    local_records=value["records"], decoded=True, pending=(),
                    good_keys=np.setdiff1d(good, np.array([k for k, _, _ in undecodable], np.int64)))
    return final


# Kept scans (trainer.kept): a study's trials and a restarted worker reuse the checked scans of the same files
# and flags instead of reading and decoding every record again.
_KEPT_FORMAT = 1  # bump when what a scan checks or keeps changes: older kept scans are then not read
_MAX_KEPT_BYTES = 1 << 30
_SCAN_FIELDS = ("records", "total_records", "total_bytes", "class_names", "class_counts", "min_size",
                "max_size", "file_indices", "stride", "offset", "file_records", "local_records",
                "records_read")


def kept_scans_path(folder: str | None, splits: Sequence[Sequence[str]], depends: list) -> str | None:
    """Where this worker's checked scans of ``splits`` (each a list of files) are kept, for ``depends``
    (the flags the checks depend on and the worker's share); None when there is no place or a file cannot
    be stat'ed (the scans are then simply not kept)."""
    import tensorflow as tf

    from trainer import kept

    if not folder:
        return None
    try:
        identity = [kept.files_identity(files) for files in splits]
    except tf.errors.OpError:
        return None
    return f"{folder}/images-{kept.key(_KEPT_FORMAT, identity, repr(depends))}.npz"


def load_kept_scans(path: str | None, splits: Sequence[Sequence[str]], *,
                    claim: bool = False) -> list[ImageScan] | None:
    """The scans :func:`keep_scans` kept at ``path`` (decoded: nothing left to check), or None (with
    ``claim``, a miss is claimed: another trial checking the same files is waited for, see trainer.kept)."""
    import io

    from trainer import kept

    raw = kept.read(path, _MAX_KEPT_BYTES, "image scans", claim=claim) if path else None
    if raw is None:
        return None
    try:
        arrays = np.load(io.BytesIO(raw), allow_pickle=False)
        metas = json.loads(arrays["meta"].tobytes())
        scans = []
        for i, (files, meta) in enumerate(zip(splits, metas, strict=True)):
            values = {name: tuple(v) if isinstance(v, list) else v for name, v in meta["fields"].items()}
            scans.append(ImageScan(
                files=tuple(files), excluded=arrays[f"excluded_{i}"], good_keys=arrays[f"good_{i}"],
                bad_records=tuple(BadRecord(*b) for b in meta["bad_records"]), decoded=True, **values))
        return scans
    except kept.UNREADABLE as exc:
        logging.getLogger("trainer").warning("not reading the kept image scans %s (%s): checking the data",
                                             path, exc)
        return None


def keep_scans(path: str | None, scans: Sequence[ImageScan]) -> None:
    """Keep the decoded (fully checked) ``scans`` at ``path`` for the job's later trials and restarts."""
    import io

    from trainer import kept

    if not path:
        return
    metas, arrays = [], {}
    for i, scan in enumerate(scans):
        metas.append({"fields": {name: getattr(scan, name) for name in _SCAN_FIELDS},
                      "bad_records": [[b.file, b.record, b.reason] for b in scan.bad_records]})
        arrays[f"excluded_{i}"], arrays[f"good_{i}"] = scan.excluded, scan.good_keys
    buffer = io.BytesIO()
    np.savez(buffer, meta=np.frombuffer(json.dumps(metas).encode(), np.uint8), **arrays)
    kept.write(path, buffer.getvalue(), "image scans")


def _decode_share(scan: ImageScan, good: np.ndarray, channels: int) -> list[tuple[int, int, str]]:
    """The second pass in parallel tf.data: the undecodable records, [(key, label, reason)]."""
    wanted = np.setdiff1d(good, scan.excluded)
    keys = [k for k, _ in untuned(_decoded(scan, channels).prefetch(4)).as_numpy_iterator()]
    missing = np.setdiff1d(wanted, np.concatenate(keys) if keys else np.zeros(0, np.int64))
    undecodable = []
    if len(missing):
        # A batch whose decode failed was dropped: check its records one by one. Each must decode or fail
        # there; one that does neither was not found in its file (the pass above and this one disagree).
        undecodable, decoded = _check_decodes(scan, missing, channels)
        if decoded + len(undecodable) != len(missing):
            raise AssertionError("a record neither decoded nor failed")
    return undecodable


def _key(files: Sequence[str], bad: BadRecord) -> int:
    return (files.index(bad.file) << _KEY_BITS) + bad.record


def _checked(encoded, channels: int):
    """:func:`decode`'s verdict on ``encoded`` for less: a JPEG is decoded at 1/8 scale. libjpeg still reads
    and entropy-decodes its whole stream, so truncated or corrupt data fails alike (no verdict differed over
    1,584 random truncations, bit flips and overwrites of the flowers photos); only the inverse DCT,
    upsampling and colour conversion shrink: ~20% less CPU in the second pass over the flowers photos. For
    checking only: the pixels are not the model's."""
    import tensorflow as tf

    return tf.cond(tf.io.is_jpeg(encoded), lambda: tf.io.decode_jpeg(encoded, channels=channels, ratio=8),
                   lambda: decode(encoded, channels))


def _decoded_height(channels: int, exact: bool = False, scaled: bool = False):
    """Encoded bytes -> the decoded image's height: the second pass's check that a record decodes (with
    ``scaled``, a JPEG at 1/8 scale: see :func:`_checked`). The height is all it returns: a tensor that
    depends on the decode, so the decode runs, and a few bytes, not the pixels.

    The pipeline's version does the least per image (it runs in a loop over each batch, where every op
    costs microseconds): no empty-image check (the first pass refused images whose header has no pixels).
    ``exact``, for the records of a failed batch, checks everything.
    """
    import tensorflow as tf

    def height(encoded):
        shape = tf.shape(_checked(encoded, channels) if scaled else decode(encoded, channels))
        if exact:
            # An empty image decodes but would fail training's resize: make it fail here like an
            # undecodable one.
            tf.debugging.assert_positive(shape[0] * shape[1], message="empty image")
        return shape[0]

    return height


def _decoded(scan: ImageScan, channels: int):
    """Batches of (keys, heights) from the second pass; a record or batch whose decode fails is dropped (the
    caller finds its records by key).

    Small images (MNIST) are decoded a batch at a time in a loop (a tf.data element per image costs more
    than decoding it); photos one per element, in parallel: their decode dwarfs the per-element cost, and a
    loop over a batch would decode its images one after the other (2000 flowers-sized JPEGs: 3.6x the wall
    time on two cores).
    """
    import tensorflow as tf

    photos = scan.total_bytes > _PHOTO_BYTES * max(1, scan.total_records)
    # The JPEG test costs more than a small image's decode saves: photos only.
    height = _decoded_height(channels, scaled=photos)

    def body(keys, encoded, labels):
        return keys, tf.map_fn(height, encoded, fn_output_signature=tf.TensorSpec([], tf.int32),
                               parallel_iterations=16)

    ds = _encoded_batches(scan, deterministic=True, batch=_CHECK_BATCH)
    if photos:

        def one(key, encoded, label):
            return key, height(encoded)

        ds = ds.unbatch().map(_plain(one), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        return ds.ignore_errors().batch(_CHECK_BATCH)
    return ds.map(_plain(body), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).ignore_errors()


def _check_decodes(scan: ImageScan, missing: np.ndarray, channels: int) -> tuple[list, int]:
    """The second pass for ``missing`` records, one at a time in Python: ([(key, label, reason)] of those
    that do not decode, how many do)."""
    import tensorflow as tf

    height = _decoded_height(channels, exact=True, scaled=True)
    bad, decoded = [], 0
    for index in sorted(set((missing >> _KEY_BITS).tolist())):
        path = scan.files[index]
        records = missing[(missing >> _KEY_BITS) == index] & ((1 << _KEY_BITS) - 1)
        lo, hi = int(records.min()), int(records.max())
        wanted = set(records.tolist())
        ds = tf.data.TFRecordDataset(path).skip(lo).take(hi - lo + 1)
        for record, raw in enumerate(ds.as_numpy_iterator(), start=lo):
            if record not in wanted:
                continue
            _, label, encoded, _ = _check_example(raw, None)
            try:
                height(tf.constant(encoded)).numpy()
                decoded += 1
            except (tf.errors.OpError, ValueError):
                bad.append(((index << _KEY_BITS) + record, label, _undecodable(channels)))
    return bad, decoded


def _encoded_batches(scan: ImageScan, *, shuffle_files: bool = False, seed: int = 0, in_order: bool = False,
                     deterministic: bool = True, batch: int = _READ_BATCH):
    """Batches of (int64 keys, encoded images, int32 labels) of this worker's good records: its files read in
    parallel (interleaved a read batch at a time, in a fixed order unless shuffling), or one after the other
    with ``in_order``. Records of other workers (by-record sharding) and skipped ones are dropped before
    parsing, a whole read batch at a time (vectorized: per-record parsing would cost more than decoding an
    MNIST image)."""
    import tensorflow as tf

    spec = {ENCODED: tf.io.FixedLenFeature([], tf.string), LABEL: tf.io.FixedLenFeature([], tf.int64)}
    excluded = tf.constant(scan.excluded if scan.excluded.size else np.array([-1], np.int64))
    local = scan.local_files
    stride, offset = scan.stride, scan.offset

    def read(path, file_index):
        return tf.data.TFRecordDataset(path).batch(batch).enumerate().map(
            lambda b, raw: (tf.bitwise.left_shift(file_index, _KEY_BITS) + b * batch, raw))

    def parse(first_key, raw):
        keys = first_key + tf.range(tf.size(raw, out_type=tf.int64), dtype=tf.int64)
        keep = tf.ones_like(keys, tf.bool)
        if stride > 1:
            keep = tf.equal(tf.bitwise.bitwise_and(keys, (1 << _KEY_BITS) - 1) % stride, offset)
        if scan.excluded.size:  # before parsing: a skipped record may not parse at all
            pos = tf.minimum(tf.searchsorted(excluded, keys), tf.size(excluded) - 1)
            keep = tf.logical_and(keep, tf.not_equal(tf.gather(excluded, pos), keys))
        raw, keys = tf.boolean_mask(raw, keep), tf.boolean_mask(keys, keep)
        parsed = tf.io.parse_example(raw, spec)
        return keys, parsed[ENCODED], tf.cast(parsed[LABEL], tf.int32)

    read, parse = _plain(read), _plain(parse)
    files = tf.data.Dataset.from_tensor_slices(([p for _, p in local],
                                                tf.constant([i for i, _ in local], tf.int64)))
    if shuffle_files:
        files = files.shuffle(len(local), seed=seed, reshuffle_each_iteration=True)
    ds = files.interleave(read, cycle_length=1 if in_order else max(1, min(len(local), 8)),
                          num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
    return ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def _encoded_records(scan: ImageScan, *, shuffle_files: bool, seed: int, in_order: bool = False):
    """(encoded image, int32 label) of this worker's good records (see :func:`_encoded_batches`)."""
    ds = _encoded_batches(scan, shuffle_files=shuffle_files, seed=seed, in_order=in_order,
                          deterministic=not shuffle_files)
    return ds.map(lambda keys, encoded, labels: (encoded, labels)).unbatch()


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


def _finalize(ds, *, batch_size: int, shuffle: bool, buffer: int, seed: int, augment, image_size: int,
              drop_remainder: bool, repeat: bool, deterministic: bool = True):
    import tensorflow as tf

    if shuffle:
        ds = ds.shuffle(buffer, seed=seed, reshuffle_each_iteration=True)
    if augment:
        ds = ds.map(_augmenter(augment, image_size, seed), num_parallel_calls=tf.data.AUTOTUNE)
    if repeat:
        ds = ds.repeat()
    ds = ds.batch(batch_size, drop_remainder=drop_remainder, num_parallel_calls=tf.data.AUTOTUNE)
    return _options(ds, deterministic)


def _options(ds, deterministic: bool):
    # Each worker reads its own share (trainer.sharding): tf.data's auto-sharding is off. A seeded shuffle
    # repeats exactly; only streaming (uncached) training trades that for throughput.
    return ds.with_options(dataset_options(shuffle=not deterministic)).prefetch(PREFETCH_BATCHES)


def _cached_dataset(indices, images, labels, *, batch_size: int, seed: int, augment, image_size: int,
                    scale: str, drop_remainder: bool, repeat: bool):
    """Batches gathered from the share's images held in a variable, as :func:`_filling_cache` gives them
    (``indices``: the positions to gather, in the pass's order; it shuffles them in training): a batch is
    one gather, so nothing is done per image (a per-image tf.data cache costs ~20 us an image, more than the
    CNN's step on MNIST, and its full-share shuffle buffer must fill before the first step). Augmentation
    works per image and takes the per-image path."""
    import tensorflow as tf

    def gather(index):
        return finish(tf.gather(images, index), image_size, scale), tf.gather(labels, index)

    ds = indices
    if augment:
        ds = ds.map(gather, num_parallel_calls=tf.data.AUTOTUNE)
        return _finalize(ds, batch_size=batch_size, shuffle=False, buffer=0, seed=seed, augment=augment,
                         image_size=image_size, drop_remainder=drop_remainder, repeat=repeat)
    if repeat:
        ds = ds.repeat()
    ds = ds.batch(batch_size, drop_remainder=drop_remainder).map(gather, num_parallel_calls=tf.data.AUTOTUNE)
    return _options(ds, deterministic=True)


def _filling_cache(scan: ImageScan, *, channels: int, image_size: int, training: bool, seed: int,
                   shuffle_buffer: int):
    """The share's cache, filled by the first pass over the share instead of before it: (a dataset of the
    positions to gather, the images variable, the labels variable) for :func:`_cached_dataset`.

    The cache holds each good record's image decoded with :func:`decode` and, where it is not already
    ``image_size`` square, resized to it as :func:`finish` resizes (bilinear, no antialiasing): uint8 when
    every image's header gives that size (:meth:`ImageScan.held_bytes`; one that decodes to another size is
    resized and rounded), else float32 0..255; :func:`_cached_dataset` scales per batch. Every pass starts by
    asking whether every position was written. Until then a pass reads the records (files shuffled,
    ``shuffle_buffer`` encoded records shuffled, in training), decodes them in parallel, writes each image and
    label at its record's position in the share (its key's rank, i.e. file order) and yields that position;
    once every position was written, a pass gathers from memory (in a full-share shuffle, in training). A pass
    cut short (a run of fewer steps than a pass, a restart) leaves the cache partly written: the next pass
    reads the files again. The scan's second pass (this run's or a kept one's) has checked that every record
    decodes, so none fails here.
    """
    import tensorflow as tf

    wanted = np.setdiff1d(scan.good_keys, scan.excluded)
    count = len(wanted)
    uint8 = scan.min_size == scan.max_size == (image_size, image_size)
    dtype = tf.uint8 if uint8 else tf.float32
    # On the host, where tf.data runs. Uninitialised: a page is only touched when its images are written.
    with tf.device("/cpu:0"):
        images = tf.Variable(tf.raw_ops.Empty(shape=[count, image_size, image_size, channels], dtype=dtype,
                                              init=False), trainable=False)
        labels = tf.Variable(tf.raw_ops.Empty(shape=[count], dtype=tf.int32, init=False), trainable=False)
        written = tf.Variable(tf.zeros([count], tf.bool), trainable=False)
    positions = tf.constant(wanted)

    def prepare(encoded):
        image = decode(encoded, channels)
        if not uint8:  # bilinear resizing to the image's own size returns it unchanged: no test for it
            return tf.image.resize(image, [image_size, image_size])
        # An image whose size is not its header's is resized as finish does, rounded back to uint8.
        same = tf.reduce_all(tf.equal(tf.shape(image)[:2], image_size))
        return tf.cond(same, lambda: tf.ensure_shape(image, [image_size, image_size, channels]),
                       lambda: tf.cast(tf.round(finish(image, image_size, "raw")), tf.uint8))

    def store(keys, pixels, values):
        at = tf.minimum(tf.searchsorted(positions, keys, out_type=tf.int64), count - 1)
        writes = [tf.raw_ops.ResourceScatterUpdate(resource=images.handle, indices=at, updates=pixels),
                  tf.raw_ops.ResourceScatterUpdate(resource=labels.handle, indices=at, updates=values),
                  tf.raw_ops.ResourceScatterUpdate(resource=written.handle, indices=at,
                                                   updates=tf.ones_like(at, tf.bool))]
        with tf.control_dependencies(writes):  # a position is yielded (and gathered) once it is written
            return tf.identity(at)

    def batch(keys, encoded, values):
        pixels = tf.map_fn(prepare, encoded, fn_output_signature=tf.TensorSpec(
            [image_size, image_size, channels], dtype), parallel_iterations=16)
        return store(keys, pixels, values)

    def one(key, encoded, value):
        return store(key[None], prepare(encoded)[None], value[None])

    photos = scan.total_bytes > _PHOTO_BYTES * max(1, scan.total_records)
    # Decoded images in flight stay a few MB, a small part of the cache, whatever the images' size.
    per_batch = max(1, min(_READ_BATCH, _FILL_BYTES // (image_size * image_size * channels * dtype.size)))
    reading = _encoded_batches(scan, shuffle_files=training, seed=seed, batch=per_batch)
    if training or photos:
        reading = reading.unbatch()
    if training:
        reading = reading.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if photos:  # one per element, in parallel (see _decoded)
        reading = reading.map(_plain(one), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    else:
        if training:
            reading = reading.batch(per_batch)
        reading = reading.map(_plain(batch), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    reading = reading.unbatch()
    cached = tf.data.Dataset.range(count)
    if training:  # another seed: the filling pass's shuffle of a small share in one file is this very order
        cached = cached.shuffle(max(1, count), seed=seed + 1, reshuffle_each_iteration=True)

    def first_or_cached(_):
        return tf.cond(tf.reduce_all(written), lambda: cached, lambda: reading)

    indices = tf.data.Dataset.from_tensors(0).flat_map(_plain(first_or_cached))
    return indices.apply(tf.data.experimental.assert_cardinality(count)), images, labels


def image_dataset(scan: ImageScan, *, image_size: int, channels: int, batch_size: int, scale: str = "unit",
                  training: bool = False, augment: Sequence[str] = (), seed: int = 0,
                  cache_limit_mb: int = 1024, shuffle_buffer: int = 4096, drop_remainder: bool = False,
                  repeat: bool = False, cached: bool | None = None):
    """Batches of (float32 [B, image_size, image_size, channels], int32 [B] labels) from this worker's share
    of the scanned files.

    ``batch_size`` is the GLOBAL batch (a distribution strategy splits it across replicas);
    ``drop_remainder`` gives static batch shapes (TPU). ``training`` shuffles (seeded) and applies ``augment``
    (a subset of ``AUGMENTATIONS``; never at eval). ``cached``: True: cache the share, filled by the first
    pass over it (nothing is decoded before the first batch; see :func:`_filling_cache`); False: stream;
    None: cache when the share's images (:meth:`ImageScan.held_bytes`) fit :func:`cache_budget` of
    ``cache_limit_mb``. Cached images are shuffled across the whole share (a filling pass:
    ``shuffle_buffer`` records, as streaming); otherwise records are shuffled (``shuffle_buffer`` of them,
    still encoded) before decoding, every epoch. A seeded cached pipeline repeats its order exactly; an
    uncached training one lets parallel decoding reorder for throughput.
    """
    import tensorflow as tf

    if scale not in SCALES:
        raise ValueError(f"scale must be one of {', '.join(SCALES)}, not {scale!r}")
    augment = tuple(augment) if training else ()
    _augmenter(augment, image_size, seed)  # refuses unknown augmentations before any work
    if not scan.decoded:
        raise ValueError("image_dataset needs a decoded scan: scan_images(decode=True) or load_images")
    common = {"batch_size": batch_size, "seed": seed, "augment": augment, "image_size": image_size,
              "drop_remainder": drop_remainder, "repeat": repeat}
    if cached is None:
        cached = scan.held_bytes(image_size, channels) <= cache_budget(cache_limit_mb)
    if cached:
        indices, images, labels = _filling_cache(scan, channels=channels, image_size=image_size,
                                                 training=training, seed=seed, shuffle_buffer=shuffle_buffer)
        return _cached_dataset(indices, images, labels, scale=scale, **common)

    def load(encoded, label):
        return preprocess_image(encoded, image_size, channels, scale), label

    ds = _encoded_records(scan, shuffle_files=training, seed=seed)
    if training:
        ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    ds = ds.map(load, num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.apply(tf.data.experimental.assert_cardinality(scan.share_records))
    return _finalize(ds, shuffle=False, buffer=0, deterministic=not training, **common)


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
    return _finalize(ds, batch_size=batch_size, shuffle=training, buffer=len(labels), seed=seed,
                     augment=augment if training else (), image_size=image_size,
                     drop_remainder=drop_remainder, repeat=repeat)
