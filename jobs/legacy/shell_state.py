"""What the statement being read does to the variables (``shell_vars``): reserved words that open and close
compound commands, a command's NAME=value prefix, the operator that joins it to the next, and the builtins
(``unset``, ``export``, ``read``, ``.``, ...) and function calls that set variables."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from jobs.legacy.shell_vars import FUNCTION, GROUP, SUBSHELL, Variables
from jobs.legacy.shell_words import (
    ASSIGNMENT,
    MAX_CALL_MARKS,
    NAME,
    UNSET,
    VARIABLE_NAME,
    Word,
    brief,
    unknown_value,
)

DECLARE = ("export", "readonly", "declare", "local", "typeset")
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
    (".", "source", "eval", "unset", *DECLARE, "read", "mapfile", "readarray", "getopts", "printf", "let")
)
# What a statement's neighbour operator says of it: after && or || it may not run; in a pipeline or in the
# background it runs in a subshell (bash's lastpipe aside): either way its assignments are not followed.
_JOINED = {"&&": "after `&&`", "||": "after `||`", "|": "in a pipeline", "|&": "in a pipeline"}
# Arithmetic that assigns: `N=1`, `N += 2`, `a[i] = 3`, `N++`, `--N` (not `==`, `<=`, `>=`, `!=`).
_ARITH_SET = re.compile(
    rf"(?:\+\+|--)\s*({NAME})|(?<![\w$])({NAME})(?:\[[^\]]{{0,100}}\])?\s*(?:\+\+|--|(?:[-+*/%&^|]|<<|>>)?=(?!=))"
)

# Reserved words that open a compound command whose branches may or may not run, and those that close one.
# `then`/`do`/`!` lead a command inside; `for`/`select`/`case` headers hold none (case: up to its `in`).
_OPENERS = ("if", "while", "until", "for", "select", "case")
_LEADERS = ("then", "do", "!")
_BRANCHES = ("else", "elif")
_CLOSERS = ("fi", "done", "esac", "}")
_HEADERS = {"for": "for-name", "select": "for-name", "case": "case"}

# Before a statement, the operator that joins it to the one before; after it, the one that follows.
_BEFORE = _JOINED
_AFTER = {"|": "in a pipeline", "|&": "in a pipeline", "&": "in the background"}


@dataclass
class State(Variables):
    """The variables set so far (``Variables``), and what the statement being read may do to them."""

    sourced: str = ""  # the `.`/`eval` whose functions a later command may be
    op: str = ""  # the operator before the statement being read
    pattern: bool = False  # a case pattern comes next
    array: int = 0  # parentheses of an array assignment still open at the end of the last line
    header: str = ""  # the `for`/`select` whose variable comes next
    pending_function: str = ""  # `f()` on a line of its own: the `{` on the next opens its body
    prefix: dict[str, Word | None] = field(default_factory=dict)  # NAME=value before a command: old values
    prefixed: dict[str, Word | None] = field(default_factory=dict)  # ... and theirs, once a command came
    marks: int = MAX_CALL_MARKS  # what function calls may still mark, one variable at a time

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
        return bool(self.open) and self.open[-1].kind == SUBSHELL

    def lead(self, word: tuple[Word, str, int], line: int) -> str:
        """Track a word at the start of a statement: "" when a simple command starts with it, "word" when it
        is a reserved word (the statement goes on after it), "for-name"/"case" when a header that holds no
        command follows (`for x in ...`, `case $x in`)."""
        keyword = plain_text(word)
        led = "word"
        if keyword in _OPENERS:
            self.enter(f"`{keyword}`", line)
            self.header = keyword
            led = _HEADERS.get(keyword, "word")
        elif keyword == "{":
            function, self.pending_function = self.pending_function, ""
            self.enter(FUNCTION if function else GROUP, line, function)
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
        elif is_definition(words, at):
            self.pending_function = function_name(words)
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
            if name in DECLARE:
                return []  # `export A B`: names only
        k = 0
        while k < len(words) and ASSIGNMENT.match(words[k][1]):
            k += 1
        return [(w, offset) for w, _, offset in words[k:]]

    def _effects(self, name: str | None, words: list[tuple[Word, str, int]], at: int, line: int) -> None:
        """What builtins and functions do to variables: followed where sh's result is certain (``unset``,
        ``export``), else the variables they set are unknown, and all of them when any could be set."""
        may_set = self.functions if name is None else name in _EFFECTS or name in self.functions
        if not may_set and not self.sourced:
            return  # most commands: nothing to do, nothing to describe
        args = words[at + 1 :]
        why = f"`{brief(' '.join(w.show() for w, _, _ in words[at:]))}` (line {line})"
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
                    elif VARIABLE_NAME.fullmatch(target):
                        self.assign(target, UNSET, "unset")
        elif name in DECLARE:
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
            found = ASSIGNMENT.match(raw)
            name = found.group(1) if found else word.literal
            if name is None:  # export "$NAME": which variable only the shell knows
                self._clobber(f"possibly set by {why}")
                continue
            if not VARIABLE_NAME.fullmatch(name) or name in self.fixed:
                continue
            if found:
                value = self._value_of(name, found, word, line)
                self.assign(name, unknown_value(name, attribute) if attribute else value)
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
            elif found := VARIABLE_NAME.match(name):  # a[1]: the array a
                self._mark(found.group(), reason)

    def arithmetic(self, text: str, why: str) -> None:
        """``(( N++ ))``, ``let N=2``, ``$(( N = 1 ))``: the variables it assigns are unknown."""
        reason = f"set by {why}"
        for found in _ARITH_SET.finditer(text):
            self._mark(found.group(1) or found.group(2), reason)

    def loop_variable(self, word: Word, line: int) -> None:
        if word.literal and VARIABLE_NAME.fullmatch(word.literal):
            self._mark(word.literal, f"set by `{self.header}` (line {line})")

    def array_assignment(self, name: str, line: int) -> None:
        self._mark(name, f"an array assignment (line {line})")


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


def is_definition(words: list[tuple[Word, str, int]], at: int) -> bool:
    """`f()` or `function f` on a line of its own: the body's `{` comes on the next."""
    raws = [raw for _, raw, _ in words[at:]]
    if raws[0] == "function":
        return len(raws) == 2
    return (len(raws) == 1 and raws[0].endswith("()")) or (len(raws) == 2 and raws[1] == "()")


def function_name(words: list[tuple[Word, str, int]]) -> str:
    raws = [raw for _, raw, _ in words]
    if raws and raws[0] == "function":
        raws = raws[1:]
    return raws[0].removesuffix("()") if raws else ""


def plain_text(word: tuple[Word, str, int]) -> str:
    """The word, when it is written plainly (a reserved word is never quoted or expanded)."""
    return word[1] if word[0].literal == word[1] else ""
