"""Strict YAML loading for job definitions.

Stricter than ``yaml.safe_load`` on purpose: tab indentation, duplicate keys, merge keys and a document
that is not a mapping are errors (a duplicate key silently dropping half a worker pool is the classic YAML
accident), and every value keeps the line it came from so later errors can point at it.

Hostile files fail fast with one line: files are read, and documents composed, by common/reader.py, the one
bounded reader of every input the tools parse, which documents the limits (regular files of at most
``MAX_FILE_BYTES``, printable text, at most ``MAX_DEPTH`` levels and ``MAX_VALUES`` values counting every
use of a YAML alias, numbers of at most ``MAX_NUMBER_CHARS`` characters).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from common import reader
from common.reader import MAX_FILE_BYTES
from jobs.definition.errors import JobError


@dataclass
class Document:
    """A loaded definition: plain JSON-like data plus the source line of every field path."""

    file: str
    data: dict[str, Any]
    lines: dict[str, int] = field(default_factory=dict)
    # Paths written once under a YAML anchor and used again through aliases: each such path maps to every path
    # the same text appears at, itself included, so `--set` can change what the file says in one place.
    shared: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def line_of(self, path: str) -> int | None:
        """Line of the field, or of its nearest ancestor that was written in the file."""
        while True:
            if path in self.lines:
                return self.lines[path]
            if "." not in path:
                return None
            path = path.rsplit(".", 1)[0]


def join(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


def load_file(path: str | Path) -> Document:
    file = str(path)
    return load_text(read_text_file(path, "a regular UTF-8 YAML file such as jobs/census_cpu.yaml"), file)


def read_text_file(path: str | Path, allowed: str, *, missing: str = "no such job file") -> str:
    """The UTF-8 text of a regular file within common.reader's limits; anything else is one-line JobError."""
    try:
        return reader.read_text(path, allowed, missing=missing)
    except reader.InputError as exc:
        raise job_error(exc) from None


def job_error(exc: reader.InputError) -> JobError:
    """The shared reader's refusal as the jobs layer's one-line error (same file, place and words)."""
    return JobError(exc.file, exc.where, exc.problem, exc.allowed)


class _Budget(reader.Budget):
    def spend(self, path: str, depth: int, node: yaml.Node) -> None:
        try:
            super().spend(path, depth, node)
        except reader.InputError as exc:
            raise job_error(exc) from None


def load_text(text: str, file: str = "<string>") -> Document:
    for number, line in enumerate(text.splitlines(), start=1):
        indent = line[: len(line) - len(line.lstrip(" \t"))]
        if "\t" in indent:
            raise JobError(file, f"line {number}", "tab character in indentation", "spaces only")
    try:
        with reader.yaml_document(text, file, "valid YAML") as (loader, node):
            if node is None:
                raise JobError(
                    file, "(top level)", "the file is empty", "a YAML mapping of Vertex AI job fields"
                )
            if not isinstance(node, yaml.MappingNode):
                raise JobError(
                    file,
                    f"line {node.start_mark.line + 1}",
                    f"the document is a {_kind(node)}, not a mapping",
                    "a YAML mapping of Vertex AI job fields",
                )
            lines: dict[str, int] = {}
            occurrences: dict[int, list[str]] = {}
            data = _build(loader, node, "", lines, file, occurrences, _Budget(file), 0)
    except reader.InputError as exc:
        raise job_error(exc) from None
    shared = {path: tuple(paths) for paths in occurrences.values() if len(paths) > 1 for path in paths}
    return Document(file, data, lines, shared)


def _kind(node: yaml.Node) -> str:
    if isinstance(node, yaml.SequenceNode):
        return "list"
    return "scalar" if isinstance(node, yaml.ScalarNode) else "node"


def _build(
    loader: yaml.SafeLoader,
    node: yaml.Node,
    path: str,
    lines: dict[str, int],
    file: str,
    occurrences: dict[int, list[str]],
    budget: _Budget,
    depth: int,
) -> Any:
    budget.spend(path, depth, node)
    if path:
        lines[path] = node.start_mark.line + 1
        # An alias hands back the anchored node object itself, so identity tells which paths share text.
        occurrences.setdefault(id(node), []).append(path)
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            where = f"line {key_node.start_mark.line + 1}"
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise JobError(
                    file,
                    join(path, "<<"),
                    f"merge keys are not supported ({where})",
                    "plain mappings; repeat the fields",
                )
            if not isinstance(key_node, yaml.ScalarNode):
                raise JobError(file, path, f"a mapping key is not a string ({where})", "string keys")
            key = str(key_node.value)
            if key in out:
                first = lines.get(join(path, key))
                raise JobError(
                    file,
                    join(path, key),
                    f"duplicate key ({where}; first on line {first})",
                    "each key once per mapping",
                )
            out[key] = _build(
                loader, value_node, join(path, key), lines, file, occurrences, budget, depth + 1
            )
        return out
    if isinstance(node, yaml.SequenceNode):
        return [
            _build(loader, item, join(path, i), lines, file, occurrences, budget, depth + 1)
            for i, item in enumerate(node.value)
        ]
    if node.tag == "tag:yaml.org,2002:timestamp":
        # Vertex fields are strings or numbers; a date-looking value is meant as text, not a datetime.
        return node.value
    return reader.construct(loader, node, file, path)


def parse_scalar(text: str, file: str = "<--set>") -> Any:
    """A --set value typed as the same text would be in the file (YAML rules and the file's limits)."""
    if len(text) > MAX_FILE_BYTES:
        raise JobError(file, "--set", f"a value of {len(text)} characters", f"at most {MAX_FILE_BYTES}")
    try:
        reader.check_printable(text, file, "--set")
        with reader.yaml_document(text, file) as (loader, node):
            if node is None:
                return None
            value = _build(loader, node, "", {}, file, {}, _Budget(file), 0)
    except reader.SyntaxProblem:
        return text
    except reader.InputError as exc:
        raise job_error(exc) from None
    if value is None and text.strip() not in ("", "null", "~", "Null", "NULL"):
        return text
    if isinstance(value, (datetime.date, datetime.datetime)):
        return text
    return value
