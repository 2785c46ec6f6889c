"""Expanding one word of a legacy submit script: quotes and backslashes removed, ``$VAR``, ``${VAR}``,
``${VAR:-default}`` and ``${VAR:=default}`` filled in from the variables, ``$(...)`` and backticks kept as
what only the running shell knows, and an unquoted expansion split into fields at IFS."""

from __future__ import annotations

import re

from jobs.legacy.shell_lines import SEPARATORS, redirects
from jobs.legacy.shell_state import State
from jobs.legacy.shell_vars import through
from jobs.legacy.shell_words import (
    ASSIGNMENT,
    LIMITS,
    MAX_NESTING,
    MAX_WORD_CHARS,
    NAME,
    NOT_ASSIGNED,
    SCRIPT_FOLDER,
    UNSET,
    VARIABLE_NAME,
    Part,
    ShellError,
    Unknown,
    Word,
    brief,
    merge,
)

_PARAMETER = re.compile(rf"({NAME})(?:(:?)([-=])(.*))?", re.S)
# `$(dirname "$0")`, `$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)`, ...: how scripts find files beside them.
_ZERO = r'"?\$(?:0|\{0\}|\{BASH_SOURCE(?:\[0\])?\}|BASH_SOURCE)"?'
_DIRNAME = re.compile(
    rf'\s*(?:dirname\s+{_ZERO}|cd\s+"?\$\(\s*dirname\s+{_ZERO}\s*\)"?\s*(?:>\s*/dev/null\s*)?(?:2>&1\s*)?&&\s*pwd(?:\s+-P)?)\s*'
)


def expand_word(
    text: str,
    i: int,
    state: State,
    line: int,
    whole: bool = False,
    depth: int = 0,
    stops: str = "",
) -> tuple[list[Word], str, int]:
    """The fields one word of the text expands to (none, one, or several where an unquoted expansion holds
    IFS characters), the literal text before its first expansion (to recognise NAME=), and where it ends.
    ``whole``: the text is one word, blanks included (the default of ``${V:-...}``, ``depth`` of them deep).
    ``stops``: characters that end the word besides blanks and separators (the `)` of a case pattern)."""
    fields: list[Word] = []
    parts: list[Part] = []
    size = 0  # characters in the field so far
    quoted = False  # the field has a quoted part: "" is an (empty) word, an empty $EMPTY is none
    raw: list[str] = []
    literal_so_far = True
    n = len(text)
    start = i
    # sh does not split the value of an assignment: A=$B keeps B's blanks.
    split = not whole and not ASSIGNMENT.match(text, i)

    def add(part: Part) -> None:
        nonlocal literal_so_far, size
        if isinstance(part, str):
            if literal_so_far:
                raw.append(part)
            size += len(part)
        else:
            literal_so_far = False
            size += len(part.source)
        if size > MAX_WORD_CHARS:
            raise ShellError(line, f"a word that expands to more than {MAX_WORD_CHARS} characters", LIMITS)
        parts.append(part)

    def end_field(delimited: bool = False) -> None:
        """``delimited``: by an IFS character that is no blank, which makes a field even when empty."""
        nonlocal parts, quoted, size
        merged = merge(parts)
        if merged or quoted or delimited:
            fields.append(Word(merged))
        parts, quoted, size = [], False, 0

    quote = ""
    while i < n:
        c = text[i]
        if (
            not quote
            and not whole
            and (c.isspace() or (c in SEPARATORS and not redirects(text, i, start)) or c in stops)
        ):
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
            quote, quoted = c, True
            i += 1
        elif c == '"' and quote == '"':
            quote = ""
            i += 1
        elif c == "$" or c == "`":
            expanded, i = _expansion(text, i, state, line, depth)
            for part in expanded.parts:
                if quote or not split or isinstance(part, Unknown):
                    add(part)
                    continue
                splitter = state.splitter()
                if isinstance(splitter, str):  # IFS only the running shell knows
                    if part:
                        add(Unknown(brief(part), splitter, "IFS"))
                    continue
                if splitter is None:
                    add(part)
                    continue
                at = 0
                for found in splitter.finditer(part):
                    if found.start() > at:
                        add(part[at : found.start()])
                    end_field(bool(found.group().strip(" \t\n")))
                    literal_so_far = False
                    at = found.end()
                if at < len(part):
                    add(part[at:])
        else:
            add(c)
            i += 1
    if quote:
        raise ShellError(line, f"unterminated {quote} quote")
    end_field()
    return fields, "".join(raw), i


def _expansion(text: str, i: int, state: State, line: int, depth: int) -> tuple[Word, int]:
    n = len(text)
    if text[i] == "`":
        end = text.find("`", i + 1)
        if end < 0:
            raise ShellError(line, "unterminated ` command substitution")
        return Word((Unknown(text[i : end + 1], "a command substitution"),)), end + 1
    if text.startswith("$(", i):
        parens, j = 0, i + 1
        while j < n:
            if text[j] == "(":
                parens += 1
            elif text[j] == ")":
                parens -= 1
                if parens == 0:
                    break
            j += 1
        if j >= n:
            raise ShellError(line, "unterminated $( command substitution")
        if text.startswith("$((", i):
            reason = "an arithmetic expansion"
            # $(( N = 1 )) assigns N in this shell (a command substitution's assignments stay in it).
            state.arithmetic(text[i + 3 : j - 1], f"`{brief(text[i : j + 1])}` (line {line})")
        elif _DIRNAME.fullmatch(text, i + 2, j):
            reason = SCRIPT_FOLDER
        else:
            reason = "a command substitution"
        return Word((Unknown(text[i : j + 1], reason),)), j + 1
    if text.startswith("${", i):
        end = _closing_brace(text, i + 2)
        if end < 0:
            raise ShellError(line, "unterminated ${")
        found = _PARAMETER.fullmatch(text, i + 2, end)
        if not found:
            return Word((Unknown(text[i : end + 1], "a parameter expansion"),)), end + 1
        name, colon, op, default = found.groups()
        value = state.value(name)
        if isinstance(value, str):
            return Word((Unknown(text[i : end + 1], value, name),)), end + 1
        # ${V-word}: word when V is unset; ${V:-word}: also when it is empty. The word is expanded in turn;
        # ${V=word}/${V:=word} also assign it.
        unset = value is None or value is UNSET
        if value is not None and not unset and not (default is not None and colon and value.parts == ()):
            return through(value, name, state, line), end + 1
        if default is not None:
            if depth >= MAX_NESTING:
                raise ShellError(line, f"${{...:-...}} defaults nested more than {MAX_NESTING} deep", LIMITS)
            fields, _, _ = expand_word(default, 0, state, line, whole=True, depth=depth + 1)
            word = fields[0] if fields else Word(())
            if op == "=":
                state.assign(name, word)
            return through(word, name, state, line), end + 1
        if value is UNSET:
            return Word(()), end + 1
        return Word((Unknown(text[i : end + 1], NOT_ASSIGNED, name),)), end + 1
    found = VARIABLE_NAME.match(text, i + 1)
    if found:
        name = found.group(0)
        end = i + 1 + len(name)
        value = state.value(name)
        if isinstance(value, str):
            return Word((Unknown(text[i:end], value, name),)), end
        if value is UNSET:
            return Word(()), end
        if value is None:
            return Word((Unknown(text[i:end], NOT_ASSIGNED, name),)), end
        return through(value, name, state, line), end
    if i + 1 < n and (text[i + 1].isdigit() or text[i + 1] in "@*#?$!-"):
        return Word((Unknown(text[i : i + 2], "a script argument or shell parameter"),)), i + 2
    return Word(("$",)), i + 1


def _closing_brace(text: str, i: int) -> int:
    """Where the ``}`` that closes a ``${`` opened just before ``i`` is (nested ones and quotes skipped)."""
    depth, quote = 1, ""
    while i < len(text):
        c = text[i]
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "\\":
            i += 1
        elif text.startswith("${", i):
            depth += 1
            i += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1
