"""The variables a legacy submit script sets, as far as the script alone determines them: their values, the
if/case/loop/function/subshell blocks whose assignments may not stand once the block closes, and what makes a
variable one only the running shell knows."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field, replace

from jobs.legacy.shell_words import (
    LIMITS,
    MAX_EXPANDED_CHARS,
    MAX_NESTING,
    NOT_ASSIGNED,
    UNSET,
    Part,
    ShellError,
    Unknown,
    Word,
    merge,
    unknown_value,
)

_BLANKS = re.compile(r"[ \t\n]+")  # the default IFS, which splits unquoted expansions into words
FUNCTION = "a function"
GROUP = "a { } group"  # runs in this shell: its assignments stand, unless the group itself may not run
SUBSHELL = "a subshell"  # ( ... ): nothing assigned inside outlives it


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


class Growth:
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
class Variables:
    """The variables set so far and the compound commands (if/case/loops/functions) the parser is in."""

    env: dict[str, Word]
    fixed: frozenset[str]  # given by the caller: the script's assignments to them are skipped
    growth: Growth
    open: list[_Compound] = field(default_factory=list)
    missing: str = ""  # why a variable not in env is unknown: set by a `.`/`eval` (until assigned again)
    poison: str = ""  # why every variable is unknown for good (`declare -n`: an assignment may be another's)
    attrs: dict[str, str] = field(default_factory=dict)  # name -> why every later assignment to it is unknown
    functions: dict[str, _Function] = field(default_factory=dict)
    condition: str = ""  # the statement may not run, or runs in a subshell: "after `&&` (line 3)"
    kept: tuple[tuple[str, ...], int] | None = None  # a { } group just closed: what it assigned, its line
    ifs: tuple[Word | None, re.Pattern[str] | str | None] = (None, _BLANKS)  # IFS's value, how it splits

    def enter(self, kind: str, line: int, function: str = "") -> None:
        # Each close hands the names assigned inside to the enclosing block: bounded depth, bounded work.
        if len(self.open) >= MAX_NESTING:
            raise ShellError(line, f"if/case/loops/functions nested more than {MAX_NESTING} deep", LIMITS)
        self.open.append(_Compound(kind, line, condition=self.condition, function=function))

    def value(self, name: str) -> Word | str | None:
        """A variable's value; ``UNSET`` when the script unset it; None when the script never assigned it;
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
        if value is None or value is UNSET or isinstance(value, str):  # (never a reason: see value())
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
            old = unknown_value(name, old)
        elif old is None:
            old = unknown_value(name, NOT_ASSIGNED)
        return Word(merge([*through(old, name, self, line).parts, *value.parts]))

    def assign(self, name: str, value: Word, verb: str = "assigned") -> None:
        if name in self.fixed:
            return
        if name in self.attrs:
            value = unknown_value(name, self.attrs[name])
        elif self.condition:
            value = unknown_value(name, f"{verb} {self.condition}")
        self._set(name, value)

    def _mark(self, name: str, reason: str) -> None:
        """NAME is set to what only the running shell knows."""
        if name not in self.fixed:
            self._set(name, unknown_value(name, reason))

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
            if compound.kind == FUNCTION and not compound.clobbers:
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
        if compound.kind == SUBSHELL:  # nothing assigned in ( ... ) outlives it
            self._restore(compound)
            return
        outer = self.open[-1] if self.open else None
        keep = compound.kind == GROUP and not compound.condition
        if compound.kind == GROUP:
            reason = f"assigned {compound.condition}"
        else:
            reason = f"assigned inside {compound.kind} (line {compound.line})"
        for name, old in compound.before.items():
            if outer is not None:  # the enclosing block's value from before, not this block's
                outer.before.setdefault(name, old)
                outer.dirty.add(name)
            if not keep:
                self.env[name] = unknown_value(name, reason)
        if compound.function:
            names = None if compound.clobbers else tuple(compound.before)
            self.functions[compound.function] = _Function(compound.line, names)
        self.kept = (tuple(compound.before), compound.line) if keep else None


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


def through(value: Word, name: str, state: Variables, line: int) -> Word:
    """A variable's value, its unknown parts marked as coming through it unless an inner variable is named;
    charged to the script's expansion budget, since each use copies it into a word."""
    state.growth.spend(value, line)
    if not value.unknowns:
        return value
    return Word(tuple(replace(p, name=p.name or name) if isinstance(p, Unknown) else p for p in value.parts))
