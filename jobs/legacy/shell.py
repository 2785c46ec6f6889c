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

This module splits each logical line into statements and gives the commands; the rest of the reader is
``shell_lines`` (logical lines, here-documents, quotes), ``shell_words`` (``Word``, ``Unknown``,
``ShellError``, the limits), ``shell_vars`` (the variables, and the blocks that undo them), ``shell_state``
(what a statement does to them) and ``shell_expand`` (one word expanded).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from jobs.legacy.shell_expand import expand_word
from jobs.legacy.shell_lines import SEPARATORS, Parens, logical_lines, paren_end, redirects
from jobs.legacy.shell_state import DECLARE, State, function_name, is_definition, plain_text
from jobs.legacy.shell_vars import SUBSHELL, Growth
from jobs.legacy.shell_words import ASSIGNMENT, NAME, Word, brief

_ARRAY = re.compile(rf"({NAME})\+?=\(")  # A=(x y): an array, whose elements convert does not follow
_CARRIED = ("&&", "||", "|", "|&")  # a line that ends with one goes on on the next
# `1>`, `2>&1`, `>>`, `<`, `&>`: a word that redirects names no command (its target is the next word unless
# written on it).
_REDIRECT = re.compile(r"\d*(?:<<-?|<<<|>>|<>|>\||>&|<&|&>>|&>|>|<)")


@dataclass
class Command:
    words: list[Word]
    line: int
    lines: list[int] = field(default_factory=list)  # the physical line of each word


@dataclass
class Script:
    commands: list[Command] = field(default_factory=list)


def parse(text: str, variables: dict[str, str] | None = None) -> Script:
    """Every simple command of the script, words expanded with the assignments made before it."""
    given = variables or {}
    state = State({k: Word((v,)) for k, v in given.items()}, frozenset(given), Growth())
    script = Script()
    for line, text_line, breaks in logical_lines(text):
        for words, after, name in _statements(text_line, state, line):
            words = state.command(words, line, after, name)
            if words:
                lines = [line + bisect.bisect_right(breaks, offset) for _, offset in words]
                script.commands.append(Command([w for w, _ in words], line, lines))
    return script


def _statements(
    text: str, state: State, line: int
) -> Iterator[tuple[list[tuple[Word, str, int]], str, int | None]]:
    """The simple commands of one logical line, one at a time and each word expanded only once the words
    before it took effect (`A=1; echo $A`, `else echo $A`, `A=1 B=$A`): (words as (expanded word, raw text up
    to the first expansion, its offset), the operator after it, where its command name is)."""
    statement: list[tuple[Word, str, int]] = []
    name: int | None = None  # the index of the command name in the statement
    assigning, target = True, False  # still in the NAME=value prefix; the next word is a redirection's
    last = ""  # what the line ends with: an operator or a word
    i, n = 0, len(text)
    parens = Parens(text)
    if state.array:  # an array assignment goes on from the line before
        i, state.array = paren_end(text, 0, state.array, line)
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
        if c in SEPARATORS and not redirects(text, i, i):
            j = i
            while j < n and text[j] in SEPARATORS:
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
                state.arithmetic(text[i + 2 : end - 2], f"`{brief(text[i:end])}` (line {line})")
                mode = "for" if mode == "for-name" else "command"
                i = end
                continue
        if mode == "lead" and c == "(":
            state.enter(SUBSHELL, line)
            i += 1
            continue
        declaring = name is not None and statement[name][1] in DECLARE  # declare -a A=(x y)
        if mode in ("lead", "command") and (assigning or declaring):
            array = _ARRAY.match(text, i)
            if array:
                state.array_assignment(array.group(1), line)
                i, state.array = paren_end(text, array.end(), 1, line)
                if i < 0:
                    break
                mode = "command"
                continue
            if assigning and not target and not ASSIGNMENT.match(text, i) and not _REDIRECT.match(text, i):
                assigning = False  # the command name (or a reserved word): NAME=value after it is an argument
                state.end_prefix()
        start = i
        stops = ")" if mode == "pattern" or state.in_subshell() else ""
        fields, raw, i = expand_word(text, i, state, line, stops=stops)
        if mode == "pattern":
            if len(fields) == 1 and plain_text((fields[0], raw, start)) == "esac":
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
        if len(fields) == 1 and plain_text((fields[0], raw, start)) == "{" and statement:
            if is_definition(statement, 0):  # f() {  /  function f {: the body follows
                state.pending_function = function_name(statement)
                statement, name, assigning = [], None, True
                state.lead((fields[0], raw, start), line)
                mode = "lead"
                continue
        mode = "command"
        found = ASSIGNMENT.match(raw) if assigning and len(fields) == 1 else None
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
