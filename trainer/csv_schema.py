"""The layout of a headerless delimited file (:class:`CsvSchema`, its :class:`Column` s) and its bad rows.

A bad row is malformed (what ``decode_csv`` could not parse, or would parse into something else) or
implausible (a numeric value outside its column's declared plausible range, or not finite, e.g. an age of
-9e18: it would parse, train silently and skew the normalisation statistics into a useless model); its
reason starts with :data:`MALFORMED` or :data:`IMPLAUSIBLE`. :mod:`trainer.csv_rows` checks rows against a
schema, :mod:`trainer.csv_scan` scans files with it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from trainer.input_files import DataError

# What a column's ``transform`` may name: applied to its raw value before the statistics.
TRANSFORMS: dict[str | None, Callable[[float], float]] = {
    None: lambda v: v,
    "log1p": lambda v: math.log1p(max(v, 0.0)),
}

MALFORMED = "malformed row: "
IMPLAUSIBLE = "implausible value: "


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
        if self.transform not in TRANSFORMS:
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


class TooManyBadRows(DataError):
    """More bad rows than ``--max-bad-rows`` allows; ``bad_rows`` holds those found, the last one over."""

    def __init__(self, message: str, bad_rows: Sequence[BadRow]):
        super().__init__(message)
        self.bad_rows = tuple(bad_rows)


def too_many(bad: Sequence[BadRow], max_bad_rows: int) -> TooManyBadRows:
    hint = (f"more than --max-bad-rows {max_bad_rows} malformed or implausible rows" if max_bad_rows else
            "use --max-bad-rows N to skip up to N malformed or implausible rows")
    return TooManyBadRows(f"{bad[max_bad_rows]} ({hint})", bad[:max_bad_rows + 1])
