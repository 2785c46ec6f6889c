"""Reading one field of a legacy job by its type (a mapping of known keys, a count, a number, a string, an
enum value): anything else is refused with the legacy file, field and line."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from jobs.definition.errors import one_of, short
from jobs.legacy.source import LegacyJob


def check_fields(legacy: LegacyJob, path: str, value: Any, allowed: Sequence[str]) -> None:
    if not isinstance(value, dict):
        raise legacy.error(path, f"must be a mapping, not {_type(value)}", one_of(allowed))
    for key in value:
        if key not in allowed:
            raise legacy.error(f"{path}.{key}", "not a field of the legacy API here", one_of(allowed))


def _type(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), "a number"
    )


def read_count(legacy: LegacyJob, path: str, value: Any, minimum: int | None = 0) -> int:
    """An integer count; ``minimum=None`` leaves its range to the caller (the study's counts: study.py)."""
    # The REST API writes int64 as a JSON string ("9"); YAML configs write a number.
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
        raise legacy.error(path, f"{short(value)} is not a possible count", f"an integer >= {minimum}")
    return value


def read_number(legacy: LegacyJob, path: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise legacy.error(path, f"{short(value)} is not a number", "a finite number")
    return value


def read_text(legacy: LegacyJob, path: str, value: Any, allowed: str = "a string") -> str:
    if not isinstance(value, str) or not value:
        raise legacy.error(path, f"{short(value)} is not a non-empty string", allowed)
    return value


def read_enum(legacy: LegacyJob, path: str, value: Any, allowed: Sequence[str]) -> str:
    if not isinstance(value, str) or value.upper() not in allowed:
        raise legacy.error(path, f"unknown value {short(value)}", one_of(allowed))
    return value.upper()
