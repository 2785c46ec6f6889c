"""Strict YAML loading for job definitions.

Stricter than ``yaml.safe_load`` on purpose: tab indentation, duplicate keys, merge keys and a document
that is not a mapping are errors (a duplicate key silently dropping half a worker pool is the classic YAML
accident), and every value keeps the line it came from so later errors can point at it.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from jobs.errors import JobError


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
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise JobError(
            file, "(file)", "no such job file", "a path to a YAML file such as jobs/census_cpu.yaml"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise JobError(file, "(file)", f"cannot read: {exc}", "a readable UTF-8 YAML file") from None
    return load_text(text, file)


def load_text(text: str, file: str = "<string>") -> Document:
    for number, line in enumerate(text.splitlines(), start=1):
        indent = line[: len(line) - len(line.lstrip(" \t"))]
        if "\t" in indent:
            raise JobError(file, f"line {number}", "tab character in indentation", "spaces only")
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise JobError(file, "(top level)", "the file is empty", "a YAML mapping of Vertex AI job fields")
        if not isinstance(node, yaml.MappingNode):
            raise JobError(
                file,
                f"line {node.start_mark.line + 1}",
                f"the document is a {_kind(node)}, not a mapping",
                "a YAML mapping of Vertex AI job fields",
            )
        lines: dict[str, int] = {}
        occurrences: dict[int, list[str]] = {}
        data = _build(loader, node, "", lines, file, occurrences)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "(parse)"
        problem = " ".join(str(part) for part in (exc.context, exc.problem) if part)
        raise JobError(
            file, where, f"malformed YAML: {problem}", "valid YAML (spaces for indentation)"
        ) from None
    except yaml.YAMLError as exc:
        raise JobError(file, "(parse)", f"malformed YAML: {exc}", "valid YAML") from None
    finally:
        loader.dispose()
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
) -> Any:
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
            out[key] = _build(loader, value_node, join(path, key), lines, file, occurrences)
        return out
    if isinstance(node, yaml.SequenceNode):
        return [
            _build(loader, item, join(path, i), lines, file, occurrences) for i, item in enumerate(node.value)
        ]
    if node.tag == "tag:yaml.org,2002:timestamp":
        # Vertex fields are strings or numbers; a date-looking value is meant as text, not a datetime.
        return node.value
    return loader.construct_object(node, deep=True)


def parse_scalar(text: str) -> Any:
    """A --set value typed the way the same text would be typed in the file (YAML scalar rules)."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if value is None and text.strip() not in ("", "null", "~", "Null", "NULL"):
        return text
    if isinstance(value, (datetime.date, datetime.datetime)):
        return text
    return value
