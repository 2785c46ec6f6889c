"""Just enough POSIX shell to read a legacy submit script: the `gcloud ai-platform|ml-engine jobs submit
training` command and the simple ``VAR=value`` assignments before it.

Lines are joined at backslash continuations, comments dropped, quotes and backslashes honoured, and
``$VAR``/``${VAR}``/``${VAR:-default}`` expanded from the assignments seen so far. What only a running shell
knows (``$(...)``, backticks, ``$1``, a variable the script never assigns) is kept as an ``Unknown`` part of
the word, so the converter can say which line and value it could not evaluate instead of guessing.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_ASSIGNMENT = re.compile(rf"({NAME})=")
_DECLARE = ("export", "readonly", "declare", "local", "typeset")
_SEPARATORS = ";&|"
SCRIPT_FOLDER = "the script's own folder"
# `$(dirname "$0")`, `$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)`, ...: how scripts find files beside them.
_ZERO = r'"?\$(?:0|\{0\}|\{BASH_SOURCE(?:\[0\])?\}|BASH_SOURCE)"?'
_DIRNAME = re.compile(
    rf'\s*(?:dirname\s+{_ZERO}|cd\s+"?\$\(\s*dirname\s+{_ZERO}\s*\)"?\s*(?:>\s*/dev/null\s*)?(?:2>&1\s*)?&&\s*pwd(?:\s+-P)?)\s*'
)


@dataclass(frozen=True)
class Unknown:
    """A part of a word only the running shell could fill in: ``$(date +%s)``, ``$BUCKET`` never assigned."""

    source: str
    reason: str


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

    def in_folder(self, folder: str) -> Word:
        """This word with the script's own folder (``$(dirname "$0")`` and the like) filled in."""
        return Word(
            _merge(
                [folder if isinstance(p, Unknown) and p.reason == SCRIPT_FOLDER else p for p in self.parts]
            )
        )


@dataclass
class Command:
    words: list[Word]
    line: int
    lines: list[int] = field(default_factory=list)  # the physical line of each word


@dataclass
class Script:
    commands: list[Command] = field(default_factory=list)


class ShellError(ValueError):
    def __init__(self, line: int, problem: str) -> None:
        super().__init__(problem)
        self.line = line
        self.problem = problem


def logical_lines(text: str) -> list[tuple[int, str, list[int]]]:
    """(first physical line, text, where each further physical line starts in it): backslash-newline
    continuations joined."""
    out: list[tuple[int, str, list[int]]] = []
    pending, start, breaks = "", 0, []
    for number, line in enumerate(text.splitlines(), start=1):
        if not pending:
            start, breaks = number, []
        else:
            breaks.append(len(pending))
        stripped = line.rstrip()
        # An odd run of trailing backslashes continues the line; an even one is escaped backslashes.
        trailing = len(stripped) - len(stripped.rstrip("\\"))
        if trailing % 2 == 1 and not _in_comment(pending + stripped):
            pending += stripped[:-1] + " "
            continue
        out.append((start, pending + line, breaks))
        pending = ""
    if pending:
        out.append((start, pending, breaks))
    return out


def _in_comment(text: str) -> bool:
    """Whether the end of ``text`` sits inside a comment (a `#` that starts an unquoted word)."""
    quote = ""
    i = 0
    while i < len(text):
        c = text[i]
        if quote == "'":
            quote = "" if c == "'" else quote
        elif c == "\\":
            i += 1
        elif quote == '"':
            quote = "" if c == '"' else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or text[i - 1].isspace()):
            return True
        i += 1
    return False


def parse(text: str, variables: dict[str, str] | None = None) -> Script:
    """Every simple command of the script, words expanded with the assignments made before it."""
    env: dict[str, Word] = {k: Word((v,)) for k, v in (variables or {}).items()}
    script = Script()
    for line, text_line, breaks in logical_lines(text):
        for words in _statements(text_line, env, line):
            words = _assign_prefix(words, env)
            if words:
                lines = [line + bisect.bisect_right(breaks, offset) for _, offset in words]
                script.commands.append(Command([w for w, _ in words], line, lines))
    return script


def _assign_prefix(words: list[tuple[Word, str, int]], env: dict[str, Word]) -> list[tuple[Word, int]]:
    """Apply leading NAME=value words (after export/readonly/...); the command that follows, each word with
    its offset in the line."""
    rest = list(words)
    if rest and rest[0][1] in _DECLARE:
        rest = rest[1:]
        declared = True
    else:
        declared = False
    while rest:
        word, raw, _ = rest[0]
        found = _ASSIGNMENT.match(raw)
        if not found:
            break
        name = found.group(1)
        env[name] = _strip_prefix(word, len(name) + 1)
        rest = rest[1:]
    if declared:
        return []  # `export A B`: names only
    return [(w, offset) for w, _, offset in rest]


def _strip_prefix(word: Word, n: int) -> Word:
    parts: list[Part] = []
    for part in word.parts:
        if n and isinstance(part, str):
            cut = min(n, len(part))
            part, n = part[cut:], n - cut
            if not part:
                continue
        parts.append(part)
    return Word(tuple(parts))


def _statements(text: str, env: dict[str, Word], line: int) -> list[list[tuple[Word, str, int]]]:
    """The statements of one logical line: lists of (expanded word, raw text up to the first expansion, its
    offset)."""
    statements: list[list[tuple[Word, str, int]]] = [[]]
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
            continue
        if c == "#":
            break
        if c in _SEPARATORS:
            while i < n and text[i] in _SEPARATORS:
                i += 1
            statements.append([])
            continue
        start = i
        word, raw, i = _word(text, i, env, line)
        statements[-1].append((word, raw, start))
    return [s for s in statements if s]


def _word(text: str, i: int, env: dict[str, Word], line: int) -> tuple[Word, str, int]:
    parts: list[Part] = []
    raw = ""  # the literal prefix, for recognising NAME= before any expansion
    literal_so_far = True
    n = len(text)

    def add(part: Part) -> None:
        nonlocal raw, literal_so_far
        if isinstance(part, str) and literal_so_far:
            raw += part
        else:
            literal_so_far = False
        parts.append(part)

    quote = ""
    while i < n:
        c = text[i]
        if not quote and (c.isspace() or c in _SEPARATORS):
            break
        if quote == "'":
            if c == "'":
                quote = ""
            else:
                add(c)
            i += 1
        elif c == "\\":
            if i + 1 < n:
                nxt = text[i + 1]
                if quote == '"' and nxt not in '$`"\\':
                    add(c)
                add(nxt)
            i += 2
        elif c in "'\"" and not quote:
            quote = c
            i += 1
        elif c == '"' and quote == '"':
            quote = ""
            i += 1
        elif c == "$" or c == "`":
            part, i = _expansion(text, i, env, line)
            for p in part.parts:
                add(p)
        else:
            add(c)
            i += 1
    if quote:
        raise ShellError(line, f"unterminated {quote} quote")
    return Word(_merge(parts)), raw, i


def _expansion(text: str, i: int, env: dict[str, Word], line: int) -> tuple[Word, int]:
    n = len(text)
    if text[i] == "`":
        end = text.find("`", i + 1)
        if end < 0:
            raise ShellError(line, "unterminated ` command substitution")
        return Word((Unknown(text[i : end + 1], "a command substitution"),)), end + 1
    if text.startswith("$(", i):
        depth, j = 0, i + 1
        while j < n:
            if text[j] == "(":
                depth += 1
            elif text[j] == ")":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        if j >= n:
            raise ShellError(line, "unterminated $( command substitution")
        reason = SCRIPT_FOLDER if _DIRNAME.fullmatch(text[i + 2 : j]) else "a command substitution"
        return Word((Unknown(text[i : j + 1], reason),)), j + 1
    if text.startswith("${", i):
        end = text.find("}", i + 2)
        if end < 0:
            raise ShellError(line, "unterminated ${")
        inner = text[i + 2 : end]
        found = re.fullmatch(rf"({NAME})(?::?-(.*))?", inner, re.S)
        if not found:
            return Word((Unknown(text[i : end + 1], "a parameter expansion"),)), end + 1
        name, default = found.group(1), found.group(2)
        if name in env:
            return env[name], end + 1
        if default is not None:
            return Word((default,)), end + 1
        return Word((Unknown(text[i : end + 1], "not assigned in the script"),)), end + 1
    found = re.match(NAME, text[i + 1 :])
    if found:
        name = found.group(0)
        end = i + 1 + len(name)
        if name in env:
            return env[name], end
        return Word((Unknown(text[i:end], "not assigned in the script"),)), end
    if i + 1 < n and (text[i + 1].isdigit() or text[i + 1] in "@*#?$!-"):
        return Word((Unknown(text[i : i + 2], "a script argument or shell parameter"),)), i + 2
    return Word(("$",)), i + 1


def _merge(parts: list[Part]) -> tuple[Part, ...]:
    out: list[Part] = []
    for part in parts:
        if isinstance(part, str) and out and isinstance(out[-1], str):
            out[-1] += part
        elif part != "":
            out.append(part)
    return tuple(out)
