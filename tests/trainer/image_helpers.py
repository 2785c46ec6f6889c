"""Shared by the image tests: TFRecord shards in the flowers schema, written with TensorFlow (no PIL)."""

from __future__ import annotations

import glob
import json
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np

from tests.helpers import subprocess_env
from tests.trainer.helpers import REPO_ROOT

FLOWERS = REPO_ROOT / "data" / "flowers"
FLOWERS_TRAIN = str(FLOWERS / "image_classification_builder-validation.tfrecord-*")  # 80 images
FLOWERS_EVAL = str(FLOWERS / "image_classification_builder-test.tfrecord-*")  # 50 images


def feature(value):
    import tensorflow as tf

    if isinstance(value, bytes):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
    if isinstance(value, float):
        return tf.train.Feature(float_list=tf.train.FloatList(value=[value]))
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))


def example(encoded: bytes, label: int, text: bytes | None = None, *, drop: str = "", **extra) -> bytes:
    """A serialized tf.train.Example in the flowers schema; ``drop`` leaves a required feature out and
    ``extra`` adds or overrides features (keys with '/' written as '__', e.g. image__format=b'PNG')."""
    import tensorflow as tf

    features = {"image/encoded": encoded, "image/class/label": label,
                "image/class/text": str(label).encode() if text is None else text}
    features.update({k.replace("__", "/"): v for k, v in extra.items()})
    features.pop(drop, None)
    proto = tf.train.Example(features=tf.train.Features(feature={k: feature(v) for k, v in features.items()}))
    return proto.SerializeToString()


def write_records(path: Path, records: list[bytes]) -> Path:
    import tensorflow as tf

    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in records:
            writer.write(record)
    return path


def digit_images(n: int, seed: int = 0, size: int = 28) -> tuple[np.ndarray, np.ndarray]:
    """MNIST-like uint8 [n, size, size, 1] images whose class is learnable: a bright bar whose position
    encodes the label (10 classes), plus noise."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, n)
    images = rng.integers(0, 60, (n, size, size, 1)).astype(np.uint8)
    for i, y in enumerate(labels):
        row = 2 + int(y) * (size - 4) // 10
        images[i, row:row + 2, 3:size - 3, 0] = 255
    return images, labels


def png_records(images: np.ndarray, labels: np.ndarray) -> list[bytes]:
    import tensorflow as tf

    return [example(tf.io.encode_png(img).numpy(), int(y), image__format=b"PNG", image__channels=1)
            for img, y in zip(images, labels, strict=True)]


def write_mnist_like(path: Path, n: int, seed: int = 0) -> Path:
    return write_records(path, png_records(*digit_images(n, seed)))


# Reloads an exported model and serves records through its raw-bytes signature (TensorFlow alone).
SCORE_IMAGES = REPO_ROOT / "tests" / "trainer" / "score_image_model.py"


def serve_records(model_dir: Path, pattern: str, limit: int = 4) -> dict:
    """SCORE_IMAGES's result for the first ``limit`` records, from a fresh process started outside the
    checkout with no trainer code imported: what a prediction server has."""
    out = subprocess.run([sys.executable, SCORE_IMAGES, str(model_dir), pattern, str(limit)],
                         capture_output=True, text=True, env=subprocess_env(), timeout=120, cwd="/")
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def png_header(width: int, height: int) -> bytes:
    """A PNG's signature and IHDR chunk: all a header check reads, declaring width x height grayscale pixels
    that never follow (a decompression bomb's first 33 bytes)."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    crc = struct.pack(">I", zlib.crc32(b"IHDR" + ihdr))
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr + crc


def webp_header(width: int, height: int, chunk: bytes = b"VP8L") -> bytes:
    """A WebP's RIFF header and first chunk's size fields, declaring width x height pixels that never follow:
    a lossless one's (VP8L), an extended one's canvas (VP8X) or a lossy one's frame (VP8)."""
    if chunk == b"VP8L":
        data = b"\x2f" + ((width - 1) | (height - 1) << 14).to_bytes(4, "little")
    elif chunk == b"VP8X":
        data = b"\0" * 4 + (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    else:
        data = b"\0\0\0\x9d\x01\x2a" + struct.pack("<HH", width, height)
    data += b"\0" * 8
    return b"RIFF" + struct.pack("<I", 12 + len(data)) + b"WEBP" + chunk + struct.pack("<I", len(data)) + data


def encoded_images(pattern: str) -> list[bytes]:
    """Each record's ``image/encoded`` bytes, in SCORE_IMAGES's order, read without TensorFlow (a test that
    only sends images need not import it): TFRecord framing (length, its CRC, data, CRC), then the Example's
    protobuf fields, Example.features (1) -> map entry (1) -> key (1) / Feature (2) -> bytes_list (1) -> value
    (1)."""
    images = []
    for path in sorted(glob.glob(pattern)):
        data = Path(path).read_bytes()
        at = 0
        while at < len(data):
            length = int.from_bytes(data[at:at + 8], "little")
            record = data[at + 12:at + 12 + length]
            at += 16 + length
            for entry in _fields(_fields(record)[1][0]).get(1, []):
                field = _fields(entry)
                if field[1][0] == b"image/encoded":
                    images.append(_fields(_fields(field[2][0])[1][0])[1][0])
    return images


def _fields(message: bytes) -> dict[int, list[bytes]]:
    """The length-delimited fields of a protobuf message by number (the others skipped)."""
    def varint(at: int) -> tuple[int, int]:
        value = shift = 0
        while True:
            byte = message[at]
            value, shift, at = value | (byte & 0x7F) << shift, shift + 7, at + 1
            if byte < 0x80:
                return value, at

    fields: dict[int, list[bytes]] = {}
    at = 0
    while at < len(message):
        key, at = varint(at)
        if key & 7 == 2:
            size, at = varint(at)
            fields.setdefault(key >> 3, []).append(message[at:at + size])
            at += size
        else:  # varint, 64-bit or 32-bit
            at = varint(at)[1] if key & 7 == 0 else at + (8 if key & 7 == 1 else 4)
    return fields
