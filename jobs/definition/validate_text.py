"""The text a definition carries: no control or bidirectional characters, plain printable names and labels,
and gs:// URIs of a valid bucket and plain path segments."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator
from typing import Any

from common.gcs import is_bucket_name
from jobs.definition.body import gs_uris, join
from jobs.definition.compile import CompiledJob
from jobs.definition.errors import short

# Unicode's explicit bidirectional formatting characters: text that reads differently than it runs
# ("Trojan Source", CVE-2021-42574).
BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
# Fields that are names people read in the console, logs and billing: plain printable text only.
NAME_FIELDS = frozenset({"displayName", "parameterId", "metricId", "name"})


def _strings(value: Any, path: str = "") -> Iterator[tuple[str, str, str]]:
    """(path, key, text) of every key and string value in a body: what a hostile file can put text into."""
    if isinstance(value, dict):
        for key, item in value.items():
            where = join(path, key)
            yield where, str(key), str(key)
            yield from _strings(item, where)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _strings(item, join(path, i))
    elif isinstance(value, str):
        yield path, path.rsplit(".", 1)[-1], value


def check_text(job: CompiledJob) -> None:
    """No control or bidirectional characters: names and labels are printable text; args, commands and env
    values may span lines (a `sh -c` script) but carry no NUL (no process can receive it) and no other
    control code or direction override (a console or log would show something other than what runs)."""
    for path, key, text in _strings(job.body):
        strict = key in NAME_FIELDS or path.startswith("labels")
        for char in text:
            if char in BIDI_CONTROLS or (
                unicodedata.category(char) == "Cc" and (strict or char not in "\n\t")
            ):
                raise job.error(
                    path,
                    f"contains the control character U+{ord(char):04X}",
                    "printable text" if strict else "printable text, newlines and tabs",
                )
            if strict and unicodedata.category(char) in ("Cf", "Zl", "Zp"):
                raise job.error(path, f"contains the format character U+{ord(char):04X}", "printable text")
    _check_gs_uris(job)


def _check_gs_uris(job: CompiledJob) -> None:
    """Every gs:// URI names a bucket and plain path segments. Cloud Storage would take `..` as an object name
    literally, but anything that maps URIs onto a filesystem (gcsfuse in the job, `--local` here) resolves it
    upward, out of the bucket: so no `.`, `..` or empty segment (a trailing `/` is fine)."""
    for path, _, text in _strings(job.body):
        for uri, bucket, name in gs_uris(text):
            segments = name.removesuffix("/").split("/") if name else []
            bad = next((s for s in segments if s in ("", ".", "..")), None)
            if not is_bucket_name(bucket):
                raise job.error(path, f"{short(uri)} names no valid bucket", "gs://<bucket>/<path>")
            if bad is not None:
                raise job.error(
                    path,
                    f"{short(uri)} has " + (f"a {bad!r} path segment" if bad else "an empty path segment"),
                    "gs://<bucket>/<path> with plain segments: no '.', '..' or '//'",
                )
