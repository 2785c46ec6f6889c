"""Just enough POSIX shell to read a legacy submit script: the `gcloud ai-platform|ml-engine jobs submit
training` command and the variables it expands.

Lines are joined at backslash continuations, comments dropped, here-documents skipped as data (``<<EOF``,
``<<-EOF``, ``<<'EOF'``: a gcloud line inside one is no command), quotes and backslashes honoured, and
``$VAR``/``${VAR}``/``${VAR:-default}``/``${VAR:=default}`` expanded from the assignments seen so far; an
unquoted expansion is split into words at IFS (blanks unless the script sets it), and one that is empty is no
word at all, as in sh. Assignments are followed as sh follows them: in order (``A=1 B=$A``), appended
(``A+=x``), undone by ``unset``, kept only for the command when one follows (``A=1 cmd``) and not at all in a
subshell ``( ... )``.

What only a running shell knows is kept as an ``Unknown`` part of the word, with the variable it came through,
so the converter can say which line, value, construct and variable it could not evaluate instead of guessing:
``$(...)``, backticks, ``$1``, a variable the script never assigns, one assigned inside ``if``/``case``/a
loop/a function or after ``&&``/``||``/in a pipeline (whether that ran decides the value), or set by
``read``, ``mapfile``, ``getopts``, ``printf -v``, ``let``/``(( ))``, ``for``, an array, ``declare -i/-l/-u``,
or after ``readonly``. ``.``/``source``, ``eval``, ``declare -n`` and a call of a function they may define
could set any variable: every variable the script did not assign again after them is unknown. Variables given
by the caller are fixed: the script's own assignments to them are skipped, since the caller knows what the
running script would have had (``PROJECT_ID=$(gcloud config get-value project)``).

Hostile scripts are refused with a line number, in time and memory linear in the script (which
common/reader.py has already bounded to 1 MiB of printable text): continuations and here-documents are scanned
once, an expanded word (so a variable's value) holds at most ``MAX_WORD_CHARS`` characters and the expansions
of one script produce at most ``MAX_EXPANDED_CHARS`` (``A1=$A0$A0 A2=$A1$A1 ...`` doubles with every line),
``${V:-...}`` defaults and if/case/loop blocks nest at most ``MAX_NESTING`` deep, and function calls mark at
most ``MAX_CALL_MARKS`` variables in all (a call past that is taken as setting any).
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_NAME = re.compile(NAME)
_ASSIGNMENT = re.compile(rf"({NAME})(\+?)=")
_ARRAY = re.compile(rf"({NAME})\+?=\(")  # A=(x y): an array, whose elements convert does not follow
MAX_WORD_CHARS = 1 << 20
MAX_EXPANDED_CHARS = 8 << 20
MAX_NESTING = 32
MAX_CALL_MARKS = 1 << 16  # variables function calls mark in all; past that a call may set any variable
LIMITS = (
    f"a POSIX shell script whose words expand to at most {MAX_WORD_CHARS} characters each and "
    f"{MAX_EXPANDED_CHARS} in all, nesting ${{...}} and if/case/loops at most {MAX_NESTING} deep"
)
_DECLARE = ("export", "readonly", "declare", "local", "typeset")
# POSIX special builtins: sh (dash) keeps `A=1 :`'s assignment, bash does not.
_SPECIAL = frozenset(
    (":", ".", "break", "continue", "eval", "exec", "exit", "export", "readonly", "return", "set", "shift")
    + ("times", "trap", "unset")
)
# After a `.`/`source`, any other command may be a function the sourced file defined; these are taken as the
# builtins and tools they are (a sourced file that redefines `gsutil` is out of reach).
_PLAIN = frozenset(
    (":", "true", "false", "echo", "printf", "test", "[", "[[", "cd", "pwd", "pushd", "popd", "set", "shift")
    + ("exit", "return", "exec", "trap", "wait", "sleep", "type", "hash", "umask", "shopt", "alias", "kill")
    + ("gcloud", "gsutil", "bq", "python", "python3", "pip", "pip3", "docker", "git", "make", "cat", "cp")
    + ("mv", "rm", "mkdir", "touch", "chmod", "ls", "ln", "tar", "zip", "unzip", "curl", "wget", "sed", "awk")
    + ("grep", "sort", "head", "tail", "tee", "wc", "date", "basename", "dirname", "realpath", "readlink")
    + ("envsubst", "jq", "yq", "env", "sudo", "xargs", "find", "tr", "cut")
)
# Builtins that set variables (a call of one of the script's functions may too).
_EFFECTS = frozenset(
    (".", "source", "eval", "unset", *_DECLARE, "read", "mapfile", "readarray", "getopts", "printf", "let")
)
_SEPARATORS = ";&|"
# What a statement's neighbour operator says of it: after && or || it may not run; in a pipeline or in the
# background it runs in a subshell (bash's lastpipe aside): either way its assignments are not followed.
_JOINED = {"&&": "after `&&`", "||": "after `||`", "|": "in a pipeline", "|&": "in a pipeline"}
_CARRIED = ("&&", "||", "|", "|&")  # a line that ends with one goes on on the next
_PARAMETER = re.compile(rf"({NAME})(?:(:?)([-=])(.*))?", re.S)
_BLANKS = re.compile(r"[ \t\n]+")  # the default IFS, which splits unquoted expansions into words
# `1>`, `2>&1`, `>>`, `<`, `&>`: a word that redirects names no command (its target is the next word unless
# written on it).
_REDIRECT = re.compile(r"\d*(?:<<-?|<<<|>>|<>|>\||>&|<&|&>>|&>|>|<)")
# Arithmetic that assigns: `N=1`, `N += 2`, `a[i] = 3`, `N++`, `--N` (not `==`, `<=`, `>=`, `!=`).
_ARITH_SET = re.compile(
    rf"(?:\+\+|--)\s*({NAME})|(?<![\w$])({NAME})(?:\[[^\]]{{0,100}}\])?\s*(?:\+\+|--|(?:[-+*/%&^|]|<<|>>)?=(?!=))"
)
SCRIPT_FOLDER = "the script's own folder"
# `$(dirname "$0")`, `$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)`, ...: how scripts find files beside them.
_ZERO = r'"?\$(?:0|\{0\}|\{BASH_SOURCE(?:\[0\])?\}|BASH_SOURCE)"?'
_DIRNAME = re.compile(
    rf'\s*(?:dirname\s+{_ZERO}|cd\s+"?\$\(\s*dirname\s+{_ZERO}\s*\)"?\s*(?:>\s*/dev/null\s*)?(?:2>&1\s*)?&&\s*pwd(?:\s+-P)?)\s*'
)
_NOT_ASSIGNED = "not assigned in the script"


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


# The value of a variable the script unset: known to be unset (``${V-d}`` is d), unlike one it never assigned.
_UNSET = Word()


def _unknown(name: str, reason: str) -> Word:
    return Word((Unknown(f"${name}", reason, name),))


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
    parens = _Parens(text)
    cursor = _Cursor(text)
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
            found.append((delimiter, tabs, expands, line, _brief(text[i:end])))
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
    cursor = _Cursor(text, quote)
    while cursor.next() >= 0:
        pass
    return cursor.quote, cursor.comment


class _Cursor:
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


class _Parens:
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


def _paren_end(text: str, i: int, depth: int, line: int) -> tuple[int, int]:
    """Where the ``)`` that brings ``depth`` open parentheses to none ends (quotes and comments skipped), or
    -1 and the depth still open at the end of the line."""
    cursor = _Cursor(text)
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


def parse(text: str, variables: dict[str, str] | None = None) -> Script:
    """Every simple command of the script, words expanded with the assignments made before it."""
    given = variables or {}
    state = _State({k: Word((v,)) for k, v in given.items()}, frozenset(given), _Growth())
    script = Script()
    for line, text_line, breaks in logical_lines(text):
        for words, after, name in _statements(text_line, state, line):
            words = state.command(words, line, after, name)
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
_HEADERS = {"for": "for-name", "select": "for-name", "case": "case"}
_FUNCTION = "a function"
_GROUP = "a { } group"  # runs in this shell: its assignments stand, unless the group itself may not run
_SUBSHELL = "a subshell"  # ( ... ): nothing assigned inside outlives it


@dataclass
class _Compound:
    kind: str  # `if`, `while`, `case`, a function, ...
    line: int
    before: dict[str, Word | None] = field(default_factory=dict)  # name -> its value before the compound
    # Names assigned since the compound began or last went back to `before`: only those need restoring, so
    # a case of many branches costs its assignments, not branches x assignments.
    dirty: set[str] = field(default_factory=set)
    condition: str = ""  # a group after `&&`: whether it runs is not known
    function: str = ""  # the name a function definition gives
    clobbers: str = ""  # the body may set any variable (it sources a file): why


@dataclass(frozen=True)
class _Function:
    line: int
    names: tuple[str, ...] | None  # what a call may set; None: any variable (the body sources a file)


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


# Before a statement, the operator that joins it to the one before; after it, the one that follows.
_BEFORE = _JOINED
_AFTER = {"|": "in a pipeline", "|&": "in a pipeline", "&": "in the background"}


@dataclass
class _State:
    """The variables set so far, the compound commands (if/case/loops/functions) the parser is in, and what
    the statement being read may do to them."""

    env: dict[str, Word]
    fixed: frozenset[str]  # given by the caller: the script's assignments to them are skipped
    growth: _Growth
    open: list[_Compound] = field(default_factory=list)
    missing: str = ""  # why a variable not in env is unknown: set by a `.`/`eval` (until assigned again)
    poison: str = ""  # why every variable is unknown for good (`declare -n`: an assignment may be another's)
    sourced: str = ""  # the `.`/`eval` whose functions a later command may be
    attrs: dict[str, str] = field(default_factory=dict)  # name -> why every later assignment to it is unknown
    functions: dict[str, _Function] = field(default_factory=dict)
    condition: str = ""  # the statement may not run, or runs in a subshell: "after `&&` (line 3)"
    op: str = ""  # the operator before the statement being read
    pattern: bool = False  # a case pattern comes next
    array: int = 0  # parentheses of an array assignment still open at the end of the last line
    header: str = ""  # the `for`/`select` whose variable comes next
    pending_function: str = ""  # `f()` on a line of its own: the `{` on the next opens its body
    prefix: dict[str, Word | None] = field(default_factory=dict)  # NAME=value before a command: old values
    prefixed: dict[str, Word | None] = field(default_factory=dict)  # ... and theirs, once a command came
    kept: tuple[tuple[str, ...], int] | None = None  # a { } group just closed: what it assigned, its line
    marks: int = MAX_CALL_MARKS  # what function calls may still mark, one variable at a time
    ifs: tuple[Word | None, re.Pattern[str] | str | None] = (None, _BLANKS)  # IFS's value, how it splits

    # --- statements ----------------------------------------------------------------------------------------

    def begin(self, line: int) -> None:
        """A statement starts: whether it surely runs in this shell depends on the operator before it."""
        self.condition = f"{_BEFORE[self.op]} (line {line})" if self.op in _BEFORE else ""
        self.prefix, self.prefixed, self.kept = {}, {}, None

    def separated(self, op: str, line: int) -> None:
        if self.kept and op in _AFTER:  # `{ A=1; } | cat`: the group ran in a subshell after all
            names, at = self.kept
            for name in names:
                self._mark(name, f"assigned {_AFTER[op]} (line {at})")
        self.op = op
        self.pattern = op in (";;", ";&", ";;&") and self.in_case()
        self.begin(line)

    def in_case(self) -> bool:
        return bool(self.open) and self.open[-1].kind == "`case`"

    def in_subshell(self) -> bool:
        return bool(self.open) and self.open[-1].kind == _SUBSHELL

    def enter(self, kind: str, line: int, function: str = "") -> None:
        # Each close hands the names assigned inside to the enclosing block: bounded depth, bounded work.
        if len(self.open) >= MAX_NESTING:
            raise ShellError(line, f"if/case/loops/functions nested more than {MAX_NESTING} deep", LIMITS)
        self.open.append(_Compound(kind, line, condition=self.condition, function=function))

    def lead(self, word: tuple[Word, str, int], line: int) -> str:
        """Track a word at the start of a statement: "" when a simple command starts with it, "word" when it
        is a reserved word (the statement goes on after it), "for-name"/"case" when a header that holds no
        command follows (`for x in ...`, `case $x in`)."""
        keyword = _keyword(word)
        led = "word"
        if keyword in _OPENERS:
            self.enter(f"`{keyword}`", line)
            self.header = keyword
            led = _HEADERS.get(keyword, "word")
        elif keyword == "{":
            function, self.pending_function = self.pending_function, ""
            self.enter(_FUNCTION if function else _GROUP, line, function)
        elif keyword in _BRANCHES and self.open:
            self._restore(self.open[-1])
        elif keyword in _CLOSERS and self.open:
            self._close()
            self.pattern = False
        elif keyword not in _LEADERS:
            return ""
        if keyword != "!":  # the compound carries the statement's condition; what runs inside it is plain
            self.condition = ""
        return led

    def branch(self) -> None:
        """`pattern)`: the case branch before it did not run if this one does."""
        self.pattern = False
        if self.in_case():
            self._restore(self.open[-1])

    def close_subshell(self) -> None:
        self._close()

    def prefix_assign(self, found: re.Match[str], word: Word, line: int) -> None:
        """A NAME=value before the command word (if any): it takes effect now, so a later one sees it
        (`A=1 B=$A`); ``end_prefix`` takes it back if a command follows."""
        name = found.group(1)
        if name not in self.fixed:
            self.prefix.setdefault(name, self.env.get(name))
        self.assign(name, self._value_of(name, found, word, line))

    def end_prefix(self) -> None:
        """A command follows the assignments: they were for its environment only, and its words expand with
        the values from before them (`A=1 echo $A`)."""
        for name, before in self.prefix.items():
            self.prefixed[name] = self.env.get(name)
            if before is None:
                self.env.pop(name, None)
            else:
                self.env[name] = before
        self.prefix = {}

    def command(
        self, words: list[tuple[Word, str, int]], line: int, after: str, at: int | None
    ) -> list[tuple[Word, int]]:
        """What a simple command does to the variables; the command that is left (its NAME=value words
        dropped), each word with its offset in the line. ``at``: where its command name is, if it has one."""
        if not self.condition and after in _AFTER:
            self.condition = f"{_AFTER[after]} (line {line})"
            for name in self.prefix:  # `A=1 | cat`: assigned in a subshell
                self._mark(name, f"assigned {self.condition}")
        self.pending_function = ""
        if at is None:
            for name, value in self.prefixed.items():  # `A=1 $EMPTY`: no command after all, so they stand
                if value is None:
                    self.env.pop(name, None)
                else:
                    self.env[name] = value
        elif _is_definition(words, at):
            self.pending_function = _function_name(words)
            return []
        else:
            name = words[at][0].literal
            if name in ("command", "builtin") and at + 1 < len(words):
                following = words[at + 1][0].literal
                if following is None or not following.startswith("-"):
                    at, name = at + 1, following
            if self.prefixed and (name is None or name in _SPECIAL):
                what = f"`{name}`" if name else "a command only the running script knows"
                for variable in self.prefixed:
                    self._mark(variable, f"assigned before {what} (line {line}; sh keeps it, bash does not)")
            self._effects(name, words, at, line)
            if name in _DECLARE:
                return []  # `export A B`: names only
        k = 0
        while k < len(words) and _ASSIGNMENT.match(words[k][1]):
            k += 1
        return [(w, offset) for w, _, offset in words[k:]]

    def _effects(self, name: str | None, words: list[tuple[Word, str, int]], at: int, line: int) -> None:
        """What builtins and functions do to variables: followed where sh's result is certain (``unset``,
        ``export``), else the variables they set are unknown, and all of them when any could be set."""
        may_set = self.functions if name is None else name in _EFFECTS or name in self.functions
        if not may_set and not self.sourced:
            return  # most commands: nothing to do, nothing to describe
        args = words[at + 1 :]
        why = f"`{_brief(' '.join(w.show() for w, _, _ in words[at:]))}` (line {line})"
        if name is None:
            if self.functions or self.sourced:  # `$STEP` may name a function
                self._clobber(f"possibly set by {why}")
        elif name in (".", "source", "eval"):
            self.sourced = why
            self._clobber(f"possibly set by {why}")
        elif name == "unset":
            options, operands = _operands(args, "")
            if "-f" not in options:
                for word, _, _ in operands:
                    target = word.literal
                    if target is None:
                        self._clobber(f"possibly unset by {why}")
                    elif _NAME.fullmatch(target):
                        self.assign(target, _UNSET, "unset")
        elif name in _DECLARE:
            self._declare(name, args, why, line)
        elif name == "read":
            options, operands = _operands(args, "adinNptu")
            targets = [w for w, _, _ in operands] + [options.get("-a")]
            self._set_by(targets if any(targets) else [Word(("REPLY",))], why)
        elif name in ("mapfile", "readarray"):
            options, operands = _operands(args, "dnOsuCc")
            self._set_by([operands[0][0] if operands else Word(("MAPFILE",))], why)
        elif name == "getopts":
            targets = [args[1][0], Word(("OPTARG",)), Word(("OPTIND",))] if len(args) > 1 else []
            self._set_by(targets, why)
        elif name == "printf":
            self._set_by([_operands(args, "v")[0].get("-v")], why)
        elif name == "let":
            for word, _, _ in args:
                self.arithmetic(word.show(), why)
        elif name in self.functions:
            function = self.functions[name]
            reason = f"possibly set by {why}, the function of line {function.line}"
            if function.names is None or len(function.names) > self.marks:
                self._clobber(reason)
                return
            self.marks -= len(function.names)
            for variable in function.names:
                self._mark(variable, reason)
        elif self.sourced and name not in _PLAIN:
            self._clobber(f"possibly set by {why}, a function {self.sourced} may define")

    def _declare(self, command: str, args: list[tuple[Word, str, int]], why: str, line: int) -> None:
        options, operands = _operands(args, "")
        if command == "export":
            options.pop("-n", None)  # export -n: no longer exported; the value stays
        if {"-f", "-F", "-p"} & options.keys():
            return  # functions, or a listing
        if "-n" in options:  # a nameref: assigning it assigns the variable it names
            self.poison = f"possibly set through the nameref of {why}"
            self._clobber(self.poison)
            return
        attribute = f"set by {why}" if {"-i", "-l", "-u"} & options.keys() else ""
        readonly = command == "readonly" or "-r" in options
        for word, raw, _ in operands:
            found = _ASSIGNMENT.match(raw)
            name = found.group(1) if found else word.literal
            if name is None:  # export "$NAME": which variable only the shell knows
                self._clobber(f"possibly set by {why}")
                continue
            if not _NAME.fullmatch(name) or name in self.fixed:
                continue
            if found:
                value = self._value_of(name, found, word, line)
                self.assign(name, _unknown(name, attribute) if attribute else value)
            if attribute:
                self.attrs[name] = attribute
            if readonly:
                self.attrs.setdefault(name, f"assigned after {why} made it read-only")

    def _set_by(self, targets: list[Word | None], why: str) -> None:
        reason = f"set by {why}"
        for target in targets:
            if target is None:
                continue
            name = target.literal
            if name is None:  # read "$VAR": which variable only the shell knows
                self._clobber(f"possibly set by {why}")
            elif found := _NAME.match(name):  # a[1]: the array a
                self._mark(found.group(), reason)

    def arithmetic(self, text: str, why: str) -> None:
        """``(( N++ ))``, ``let N=2``, ``$(( N = 1 ))``: the variables it assigns are unknown."""
        reason = f"set by {why}"
        for found in _ARITH_SET.finditer(text):
            self._mark(found.group(1) or found.group(2), reason)

    def loop_variable(self, word: Word, line: int) -> None:
        if word.literal and _NAME.fullmatch(word.literal):
            self._mark(word.literal, f"set by `{self.header}` (line {line})")

    def array_assignment(self, name: str, line: int) -> None:
        self._mark(name, f"an array assignment (line {line})")

    # --- variables -----------------------------------------------------------------------------------------

    def value(self, name: str) -> Word | str | None:
        """A variable's value; ``_UNSET`` when the script unset it; None when the script never assigned it;
        why, when only the running shell knows. IFS is taken as left alone by `.`/`eval`, which would
        otherwise make every unquoted expansion unknown."""
        if name in self.fixed:
            return self.env[name]
        if self.poison and name != "IFS":
            return self.poison
        value = self.env.get(name)
        if value is None and self.missing and name != "IFS":
            return self.missing
        return value

    def splitter(self) -> re.Pattern[str] | str | None:
        """How unquoted expansions split into words: at IFS (a pattern), not at all (None), or why only the
        running shell knows."""
        value = self.value("IFS")
        if value is self.ifs[0]:
            return self.ifs[1]
        if value is None or value is _UNSET or isinstance(value, str):  # (never a reason: see value())
            splitter: re.Pattern[str] | str | None = _BLANKS
        elif value.literal is None:
            splitter = f"split at an IFS {value.unknowns[0].reason}"
        else:
            splitter = _ifs(value.literal)
        self.ifs = (value if isinstance(value, Word) else None, splitter)
        return splitter

    def _value_of(self, name: str, found: re.Match[str], word: Word, line: int) -> Word:
        """The value NAME=value assigns, or NAME+=value (the old value, then the new)."""
        value = _strip_prefix(word, found.end())
        if not found.group(2):
            return value
        old = self.value(name)
        if isinstance(old, str):
            old = _unknown(name, old)
        elif old is None:
            old = _unknown(name, _NOT_ASSIGNED)
        return Word(_merge([*_through(old, name, self, line).parts, *value.parts]))

    def assign(self, name: str, value: Word, verb: str = "assigned") -> None:
        if name in self.fixed:
            return
        if name in self.attrs:
            value = _unknown(name, self.attrs[name])
        elif self.condition:
            value = _unknown(name, f"{verb} {self.condition}")
        self._set(name, value)

    def _mark(self, name: str, reason: str) -> None:
        """NAME is set to what only the running shell knows."""
        if name not in self.fixed:
            self._set(name, _unknown(name, reason))

    def _set(self, name: str, value: Word) -> None:
        if self.open:
            compound = self.open[-1]
            if name not in compound.before:
                compound.before[name] = self.env.get(name)
            compound.dirty.add(name)
        self.env[name] = value

    def _clobber(self, reason: str) -> None:
        """Any variable may have been set: all but those given are unknown until assigned again. Costs the
        variables assigned since the last time, so a script of many `.` lines stays linear."""
        self.env = {k: v for k, v in self.env.items() if k in self.fixed or k == "IFS"}
        self.missing = reason
        for compound in self.open:
            if compound.kind == _FUNCTION and not compound.clobbers:
                compound.clobbers = reason

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
        if compound.kind == _SUBSHELL:  # nothing assigned in ( ... ) outlives it
            self._restore(compound)
            return
        outer = self.open[-1] if self.open else None
        keep = compound.kind == _GROUP and not compound.condition
        if compound.kind == _GROUP:
            reason = f"assigned {compound.condition}"
        else:
            reason = f"assigned inside {compound.kind} (line {compound.line})"
        for name, old in compound.before.items():
            if outer is not None:  # the enclosing block's value from before, not this block's
                outer.before.setdefault(name, old)
                outer.dirty.add(name)
            if not keep:
                self.env[name] = _unknown(name, reason)
        if compound.function:
            names = None if compound.clobbers else tuple(compound.before)
            self.functions[compound.function] = _Function(compound.line, names)
        self.kept = (tuple(compound.before), compound.line) if keep else None


def _operands(
    args: list[tuple[Word, str, int]], valued: str
) -> tuple[dict[str, Word | None], list[tuple[Word, str, int]]]:
    """A builtin's options (``-r``, ``-p PROMPT`` or ``-pPROMPT`` where the letter is in ``valued``; ``+x``)
    and the operands after them."""
    options: dict[str, Word | None] = {}
    i = 0
    while i < len(args):
        text = args[i][0].literal
        if text is None or len(text) < 2 or text[0] not in "-+":
            break
        i += 1
        if text == "--":
            break
        for k in range(1, len(text)):
            option = text[0] + text[k]
            if text[0] == "-" and text[k] in valued:
                if text[k + 1 :]:
                    options[option] = Word((text[k + 1 :],))
                else:
                    options[option] = args[i][0] if i < len(args) else None
                    i += 1
                break
            options[option] = Word()
    return options, args[i:]


def _is_definition(words: list[tuple[Word, str, int]], at: int) -> bool:
    """`f()` or `function f` on a line of its own: the body's `{` comes on the next."""
    raws = [raw for _, raw, _ in words[at:]]
    if raws[0] == "function":
        return len(raws) == 2
    return (len(raws) == 1 and raws[0].endswith("()")) or (len(raws) == 2 and raws[1] == "()")


def _function_name(words: list[tuple[Word, str, int]]) -> str:
    raws = [raw for _, raw, _ in words]
    if raws and raws[0] == "function":
        raws = raws[1:]
    return raws[0].removesuffix("()") if raws else ""


@functools.lru_cache(maxsize=8)
def _ifs(chars: str) -> re.Pattern[str] | None:
    """How an IFS splits (POSIX): at runs of its blanks, and at each of its other characters with the blanks
    around it, which delimit a field even when empty; None for an empty IFS, which splits nothing."""
    if not chars:
        return None
    blanks = re.escape("".join(sorted(set(chars) & set(" \t\n"))))
    others = re.escape("".join(sorted(set(chars) - set(" \t\n"))))
    if not others:
        return re.compile(f"[{blanks}]+")
    around = f"[{blanks}]*" if blanks else ""
    return re.compile(f"{around}[{others}]{around}" + (f"|[{blanks}]+" if blanks else ""))


def _brief(text: str, limit: int = 60) -> str:
    """Script text for a message: one line stays readable whatever the script held."""
    return text if len(text) <= limit else f"{text[:limit]}..."


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


def _statements(
    text: str, state: _State, line: int
) -> Iterator[tuple[list[tuple[Word, str, int]], str, int | None]]:
    """The simple commands of one logical line, one at a time and each word expanded only once the words
    before it took effect (`A=1; echo $A`, `else echo $A`, `A=1 B=$A`): (words as (expanded word, raw text up
    to the first expansion, its offset), the operator after it, where its command name is)."""
    statement: list[tuple[Word, str, int]] = []
    name: int | None = None  # the index of the command name in the statement
    assigning, target = True, False  # still in the NAME=value prefix; the next word is a redirection's
    last = ""  # what the line ends with: an operator or a word
    i, n = 0, len(text)
    parens = _Parens(text)
    if state.array:  # an array assignment goes on from the line before
        i, state.array = _paren_end(text, 0, state.array, line)
        if i < 0:
            return
    # mode: lead (reserved words may come), command, for-name/for (a header to skip), case (up to `in`),
    # pattern (a case pattern, up to its `)`)
    mode = "pattern" if state.pattern else "lead"
    state.begin(line)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
            continue
        if c == "#":
            break
        if c == ")" and state.in_subshell():
            if statement:
                yield statement, "", name
            statement, name, assigning, target, mode, last = [], None, True, False, "lead", "word"
            state.close_subshell()
            i += 1
            continue
        if c in _SEPARATORS and not _redirects(text, i, i):
            j = i
            while j < n and text[j] in _SEPARATORS:
                j += 1
            op, i, last = text[i:j], j, "op"
            if mode == "pattern":  # `a|b)`: the pattern's alternatives
                continue
            if statement:
                yield statement, op, name
            state.separated(op, line)
            statement, name, assigning, target = [], None, True, False
            mode = "pattern" if state.pattern else "lead"
            continue
        last = "word"
        if mode in ("lead", "for-name") and text.startswith("((", i):
            end = parens.arith_end(i)
            if end > 0:  # (( N++ )), for (( i = 0; ... ))
                state.arithmetic(text[i + 2 : end - 2], f"`{_brief(text[i:end])}` (line {line})")
                mode = "for" if mode == "for-name" else "command"
                i = end
                continue
        if mode == "lead" and c == "(":
            state.enter(_SUBSHELL, line)
            i += 1
            continue
        declaring = name is not None and statement[name][1] in _DECLARE  # declare -a A=(x y)
        if mode in ("lead", "command") and (assigning or declaring):
            array = _ARRAY.match(text, i)
            if array:
                state.array_assignment(array.group(1), line)
                i, state.array = _paren_end(text, array.end(), 1, line)
                if i < 0:
                    break
                mode = "command"
                continue
            if assigning and not target and not _ASSIGNMENT.match(text, i) and not _REDIRECT.match(text, i):
                assigning = False  # the command name (or a reserved word): NAME=value after it is an argument
                state.end_prefix()
        start = i
        stops = ")" if mode == "pattern" or state.in_subshell() else ""
        fields, raw, i = _word(text, i, state, line, stops=stops)
        if mode == "pattern":
            if len(fields) == 1 and _keyword((fields[0], raw, start)) == "esac":
                state.lead((fields[0], raw, start), line)
                mode = "lead"
            elif text.startswith(")", i):
                i += 1
                state.branch()
                mode = "lead"
            continue
        if mode == "for-name":
            if len(fields) == 1:
                state.loop_variable(fields[0], line)
            mode = "for"
            continue
        if mode == "for" or (mode == "case" and raw != "in"):
            continue
        if mode == "case":
            mode, state.pattern = "pattern", True
            continue
        if mode == "lead" and len(fields) == 1:
            led = state.lead((fields[0], raw, start), line)
            if led:
                mode = "lead" if led == "word" else led
                assigning = True
                continue
        if len(fields) == 1 and _keyword((fields[0], raw, start)) == "{" and statement:
            if _is_definition(statement, 0):  # f() {  /  function f {: the body follows
                state.pending_function = _function_name(statement)
                statement, name, assigning = [], None, True
                state.lead((fields[0], raw, start), line)
                mode = "lead"
                continue
        mode = "command"
        found = _ASSIGNMENT.match(raw) if assigning and len(fields) == 1 else None
        if found:
            state.prefix_assign(found, fields[0], line)
        elif name is None and fields:
            redirect = _REDIRECT.match(text, start)
            if target:
                target = False
            elif redirect:
                target = redirect.end() == i  # `> file`: the file is the next word
            else:
                name = len(statement)
        # Only the first field can be NAME=...: words that splitting made are never assignments.
        statement += [(w, raw if k == 0 else "", start) for k, w in enumerate(fields)]
    if statement:
        yield statement, "", name
    if last == "word":
        state.op = ""
    elif last == "op" and state.op not in _CARRIED:  # `cmd &&` goes on on the next line; `cmd;` does not
        state.op = ""


def _redirects(text: str, i: int, start: int) -> bool:
    """The ``&`` at ``i`` belongs to a redirection (``2>&1``, ``&>log``), not a separator."""
    if text[i] != "&":
        return False
    if i > start and text[i - 1] in "<>":
        return True
    return i == start and text.startswith(">", i + 1)


def _word(
    text: str,
    i: int,
    state: _State,
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

    def end_field(delimited: bool = False) -> None:
        """``delimited``: by an IFS character that is no blank, which makes a field even when empty."""
        nonlocal parts, quoted, size
        merged = _merge(parts)
        if merged or quoted or delimited:
            fields.append(Word(merged))
        parts, quoted, size = [], False, 0

    quote = ""
    while i < n:
        c = text[i]
        if (
            not quote
            and not whole
            and (c.isspace() or (c in _SEPARATORS and not _redirects(text, i, start)) or c in stops)
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
                        add(Unknown(_brief(part), splitter, "IFS"))
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


def _expansion(text: str, i: int, state: _State, line: int, depth: int) -> tuple[Word, int]:
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
            state.arithmetic(text[i + 3 : j - 1], f"`{_brief(text[i : j + 1])}` (line {line})")
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
        unset = value is None or value is _UNSET
        if value is not None and not unset and not (default is not None and colon and value.parts == ()):
            return _through(value, name, state, line), end + 1
        if default is not None:
            if depth >= MAX_NESTING:
                raise ShellError(line, f"${{...:-...}} defaults nested more than {MAX_NESTING} deep", LIMITS)
            fields, _, _ = _word(default, 0, state, line, whole=True, depth=depth + 1)
            word = fields[0] if fields else Word(())
            if op == "=":
                state.assign(name, word)
            return _through(word, name, state, line), end + 1
        if value is _UNSET:
            return Word(()), end + 1
        return Word((Unknown(text[i : end + 1], _NOT_ASSIGNED, name),)), end + 1
    found = _NAME.match(text, i + 1)
    if found:
        name = found.group(0)
        end = i + 1 + len(name)
        value = state.value(name)
        if isinstance(value, str):
            return Word((Unknown(text[i:end], value, name),)), end
        if value is _UNSET:
            return Word(()), end
        if value is None:
            return Word((Unknown(text[i:end], _NOT_ASSIGNED, name),)), end
        return _through(value, name, state, line), end
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
