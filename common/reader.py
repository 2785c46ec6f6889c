"""The one bounded reader of every YAML, JSON and text input the tools parse: job files and `--set` values
(jobs/definition/loader.py), legacy configs and submit scripts (`run_job.py convert`, jobs/legacy/),
environment configs (infra/config.py) and deployed outputs files (infra/outputs.py).

Pure (stdlib + yaml), in common/ because infra/ and jobs/ both use it. Its errors are `InputError` (file,
where, problem, allowed); each door turns them into its own one-line error (`JobError`, `ConfigError`).
The limits, in one place:

- only a regular file is read (opened with O_NONBLOCK and checked with fstat on the open descriptor: a FIFO,
  a device, a socket or a directory is refused without blocking on it), of at most ``MAX_FILE_BYTES``
  (a file that grows after fstat is still read only up to the cap), UTF-8;
- printable text: a control character (any below U+0020 but tab, newline and carriage return, DEL, C1
  controls but NEL) or a NUL is refused with its line, the characters YAML itself refuses;
- a YAML or JSON document nests at most ``MAX_DEPTH`` levels and expands, counting every use of a YAML
  alias, to at most ``MAX_VALUES`` values (a few hundred bytes of nested aliases would otherwise expand to
  billions), and a number has at most ``MAX_NUMBER_CHARS`` characters (Python refuses int() of over 4,300
  digits with a ValueError, and no field takes a number that long);
- patterns are matched against the whole string (`fullmatch`): `re.match` with `^...$` lets a trailing
  newline through.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

# Configs, job definitions and submit scripts are a few KiB; a megabyte is a mistake (or an attack).
MAX_FILE_BYTES = 1 << 20
# The deepest Vertex AI job body (conditional parameters inside a study) is about a dozen levels.
MAX_DEPTH = 32
# Every value counted as often as aliases repeat it: far above any real file, far below a memory problem.
MAX_VALUES = 50_000
# Project numbers have at most 20 digits; a float written out in full about 25 characters.
MAX_NUMBER_CHARS = 40

# What YAML accepts as printable (its reader refuses the rest with a traceback-prone ReaderError).
_NOT_PRINTABLE = re.compile("[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")


class InputError(ValueError):
    """Bad or hostile input: ``file``, ``where`` (``(file)``, ``line 3``, a field path), the problem and what
    is allowed. Each door re-raises it as its own one-line error."""

    def __init__(self, file: str, where: str, problem: str, allowed: str = "") -> None:
        self.file = str(file)
        self.where = where
        self.problem = problem
        self.allowed = allowed
        super().__init__(f"{self.file}: {where}: {problem}" + (f"; allowed: {allowed}" if allowed else ""))


class SyntaxProblem(InputError):
    """Text that does not parse as YAML/JSON (rather than one over a limit): doors may phrase it their way."""

    def __init__(self, file: str, where: str, problem: str, allowed: str, line: int | None) -> None:
        super().__init__(file, where, problem, allowed)
        self.line = line


def fullmatch(pattern: re.Pattern[str], value: Any) -> bool:
    """Whether ``value`` is a string the pattern matches whole (a trailing newline included)."""
    return isinstance(value, str) and pattern.fullmatch(value) is not None


def shown(value: Any, limit: int = 40) -> str:
    """A value for an error message: repr (control and direction characters escaped), cut short when long,
    so the one line stays one readable line whatever the input held."""
    text = repr(value)
    return text if len(text) <= limit + 2 else f"{text[:limit]}... ({len(text)} characters)"


_FILE_KINDS = (
    (stat.S_ISREG, "a regular file"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISLNK, "a symbolic link"),
)


def file_kind(mode: int) -> str:
    """What an ``st_mode`` is, in words ("a FIFO"), for errors about a path that is the wrong kind."""
    return next((name for test, name in _FILE_KINDS if test(mode)), "an unknown kind of file")


def read_text(path: str | Path, allowed: str, *, missing: str = "no such file") -> str:
    """The UTF-8, printable text of a regular file of at most ``MAX_FILE_BYTES``; anything else InputError."""
    file = str(path)
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; the fstat below refuses it anyway.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise InputError(file, "(file)", missing, allowed) from None
    except OSError as exc:
        raise InputError(file, "(file)", f"cannot open: {exc.strerror or exc}", allowed) from None
    try:
        info = os.fstat(fd)  # of what was opened: no window between checking a path and reading it
        if not stat.S_ISREG(info.st_mode):
            raise InputError(file, "(file)", f"not a regular file ({file_kind(info.st_mode)})", allowed)
        if info.st_size > MAX_FILE_BYTES:
            raise InputError(
                file, "(file)", f"{info.st_size} bytes", f"at most {MAX_FILE_BYTES} bytes ({allowed})"
            )
        # Read one byte past the cap: a file that grows after fstat (or /proc's, sized 0) is not read whole.
        with os.fdopen(fd, "rb", closefd=True) as handle:
            fd = -1
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise InputError(file, "(file)", f"cannot read: {exc.strerror or exc}", allowed) from None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(raw) > MAX_FILE_BYTES:
        raise InputError(file, "(file)", "larger than the cap", f"at most {MAX_FILE_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(file, "(file)", f"not UTF-8 (byte {exc.start})", allowed) from None
    check_printable(text, file)
    return text


def check_printable(text: str, file: str, where: str = "") -> None:
    """Refuse a control character or NUL, naming its line (``where``: a field, for text not from a file)."""
    found = _NOT_PRINTABLE.search(text)
    if found is None:
        return
    line = text.count("\n", 0, found.start()) + 1
    raise InputError(
        file,
        where or f"line {line}",
        f"contains the control character U+{ord(found.group()):04X}",
        "printable UTF-8 text (tabs and newlines allowed)",
    )


class Budget:
    """How many values a document has expanded to so far (aliases count each time they are used) and how
    deep it nests: the limits on what a YAML/JSON document may cost to build."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.values = 0

    def spend(self, path: str, depth: int, node: yaml.Node) -> None:
        self.values += 1
        line = node.start_mark.line + 1
        if self.values > MAX_VALUES:
            raise InputError(
                self.file,
                path or "(top level)",
                f"the document expands to more than {MAX_VALUES} values (line {line}; "
                "YAML aliases repeating aliases?)",
                "a document without nested aliases",
            )
        if depth > MAX_DEPTH:
            raise InputError(
                self.file,
                f"line {line}",
                f"nested more than {MAX_DEPTH} levels deep",
                f"at most {MAX_DEPTH} levels of mappings and lists",
            )
        number = isinstance(node, yaml.ScalarNode) and node.tag in _NUMBER_TAGS
        if number and len(node.value) > MAX_NUMBER_CHARS:
            raise InputError(
                self.file,
                path or f"line {line}",
                f"a number of {len(node.value)} characters (line {line})",
                f"at most {MAX_NUMBER_CHARS} characters",
            )


class _Loader(yaml.SafeLoader):
    """A SafeLoader that stops composing past ``MAX_VALUES`` nodes (parsing 1 MiB of pure-Python YAML takes
    seconds; a count cap ends it at the limit) and past ``max_items`` entries of a mapping at a key path."""

    def __init__(self, text: str, file: str, max_items: dict[str, tuple[int, str]]) -> None:
        super().__init__(text)
        self.file = file
        self.max_items = max_items
        self.composed = 0
        self.keys: list[str] = []  # the key path of the node being composed

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        self.composed += 1
        line = self.peek_event().start_mark.line + 1
        if self.composed > MAX_VALUES:
            raise InputError(self.file, f"line {line}", f"more than {MAX_VALUES} values",
                             f"at most {MAX_VALUES} values in a document")
        if isinstance(parent, yaml.MappingNode) and index is None:  # a key: one more entry of the parent
            cap = self.max_items.get(".".join(self.keys))
            if cap is not None and len(parent.value) >= cap[0]:
                raise InputError(self.file, ".".join(self.keys), f"more than {cap[0]} {cap[1]} (line {line})",
                                 f"at most {cap[0]}")
        if parent is None:  # the document itself
            return super().compose_node(parent, index)
        key = index.value if isinstance(index, yaml.ScalarNode) else "?" if index is None else str(index)
        self.keys.append(key)
        try:
            return super().compose_node(parent, index)
        finally:
            self.keys.pop()


@contextmanager
def yaml_document(
    text: str, file: str, allowed: str = "valid YAML", max_items: dict[str, tuple[int, str]] | None = None
) -> Iterator[tuple[yaml.SafeLoader, Any]]:
    """The composed node of one YAML document (None when empty) and its loader, for the caller to build
    values from inside the ``with``; every YAML problem in there, or over a limit, is an InputError.
    ``max_items``: {key path: (most entries, what they are)} for mappings whose size has a cap of its own."""
    check_printable(text, file)
    if len(text) > MAX_FILE_BYTES:
        raise InputError(file, "(file)", f"{len(text)} characters", f"at most {MAX_FILE_BYTES}")
    loader = _Loader(text, file, max_items or {})
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:  # PyYAML composes nested nodes recursively: too deep a document ends here
            raise InputError(
                file,
                "(parse)",
                "nested too deep to parse",
                f"at most {MAX_DEPTH} levels of mappings and lists",
            ) from None
        yield loader, node
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "(parse)"
        problem = " ".join(str(part) for part in (exc.context, exc.problem) if part)
        raise SyntaxProblem(
            file, where, f"malformed YAML: {problem}", f"{allowed} (spaces for indentation)",
            mark.line + 1 if mark else None,
        ) from None
    except yaml.YAMLError as exc:
        raise SyntaxProblem(file, "(parse)", f"malformed YAML: {exc}", allowed, None) from None
    finally:
        loader.dispose()


def spend_all(node: yaml.Node, budget: Budget) -> None:
    """Charge a whole node graph to the budget, aliases as often as they are used, without recursion: the
    walk stops at the first limit, so it costs at most ``MAX_VALUES`` steps whatever the aliases expand to."""
    stack: list[tuple[yaml.Node, str, int]] = [(node, "", 0)]
    while stack:
        current, path, depth = stack.pop()
        budget.spend(path, depth, current)
        if isinstance(current, yaml.MappingNode):
            for key, value in reversed(current.value):
                name = str(key.value) if isinstance(key, yaml.ScalarNode) else "?"
                stack.append((value, f"{path}.{name}" if path else name, depth + 1))
                stack.append((key, path, depth + 1))
        elif isinstance(current, yaml.SequenceNode):
            stack.extend(
                (item, f"{path}.{i}" if path else str(i), depth + 1)
                for i, item in reversed(list(enumerate(current.value)))
            )


def plain_yaml(
    text: str, file: str, allowed: str = "valid YAML", max_items: dict[str, tuple[int, str]] | None = None
) -> Any:
    """``yaml.safe_load`` within the limits (``max_items`` as for ``yaml_document``)."""
    with yaml_document(text, file, allowed, max_items) as (loader, node):
        if node is None:
            return None
        spend_all(node, Budget(file))
        return construct(loader, node, file, "(top level)", deep=False)


def construct(loader: yaml.SafeLoader, node: yaml.Node, file: str, path: str, *, deep: bool = True) -> Any:
    """The value of a node, where an explicit tag the value does not fit (``!!int abc``, ``!!timestamp
    2020-02-31``) is an InputError rather than the ValueError the constructor raises."""
    try:
        if deep:
            return loader.construct_object(node, deep=True)
        return loader.construct_document(node)
    except (ValueError, TypeError, OverflowError) as exc:
        if isinstance(exc, InputError):
            raise
        line = node.start_mark.line + 1
        raise InputError(
            file,
            path or f"line {line}",
            f"a value that does not fit its YAML tag {node.tag} (line {line}: {str(exc)[:80]})",
            "a value of the type its tag names",
        ) from None


def plain_json(text: str, file: str, allowed: str = "valid JSON") -> Any:
    """``json.loads`` within the limits: depth, value count and number length, each an InputError."""
    check_printable(text, file)

    def number(kind: Callable[[str], Any]) -> Callable[[str], Any]:
        def parse(token: str) -> Any:
            if len(token) > MAX_NUMBER_CHARS:
                raise _LongNumber(token)
            return kind(token)

        return parse

    try:
        data = json.loads(text, parse_int=number(int), parse_float=number(float))
    except json.JSONDecodeError as exc:
        raise SyntaxProblem(
            file, f"line {exc.lineno}, column {exc.colno}", f"malformed JSON: {exc.msg}", allowed, exc.lineno
        ) from None
    except _LongNumber as exc:
        raise InputError(
            file,
            "(document)",
            f"a number of {len(exc.token)} characters",
            f"at most {MAX_NUMBER_CHARS} characters",
        ) from None
    except RecursionError:
        raise InputError(
            file, "(parse)", "nested too deep to parse", f"at most {MAX_DEPTH} levels of objects and arrays"
        ) from None
    _check_json(data, file)
    return data


class _LongNumber(ValueError):
    def __init__(self, token: str) -> None:
        super().__init__("number too long")
        self.token = token


def _check_json(data: Any, file: str) -> None:
    """Depth and value count of parsed JSON (no aliases: the count is bounded by the size already)."""
    stack: list[tuple[Any, str, int]] = [(data, "", 0)]
    values = 0
    while stack:
        value, path, depth = stack.pop()
        values += 1
        if depth > MAX_DEPTH:
            raise InputError(
                file,
                path or "(top level)",
                f"nested more than {MAX_DEPTH} levels deep",
                f"at most {MAX_DEPTH} levels of objects and arrays",
            )
        if values > MAX_VALUES:
            raise InputError(file, "(document)", f"more than {MAX_VALUES} values", f"at most {MAX_VALUES}")
        if isinstance(value, dict):
            items = value.items()
        else:
            items = enumerate(value) if isinstance(value, list) else ()
        stack.extend((item, f"{path}.{key}" if path else str(key), depth + 1) for key, item in items)
