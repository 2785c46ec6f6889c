"""Checking a delimited file's rows against a :class:`~trainer.csv_schema.CsvSchema`: line by line with a
reason for each bad row (:class:`Validator`), and a block of lines at a time in NumPy (:class:`FastPath`,
:func:`blocks`), which leaves every line it does not accept to the per-line check.

Integers are checked for int64 without converting their text, so a row's cost is bounded by its length.
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from trainer.csv_schema import IMPLAUSIBLE, MALFORMED, TRANSFORMS, CsvSchema
from trainer.input_files import complete_lines

_WHITESPACE = np.zeros(256, dtype=bool)
_WHITESPACE[list(b" \t\n\r\x0b\x0c")] = True  # what bytes.strip() strips
# Blocks whose vectorised checks run at once (see blocks).
_SCAN_THREADS = 4
_INT = re.compile(rb"-?[0-9]+")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1  # what decode_csv parses an int column into
# decode_csv also parses nan and inf(inity) into a float column: accepted here, then refused as not finite.
_FLOAT = re.compile(rb"[-+]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|(?i:nan|inf|infinity))")
# The range of a numeric column that declares none: every finite value.
_ANY_FINITE = (-sys.float_info.max, sys.float_info.max)


class Validator:
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
             TRANSFORMS[c.transform], *map(float, c.plausible or _ANY_FINITE))
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


class FastPath:
    """The validator's verdict on whole blocks of lines at once, in NumPy: a row it accepts is one the
    per-line :class:`Validator` would accept with the same label and values; every other line (comments,
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


def _non_data(a: np.ndarray, starts: np.ndarray, ends: np.ndarray, comment: bytes) -> np.ndarray:
    """The lines ``a[starts:ends]`` that are not data, vectorised: blank once stripped, or starting with
    ``comment`` once stripped (exactly :meth:`Validator.is_data`'s negation)."""
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


def blocks(path: str, flag: str, fast: FastPath, columns: int, comment: bytes):
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
        for block in complete_lines(path, flag):
            pending.append(pool.submit(lines, block))
            if len(pending) > threads:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
