"""Hostile training data (issue 30): the attempts, the files each one writes, and a runner that tries them
all in ONE process as ``python -m trainer.task`` would (``trainer.task.main``), measuring each.

Why one process: a CLI subprocess per attempt pays TensorFlow's import (5-10 s) every time. The runner
imports TensorFlow once, then per attempt writes its files, resets the kernel's peak-RSS mark (writing "5"
to /proc/self/clear_refs sets VmHWM to the current RSS, Linux >= 4.0), runs ``main(argv)`` as the CLI would
(tests/trainer/cli_batch.py's call_main: fds 1 and 2 sent to files), and reads VmHWM: the peak growth is
the attempt's own, whatever ran before it. A signal death kills the runner: the attempt it was running is
then the one its progress file names last.

    python -m tests.trainer.hostile OUT.json [NAME ...]   # all attempts, or those named
"""

from __future__ import annotations

import gzip
import json
import os
import struct
import sys
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
CENSUS_ROW = (b"39, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family, White, "
              b"Male, 2174, 0, 40, United-States, <=50K")
RATINGS_HEADER = b"userId,movieId,rating,timestamp\n"


# --- TFRecord framing without TensorFlow (a length header must carry a valid CRC for TF to trust it) ---

def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def masked_crc(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def length_header(length: int) -> bytes:
    """A record's 8-byte length and its valid masked CRC: TensorFlow believes it."""
    head = struct.pack("<Q", length)
    return head + struct.pack("<I", masked_crc(head))


# --- images without a decoder ---

def png_bomb(side: int) -> bytes:
    """A valid 1-bit grayscale PNG of side x side zeros: ~65 KB for 23000, decoded as RGB 1.6 GB."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    row = b"\0" * (1 + (side + 7) // 8)  # filter byte, then the packed bits
    z = zlib.compressobj(9)
    rows = 256
    body = b"".join(z.compress(row * min(rows, side - i)) for i in range(0, side, rows)) + z.flush()
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0))
            + chunk(b"IDAT", body) + chunk(b"IEND", b""))


def gif_huge_frame() -> bytes:
    """A 1x1 GIF whose one frame claims 65535x65535 (giflib sizes a frame's raster by its descriptor)."""
    return (b"GIF89a" + struct.pack("<HH", 1, 1) + b"\x00\x00\x00"  # screen, no colour table
            + b"\x2c" + struct.pack("<HHHH", 0, 0, 65535, 65535) + b"\x00"  # image descriptor
            + b"\x08\x02\x4c\x01\x00" + b"\x3b")  # LZW code size, one sub-block, terminator, trailer


def small_png(seed: int) -> bytes:
    import numpy as np
    import tensorflow as tf

    pixels = np.random.default_rng(seed).integers(0, 255, (28, 28, 1)).astype(np.uint8)
    return tf.io.encode_png(pixels).numpy()


def write_examples(path: Path, images: list[tuple[bytes, int]]) -> None:
    from tests.trainer.image_helpers import example, write_records

    write_records(path, [example(encoded, label) for encoded, label in images])


def good_images(d: Path, name: str = "good.tfrecord", n: int = 8) -> None:
    write_examples(d / name, [(small_png(i), i % 2) for i in range(n)])


# --- the prepares: each writes an attempt's files into its folder ---

def p_length_claim(d: Path, claim: int) -> None:
    good_images(d, "eval.tfrecord")
    (d / "train.tfrecord").write_bytes(length_header(claim) + b"x" * 100)


def p_length_past_end(d: Path) -> None:
    good_images(d, "eval.tfrecord")
    good_images(d, "train.tfrecord")
    with open(d / "train.tfrecord", "ab") as f:
        f.write(length_header(1 << 20) + b"x" * 100)


def p_gzip(d: Path) -> None:
    good_images(d, "eval.tfrecord")
    good_images(d, "plain")
    (d / "train.tfrecord").write_bytes(gzip.compress((d / "plain").read_bytes()))


def p_label(d: Path, label: int) -> None:
    good_images(d, "eval.tfrecord")
    write_examples(d / "train.tfrecord", [(small_png(i), i % 2) for i in range(8)] + [(small_png(9), label)])


def p_bombs(d: Path, bombs: int, good: int) -> None:
    bomb = png_bomb(23000)
    good_images(d, "eval.tfrecord")
    write_examples(d / "train.tfrecord", [(small_png(i), i % 2) for i in range(good)] + [(bomb, 0)] * bombs)


def p_gif(d: Path) -> None:
    good_images(d, "eval.tfrecord")
    write_examples(d / "train.tfrecord", [(small_png(i), i % 2) for i in range(8)] + [(gif_huge_frame(), 0)])


def p_big_jpegs(d: Path) -> None:
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    jpegs = [tf.io.encode_jpeg(np.full((2048, 2048, 3), rng.integers(0, 255), np.uint8)).numpy()
             for _ in range(8)]
    write_examples(d / "train.tfrecord", [(j, i % 2) for i, j in enumerate(jpegs)])


def p_fifo(d: Path) -> None:
    (d / "train-a.csv").write_bytes((CENSUS_ROW + b"\n") * 10)
    os.mkfifo(d / "train-b.csv")
    (d / "eval.csv").write_bytes((CENSUS_ROW + b"\n") * 10)


def p_many_files(d: Path, count: int) -> None:
    folder = d / "shards"
    folder.mkdir()
    for i in range(count):
        os.close(os.open(folder / f"s-{i:06d}", os.O_CREAT | os.O_WRONLY, 0o644))


def _bytes(parts) -> bytes:
    """(text, repeat) pairs joined: the table names large files without holding them."""
    return b"".join(text * count for text, count in parts)


def p_census(d: Path, train) -> None:
    (d / "train.csv").write_bytes(_bytes(train))
    (d / "eval.csv").write_bytes((CENSUS_ROW + b"\n") * 50)


def p_ratings(d: Path, bad) -> None:
    """100 good ratings, then the bad line (line 102)."""
    rows = b"".join(b"%d,%d,%d,%d\n" % (i % 50, i % 40, 1 + i % 5, i) for i in range(100))
    (d / "ratings.csv").write_bytes(RATINGS_HEADER + rows + _bytes(bad))


def p_many_users(d: Path, users: int) -> None:
    (d / "ratings.csv").write_bytes(RATINGS_HEADER + b"".join(b"u%d,%d,4,0\n" % (i, i % 50)
                                                              for i in range(users)))


# --- the attempts ---

@dataclass(frozen=True)
class Attempt:
    name: str
    prepare: str  # a p_* function of this module
    args: dict = field(default_factory=dict)
    argv: tuple[str, ...] = ()  # "{d}" is the attempt's folder
    expect: str = ""  # a fragment of the one error line (empty: the run succeeds)
    status: int = 2


IMAGE = ("--model", "image_classifier", "--train-files", "{d}/train.tfrecord", "--eval-files",
         "{d}/eval.tfrecord", "--job-dir", "{d}/job", "--num-epochs", "1", "--channels", "1")
CENSUS = ("--model", "wide_deep", "--train-files", "{d}/train.csv", "--eval-files", "{d}/eval.csv",
          "--job-dir", "{d}/job", "--num-epochs", "1")
RATINGS = ("--model", "recommender", "--train-files", "{d}/ratings.csv", "--job-dir", "{d}/job",
           "--num-epochs", "1")
TRUNCATED = "not a TFRecord file, or record 0 is corrupt or truncated (its length header claims"
BOMB = "undecodable image: 23000x23000 (width x height) takes 529000000 pixels to decode"

ATTEMPTS = (
    Attempt("tfrecord length 6 GB", "p_length_claim", {"claim": 6 << 30}, IMAGE,
            f"{TRUNCATED} 6442450944 "),
    Attempt("tfrecord length 1 TB", "p_length_claim", {"claim": 1 << 40}, IMAGE,
            f"{TRUNCATED} 1099511627776"),
    Attempt("tfrecord length 2 EB", "p_length_claim", {"claim": 2 << 60}, IMAGE,
            f"{TRUNCATED} 2305843009213693952"),
    Attempt("tfrecord length past the end", "p_length_past_end", {}, IMAGE,
            "record 8 is corrupt or truncated (its length header claims 1048576 bytes, past the end"),
    Attempt("gzip tfrecord", "p_gzip", {}, IMAGE,
            "train.tfrecord: not a TFRecord file: it starts with GZIP's"),
    Attempt("label 2**62", "p_label", {"label": 2**62}, IMAGE,
            "record 8: bad label: label 4611686018427387904 is outside 0..99999 (at most 100000 classes)"),
    Attempt("label 10**9", "p_label", {"label": 10**9}, IMAGE,
            "record 8: bad label: label 1000000000 is outside"),
    Attempt("png bomb x1", "p_bombs", {"bombs": 1, "good": 8}, (*IMAGE[:-2], "--channels", "3"),
            f"record 8: {BOMB}"),
    Attempt("png bomb x8, size from the data", "p_bombs", {"bombs": 8, "good": 0},
            (*IMAGE[:-2], "--channels", "3", "--max-bad-records", "8"), "train.tfrecord: no usable records"),
    Attempt("gif frame 65535x65535", "p_gif", {}, IMAGE,
            "record 8: undecodable image: 1x1 (width x height) takes 4294836226 pixels to decode"),
    Attempt("eight 2048x2048 jpegs", "p_big_jpegs", {},
            (*IMAGE[:5], "{d}/train.tfrecord", *IMAGE[6:-2], "--channels", "3", "--train-batch-size", "8"),
            "; 128x128x3;", 0),  # the data's 2048 is over --image-size's 1024: the fallback size
    Attempt("fifo in a glob", "p_fifo", {}, (*CENSUS[:3], "{d}/train-*", *CENSUS[4:]),
            "train-b.csv: is a FIFO, not a regular file"),
    Attempt("100000 files", "p_many_files", {"count": 100_000}, (*IMAGE[:3], "{d}/shards/s-*", *IMAGE[4:]),
            "--train-files: 100000 files match "),
    # Scaled: the scan refuses at line 1000001 and reads a few 4 MB blocks ahead, so 1 GB of blank lines or
    # 200 MB of comment lines take the same path (measured at full size: see the issue 30 report).
    Attempt("census blank lines", "p_census", {"train": [(b"\n", 4_000_000)]}, CENSUS,
            "train.csv:1000001: more than 1000000 blank or comment lines"),
    Attempt("census | lines", "p_census", {"train": [(b"|\n", 3_000_000)]}, CENSUS,
            "train.csv:1000001: more than 1000000 blank or comment lines"),
    Attempt("census 5000-digit number", "p_census",
            {"train": [(CENSUS_ROW + b"\n", 50), (b"9", 5000), (CENSUS_ROW[2:] + b"\n", 1)]}, CENSUS,
            "train.csv:51: malformed row: field 'age': 9999999999999999999999999999999999999999... "
            "(5000 bytes) is outside the int64 range"),
    Attempt("census line over 8 MiB", "p_census", {"train": [(CENSUS_ROW + b"\n", 5), (b"x", 9 << 20)]},
            CENSUS, "train.csv:6: malformed row: longer than 8388608 bytes"),
    # Scaled from 5M users (measured at full size in the report): reading 5M ratings alone takes ~5 s.
    Attempt("ratings 1.5M users", "p_many_users", {"users": 1_500_000}, RATINGS,
            "--train-files: 1200000 distinct users (userId, --user-column) in the training ratings, more "
            "than the 1000000"),
    Attempt("ratings 10 MB id", "p_ratings", {"bad": [(b"x", 10 << 20), (b",1,4,0\n", 1)]},
            RATINGS, "ratings.csv:102: malformed row: longer than 8388608 bytes"),
    Attempt("ratings 300-byte id", "p_ratings", {"bad": [(b"x", 300), (b",1,4,0\n", 1)]}, RATINGS,
            "ratings.csv: line 102: userId (--user-column) is 300 bytes long, more than the 256"),
    Attempt("ratings 1 MB quoted id", "p_ratings",
            {"bad": [(b'"', 1), (b"x", 1 << 20), (b'",1,4,0\n', 1)]}, RATINGS,
            "ratings.csv: line 102: not a CSV row: field larger than field limit"),
    Attempt("ratings 10 MB quoted id", "p_ratings",
            {"bad": [(b'"', 1), (b"x", 10 << 20), (b'",1,4,0\n', 1)]}, RATINGS,
            "ratings.csv:102: malformed row: longer than 8388608 bytes"),
    Attempt("ratings timestamp 10**20", "p_ratings", {"bad": [(b"1,1,4," + b"1" + b"0" * 20 + b"\n", 1)]},
            RATINGS, "line 102: timestamp (--timestamp-column) must be an integer time in the int64 range"),
    Attempt("ratings rating 1e308", "p_ratings", {"bad": [(b"1,1,1e308,0\n", 1)]}, RATINGS,
            "line 102: rating (--rating-column) must be a float32 number"),
    Attempt("ratings rating 1e39", "p_ratings", {"bad": [(b"1,1,1e39,0\n", 1)]}, RATINGS,
            "line 102: rating (--rating-column) must be a float32 number"),
)


def _status_kb(field_name: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    raise KeyError(field_name)


def run(out: Path, names: list[str]) -> None:
    import gc
    import shutil

    import tensorflow as tf  # noqa: F401  (imported before the first attempt: not counted in its peak)

    from tests.trainer.cli_batch import call_main
    from trainer import task

    attempts = [a for a in ATTEMPTS if not names or a.name in names]
    results = []
    root = out.parent / "attempts"  # beside the results: a runner that dies leaves them in pytest's tmp
    progress = out.with_suffix(".progress")
    for i, attempt in enumerate(attempts):
        d = root / str(i)
        d.mkdir(parents=True)
        globals()[attempt.prepare](d, **attempt.args)
        argv = [a.format(d=d) for a in attempt.argv]
        progress.write_text(attempt.name)
        gc.collect()
        before = _status_kb("VmRSS")
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        log = d / "stderr"
        start = time.perf_counter()
        # A traceback is a defect: recorded, the next attempts still run.
        status, traceback = call_main(task.main, argv, d / "stdout", log)
        seconds = time.perf_counter() - start
        peak = _status_kb("VmHWM")
        results.append({"name": attempt.name, "status": status, "stderr": log.read_text(errors="replace"),
                        "traceback": traceback, "seconds": seconds, "rss_before_mb": before / 1024,
                        "peak_growth_mb": (peak - before) / 1024, "peak_mb": peak / 1024})
        out.write_text(json.dumps(results))
        shutil.rmtree(d)
    progress.unlink()


if __name__ == "__main__":
    run(Path(sys.argv[1]), sys.argv[2:])
