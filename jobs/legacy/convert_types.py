"""What a legacy conversion is given (``Options``) and what it gives (``Conversion``: the definition, and the
decisions and losses each step of it writes down for a person to review)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jobs.definition.compile import CONTAINER


@dataclass(frozen=True)
class Options:
    outputs: Mapping[str, str]
    # Always named by the caller (jobs.api, whose DEFAULT_ENV is the one default): no second default here.
    env: str
    model: str | None = None
    delivery: str = CONTAINER
    extra_args: tuple[str, ...] = ()  # trainer args given to `convert` after `--`: added over the legacy ones
    accounts: tuple[str, ...] = ()  # service accounts the environment lets a job run as
    # Legacy buckets whose objects the user moves into one of the environment's: (gs://old, output key).
    bucket_map: tuple[tuple[str, str], ...] = ()


@dataclass
class Conversion:
    kind: str
    definition: dict[str, Any]
    decisions: list[str] = field(default_factory=list)
    lost: list[tuple[str, str]] = field(default_factory=list)  # (legacy job path, why it is not carried)
    # (converted file path prefix, legacy job path): to point an error in the converted job at its source.
    blame: list[tuple[str, str]] = field(default_factory=list)
