"""``${infra.<key>}`` and ``${job.<key>}`` references inside a definition, resolved in two passes.

Infra outputs are resolved first (they are part of what a submission is, so they enter the submission hash);
``${job.*}`` values are resolved last because the job id itself contains that hash. ``$${`` escapes a
literal ``${``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from jobs.definition.errors import JobError, one_of, short
from jobs.definition.loader import join

_REF = re.compile(r"\$(\$)?\{([^}]*)\}")


def resolve(
    value: Any,
    namespaces: Mapping[str, Mapping[str, str]],
    file: str,
    path: str = "",
    *,
    final: bool = True,
    to_file_path=lambda p: p,
) -> Any:
    """Replace references of the given namespaces everywhere in ``value``.

    With ``final`` False, references to namespaces not given are left as written (and escapes kept) for a
    later pass; with ``final`` True every remaining reference must resolve.
    """
    if isinstance(value, dict):
        return {
            k: resolve(v, namespaces, file, join(path, k), final=final, to_file_path=to_file_path)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [
            resolve(v, namespaces, file, join(path, i), final=final, to_file_path=to_file_path)
            for i, v in enumerate(value)
        ]
    if not isinstance(value, str) or "${" not in value:
        return value

    def substitute(match: re.Match) -> str:
        if match.group(1):
            return "${" + match.group(2) + "}" if final else match.group(0)
        namespace, _, key = match.group(2).strip().partition(".")
        if namespace not in namespaces:
            if not final and namespace in ("infra", "job"):
                return match.group(0)
            raise JobError(
                file,
                to_file_path(path),
                f"unknown reference {short('${' + match.group(2) + '}', quote=False)}",
                "${infra.<key>}, ${job.<key>}",
            )
        values = namespaces[namespace]
        if key not in values:
            raise JobError(
                file,
                to_file_path(path),
                f"unknown reference {short('${' + match.group(2) + '}', quote=False)}",
                one_of(f"${{{namespace}.{k}}}" for k in sorted(values)),
            )
        return str(values[key])

    return _REF.sub(substitute, value)
