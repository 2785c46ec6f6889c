"""TFRecord files of tf.train.Examples in the flowers schema: finding them, checking their framing before
TensorFlow reads them, and reading and checking each record.

The schema (TF-Slim / TFDS ``image_classification_builder``, also used for MNIST here): ``image/encoded``
(JPEG/PNG/GIF/BMP bytes), ``image/class/label`` (int64) and ``image/class/text`` (bytes) are required; the
optional ``image/filename``, ``image/format``, ``image/height``, ``image/width``, ``image/channels`` and
``image/colorspace`` are ignored (the decoded image is the truth).

Every record's cost is bounded before it is paid: each file's record length headers are read before
TensorFlow reads the file (at most MAX_RECORD_BYTES a record, none past the end; a GZIP file is named as
one), and labels without declared classes below MAX_CLASSES: a label over its bound is a bad record. A file
that is not a TFRecord file (or has a corrupt/truncated record) always fails: nothing after the damage can
be read reliably. A record is named by its key, ``file_index << KEY_BITS | record_index``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from trainer.input_files import DataError, op_reason

ENCODED, LABEL, TEXT = "image/encoded", "image/class/label", "image/class/text"
REQUIRED = ((ENCODED, "bytes_list"), (LABEL, "int64_list"), (TEXT, "bytes_list"))
MALFORMED = "malformed record: "
BAD_LABEL = "bad label: "
UNDECODABLE = "undecodable image: "
# Record keys are file_index << KEY_BITS | record_index (a shard holds far fewer than 2**40 records); the
# file index is the file's position in the whole split's list, the same on every worker.
KEY_BITS = 40
READ_BATCH = 256  # records the training pipeline reads and parses together
_GZIP = b"\x1f\x8b"
# The largest TFRecord record read (an encoded image and its labels): checked from the length headers
# before TensorFlow reads a file (see check_framing).
MAX_RECORD_BYTES = 64 << 20
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


def check_example(raw: bytes, classes: int | None) -> tuple[str | None, int, bytes, bytes]:
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
        return label_reason(label, classes), 0, b"", b""
    return None, label, encoded, text


def label_reason(label: int, classes: int | None) -> str:
    if classes is None:
        return BAD_LABEL + f"label {label} is outside 0..{MAX_CLASSES - 1} (at most {MAX_CLASSES} classes)"
    return BAD_LABEL + f"label {label} is outside 0..{classes - 1}"


def undecodable(channels: int) -> str:
    return UNDECODABLE + f"not a {channels}-channel JPEG/PNG/GIF/BMP image that decodes"


def plain(fn):
    """``fn`` for tf.data without AutoGraph: its Python control flow is all decided while tracing, and
    converting it costs more than the tracing itself (a second per pipeline on small data)."""
    import tensorflow as tf

    return tf.autograph.experimental.do_not_convert(fn)


def iterator_reason(exc) -> str:
    """An iterator error's first line without TensorFlow's "{{function_node ...}}" and "[Op:...]" noise."""
    return re.sub(r"\{\{[^}]*\}\}\s*|\s*\[Op:.*$", "", op_reason(exc)).strip() or type(exc).__name__


def _damaged(path: str, record: int, reason: str) -> DataError:
    return DataError(f"{path}: not a TFRecord file, or record {record} is corrupt or truncated ({reason})")


def check_framing(path: str, size: int, flag: str) -> None:
    """Walk the file's record headers (an 8-byte little-endian length, its 4-byte CRC, then the data and its
    CRC) before TensorFlow reads it: a length over MAX_RECORD_BYTES, or past the end of the file, is refused
    here. TFRecordDataset allocates whatever a length header claims before reading the data (a claim of
    6 GB, 1 TB or 2 EB ends the process with signal 11). The CRCs stay TensorFlow's to check. A file cut
    inside a header is left to :func:`read_records`, which words it. Costs a seek and a 12-byte read a
    record."""
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


def read_records(path: str, size: int, flag: str):
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
                        f"({iterator_reason(exc)})") from None
    except tf.errors.OpError as exc:
        raise DataError(f"{flag + ': ' if flag else ''}cannot read {path}: {iterator_reason(exc)}") from None
    if offset != size:  # TFRecordDataset reads a file cut inside a record's length header as a clean end
        raise DataError(f"{path}: not a TFRecord file, or record {index} is corrupt or truncated "
                        f"({size - offset} stray bytes at the end)")
