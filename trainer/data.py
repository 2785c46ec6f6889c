"""Reading delimited text data: file expansion, a validating scan, and the streaming tf.data pipeline.

Every file access goes through ``tf.io.gfile``, so local paths, globs, several files and ``gs://`` URIs all
work the same way.

Bad rows are found by :func:`scan_csv`, one pass over the raw lines before training starts (vectorised in
NumPy a block of lines at a time, on several cores, with the per-line validator wording every bad row):
malformed rows (what ``decode_csv`` could not parse, or would parse into something else) and implausible
ones (a numeric value outside its column's declared plausible range, or not finite, e.g. an age of -9e18:
it would parse, train silently and skew the normalisation statistics into a useless model). It names the
file and line of the first bad row (or counts and reports up to ``--max-bad-rows`` skipped ones), counts the
data rows and computes the normalisation statistics the model needs, so a bad file stops the run before
anything is written. The tf.data pipeline then reads the same lines with
``TextLineDataset``, batches them first and decodes whole batches with ``decode_csv`` in a parallel map: the
lines to leave out (comments, blank lines, skipped bad rows) are removed per batch by their global line
number, a vectorised lookup, so no per-line Python or per-element tf.data work is done.

What a file may cost is bounded before it is paid: at most MAX_FILES files a flag, regular files only,
lines of at most MAX_LINE_BYTES, integers checked for int64 without converting their text, and at most
MAX_NON_DATA_LINES blank or comment lines (each is a position the pipeline drops).
"""

from __future__ import annotations

import glob
import json
import logging
import math
import os
import re
import stat
import sys
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

# A scan reads files in blocks of this size, so memory stays flat on large inputs.
_BLOCK_BYTES = 4 << 20
# The share of the available memory one process's caches may take, divided among the cluster's processes
# on the same host (see cache_budget).
_MEMORY_SHARE = 0.5
# The longest line a scan reads (a file without line breaks would otherwise be read into memory whole).
MAX_LINE_BYTES = 8 << 20
# The most lines a scan leaves out that are not data (blank or comment lines): each is kept as a position
# for the pipeline to drop (8 MB at the limit); a file of a billion blank lines is refused at this one.
MAX_NON_DATA_LINES = 1_000_000
_WHITESPACE = np.zeros(256, dtype=bool)
_WHITESPACE[list(b" \t\n\r\x0b\x0c")] = True  # what bytes.strip() strips
# Blocks whose vectorised checks run at once (see _blocks).
_SCAN_THREADS = 4
# Batches the training pipeline shuffles among (it reorders whole batches; see text_dataset).
SHUFFLE_BATCHES = 16
_INT = re.compile(rb"-?[0-9]+")
# Rows sampled per numeric column for quantiles (ScanResult.quantiles): exact below it, uniform above.
QUANTILE_SAMPLE = 100_000
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1  # what decode_csv parses an int column into
# decode_csv also parses nan and inf(inity) into a float column: accepted here, then refused as not finite.
_FLOAT = re.compile(rb"[-+]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|(?i:nan|inf|infinity))")
# The range of a numeric column that declares none: every finite value.
_ANY_FINITE = (-sys.float_info.max, sys.float_info.max)
_TRANSFORMS: dict[str | None, Callable[[float], float]] = {
    None: lambda v: v,
    "log1p": lambda v: math.log1p(max(v, 0.0)),
}


MALFORMED = "malformed row: "
IMPLAUSIBLE = "implausible value: "


class DataError(ValueError):
    """Bad input data; ``str()`` is one line naming the file (and line) and what is wrong."""


@dataclass(frozen=True)
class Column:
    name: str
    kind: str  # "int", "float" or "str"
    transform: str | None = None  # applied before normalisation statistics: None or "log1p"
    # Inclusive (low, high) bounds of a plausible raw value (before the transform); None: any finite value.
    # A row outside them is bad, like a malformed one. Generous: they catch corrupt values, not outliers.
    plausible: tuple[float, float] | None = None

    def __post_init__(self):
        if self.kind not in ("int", "float", "str"):
            raise ValueError(f"column {self.name}: unknown kind {self.kind!r}")
        if self.transform not in _TRANSFORMS:
            raise ValueError(f"column {self.name}: unknown transform {self.transform!r}")
        if self.plausible is not None:
            low, high = self.plausible
            if self.kind == "str" or not (math.isfinite(low) and math.isfinite(high) and low <= high):
                raise ValueError(f"column {self.name}: bad plausible range {self.plausible!r}")

    @property
    def numeric(self) -> bool:
        return self.kind != "str"


@dataclass(frozen=True)
class CsvSchema:
    """Layout of a headerless delimited file whose last meaning is a binary label."""

    columns: tuple[Column, ...]
    label: str
    positive: tuple[str, ...]  # label values meaning 1 (after stripping label_suffix)
    negative: tuple[str, ...]  # label values meaning 0
    label_suffix: str = ""  # e.g. adult.test writes ">50K." where adult.data writes ">50K"
    comment_prefix: str = "|"  # UCI convention: "|" starts a comment line (adult.test's banner)
    delimiter: str = ","

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def features(self) -> tuple[Column, ...]:
        return tuple(c for c in self.columns if c.name != self.label)

    def column(self, name: str) -> Column:
        return self.columns[self.names.index(name)]


@dataclass(frozen=True)
class BadRow:
    file: str
    line: int  # 1-based, as an editor shows it
    reason: str  # starts with "malformed row: " or "implausible value: "

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.reason}"


@dataclass(frozen=True)
class ScanResult:
    files: tuple[str, ...]
    total_lines: int  # every line TextLineDataset will yield, data or not
    rows: int  # data rows the pipeline will deliver
    positives: int
    total_bytes: int
    excluded: np.ndarray  # sorted global 0-based line indices the pipeline must leave out
    bad_rows: tuple[BadRow, ...] = ()  # malformed and implausible rows skipped under --max-bad-rows
    stats: dict[str, tuple[float, float]] = field(default_factory=dict)  # numeric column -> (mean, variance)
    # numeric column -> a uniform sample of its (transformed) values, at most QUANTILE_SAMPLE of them
    samples: dict[str, np.ndarray] = field(default_factory=dict)

    def quantiles(self, name: str, count: int) -> tuple[float, ...]:
        """Distinct inner `count`-quantiles of column `name`, as bin edges. If the most common value fills
        more than a bin on its own (capital gains: 92% zeros), it is an edge by itself and the quantiles are
        taken over the other values, so the rest of the range still gets its bins."""
        sample = self.samples[name]
        values, counts = np.unique(sample, return_counts=True)
        edges = []
        if counts.max() * count > len(sample) and len(values) > 1:
            mode = values[np.argmax(counts)]
            edges.append(mode)
            sample = sample[sample != mode]
        edges.extend(np.quantile(sample, np.linspace(0, 1, count + 1)[1:-1]))
        return tuple(float(q) for q in np.unique(edges))

    def value_range(self, name: str) -> tuple[float, float]:
        return float(np.min(self.samples[name])), float(np.max(self.samples[name]))

    def summary(self) -> str:
        text = f"{self.rows} rows from {len(self.files)} file(s)"
        if self.bad_rows:
            shown = "; ".join(str(b) for b in self.bad_rows[:3])
            more = f" (+{len(self.bad_rows) - 3} more)" if len(self.bad_rows) > 3 else ""
            counts = self.bad_counts()
            text += (f", skipped {len(self.bad_rows)} bad row(s) ({counts['malformed']} malformed, "
                     f"{counts['implausible']} implausible): {shown}{more}")
        return text

    def bad_counts(self) -> dict[str, int]:
        implausible = sum(b.reason.startswith(IMPLAUSIBLE) for b in self.bad_rows)
        return {"malformed": len(self.bad_rows) - implausible, "implausible": implausible}


def _is_uri(path: str) -> bool:
    return "://" in path


# The most files one flag's paths and globs may name: every file is checked before training, and a
# scan keeps per-file state. A data set of more shards than this is better merged into fewer, larger ones.
MAX_FILES = 10_000
_SHOWN_FILES = 3  # file names an error lists before "(+N more)"


def name_files(files: Sequence[str]) -> str:
    """The first few of ``files`` and how many more: an error's line stays short for any number of files."""
    shown = ", ".join(files[:_SHOWN_FILES])
    return shown + (f" (+{len(files) - _SHOWN_FILES} more)" if len(files) > _SHOWN_FILES else "")


def expand_files(patterns: Sequence[str], flag: str) -> tuple[str, ...]:
    """Resolve paths and globs (local or gs://) to a de-duplicated tuple of files, sorted per pattern.

    Local paths are expanded without TensorFlow, so a missing local file is reported before it is imported.
    Matching directories are left out; any other match that is not a regular file (a FIFO, a socket, a
    device) is refused, as are more than MAX_FILES files.
    """
    files: dict[str, None] = {}  # insertion-ordered and de-duplicated in linear time
    for pattern in patterns:
        if _is_uri(pattern):
            matches = _glob_uri(pattern, flag)
        else:
            matches = local_files(sorted(glob.glob(pattern)), pattern, flag)
        if not matches:
            raise DataError(f"{flag}: no such file: {pattern}")
        files.update(dict.fromkeys(matches))
        check_file_count(files, patterns, flag)
    return tuple(files)


def local_files(matches: Sequence[str], pattern: str, flag: str) -> list[str]:
    """The regular files among a local glob's ``matches``: directories are left out, anything else that is
    not a regular file is refused (reading a FIFO blocks until a writer comes, forever for a training job).
    ``os.stat`` opens nothing, so checking a FIFO or a device has no effect on it."""
    check_file_count(matches, [pattern], flag)
    kept = []
    for path in matches:
        try:
            mode = os.stat(path).st_mode
        except OSError:  # gone since the glob, or a dangling link: as if it had not matched
            continue
        if stat.S_ISREG(mode):
            kept.append(path)
        elif not stat.S_ISDIR(mode):
            raise DataError(f"{flag}: {path}: is a {_file_kind(mode)}, not a regular file")
    return kept


def _file_kind(mode: int) -> str:
    for test, kind in ((stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device")):
        if test(mode):
            return kind
    return "special file"


def check_file_count(files, patterns: Sequence[str], flag: str) -> None:
    if len(files) > MAX_FILES:
        names = list(files)
        raise DataError(f"{flag}: {len(names)} files match {name_files(list(patterns))}, more than the "
                        f"{MAX_FILES} allowed (merge the data into fewer, larger files): {name_files(names)}")


def _glob_uri(pattern: str, flag: str) -> list[str]:
    import tensorflow as tf

    try:
        matches = sorted(tf.io.gfile.glob(pattern))
    except tf.errors.OpError as exc:  # e.g. gs:// without network or credentials
        raise DataError(f"{flag}: cannot list {pattern}: {op_reason(exc)}") from None
    check_file_count(matches, [pattern], flag)
    return [m for m in matches if not tf.io.gfile.isdir(m)]


def op_reason(exc) -> str:
    """The first line of a tf.errors.OpError's message (some, e.g. ram:// NotFoundError, have none); for an
    error inside a tf.function ("Graph execution error:", the node, a stack), the op's own line."""
    lines = [line.strip() for line in (exc.message or "").strip().splitlines() if line.strip()]
    if lines and lines[0] == "Graph execution error:":
        reason = [line for line, after in zip(lines, lines[1:], strict=False) if after.startswith("[[")]
        return reason[0] if reason else lines[-1]
    return lines[0] if lines else type(exc).__name__


def _unreadable(path: str, exc, flag: str) -> DataError:
    """A read failure (e.g. gs:// without access; local files were checked before) as one line."""
    return DataError(f"{flag + ': ' if flag else ''}cannot read {path}: {op_reason(exc)}")


def read_lines(path: str, flag: str):
    """Yield the lines of ``path`` exactly as TextLineDataset splits them (no trailing empty line)."""
    for block in _complete_lines(path, flag):
        for line in block.split(b"\n")[:-1]:
            yield line[:-1] if line.endswith(b"\r") else line


class _Validator:
    """Checks one raw line against a schema the way decode_csv will parse it, but with a reason."""

    def __init__(self, schema: CsvSchema):
        self.schema = schema
        self.n = len(schema.columns)
        self.delim = schema.delimiter.encode()
        self.comment = schema.comment_prefix.encode()
        self.label_index = schema.names.index(schema.label)
        self.suffix = schema.label_suffix.encode()
        self.positive = {v.encode() for v in schema.positive}
        self.negative = {v.encode() for v in schema.negative}
        self.numeric = [
            (i, c.name, *((_INT, "an integer") if c.kind == "int" else (_FLOAT, "a number")),
             _TRANSFORMS[c.transform], *map(float, c.plausible or _ANY_FINITE))
            for i, c in enumerate(schema.columns) if c.numeric
        ]

    def is_data(self, line: bytes) -> bool:
        stripped = line.strip()
        return bool(stripped) and not stripped.startswith(self.comment)

    def check(self, line: bytes) -> str | tuple[int, list[float]]:
        """A bad row's reason (starting with MALFORMED or IMPLAUSIBLE), or a good row's (label, transformed
        numeric values in column order)."""
        if b'"' in line:
            return MALFORMED + "unexpected quote character"
        fields = line.split(self.delim)
        if len(fields) != self.n:
            return MALFORMED + f"expected {self.n} fields, got {len(fields)}"
        values = []
        for i, name, pattern, expected, transform, low, high in self.numeric:
            text = fields[i].strip()
            if not pattern.fullmatch(text):
                return MALFORMED + f"field {name!r}: {_shown(text)!r} is not {expected}"
            # Up to 18 digits always fit; only longer texts pay for the check on this per-row path.
            if pattern is _INT and len(text) > 18 and not _fits_int64(text):
                return MALFORMED + f"field {name!r}: {_shown(text)} is outside the int64 range"
            value = float(text)
            if not low <= value <= high:  # nan and +-inf are outside any range, _ANY_FINITE included
                return IMPLAUSIBLE + _implausible(name, _shown(text), value, low, high)
            values.append(transform(value))
        for i, text in enumerate(fields):
            if not text.strip():
                return MALFORMED + f"field {self.schema.columns[i].name!r} is empty"
        label = fields[self.label_index].strip()
        if self.suffix and label.endswith(self.suffix):
            label = label[: -len(self.suffix)]
        if label in self.positive:
            y = 1
        elif label in self.negative:
            y = 0
        else:
            allowed = ", ".join(self.schema.negative + self.schema.positive)
            text = _shown(label)
            return MALFORMED + f"field {self.schema.label!r}: {text!r} is not one of {allowed}"
        return y, values


def _fits_int64(text: bytes) -> bool:
    """Whether an integer's text (``_INT``) parses into int64, as decode_csv's strtoll does (leading zeros
    and all). More than 19 significant digits never fit: they are not handed to int(), which refuses texts
    of over 4300 digits with a ValueError."""
    digits = text.lstrip(b"-").lstrip(b"0")
    if len(digits) > 19:
        return False
    return _INT64_MIN <= int((b"-" if text.startswith(b"-") else b"") + (digits or b"0")) <= _INT64_MAX


def _shown(text: bytes, limit: int = 40) -> str:
    """A field's text for an error: at most ``limit`` characters and how long it was."""
    shown = text.decode(errors="replace")
    return shown if len(shown) <= limit else f"{shown[:limit]}... ({len(text)} bytes)"


def _bound(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _implausible(name: str, text: str, value: float, low: float, high: float) -> str:
    allowed = f"plausible range {_bound(low)}..{_bound(high)}"
    if math.isfinite(value):
        return f"field {name!r}: {text} is outside the {allowed}"
    if (low, high) == _ANY_FINITE:
        return f"field {name!r}: {text} is not a finite number"
    return f"field {name!r}: {text} is not a finite number ({allowed})"


class TooManyBadRows(DataError):
    """More bad rows than ``--max-bad-rows`` allows; ``bad_rows`` holds those found, the last one over."""

    def __init__(self, message: str, bad_rows: Sequence[BadRow]):
        super().__init__(message)
        self.bad_rows = tuple(bad_rows)


def too_many(bad: Sequence[BadRow], max_bad_rows: int) -> TooManyBadRows:
    hint = (f"more than --max-bad-rows {max_bad_rows} malformed or implausible rows" if max_bad_rows else
            "use --max-bad-rows N to skip up to N malformed or implausible rows")
    return TooManyBadRows(f"{bad[max_bad_rows]} ({hint})", bad[:max_bad_rows + 1])


def _complete_lines(path: str, flag: str):
    """Blocks of ``path`` cut after their last newline, each a run of whole lines ending in b"\n" (a last
    line without one gets it), so the lines are exactly TextLineDataset's plus their newlines."""
    import tensorflow as tf

    tail = b""
    lines = 0  # complete lines before ``tail``, for an error naming the line
    try:
        with tf.io.gfile.GFile(path, "rb") as f:
            while True:
                block = f.read(_BLOCK_BYTES)
                if not block:
                    break
                cut = block.rfind(b"\n") + 1
                # A line longer than a block is read on, within the bound, also where it ends in this block.
                if len(tail) + (block.find(b"\n") if cut else len(block)) > MAX_LINE_BYTES:
                    raise DataError(f"{path}:{lines + 1}: malformed row: longer than {MAX_LINE_BYTES} "
                                    "bytes (a row of this data is a line of text)")
                if not cut:
                    tail += block
                    continue
                chunk = tail + block[:cut]
                lines += chunk.count(b"\n")
                yield chunk
                tail = block[cut:]
    except tf.errors.OpError as exc:
        raise _unreadable(path, exc, flag) from None
    if tail:
        yield tail + b"\n"


class _FastPath:
    """The validator's verdict on whole blocks of lines at once, in NumPy: a row it accepts is one the
    per-line :class:`_Validator` would accept with the same label and values; every other line (comments,
    blank lines, quotes, tabs, float columns, anything unusual) is left to the per-line validator, which
    also words every bad row's reason. On census rows it is about 10x faster than the per-line check."""

    _WIDTH = 24  # longest numeric field (with its spaces) the vectorised parse takes; 18 digits fit in int64
    _LABEL_WIDTH = 16

    def __init__(self, schema: CsvSchema):
        self.n = len(schema.columns)
        self.usable = (len(schema.delimiter) == 1 and ord(schema.delimiter) < 128 and schema.comment_prefix
                       and not any(c.kind == "float" for c in schema.columns) and self.n > 1)
        self.delim = ord(schema.delimiter[0]) if schema.delimiter else 0
        self.comment = ord(schema.comment_prefix[0]) if schema.comment_prefix else 0
        self.ints = [(i, *map(float, c.plausible or _ANY_FINITE), c.transform)
                     for i, c in enumerate(schema.columns) if c.kind == "int"]
        self.label_index = schema.names.index(schema.label)
        self.texts = [i for i, c in enumerate(schema.columns) if c.kind == "str" and i != self.label_index]
        suffix = schema.label_suffix.encode()
        # The stripped label texts the validator accepts: each value, and each value with the suffix.
        self.labels: list[tuple[bytes, int]] = []
        for values, y in ((schema.positive, 1), (schema.negative, 0)):
            for v in (v.encode() for v in values):
                if not (suffix and v.endswith(suffix)):
                    self.labels.append((v, y))
                if suffix:
                    self.labels.append((v + suffix, y))
        self.usable = self.usable and all(len(v) <= self._LABEL_WIDTH for v, _ in self.labels)

    def rows(self, block: bytes, starts, ends):
        """(accepted mask, labels, numeric values [lines, columns]) for the lines of ``block``."""
        a = np.frombuffer(block, dtype=np.uint8)
        count = len(starts)
        ok = (ends > starts) & (a[starts] != self.comment) & (a[starts] > 32)
        # Whitespace other than spaces (and the stripped \r), and quotes, go to the per-line check.
        for special in (b'"', b"\t", b"\x0b", b"\x0c", b"\r"):
            if special in block:
                hits = np.flatnonzero(a == special[0])
                ok &= np.searchsorted(hits, ends) == np.searchsorted(hits, starts)
        delims = np.flatnonzero(a == self.delim).astype(np.int32)
        first_delim = np.searchsorted(delims, starts)
        ok &= np.searchsorted(delims, ends) - first_delim == self.n - 1
        labels = np.zeros(count, dtype=np.int64)
        values = np.zeros((count, len(self.ints)), dtype=np.float64)
        rows = np.flatnonzero(ok)
        if not rows.size:
            return ok, labels, values
        where = delims[first_delim[rows][:, None] + np.arange(self.n - 1)]
        field_starts = np.concatenate((starts[rows, None].astype(np.int32), where + 1), axis=1)
        field_ends = np.concatenate((where, ends[rows, None].astype(np.int32)), axis=1)
        # A text field is not empty once stripped: a non-space byte first or second (anything else: the
        # per-line check). Integers and the label are checked whole below.
        text_starts, text_ends = field_starts[:, self.texts], field_ends[:, self.texts]
        second = a[np.minimum(text_starts + 1, len(a) - 1)]
        good = ((text_ends > text_starts)
                & ((a[text_starts] > 32) | ((text_ends - text_starts >= 2) & (second > 32)))).all(axis=1)
        if self.ints:
            columns = [i for i, *_ in self.ints]
            parsed, value = self._integers(a, field_starts[:, columns], field_ends[:, columns])
            low = np.array([low for _, low, _, _ in self.ints])
            high = np.array([high for _, _, high, _ in self.ints])
            good &= (parsed & (value >= low) & (value <= high)).all(axis=1)
            for k, (_, _, _, transform) in enumerate(self.ints):
                column = value[:, k]
                values[rows, k] = np.log1p(np.maximum(column, 0.0)) if transform == "log1p" else column
        label_ok, y = self._labels(a, field_starts[:, self.label_index], field_ends[:, self.label_index])
        good &= label_ok
        labels[rows] = y
        ok[rows] = good
        return ok, labels, values

    @staticmethod
    def _chars(a, starts, ends, width: int):
        """Each field's bytes in a [..., width] uint8 array padded with spaces."""
        index = starts[..., None] + np.arange(width, dtype=starts.dtype)
        return np.where(index < ends[..., None], a[np.minimum(index, len(a) - 1)], np.uint8(32))

    def _integers(self, a, starts, ends):
        """(parsed, value) [rows, columns]: a field is spaces, an optional minus, 1 to 18 digits, spaces."""
        lengths = ends - starts
        width = int(min(lengths.max(), self._WIDTH))
        chars = self._chars(a, starts, ends, width)
        digits = chars - np.uint8(48)  # wraps below "0": one comparison finds the digits
        digit = digits <= 9
        minus = chars == 45
        solid = chars != 32
        first = solid.argmax(axis=-1)
        last = width - 1 - solid[..., ::-1].argmax(axis=-1)
        run = last - first + 1
        signs = minus.sum(axis=-1)
        lead = np.take_along_axis(chars, first[..., None], axis=-1)[..., 0]
        parsed = ((lengths <= width) & (digit | minus | ~solid).all(axis=-1) & (solid.sum(axis=-1) == run)
                  & ((signs == 0) | ((signs == 1) & (lead == 45))) & (run - signs >= 1) & (run - signs <= 18))
        magnitude = np.zeros(chars.shape[:-1], dtype=np.int64)
        for j in range(width):  # Horner's rule, one character position at a time
            magnitude = np.where(digit[..., j], magnitude * 10 + digits[..., j], magnitude)
        return parsed, np.where(signs == 1, -magnitude, magnitude).astype(np.float64)

    def _labels(self, a, starts, ends):
        width = int(min((ends - starts).max(), self._LABEL_WIDTH))
        chars = self._chars(a, starts, ends, width)
        fits = ends - starts <= width
        solid = chars != 32
        first = solid.argmax(axis=1)
        run = width - solid[:, ::-1].argmax(axis=1) - first
        text = np.take_along_axis(chars, np.minimum(first[:, None] + np.arange(width), width - 1), axis=1)
        ok = np.zeros(len(chars), dtype=bool)
        y = np.zeros(len(chars), dtype=np.int64)
        for value, label in self.labels:
            if len(value) > width:
                continue
            same = (text[:, :len(value)] == np.frombuffer(value, np.uint8)).all(axis=1)
            match = fits & (run == len(value)) & same
            ok |= match
            y[match] = label
        return ok, y


class _Sample:
    """A uniform sample without replacement of at most ``size`` rows (the rows with the smallest random
    keys from a seeded generator: the same rows in the same files give the same sample), kept in memory
    whatever the data size."""

    def __init__(self, size: int, columns: int):
        self.size = size
        self.rng = np.random.default_rng(0)
        self.keys = np.empty(0)
        self.values = np.empty((0, columns))

    def add(self, values: np.ndarray) -> None:
        keys = np.concatenate((self.keys, self.rng.random(len(values))))
        values = np.concatenate((self.values, values))
        if len(keys) > self.size:
            keep = np.argpartition(keys, self.size)[:self.size]
            keys, values = keys[keep], values[keep]
        self.keys, self.values = keys, values


def _non_data(a: np.ndarray, starts: np.ndarray, ends: np.ndarray, comment: bytes) -> np.ndarray:
    """The lines ``a[starts:ends]`` that are not data, vectorised: blank once stripped, or starting with
    ``comment`` once stripped (exactly :meth:`_Validator.is_data`'s negation)."""
    solid = np.flatnonzero(~_WHITESPACE[a])
    if not len(solid):
        return np.ones(len(starts), dtype=bool)
    at = np.searchsorted(solid, starts)
    first = solid[np.minimum(at, len(solid) - 1)]
    last = solid[np.maximum(np.searchsorted(solid, ends) - 1, 0)]  # the last non-blank byte before the end
    blank = (at == len(solid)) | (first >= ends)
    comment_line = ~blank
    for j, byte in enumerate(comment):
        comment_line &= (first + j <= last) & (a[np.minimum(first + j, len(a) - 1)] == byte)
    return blank | comment_line


def _blocks(path: str, flag: str, fast: _FastPath, columns: int, comment: bytes):
    """(block, its line count, the data lines (indices in the block), their starts, their ends, the fast
    path's verdict on them, the non-data lines (indices)) for each block of ``path``, in order. Only data
    lines get per-line arrays: a block of blank lines costs a list of their positions. The vectorised
    checks of the next blocks run on other cores (NumPy releases the GIL) while the caller handles this
    one; at most a few blocks are held at once."""

    def lines(block: bytes):
        a = np.frombuffer(block, dtype=np.uint8)
        ends = np.flatnonzero(a == 10).astype(np.int32)  # a block is far below 2 GB
        starts = np.concatenate(([0], ends[:-1] + 1)).astype(np.int32)
        ends = ends - ((ends > starts) & (a[ends - 1] == 13))  # TextLineDataset drops a \r before \n
        skip = _non_data(a, starts, ends, comment)
        data = np.flatnonzero(~skip)
        count, starts, ends, skip = len(skip), starts[data], ends[data], np.flatnonzero(skip)
        if fast.usable:
            return block, count, data, starts, ends, fast.rows(block, starts, ends), skip
        empty = np.zeros(len(data), dtype=bool), np.zeros(len(data), dtype=np.int64)
        return block, count, data, starts, ends, (*empty, np.zeros((len(data), columns))), skip

    threads = max(1, min(_SCAN_THREADS, os.cpu_count() or 1))
    with ThreadPoolExecutor(threads) as pool:
        pending = deque()
        for block in _complete_lines(path, flag):
            pending.append(pool.submit(lines, block))
            if len(pending) > threads:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def scan_csv(files: Sequence[str], schema: CsvSchema, *, max_bad_rows: int = 0, flag: str = "",
             keep: tuple[int, int] = (0, 1), require_rows: bool = True, sample_size: int | None = None,
             keeper: ScanKeeper | None = None) -> ScanResult:
    """Validate every line of ``files``; raise TooManyBadRows (a DataError) at the first bad row beyond
    ``max_bad_rows``.

    Malformed and implausible rows share the ``max_bad_rows`` budget: both are left out of the pipeline, the
    statistics and the row count, and listed in ``bad_rows``. ``keep=(i, n)``: only the lines whose index
    (counted over all ``files``) is ``i`` modulo ``n`` are this scan's; the others are neither checked nor
    counted (a worker's share when sharding by record, see trainer.sharding).

    With a ``keeper``, a completed scan is kept in its folder, keyed by the files' identity (path, size,
    modification time), the schema and the share; the job's later trials and restarts read it instead of the
    data, and refuse or skip the same bad rows with the same lines (a scan that stopped at a bad row is not
    kept, and nothing is written before ``keeper.flush()``).
    """
    if keeper is None:
        return _scan_files(files, schema, max_bad_rows=max_bad_rows, flag=flag, keep=keep,
                           require_rows=require_rows, sample_size=sample_size)
    size = QUANTILE_SAMPLE if sample_size is None else sample_size
    path = f"{keeper.folder}/{_scan_key(files, schema, keep, size, flag)}.npz"
    scan = _load_scan(path, files, claim=keeper.claim)
    if scan is None:
        scan = _scan_files(files, schema, max_bad_rows=max_bad_rows, flag=flag, keep=keep,
                           require_rows=require_rows, sample_size=size)
        keeper.pending.append((path, scan))
        return scan
    logging.getLogger("trainer").info("%s: read the scan of %d file(s) from %s", flag or "data", len(files),
                                      path)
    if len(scan.bad_rows) > max_bad_rows:
        raise too_many(scan.bad_rows, max_bad_rows)
    if scan.rows == 0 and require_rows:
        raise DataError(f"{flag + ': ' if flag else ''}no data rows in {name_files(files)}")
    return scan


@dataclass
class ScanKeeper:
    """Where completed scans are kept (trainer.sharding.Shard.cache_dir), and those still to write: a task
    writes them with :meth:`flush` once all its data was accepted, so bad data leaves nothing behind.
    ``claim``: a scan missed is claimed, and a run that misses one another run is scanning waits for it
    (trainer.kept; ``trainer.kept.may_claim(shard)``)."""

    folder: str
    claim: bool = False
    pending: list[tuple[str, ScanResult]] = field(default_factory=list)

    def flush(self) -> None:
        for path, scan in self.pending:
            _save_scan(path, scan)
        self.pending.clear()


_MAX_KEPT_SCAN_BYTES = 1 << 30  # a kept scan holds a bounded sample and the excluded lines' positions
_SCAN_FORMAT = 1  # bump when what a scan checks or keeps changes: older kept scans are then not read


def _scan_key(files: Sequence[str], schema: CsvSchema, keep: tuple[int, int], sample_size: int,
              flag: str) -> str:
    import tensorflow as tf

    from trainer import kept

    identity = []
    for path in files:
        try:
            identity += kept.files_identity([path])
        except tf.errors.OpError as exc:
            raise _unreadable(path, exc, flag) from None
    return kept.key(_SCAN_FORMAT, repr(schema), list(keep), sample_size, identity)


def _load_scan(path: str, files: Sequence[str], *, claim: bool = False) -> ScanResult | None:
    """A kept scan, or None when there is none or it cannot be read (then the data is scanned again; with
    ``claim``, under this run's claim: see trainer.kept)."""
    import io

    from trainer import kept

    raw = kept.read(path, _MAX_KEPT_SCAN_BYTES, "scan", claim=claim)
    if raw is None:
        return None
    try:
        kept_scan = np.load(io.BytesIO(raw), allow_pickle=False)
        meta = json.loads(kept_scan["meta"].tobytes())
        samples = kept_scan["samples"]
        return ScanResult(
            files=tuple(files), total_lines=meta["total_lines"], rows=meta["rows"],
            positives=meta["positives"], total_bytes=meta["total_bytes"], excluded=kept_scan["excluded"],
            bad_rows=tuple(BadRow(*b) for b in meta["bad_rows"]),
            stats={k: tuple(v) for k, v in meta["stats"].items()},
            samples={name: samples[:, k].copy() for k, name in enumerate(meta["names"])})
    except kept.UNREADABLE as exc:
        logging.getLogger("trainer").warning("not reading the kept scan %s (%s): scanning the data", path,
                                             exc)
        return None


def _save_scan(path: str, scan: ScanResult) -> None:
    """Keep ``scan`` at ``path`` (see trainer.kept.write)."""
    import io

    from trainer import kept

    names = list(scan.samples)
    meta = {"rows": scan.rows, "positives": scan.positives, "total_lines": scan.total_lines,
            "total_bytes": scan.total_bytes, "stats": scan.stats, "names": names,
            "bad_rows": [[b.file, b.line, b.reason] for b in scan.bad_rows]}
    samples = np.stack([scan.samples[n] for n in names], axis=1) if names else np.empty((0, 0))
    buffer = io.BytesIO()
    np.savez(buffer, meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8),
             excluded=scan.excluded, samples=samples)
    kept.write(path, buffer.getvalue(), "data scan")


def _scan_files(files: Sequence[str], schema: CsvSchema, *, max_bad_rows: int, flag: str,
                keep: tuple[int, int], require_rows: bool, sample_size: int | None) -> ScanResult:
    """scan_csv without the kept scans: rows are checked a block at a time by :class:`_FastPath`, and line by
    line only where it declines."""
    import tensorflow as tf

    v, fast = _Validator(schema), _FastPath(schema)
    index_of, count_of = keep
    numeric = [c.name for c in schema.columns if c.numeric]
    sample = _Sample(QUANTILE_SAMPLE if sample_size is None else sample_size, len(numeric))
    sums, squares = np.zeros(len(numeric)), np.zeros(len(numeric))
    excluded: list[np.ndarray] = []
    bad: list[BadRow] = []
    index = rows = positives = total_bytes = non_data = 0
    for path in files:
        try:
            total_bytes += tf.io.gfile.stat(path).length
        except tf.errors.OpError as exc:
            raise _unreadable(path, exc, flag) from None
        number = 0  # lines of this file before the block
        for block, count, data, starts, ends, verdict, skip in _blocks(path, flag, fast, len(numeric),
                                                                        v.comment):
            good, labels, values = verdict
            mine = (index + data) % count_of == index_of
            good &= mine
            if count_of > 1:
                skip = skip[(index + skip) % count_of == index_of]
            if non_data + len(skip) > MAX_NON_DATA_LINES:
                line = number + int(skip[MAX_NON_DATA_LINES - non_data]) + 1
                raise DataError(f"{path}:{line}: more than {MAX_NON_DATA_LINES} blank or comment lines in "
                                f"{flag or 'the data'} (each is a position to leave out of every epoch): "
                                "remove them")
            non_data += len(skip)
            # Only the data lines the fast path declined: bad rows, or good rows it does not parse.
            for j in np.flatnonzero(mine & ~good).tolist():
                line = block[starts[j]:ends[j]]
                result = v.check(line)
                if isinstance(result, str):
                    bad.append(BadRow(path, number + int(data[j]) + 1, result))
                    if len(bad) > max_bad_rows:
                        raise too_many(bad, max_bad_rows)
                else:
                    good[j] = True
                    labels[j], values[j] = result
            rows += int(good.sum())
            positives += int(labels[good].sum())
            kept = values[good]
            sums += kept.sum(axis=0)
            squares += (kept * kept).sum(axis=0)
            sample.add(kept)
            left_out = np.zeros(count, dtype=bool)  # this share's non-data and bad lines, in line order
            left_out[skip] = True
            left_out[data[mine & ~good]] = True
            excluded.append(index + np.flatnonzero(left_out))
            index += count
            number += count
    if rows == 0 and require_rows:
        raise DataError(f"{flag + ': ' if flag else ''}no data rows in {name_files(files)}")
    stats = {}
    for k, name in enumerate(numeric):
        mean = sums[k] / rows if rows else 0.0
        stats[name] = (float(mean), max(float(squares[k] / rows - mean * mean), 0.0) if rows else 0.0)
    return ScanResult(
        files=tuple(files), total_lines=index, rows=rows, positives=positives, total_bytes=total_bytes,
        excluded=np.concatenate(excluded or [np.empty(0, np.int64)]).astype(np.int64), bad_rows=tuple(bad),
        stats=stats, samples={name: sample.values[:, k].copy() for k, name in enumerate(numeric)},
    )


def scan_share(files: Sequence[str], schema: CsvSchema, shard, *, max_bad_rows: int = 0, flag: str = "",
               every_share: bool = False,
               keeper: ScanKeeper | None = None) -> tuple[ScanResult, ScanResult, tuple[int, int]]:
    """(this worker's scan, the whole data's, ``keep``) under ``shard`` (a trainer.sharding.Shard).

    Each worker scans only its share (its files, or with fewer files than workers its lines by position:
    ``keep``); the counts, statistics, quantile samples and bad rows are then combined over the cluster, so
    every worker builds the same preprocessing, refuses the same bad data with the same line, and the
    scan's time per worker falls with the number of workers. The whole data's ScanResult has no
    ``excluded`` lines (those are per share). Unsharded, both scans are the same one. ``every_share``: each
    worker's share must hold data rows (training repeats each share; an empty one never yields a batch).
    """
    from trainer.sharding import empty_share

    if not shard.sharded:
        scan = scan_csv(files, schema, max_bad_rows=max_bad_rows, flag=flag, keeper=keeper)
        return scan, scan, (0, 1)
    mine, by_record = shard.files(files, flag)
    keep = (shard.index, shard.count) if by_record else (0, 1)
    part: dict = {"error": None, "bad": []}
    local = None
    try:
        local = scan_csv(mine, schema, max_bad_rows=max_bad_rows, flag=flag, keep=keep, require_rows=False,
                         sample_size=QUANTILE_SAMPLE // shard.count, keeper=keeper)
        part.update(rows=local.rows, positives=local.positives, bytes=local.total_bytes,
                    bad=[[b.file, b.line, b.reason] for b in local.bad_rows],
                    stats={k: list(v) for k, v in local.stats.items()},
                    samples={k: v.tolist() for k, v in local.samples.items()})
    except TooManyBadRows as exc:
        part["bad"] = [[b.file, b.line, b.reason] for b in exc.bad_rows]
    except DataError as exc:
        part["error"] = str(exc)
    parts = shard.exchange(part)  # every worker, also one whose share failed: the others wait for it
    for other in parts:
        if other["error"]:
            raise DataError(other["error"])
    order = {path: i for i, path in enumerate(files)}
    bad = sorted((BadRow(*b) for other in parts for b in other["bad"]), key=lambda b: (order[b.file], b.line))
    if len(bad) > max_bad_rows:  # each share stops at its first row over the budget: the union holds ours
        raise too_many(bad, max_bad_rows)
    rows = sum(other["rows"] for other in parts)
    if rows == 0:
        raise DataError(f"{flag + ': ' if flag else ''}no data rows in {name_files(files)}")
    empty = empty_share([other["rows"] for other in parts], files, flag, "data rows") if every_share else None
    if empty:  # the same line on every worker, from the exchanged counts (see trainer.sharding.empty_share)
        raise DataError(empty)
    names = [c.name for c in schema.columns if c.numeric]
    stats = {}
    for name in names:  # per share (mean, variance) back to sums, added up
        total = sum(p["stats"][name][0] * p["rows"] for p in parts)
        squares = sum((p["stats"][name][1] + p["stats"][name][0] ** 2) * p["rows"] for p in parts)
        stats[name] = (total / rows, max(squares / rows - (total / rows) ** 2, 0.0))
    whole = ScanResult(files=tuple(files), total_lines=0, rows=rows,
                       positives=sum(other["positives"] for other in parts),
                       total_bytes=sum(other["bytes"] for other in parts), excluded=np.empty(0, np.int64),
                       bad_rows=tuple(bad), stats=stats, samples=_merge_samples(parts, names))
    return local, whole, keep


def _merge_samples(parts: list[dict], names: list[str]) -> dict[str, np.ndarray]:
    """One uniform sample of the whole data from each share's: from every share the same fraction of its
    rows (the largest that all shares' samples can give), chosen at random with a fixed seed."""
    rng = np.random.default_rng(0)
    shares = [p for p in parts if p["rows"]]
    fraction = min(len(p["samples"][names[0]]) / p["rows"] for p in shares) if names else 0.0
    merged: dict[str, list[np.ndarray]] = {name: [] for name in names}
    for p in shares:
        size = len(p["samples"][names[0]]) if names else 0
        pick = rng.choice(size, size=min(size, round(fraction * p["rows"])), replace=False)
        for name in names:
            merged[name].append(np.asarray(p["samples"][name], dtype=np.float64)[pick])
    return {name: np.concatenate(values) for name, values in merged.items()}


def cache_budget(limit_mb: int, environ: Mapping[str, str] = os.environ) -> int:
    """Bytes one process may cache: ``limit_mb`` (the --cache-limit-mb flag), and at most a share of the
    memory available on this machine divided among the cluster's processes that run on it (a local
    multi-worker run, or several trials of a local study, would otherwise each take the whole)."""
    budget = limit_mb << 20
    available = _available_memory()
    if available is not None:
        budget = min(budget, int(available * _MEMORY_SHARE / _local_processes(environ)))
    return budget


def _available_memory() -> int | None:
    """MemAvailable, lowered to the cgroup's remaining allowance in a container; None where unknown."""
    found = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
    except OSError:
        pass
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        with open("/sys/fs/cgroup/memory.current") as f:
            used = int(f.read().strip())
        if limit != "max":
            found.append(max(0, int(limit) - used))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


def _local_processes(environ: Mapping[str, str]) -> int:
    """Processes of this cluster on this machine (1 outside a cluster): those sharing this task's host."""
    from trainer.env import cluster_from_env

    try:
        cluster = cluster_from_env(environ)
    except ValueError:  # a bad TF_CONFIG is reported where the strategy is made
        return 1
    addresses = [a for role in ("chief", "master", "worker") for a in cluster.spec.get(role, [])]
    mine = cluster.spec.get(cluster.task_type, [])
    if not addresses or cluster.task_index >= len(mine):
        return 1
    host = mine[cluster.task_index].rsplit(":", 1)[0]
    return max(1, sum(a.rsplit(":", 1)[0] == host for a in addresses))


def bytes_per_row(element_spec) -> int:
    """Memory one row of a batched dataset's elements takes (strings counted at 64 bytes)."""
    import tensorflow as tf

    total = 0
    for spec in tf.nest.flatten(element_spec):
        size = 64 if spec.dtype == tf.string else spec.dtype.size
        total += size * int(np.prod([d or 1 for d in spec.shape[1:]]))
    return total


def decode_csv_batch(lines, schema: CsvSchema):
    """Decode a batch of raw lines into (features dict, float label) tensors; strings are stripped."""
    import tensorflow as tf

    dtypes = {"int": tf.int64, "float": tf.float32, "str": tf.string}
    defaults = [tf.constant([], dtype=dtypes[c.kind]) for c in schema.columns]
    fields = tf.io.decode_csv(lines, record_defaults=defaults, field_delim=schema.delimiter)
    features = {}
    for column, value in zip(schema.columns, fields, strict=True):
        features[column.name] = tf.strings.strip(value) if column.kind == "str" else value
    raw_label = features.pop(schema.label)
    if schema.label_suffix:
        raw_label = tf.strings.regex_replace(raw_label, re.escape(schema.label_suffix) + "$", "")
    label = tf.zeros_like(raw_label, dtype=tf.float32)
    for value in schema.positive:
        label = tf.where(tf.equal(raw_label, value), 1.0, label)
    return features, label


def _kept_per_batch(scan: ScanResult, batch_lines: int, keep: tuple[int, int]) -> np.ndarray:
    """Data rows each batch of ``batch_lines`` lines delivers: its lines of this share (every line, or with
    ``keep=(i, n)`` those at positions i modulo n), less the excluded ones."""
    index_of, count_of = keep
    n = -(-scan.total_lines // batch_lines)
    edges = np.minimum(np.arange(n + 1, dtype=np.int64) * batch_lines, scan.total_lines)
    below = (edges - index_of + count_of - 1) // count_of  # lines before each edge at i modulo n
    return np.diff(below) - np.bincount(scan.excluded // batch_lines, minlength=n)


def count_batches(scan: ScanResult, batch_size: int) -> int:
    """Batches an unsharded text_dataset yields per pass: line batches that keep at least one data row."""
    return int(np.count_nonzero(_kept_per_batch(scan, batch_size, (0, 1)) > 0))


def text_dataset(scan: ScanResult, schema: CsvSchema, *, batch_size: int,
                 transform: Callable | None = None, cache: bool | int = False, shuffle: bool = False,
                 seed: int = 0, repeat: bool = False, keep: tuple[int, int] = (0, 1), sharded: bool = False):
    """The streaming pipeline: TextLineDataset -> batch -> (drop excluded lines, decode, transform) -> cache.

    ``transform(features, label)`` runs inside the parallel map (the task's preprocessing), so with
    ``cache`` both parsing and preprocessing happen once and later epochs read ready tensors (``cache`` as a
    number of bytes: only when the preprocessed rows take at most that much memory). Shuffling
    reorders whole batches: per-example shuffling would cost per-element tf.data work on every epoch.
    ``keep=(i, n)``: this worker's share by record (trainer.sharding): batches of ``n * batch_size`` lines of
    which only those at positions i modulo n are decoded, so batches stay about ``batch_size`` rows.
    ``sharded``: one of several workers' shares, whose length the pipeline does not claim: tf.distribute
    splits each batch among the workers, so a worker takes more steps than its share has batches, and Keras
    would stop evaluating after the claimed number.
    """
    import tensorflow as tf

    from trainer.sharding import PREFETCH_BATCHES, dataset_options

    index_of, count_of = keep
    lines_per_batch = batch_size * count_of
    excluded = tf.constant(scan.excluded, dtype=tf.int64)
    has_excluded = bool(scan.excluded.size)
    delivers = _kept_per_batch(scan, lines_per_batch, keep) > 0

    def parse(batch_index, lines):
        start = batch_index * lines_per_batch
        index = start + tf.range(tf.size(lines, out_type=tf.int64), dtype=tf.int64)
        if count_of > 1:
            lines, index = (tf.boolean_mask(t, tf.equal(index % count_of, index_of)) for t in (lines, index))
        if has_excluded:
            pos = tf.searchsorted(excluded, index, out_type=tf.int64)
            hit = tf.gather(excluded, tf.minimum(pos, tf.size(excluded, out_type=tf.int64) - 1))
            lines = tf.boolean_mask(lines, tf.not_equal(hit, index))
        features, label = decode_csv_batch(lines, schema)
        if transform is not None:
            return transform(features, label)
        return features, label

    ds = tf.data.TextLineDataset(list(scan.files)).batch(lines_per_batch).enumerate()
    if not delivers.all():
        # A batch of only excluded lines (a banner and a blank line, or comments) is dropped before it is
        # decoded: the preprocessing's layers refuse empty batches.
        table = tf.constant(delivers)
        ds = ds.filter(lambda batch_index, _: table[batch_index])
    ds = ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if not sharded:
        ds = ds.apply(tf.data.experimental.assert_cardinality(int(delivers.sum())))
    if cache is not True and cache is not False:
        cache = scan.rows * bytes_per_row(ds.element_spec) <= cache
    if cache:
        ds = ds.cache()
    if shuffle:
        # A bounded buffer: a whole-dataset one would make the first epoch parse everything before the first
        # training step instead of overlapping the two.
        ds = ds.shuffle(SHUFFLE_BATCHES, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        ds = ds.repeat()
    return ds.with_options(dataset_options(shuffle)).prefetch(PREFETCH_BATCHES)
