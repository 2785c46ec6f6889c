"""The words a legacy submit script expands to (``Word``: literal text and ``Unknown`` parts only the running
shell knows), the error that refuses a script (``ShellError``), and the limits that keep a hostile script
linear in time and memory.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

NAME = r"[A-Za-z_][A-Za-z0-9_]*"
VARIABLE_NAME = re.compile(NAME)
ASSIGNMENT = re.compile(rf"({NAME})(\+?)=")
MAX_WORD_CHARS = 1 << 20
MAX_EXPANDED_CHARS = 8 << 20
MAX_NESTING = 32
MAX_CALL_MARKS = 1 << 16  # variables function calls mark in all; past that a call may set any variable
LIMITS = (
    f"a POSIX shell script whose words expand to at most {MAX_WORD_CHARS} characters each and "
    f"{MAX_EXPANDED_CHARS} in all, nesting ${{...}} and if/case/loops at most {MAX_NESTING} deep"
)
SCRIPT_FOLDER = "the script's own folder"
NOT_ASSIGNED = "not assigned in the script"


@dataclass(frozen=True)
class Unknown:
    """A part of a word only the running shell could fill in: ``$(date +%s)``, ``$BUCKET`` never assigned."""

    source: str
    reason: str
    name: str = ""  # the variable it came through, innermost (${PROJECT_ID} inside ${IMAGE_URI}): what to set


Part = str | Unknown


@dataclass(frozen=True)
class Word:
    parts: tuple[Part, ...] = ()

    @property
    def unknowns(self) -> tuple[Unknown, ...]:
        return tuple(p for p in self.parts if isinstance(p, Unknown))

    @property
    def literal(self) -> str | None:
        """The text, when the script alone determines it."""
        return None if self.unknowns else "".join(self.parts)  # type: ignore[arg-type]

    def show(self) -> str:
        return "".join(p.source if isinstance(p, Unknown) else p for p in self.parts)

    def segments(self) -> list[Word]:
        """The word split at its literal ``/``: ``gs://$B/x`` -> ``gs:``, ``""``, ``$B``, ``x``."""
        out: list[list[Part]] = [[]]
        for part in self.parts:
            if isinstance(part, Unknown):
                out[-1].append(part)
                continue
            first, *rest = part.split("/")
            out[-1].append(first)
            out.extend([piece] for piece in rest)
        return [Word(merge(parts)) for parts in out]

    def in_folder(self, folder: str) -> Word:
        """This word with the script's own folder (``$(dirname "$0")`` and the like) filled in."""
        return Word(
            merge(
                [folder if isinstance(p, Unknown) and p.reason == SCRIPT_FOLDER else p for p in self.parts]
            )
        )


# The value of a variable the script unset: known to be unset (``${V-d}`` is d), unlike one it never assigned.
UNSET = Word()


def unknown_value(name: str, reason: str) -> Word:
    return Word((Unknown(f"${name}", reason, name),))


class ShellError(ValueError):
    def __init__(self, line: int, problem: str, allowed: str = "a POSIX shell script") -> None:
        super().__init__(problem)
        self.line = line
        self.problem = problem
        self.allowed = allowed


def brief(text: str, limit: int = 60) -> str:
    """Script text for a message: one line stays readable whatever the script held."""
    return text if len(text) <= limit else f"{text[:limit]}..."


def merge(parts: list[Part]) -> tuple[Part, ...]:
    """Adjacent strings joined (once per run: a word built one character at a time stays linear)."""
    out: list[Part] = []
    run: list[str] = []
    for part in parts:
        if isinstance(part, str):
            run.append(part)
            continue
        if run:
            out.append("".join(run))
            run = []
        out.append(part)
    if run:
        out.append("".join(run))
    return tuple(p for p in out if p != "")
