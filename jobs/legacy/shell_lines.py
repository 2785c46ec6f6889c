"""A legacy submit script as logical lines: backslash continuations joined, here-document bodies left out, and
the quote, comment and parenthesis scanning the parser reads each line with."""

from __future__ import annotations

import bisect
import re

from jobs.legacy.shell_words import ShellError, brief

SEPARATORS = ";&|"


def logical_lines(text: str) -> list[tuple[int, str, list[int]]]:
    """(first physical line, text, where each further physical line starts in it): backslash-newline
    continuations joined, here-document bodies left out. Each physical line is scanned once (pieces joined at
    the end), so a script of continuations or here-documents costs time linear in its length."""
    out: list[tuple[int, str, list[int]]] = []
    pieces: list[str] = []  # the pending logical line
    pending, start, breaks, quote = 0, 0, [], ""
    lines = text.splitlines()
    number = 0
    while number < len(lines):
        line = lines[number]
        number += 1
        if not pieces:
            start, breaks, quote = number, [], ""
        else:
            breaks.append(pending)
        stripped = line.rstrip()
        # An odd run of trailing backslashes continues the line; an even one is escaped backslashes.
        trailing = len(stripped) - len(stripped.rstrip("\\"))
        if trailing % 2 == 1 and not _scan(stripped, quote)[1]:
            piece = stripped[:-1] + " "
            quote = _scan(piece, quote)[0]
            pieces.append(piece)
            pending += len(piece)
            continue
        logical = "".join(pieces) + line
        out.append((start, logical, breaks))
        pieces, pending = [], 0
        # Bodies follow the line that opened them, in order: `cmd <<A <<B`.
        for delimiter, tabs, expands, at, shown in _heredocs(logical, start, breaks):
            number = _skip_body(lines, number, delimiter, tabs, expands, at, shown)
    if pieces:
        out.append((start, "".join(pieces), breaks))
    return out


def _heredocs(text: str, start: int, breaks: list[int]) -> list[tuple[str, bool, bool, int, str]]:
    """The here-documents a logical line opens: (delimiter, ``<<-`` strips tabs, the body is expanded, the
    line of its ``<<``, how it was written). ``<<<`` and shifts inside ``(( ))``/``$(( ))`` are not
    here-documents, nor is ``<<`` inside quotes or a comment."""
    found: list[tuple[str, bool, bool, int, str]] = []
    if "<<" not in text:
        return found
    parens = Parens(text)
    cursor = Cursor(text)
    n = len(text)
    while (i := cursor.next()) >= 0:
        c = text[i]
        if text.startswith("((", i) or text.startswith("$((", i):
            end = parens.arith_end(i + (c == "$"))
            cursor.i = end if end > 0 else i + 2
        elif text.startswith("<<<", i):
            cursor.i = i + 3
        elif text.startswith("<<", i):
            j = i + 2
            tabs = text.startswith("-", j)
            j += tabs
            while j < n and text[j] in " \t":
                j += 1
            line = start + bisect.bisect_right(breaks, i)
            delimiter, expands, end = _delimiter(text, j, line)
            if end == j:
                raise ShellError(line, "`<<` with no delimiter word after it")
            found.append((delimiter, tabs, expands, line, brief(text[i:end])))
            cursor.i = end
    return found


def _delimiter(text: str, i: int, line: int) -> tuple[str, bool, int]:
    """The word that ends a here-document, quotes removed; whether it was unquoted (then the body is
    expanded and a backslash-newline in it joins lines); where the word ends."""
    chars: list[str] = []
    quoted = False
    n = len(text)
    while i < n and text[i] not in " \t;&|<>()":
        c = text[i]
        if c == "\\":
            quoted = True
            chars.append(text[i + 1 : i + 2])
            i += 2
        elif c in "'\"":
            end = text.find(c, i + 1)
            if end < 0:
                raise ShellError(line, f"unterminated {c} quote")
            quoted = True
            chars.append(text[i + 1 : end])
            i = end + 1
        else:
            chars.append(c)
            i += 1
    return "".join(chars), not quoted, i


def _skip_body(
    lines: list[str], number: int, delimiter: str, tabs: bool, expands: bool, line: int, shown: str
) -> int:
    """The index of the line after a here-document's body, which starts at ``number``."""
    joined = False  # the line before ended with a backslash-newline: this one is part of it
    while number < len(lines):
        body = lines[number]
        number += 1
        if tabs:
            body = body.lstrip("\t")
        if body == delimiter and not joined:
            return number
        joined = expands and (len(body) - len(body.rstrip("\\"))) % 2 == 1
    # sh reads to the end of the file (bash warns): almost always a misspelt delimiter, so say so.
    raise ShellError(
        line,
        f"the here-document {shown} is never closed: no line {delimiter!r} follows",
        "a here-document ended by a line holding only its delimiter word",
    )


def _scan(text: str, quote: str) -> tuple[str, bool]:
    """The quote open at the end of ``text`` when ``quote`` was open at its start, and whether the end sits
    inside a comment (a `#` that starts an unquoted word). ``text`` follows a blank or starts the line."""
    cursor = Cursor(text, quote)
    while cursor.next() >= 0:
        pass
    return cursor.quote, cursor.comment


class Cursor:
    """Walks a line's characters outside quotes and backslash escapes: ``next()`` gives the index of the next
    one (-1 at the end of the line or of the code before a comment); set ``i`` to go on from elsewhere."""

    def __init__(self, text: str, quote: str = "") -> None:
        self.text, self.i, self.quote, self.comment = text, 0, quote, False

    def next(self) -> int:
        text = self.text
        while self.i < len(text):
            i = self.i
            c = text[i]
            self.i += 1
            if self.quote == "'":
                self.quote = "" if c == "'" else "'"
            elif c == "\\":
                self.i += 1
            elif self.quote == '"':
                self.quote = "" if c == '"' else '"'
            elif c in "'\"":
                self.quote = c
            elif c == "#" and (i == 0 or text[i - 1] in " \t;&|("):  # `#` starting a word
                self.i, self.comment = len(text), True
            else:
                return i
        return -1


class Parens:
    """The ``(``/``)`` pairs of one line, matched in one pass when first asked (quotes not considered: enough
    to tell ``(( ))`` from two subshells), so finding where each ``((`` ends stays linear."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pairs: dict[int, int] | None = None

    def arith_end(self, i: int) -> int:
        """Where the ``))`` closing the ``((`` at ``i`` ends, or -1 when it does not close on this line or
        closes as two parentheses apart (``((cd x); y)`` is two subshells)."""
        if self.pairs is None:
            self.pairs, stack = {}, []
            for found in re.finditer(r"[()]", self.text):
                if found.group() == "(":
                    stack.append(found.start())
                elif stack:
                    self.pairs[stack.pop()] = found.start()
        inner = self.pairs.get(i + 1)
        return inner + 2 if inner is not None and self.pairs.get(i) == inner + 1 else -1


def paren_end(text: str, i: int, depth: int, line: int) -> tuple[int, int]:
    """Where the ``)`` that brings ``depth`` open parentheses to none ends (quotes and comments skipped), or
    -1 and the depth still open at the end of the line."""
    cursor = Cursor(text)
    cursor.i = i
    while (i := cursor.next()) >= 0:
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return i + 1, 0
    if cursor.quote:
        raise ShellError(line, f"unterminated {cursor.quote} quote")
    return -1, depth


def redirects(text: str, i: int, start: int) -> bool:
    """The ``&`` at ``i`` belongs to a redirection (``2>&1``, ``&>log``), not a separator."""
    if text[i] != "&":
        return False
    if i > start and text[i - 1] in "<>":
        return True
    return i == start and text.startswith(">", i + 1)
