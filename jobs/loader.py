"""Strict YAML loading for job definitions.

Stricter than ``yaml.safe_load`` on purpose: tab indentation, duplicate keys, merge keys and a document
that is not a mapping are errors (a duplicate key silently dropping half a worker pool is the classic YAML
accident), and every value keeps the line it came from so later errors can point at it.

Hostile files fail fast with one line: only a regular file of at most ``MAX_FILE_BYTES`` is read (a FIFO, a
device or a directory is refused without blocking on it), and a document may neither nest deeper than
``MAX_DEPTH`` nor expand, through YAML aliases, to more than ``MAX_VALUES`` values (a few hundred bytes of
nested aliases would otherwise expand to billions).
"""

from __future__ import annotations

import datetime
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from jobs.errors import JobError

# Job definitions are a few KiB; a megabyte is a mistake (or an attack), never a job.
MAX_FILE_BYTES = 1 << 20
# The deepest Vertex AI job body (conditional parameters inside a study) is about a dozen levels.
MAX_DEPTH = 32
# Every value counted as often as aliases repeat it: far above any real study, far below a memory problem.
MAX_VALUES = 50_000


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
    """The UTF-8 text of a regular file of at most ``MAX_FILE_BYTES``; anything else is one-line JobError."""
    file = str(path)
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; the fstat below refuses it anyway.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise JobError(file, "(file)", missing, allowed) from None
    except OSError as exc:
        raise JobError(file, "(file)", f"cannot open: {exc.strerror or exc}", allowed) from None
    try:
        info = os.fstat(fd)  # of what was opened: no window between checking a path and reading it
        if not stat.S_ISREG(info.st_mode):
            raise JobError(file, "(file)", f"not a regular file ({file_kind(info.st_mode)})", allowed)
        if info.st_size > MAX_FILE_BYTES:
            raise JobError(
                file, "(file)", f"{info.st_size} bytes", f"at most {MAX_FILE_BYTES} bytes ({allowed})"
            )
        # Read one byte past the cap: a file that grows after fstat is still refused, not read whole.
        with os.fdopen(fd, "rb", closefd=True) as handle:
            fd = -1
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise JobError(file, "(file)", f"cannot read: {exc.strerror or exc}", allowed) from None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(raw) > MAX_FILE_BYTES:
        raise JobError(file, "(file)", "larger than the cap", f"at most {MAX_FILE_BYTES} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JobError(file, "(file)", f"not UTF-8 (byte {exc.start})", allowed) from None


_FILE_KINDS = (
    (stat.S_ISREG, "a regular file"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def file_kind(mode: int) -> str:
    """What an ``st_mode`` is, in words ("a FIFO"), for errors about a path that is the wrong kind."""
    return next((name for test, name in _FILE_KINDS if test(mode)), "an unknown kind of file")


class _Budget:
    """How many values a document has expanded to so far: aliases count each time they are used."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.values = 0

    def spend(self, path: str, depth: int, node: yaml.Node) -> None:
        self.values += 1
        if self.values > MAX_VALUES:
            raise JobError(
                self.file,
                path or "(top level)",
                f"the document expands to more than {MAX_VALUES} values (line {node.start_mark.line + 1}; "
                "YAML aliases repeating aliases?)",
                "a job definition without nested aliases",
            )
        if depth > MAX_DEPTH:
            raise JobError(
                self.file,
                f"line {node.start_mark.line + 1}",
                f"nested more than {MAX_DEPTH} levels deep",
                f"at most {MAX_DEPTH} levels of mappings and lists",
            )


def load_text(text: str, file: str = "<string>") -> Document:
    for number, line in enumerate(text.splitlines(), start=1):
        indent = line[: len(line) - len(line.lstrip(" \t"))]
        if "\t" in indent:
            raise JobError(file, f"line {number}", "tab character in indentation", "spaces only")
    if len(text) > MAX_FILE_BYTES:
        raise JobError(file, "(file)", f"{len(text)} characters", f"at most {MAX_FILE_BYTES}")
    loader = yaml.SafeLoader(text)
    try:
        node = _compose(loader, file)
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
        data = _build(loader, node, "", lines, file, occurrences, _Budget(file), 0)
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


def _compose(loader: yaml.SafeLoader, file: str) -> yaml.Node | None:
    """The document's node graph. PyYAML composes nested nodes recursively: too deep a document ends there."""
    try:
        return loader.get_single_node()
    except RecursionError:
        raise JobError(
            file, "(parse)", "nested too deep to parse", f"at most {MAX_DEPTH} levels of mappings and lists"
        ) from None


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
    return loader.construct_object(node, deep=True)


def parse_scalar(text: str, file: str = "<--set>") -> Any:
    """A --set value typed as the same text would be in the file (YAML rules and the file's limits)."""
    if len(text) > MAX_FILE_BYTES:
        raise JobError(file, "--set", f"a value of {len(text)} characters", f"at most {MAX_FILE_BYTES}")
    loader = yaml.SafeLoader(text)
    try:
        node = _compose(loader, file)
        if node is None:
            return None
        value = _build(loader, node, "", {}, file, {}, _Budget(file), 0)
    except yaml.YAMLError:
        return text
    finally:
        loader.dispose()
    if value is None and text.strip() not in ("", "null", "~", "Null", "NULL"):
        return text
    if isinstance(value, (datetime.date, datetime.datetime)):
        return text
    return value
