"""Just enough POSIX shell to read a legacy submit script: the `gcloud ai-platform|ml-engine jobs submit
training` command and the simple ``VAR=value`` assignments before it.

Lines are joined at backslash continuations, comments dropped, quotes and backslashes honoured, and
``$VAR``/``${VAR}``/``${VAR:-default}`` expanded from the assignments seen so far; an unquoted expansion is
split into words at blanks (``$EXTRA_FLAGS``), and one that is empty is no word at all, as in sh. What only a
running shell knows (``$(...)``, backticks, ``$1``, a variable the script never assigns, or one assigned
inside ``if``/``case``/a loop/a function, where which branch runs decides the value) is kept as an
``Unknown`` part of the word, with the variable it came through, so the converter can say which line, value
and variable it could not evaluate instead of guessing. Variables given by the caller are fixed: the
script's own assignments to them are skipped, since the caller knows what the running script would have had
(``PROJECT_ID=$(gcloud config get-value project)``).

Hostile scripts are refused with a line number, in time and memory linear in the script (which
infra/reader.py has already bounded to 1 MiB of printable text): continuations are scanned once, an expanded
word (so a variable's value) holds at most ``MAX_WORD_CHARS`` characters and the expansions of one script
produce at most ``MAX_EXPANDED_CHARS`` (``A1=$A0$A0 A2=$A1$A1 ...`` doubles with every line), and
``${V:-...}`` defaults and if/case/loop blocks nest at most ``MAX_NESTING`` deep.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_NAME = re.compile(NAME)
_ASSIGNMENT = re.compile(rf"({NAME})=")
MAX_WORD_CHARS = 1 << 20
MAX_EXPANDED_CHARS = 8 << 20
MAX_NESTING = 32
LIMITS = (
    f"a POSIX shell script whose words expand to at most {MAX_WORD_CHARS} characters each and "
    f"{MAX_EXPANDED_CHARS} in all, nesting ${{...}} and if/case/loops at most {MAX_NESTING} deep"
)
_DECLARE = ("export", "readonly", "declare", "local", "typeset")
_SEPARATORS = ";&|"
_PARAMETER = re.compile(rf"({NAME})(?:(:?)-(.*))?", re.S)
_BLANKS = re.compile(r"[ \t\n]+")  # the default IFS, which splits unquoted expansions into words
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
        return [Word(_merge(parts)) for parts in out]

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
    def __init__(self, line: int, problem: str, allowed: str = "a POSIX shell script") -> None:
        super().__init__(problem)
        self.line = line
        self.problem = problem
        self.allowed = allowed


def logical_lines(text: str) -> list[tuple[int, str, list[int]]]:
    """(first physical line, text, where each further physical line starts in it): backslash-newline
    continuations joined. Each physical line is scanned once (pieces joined at the end), so a script of
    continuations costs time linear in its length."""
    out: list[tuple[int, str, list[int]]] = []
    pieces: list[str] = []  # the pending logical line
    pending, start, breaks, quote = 0, 0, [], ""
    for number, line in enumerate(text.splitlines(), start=1):
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
        out.append((start, "".join(pieces) + line, breaks))
        pieces, pending = [], 0
    if pieces:
        out.append((start, "".join(pieces), breaks))
    return out


def _scan(text: str, quote: str) -> tuple[str, bool]:
    """The quote open at the end of ``text`` when ``quote`` was open at its start, and whether the end sits
    inside a comment (a `#` that starts an unquoted word). ``text`` follows a blank or starts the line."""
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
            return quote, True
        i += 1
    return quote, False


def parse(text: str, variables: dict[str, str] | None = None) -> Script:
    """Every simple command of the script, words expanded with the assignments made before it."""
    given = variables or {}
    state = _State({k: Word((v,)) for k, v in given.items()}, frozenset(given), _Growth())
    script = Script()
    for line, text_line, breaks in logical_lines(text):
        for words in _statements(text_line, state, line):
            words = state.command(words, line)
            if words:
                lines = [line + bisect.bisect_right(breaks, offset) for _, offset in words]
                script.commands.append(Command([w for w, _ in words], line, lines))
    return script


# Reserved words that open a compound command whose branches may or may not run, and those that close one.
# `then`/`do`/`!` lead a command inside; `for`/`select`/`case` headers hold none (case: up to its `in`).
_OPENERS = ("if", "while", "until", "for", "select", "case")
_LEADERS = ("then", "do", "!")
_BRANCHES = ("else", "elif")
_CLOSERS = ("fi", "done", "esac", "}")
_HEADERS = {"for": "for", "select": "for", "case": "case"}


@dataclass
class _Compound:
    kind: str  # `if`, `while`, `case`, a function, ...
    line: int
    before: dict[str, Word | None] = field(default_factory=dict)  # name -> its value before the compound
    # Names assigned since the compound began or last went back to `before`: only those need restoring, so
    # a case of many branches costs its assignments, not branches x assignments.
    dirty: set[str] = field(default_factory=set)


class _Growth:
    """What the expansions of one script have produced so far, in characters: a chain of variables that
    repeat each other doubles with each line, so it is refused well before it fills memory."""

    def __init__(self) -> None:
        self.total = 0

    def spend(self, value: Word, line: int) -> None:
        self.total += sum(1 + len(p.source if isinstance(p, Unknown) else p) for p in value.parts)
        if self.total > MAX_EXPANDED_CHARS:
            raise ShellError(
                line,
                f"the script's expansions produce more than {MAX_EXPANDED_CHARS} characters "
                "(variables repeating variables?)",
                LIMITS,
            )


@dataclass
class _State:
    """The variables set so far, and the compound commands (if/case/loops/functions) the parser is in."""

    env: dict[str, Word]
    fixed: frozenset[str]  # given by the caller: the script's assignments to them are skipped
    growth: _Growth
    open: list[_Compound] = field(default_factory=list)

    def enter(self, kind: str, line: int) -> None:
        # Each close hands the names assigned inside to the enclosing block: bounded depth, bounded work.
        if len(self.open) >= MAX_NESTING:
            raise ShellError(line, f"if/case/loops/functions nested more than {MAX_NESTING} deep", LIMITS)
        self.open.append(_Compound(kind, line))

    def lead(self, word: tuple[Word, str, int], line: int) -> str:
        """Track a word at the start of a statement: "" when a simple command starts with it, "word" when it
        is a reserved word or case pattern (the statement goes on after it), "for"/"case" when a header
        that holds no command follows (`for x in ...`, `case $x in`)."""
        keyword = _keyword(word)
        if keyword in _OPENERS:
            self.enter(f"`{keyword}`", line)
            return _HEADERS.get(keyword, "word")
        if keyword in _BRANCHES and self.open:
            self._restore(self.open[-1])
        elif keyword in _CLOSERS and self.open:
            self._close()
        elif keyword not in _LEADERS and not self._case_pattern(word):
            return ""
        return "word"

    def command(self, words: list[tuple[Word, str, int]], line: int) -> list[tuple[Word, int]]:
        """Apply a simple command's leading NAME=value words; the command that is left, each word with its
        offset in the line."""
        if words and _keyword(words[-1]) == "{":  # name() {  /  function name {
            self.enter("a function", line)
            return []
        return self._assign_prefix(words)

    def _case_pattern(self, word: tuple[Word, str, int]) -> bool:
        """`pattern)` at the start of a case branch: the branch before it did not run if this one does."""
        if not self.open or self.open[-1].kind != "`case`" or not word[1].endswith(")"):
            return False
        self._restore(self.open[-1])
        return True

    def _assign_prefix(self, words: list[tuple[Word, str, int]]) -> list[tuple[Word, int]]:
        declared = bool(words) and words[0][1] in _DECLARE
        k = 1 if declared else 0
        while k < len(words):
            word, raw, _ = words[k]
            found = _ASSIGNMENT.match(raw)
            if not found:
                break
            self._assign(found.group(1), _strip_prefix(word, len(found.group(1)) + 1))
            k += 1
        if declared:
            return []  # `export A B`: names only
        return [(w, offset) for w, _, offset in words[k:]]

    def _assign(self, name: str, value: Word) -> None:
        if name in self.fixed:
            return
        if self.open:
            compound = self.open[-1]
            if name not in compound.before:
                compound.before[name] = self.env.get(name)
            compound.dirty.add(name)
        self.env[name] = value

    def _restore(self, compound: _Compound) -> None:
        for name in compound.dirty:
            value = compound.before[name]
            if value is None:
                self.env.pop(name, None)
            else:
                self.env[name] = value
        compound.dirty.clear()

    def _close(self) -> None:
        compound = self.open.pop()
        reason = f"assigned inside {compound.kind} (line {compound.line})"
        for name in compound.before:
            self._assign(name, Word((Unknown(f"${name}", reason, name),)))


def _keyword(word: tuple[Word, str, int]) -> str:
    """The word, when it is written plainly (a reserved word is never quoted or expanded)."""
    return word[1] if word[0].literal == word[1] else ""


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


def _statements(text: str, state: _State, line: int) -> Iterator[list[tuple[Word, str, int]]]:
    """The simple commands of one logical line, one at a time and each word expanded only once the words
    before it took effect (`A=1; echo $A`, `else echo $A`): lists of (expanded word, raw text up to the first
    expansion, its offset)."""
    statement: list[tuple[Word, str, int]] = []
    mode = "lead"  # lead: reserved words may come; command; for: a header to skip; case: skip up to `in`
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
            if statement:
                yield statement
            statement, mode = [], "lead"
            continue
        start = i
        fields, raw, i = _word(text, i, state, line)
        if mode == "for" or (mode == "case" and raw != "in"):
            continue
        if mode == "case":
            mode = "lead"
            continue
        if mode == "lead" and len(fields) == 1:
            led = state.lead((fields[0], raw, start), line)
            if led:
                mode = "lead" if led == "word" else led
                continue
        mode = "command"
        # Only the first field can be NAME=...: words that splitting made are never assignments.
        statement += [(w, raw if k == 0 else "", start) for k, w in enumerate(fields)]
    if statement:
        yield statement


def _word(
    text: str, i: int, state: _State, line: int, whole: bool = False, depth: int = 0
) -> tuple[list[Word], str, int]:
    """The fields one word of the text expands to (none, one, or several where an unquoted expansion holds
    blanks), the literal text before its first expansion (to recognise NAME=), and where it ends. ``whole``:
    the text is one word, blanks included (the default of ``${V:-...}``, ``depth`` of them deep)."""
    fields: list[Word] = []
    parts: list[Part] = []
    size = 0  # characters in the field so far
    quoted = False  # the field has a quoted part: "" is an (empty) word, an empty $EMPTY is none
    raw: list[str] = []
    literal_so_far = True
    n = len(text)
    # sh does not split the value of an assignment: A=$B keeps B's blanks.
    split = not whole and not _ASSIGNMENT.match(text, i)

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

    def end_field() -> None:
        nonlocal parts, quoted, size
        merged = _merge(parts)
        if merged or quoted:
            fields.append(Word(merged))
        parts, quoted, size = [], False, 0

    quote = ""
    while i < n:
        c = text[i]
        if not quote and not whole and (c.isspace() or c in _SEPARATORS):
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
                for k, piece in enumerate(_BLANKS.split(part)):
                    if k:
                        end_field()
                        literal_so_far = False
                    if piece:
                        add(piece)
        else:
            add(c)
            i += 1
    if quote:
        raise ShellError(line, f"unterminated {quote} quote")
    end_field()
    return fields, "".join(raw), i


def _expansion(text: str, i: int, state: _State, line: int, depth: int) -> tuple[Word, int]:
    n = len(text)
    env = state.env
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
        name, colon, default = found.groups()
        value = env.get(name)
        # ${V-word}: word when V is unset; ${V:-word}: also when it is empty. The word is expanded in turn.
        if value is not None and not (default is not None and colon and value.parts == ()):
            return _through(value, name, state, line), end + 1
        if default is not None:
            if depth >= MAX_NESTING:
                raise ShellError(line, f"${{...:-...}} defaults nested more than {MAX_NESTING} deep", LIMITS)
            fields, _, _ = _word(default, 0, state, line, whole=True, depth=depth + 1)
            return _through(fields[0] if fields else Word(()), name, state, line), end + 1
        return Word((Unknown(text[i : end + 1], "not assigned in the script", name),)), end + 1
    found = _NAME.match(text, i + 1)
    if found:
        name = found.group(0)
        end = i + 1 + len(name)
        if name in env:
            return _through(env[name], name, state, line), end
        return Word((Unknown(text[i:end], "not assigned in the script", name),)), end
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


def _through(value: Word, name: str, state: _State, line: int) -> Word:
    """A variable's value, its unknown parts marked as coming through it unless an inner variable is named;
    charged to the script's expansion budget, since each use copies it into a word."""
    state.growth.spend(value, line)
    if not value.unknowns:
        return value
    return Word(tuple(replace(p, name=p.name or name) if isinstance(p, Unknown) else p for p in value.parts))


def _merge(parts: list[Part]) -> tuple[Part, ...]:
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
