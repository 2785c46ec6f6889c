"""``--set PATH=VALUE``: override one field of a definition by its dotted path as written in the file."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jobs.definition.errors import JobError, one_of
from jobs.definition.loader import join, parse_scalar


@dataclass(frozen=True)
class Override:
    path: str
    value: Any
    text: str  # as given on the command line; part of the submission hash

    @classmethod
    def parse(cls, text: str, file: str) -> Override:
        path, sep, raw = text.partition("=")
        if not sep or not path.strip():
            raise JobError(
                file,
                f"--set {text}",
                "expected PATH=VALUE",
                "a dotted path as written in the file, e.g. --set maxTrialCount=2",
            )
        try:
            value = parse_scalar(raw, file)
        except JobError as exc:  # the value's own limits (size, nesting, aliases), addressed to this --set
            raise exc.at(path=f"--set {path.strip()}") from None
        return cls(path.strip(), value, text)


def apply_overrides(
    data: dict[str, Any],
    overrides: list[Override],
    file: str,
    shared: Mapping[str, tuple[str, ...]] | None = None,
) -> dict[str, Any]:
    """A copy of ``data`` with each override applied in order.

    Only fields already written in the file can be set: a typo must not silently add a field (the schema check
    would then blame the file for a field the user never wrote). List items are addressed by index. A field
    under a YAML anchor is set wherever the anchor is used (``shared``, from the loader): the file says it
    once, so one --set changes it, e.g. the args of a chief and its workers together.
    """
    data = copy.deepcopy(data)
    for override in overrides:
        for path in (shared or {}).get(override.path, (override.path,)):
            _set(data, override, path, file)
    return data


def _set(data: dict[str, Any], override: Override, path: str, file: str) -> None:
    parts = path.split(".")
    node: Any = data
    walked = ""
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        where = join(walked, part)
        if isinstance(node, dict):
            if part not in node:
                raise JobError(
                    file,
                    f"--set {where}",
                    "no such field in the file",
                    one_of(join(walked, k) for k in node) or "(no fields here)",
                )
            if last:
                node[part] = copy.deepcopy(override.value)
            else:
                node = node[part]
        elif isinstance(node, list):
            if not part.isdigit() or int(part) >= len(node):
                raise JobError(
                    file,
                    f"--set {where}",
                    f"not an index of this {len(node)}-item list",
                    f"0..{len(node) - 1}" if node else "(empty list)",
                )
            if last:
                node[int(part)] = copy.deepcopy(override.value)
            else:
                node = node[int(part)]
        else:
            raise JobError(
                file,
                f"--set {where}",
                f"{walked} is a single value, not a mapping or list",
                f"--set {walked}=VALUE",
            )
        walked = where
