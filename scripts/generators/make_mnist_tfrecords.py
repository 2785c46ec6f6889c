#!/usr/bin/env python3
"""Convert the shipped MNIST t10k IDX files into the TFRecord shards of data/mnist/, reproducibly to the byte.

Usage (from the repo root; plain Python 3.10+, no TensorFlow, a few seconds):
  python scripts/generators/make_mnist_tfrecords.py          # data/mnist/raw/*.gz -> data/mnist/*.tfrecord-*
  python scripts/generators/make_mnist_tfrecords.py --check  # regenerate in a temp dir, compare with shards
  python scripts/generators/make_mnist_tfrecords.py --source DIR --out DIR

Input: t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz (the 10,000 MNIST test digits, 28x28
grayscale), checked for their IDX magic, counts, shape and the sha256 of their decompressed contents.

Output (the schema of the flowers shards in data/flowers/, one tf.train.Example per digit):
  mnist-train.tfrecord-00000-of-00002, mnist-train.tfrecord-00001-of-00002   8,000 records (4,000 each)
  mnist-eval.tfrecord-00000-of-00001                                          2,000 records
  image/encoded PNG bytes (8-bit grayscale)   image/format b"png"     image/class/label int64 0-9
  image/class/text b"0".."9"   image/height 28   image/width 28   image/channels 1
  image/colorspace b"grayscale"   image/filename b"t10k-00042.png" (the digit's index in the IDX file)
Records keep the IDX file order within each split; train records fill the train shards in that order.

The split is stratified and fixed: eval takes 20 % of every class (quotas by largest remainder of
count * 2000 / 10000, ties to the lower digit), namely the digits of that class whose
sha256(b"mnist-t10k-split-v1/%05d" % index) sorts lowest; the other 8,000 are train. It depends on nothing but
the file contents and SHA-256, so no PRNG or library version can move a digit. Not "first 8,000 / last
2,000": the t10k file's first 5,000 digits (from NIST SD-3, Census Bureau staff) are cleaner than its last
5,000 (SD-1, high school students), so a tail split would evaluate on the harder half only and skew the
class mix.

Determinism: every output byte is produced here in pure Python. The PNG (signature, IHDR, one IDAT, IEND) uses
filter type 0 and a deflate stream written by this script (one fixed-Huffman block; literals plus distance-1
run matches), not zlib.compress, whose output differs between zlib builds (e.g. zlib-ng); zlib serves only for
the crc32/adler32 checksums, which are fixed functions. Each IDAT is inflated back with zlib as a self-check.
tf.train.Example is written in protobuf wire format with its features sorted by key (what deterministic
serialization gives), and the TFRecord framing (length, masked CRC-32C of the length, data, masked CRC-32C of
the data) with a table-driven CRC-32C. tests/scripts/test_make_mnist_tfrecords.py reads everything back with
TensorFlow.

Exit status: 0 done (--check: identical), 1 --check found a difference, 2 bad input (one line; nothing
written).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import re
import struct
import sys
import tempfile
import zlib
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_SOURCE = REPO_ROOT / "data" / "mnist" / "raw"
DEFAULT_OUT = REPO_ROOT / "data" / "mnist"

IMAGES_FILE = "t10k-images-idx3-ubyte.gz"
LABELS_FILE = "t10k-labels-idx1-ubyte.gz"
# sha256 of the decompressed canonical files
# (the .gz md5s: 9fb629c4189551a2d022fa330f9573f3 and ec29112dd5afa0611ce80d1b7f02629c).
IMAGES_SHA256 = "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7"
LABELS_SHA256 = "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2"
COUNT, ROWS, COLS = 10_000, 28, 28
EVAL_COUNT = 2_000
SPLIT_SALT = b"mnist-t10k-split-v1/"
SHARDS = {"train": 2, "eval": 1}
SHARD_PATTERN = re.compile(r"mnist-[a-z]+\.tfrecord-\d{5}-of-\d{5}")


class InputError(Exception):
    """Bad source data: reported as one line, exit status 2."""


# -------------------------------------------------------------------------------- reading IDX

def _read_gz(path: Path) -> bytes:
    try:
        return gzip.decompress(path.read_bytes())
    except FileNotFoundError:
        raise InputError(f"missing source file {path}") from None
    except (OSError, EOFError, zlib.error) as exc:  # BadGzipFile is an OSError; truncation raises EOFError
        raise InputError(f"{path} is not a readable gzip file: {exc}") from None


def read_mnist(source: Path) -> tuple[list[bytes], list[int]]:
    """The 10,000 images (784 bytes each, row-major) and labels, once headers and contents check out."""
    images, labels = source / IMAGES_FILE, source / LABELS_FILE
    img, lab = _read_gz(images), _read_gz(labels)
    if len(img) < 16 or struct.unpack(">I", img[:4])[0] != 2051:
        raise InputError(f"{images}: not an IDX3 image file (magic {img[:4].hex() or 'none'}, want 00000803)")
    if len(lab) < 8 or struct.unpack(">I", lab[:4])[0] != 2049:
        raise InputError(f"{labels}: not an IDX1 label file (magic {lab[:4].hex() or 'none'}, want 00000801)")
    n, rows, cols = struct.unpack(">III", img[4:16])
    (m,) = struct.unpack(">I", lab[4:8])
    if (n, rows, cols) != (COUNT, ROWS, COLS):
        raise InputError(f"{images}: header says {n} images of {rows}x{cols}, want {COUNT} of {ROWS}x{COLS}")
    if m != COUNT:
        raise InputError(f"{labels}: header says {m} labels, want {COUNT}")
    if len(img) != 16 + COUNT * ROWS * COLS or len(lab) != 8 + COUNT:
        raise InputError(f"{images if len(img) != 16 + COUNT * ROWS * COLS else labels}: payload length "
                         "does not match its header")
    if max(lab[8:]) > 9:
        raise InputError(f"{labels}: label {max(lab[8:])} outside 0-9")
    for path, data, want in ((images, img, IMAGES_SHA256), (labels, lab, LABELS_SHA256)):
        if hashlib.sha256(data).hexdigest() != want:
            raise InputError(f"{path}: well-formed, but not the canonical MNIST t10k data (sha256 differs)")
    size = ROWS * COLS
    return [img[16 + i * size:16 + (i + 1) * size] for i in range(COUNT)], list(lab[8:])


# -------------------------------------------------------------------------------- the split

def eval_indices(labels: list[int]) -> set[int]:
    """The fixed stratified eval split: per class, the quota of indices with the lowest salted sha256."""
    by_class: dict[int, list[int]] = {c: [] for c in range(10)}
    for i, label in enumerate(labels):
        by_class[label].append(i)
    quota = {c: len(ix) * EVAL_COUNT // len(labels) for c, ix in by_class.items()}
    # Largest remainder (in integers, no float rounding); ties go to the lower digit.
    order = sorted(by_class, key=lambda c: (-(len(by_class[c]) * EVAL_COUNT % len(labels)), c))
    for c in order[:EVAL_COUNT - sum(quota.values())]:
        quota[c] += 1
    chosen: set[int] = set()
    for c, ix in by_class.items():
        ranked = sorted(ix, key=lambda i: hashlib.sha256(SPLIT_SALT + b"%05d" % i).digest())
        chosen.update(ranked[:quota[c]])
    return chosen


# -------------------------------------------------------------------------------- PNG

def _reverse(code: int, length: int) -> int:
    return int(format(code, f"0{length}b")[::-1], 2)


def _fixed_literal(symbol: int) -> tuple[int, int]:
    """(bits as emitted LSB first, bit count) of a fixed-Huffman literal/length symbol (RFC 1951 3.2.6)."""
    if symbol < 144:
        code, length = 0x30 + symbol, 8
    elif symbol < 256:
        code, length = 0x190 + symbol - 144, 9
    elif symbol < 280:
        code, length = symbol - 256, 7
    else:
        code, length = 0xC0 + symbol - 280, 8
    return _reverse(code, length), length


_LENGTH_BASES = [3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115,
                 131, 163, 195, 227, 258]
_LENGTH_EXTRA = [0] * 8 + [1] * 4 + [2] * 4 + [3] * 4 + [4] * 4 + [5] * 4 + [0]
_LITERALS = [_fixed_literal(s) for s in range(256)]


def _match_code(length: int) -> tuple[int, int]:
    """Bits of a (length, distance 1) match: length symbol, its extra bits, distance code 0 (5 bits)."""
    k = max(i for i, base in enumerate(_LENGTH_BASES) if base <= length)  # 258 is symbol 285, not 284 + 31
    bits, n = _fixed_literal(257 + k)
    bits |= (length - _LENGTH_BASES[k]) << n
    return bits, n + _LENGTH_EXTRA[k] + 5


_MATCHES = {length: _match_code(length) for length in range(3, 259)}
_END_OF_BLOCK = _fixed_literal(256)
_RUNS = re.compile(rb"(.)\1*", re.S)


def _bit_string(bits: int, n: int) -> str:
    """Bits in emission order (least significant first) as a string of "0"/"1"."""
    return format(bits, f"0{n}b")[::-1]


def _run_bits(run: bytes) -> str:
    """Bits of a run of equal bytes: the literal, then distance-1 matches (literals when under 3 remain)."""
    literal = _bit_string(*_LITERALS[run[0]])
    out, rest = [literal], len(run) - 1
    while rest:
        if rest >= 3:
            take = min(rest, 258)
            if 0 < rest - take < 3:
                take = rest - 3
            out.append(_bit_string(*_MATCHES[take]))
        else:
            take = 1
            out.append(literal)
        rest -= take
    return "".join(out)


class _RunCodes(dict):
    """run bytes -> its bits, computed on first use."""

    def __missing__(self, run: bytes) -> str:
        code = self[run] = _run_bits(run)
        return code


_RUN_CODES = _RunCodes()


def deflate(data: bytes) -> bytes:
    """A zlib stream of one final fixed-Huffman block; every byte is decided here, not by the zlib build."""
    runs = map(_RUN_CODES.__getitem__, map(re.Match.group, _RUNS.finditer(data)))
    # BFINAL=1, BTYPE=01 (fixed Huffman), the runs, end of block; least significant bit first.
    bits = "110" + "".join(runs) + _bit_string(*_END_OF_BLOCK)
    stream = int(bits[::-1], 2).to_bytes((len(bits) + 7) // 8, "little")  # zero-padded to a byte boundary
    # CMF 0x78 (deflate, 32K window), FLG 0x01 (FLEVEL 0, no dictionary, header check bits).
    return b"\x78\x01" + stream + struct.pack(">I", zlib.adler32(data))


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def encode_png(pixels: bytes, width: int = COLS, height: int = ROWS) -> bytes:
    """An 8-bit grayscale, non-interlaced PNG with filter type 0 on every row."""
    raw = b"".join(b"\x00" + pixels[r * width:(r + 1) * width] for r in range(height))
    idat = deflate(raw)
    if zlib.decompress(idat) != raw:  # self-check of the encoder against a reference inflater
        raise RuntimeError("internal error: the deflate stream does not inflate to the image")
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", ihdr) + _chunk(b"IDAT", idat) + _chunk(b"IEND", b"")


# -------------------------------------------------------------------------------- tf.train.Example

def _varint_of(value: int) -> bytes:
    value &= (1 << 64) - 1  # int64 two's complement, as protobuf encodes negative values
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL_VARINTS = [_varint_of(n) for n in range(1 << 14)]


def _varint(value: int) -> bytes:
    return _SMALL_VARINTS[value] if 0 <= value < 1 << 14 else _varint_of(value)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def bytes_feature(*values: bytes) -> bytes:
    return _field(1, b"".join(_field(1, v) for v in values))  # Feature.bytes_list = 1, BytesList.value = 1


def int64_feature(*values: int) -> bytes:
    # Feature.int64_list = 3; Int64List.value = 1, packed varints.
    return _field(3, _field(1, b"".join(_varint(v) for v in values)))


def serialize_example(features: dict[str, bytes]) -> bytes:
    """Example{features = 1: Features{feature = 1: map<string, Feature>}}, entries sorted by key."""
    entries = (_field(1, _field(1, key.encode()) + _field(2, features[key])) for key in sorted(features))
    return _field(1, b"".join(entries))


_FIXED_FEATURES = {
    "image/format": bytes_feature(b"png"),
    "image/height": int64_feature(ROWS),
    "image/width": int64_feature(COLS),
    "image/channels": int64_feature(1),
    "image/colorspace": bytes_feature(b"grayscale"),
}
_LABEL_FEATURES = [
    {"image/class/label": int64_feature(label), "image/class/text": bytes_feature(b"%d" % label)}
    for label in range(10)
]


def mnist_example(index: int, pixels: bytes, label: int) -> bytes:
    return serialize_example({
        **_FIXED_FEATURES,
        **_LABEL_FEATURES[label],
        "image/encoded": bytes_feature(encode_png(pixels)),
        "image/filename": bytes_feature(b"t10k-%05d.png" % index),
    })


# -------------------------------------------------------------------------------- TFRecord framing

def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        crc = n
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1  # Castagnoli, reflected
        table.append(crc)
    return table


_CRC32C = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc, table = 0xFFFFFFFF, _CRC32C
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecord(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", masked_crc32c(data))


# -------------------------------------------------------------------------------- the shards

def shard_name(split: str, shard: int, shards: int) -> str:
    return f"mnist-{split}.tfrecord-{shard:05d}-of-{shards:05d}"


def build(source: Path) -> tuple[dict[str, bytes], dict[str, list[int]]]:
    """Every output file's bytes (name -> bytes), and each split's labels in record order."""
    images, labels = read_mnist(source)
    held_out = eval_indices(labels)
    members = {"train": [i for i in range(COUNT) if i not in held_out], "eval": sorted(held_out)}
    files: dict[str, bytes] = {}
    for split, indices in members.items():
        shards = SHARDS[split]
        per_shard = -(-len(indices) // shards)
        for shard in range(shards):
            chunk = indices[shard * per_shard:(shard + 1) * per_shard]
            files[shard_name(split, shard, shards)] = b"".join(
                tfrecord(mnist_example(i, images[i], labels[i])) for i in chunk)
    return files, {split: [labels[i] for i in ix] for split, ix in members.items()}


def write(files: dict[str, bytes], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        tmp = out / f".{name}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, out / name)


def stale_shards(files: dict[str, bytes], out: Path) -> list[str]:
    """Shard-like files in `out` that this script does not write (a trainer's glob would read them)."""
    if not out.is_dir():
        return []
    return sorted(p.name for p in out.iterdir() if SHARD_PATTERN.fullmatch(p.name) and p.name not in files)


def check(files: dict[str, bytes], out: Path) -> str | None:
    """None when `out` holds exactly these shards byte for byte; otherwise what differs, in one line."""
    with tempfile.TemporaryDirectory() as tmp:
        write(files, Path(tmp))
        for name in files:
            shipped = out / name
            if not shipped.is_file():
                return f"{shipped} is missing"
            if shipped.read_bytes() != (Path(tmp) / name).read_bytes():
                return f"{shipped} differs from the regenerated bytes"
    stale = stale_shards(files, out)
    if stale:
        return f"{out} holds shards this script does not write: {', '.join(stale)}"
    return None


def summary(files: dict[str, bytes], split_labels: dict[str, list[int]]) -> list[str]:
    lines = []
    for split, labels in split_labels.items():
        counts = " ".join(f"{c}:{labels.count(c)}" for c in range(10))
        lines.append(f"{split}: {len(labels)} records; per digit {counts}")
    for name, data in files.items():
        lines.append(f"{name}  {len(data):,} bytes  sha256 {hashlib.sha256(data).hexdigest()}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE,
                        help=f"folder with {IMAGES_FILE} and {LABELS_FILE} (default data/mnist/raw)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help="folder for the shards (default data/mnist)")
    parser.add_argument("--check", action="store_true",
                        help="regenerate into a temp dir and compare with the shards in --out; write nothing")
    args = parser.parse_args(argv)
    prog = "make_mnist_tfrecords.py"
    try:
        files, split_labels = build(args.source)
    except InputError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    if args.check:
        problem = check(files, args.out)
        if problem:
            print(f"{prog}: check failed: {problem}; rerun without --check to rewrite", file=sys.stderr)
            return 1
        print(f"ok: the {len(files)} shards in {args.out} are identical to the regenerated bytes")
        return 0
    try:
        write(files, args.out)
    except OSError as exc:
        print(f"{prog}: error: cannot write to {args.out}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print("\n".join(summary(files, split_labels)))
    stale = stale_shards(files, args.out)
    if stale:
        print(f"warning: {args.out} also holds {', '.join(stale)}, which a shard glob would read too",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
