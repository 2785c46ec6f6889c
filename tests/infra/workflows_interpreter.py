"""A small interpreter of the Cloud Workflows subset infra/schedules.py writes, for tests: steps with assign,
call (connectors and sys.log), for, switch (steps, return, raise), return, raise and `next: break`, and
expressions of string literals, variables, attribute and `in` tests, comparisons, arithmetic, and the
standard-library functions the program uses (sys.now, sys.get_env, time.format, time.parse, text.substring,
text.replace_all_regex, map.get, default, len).

Anything else (an unknown step key, function or connector) fails the test instead of being skipped, so a typo
in the generated program cannot pass. Expressions are evaluated as Python after a literal-aware rewrite of
Workflows' spellings (null, true, false); the programs come from this repository, never from users.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any


class WorkflowRaised(Exception):
    """The program raised (an execution that ends FAILED)."""


class _Break(Exception):
    pass


class _Return(Exception):
    def __init__(self, value: Any) -> None:
        self.value = value


class Obj(dict):
    """A Workflows map: `job.name` and `"name" in job` both work."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError:
            raise KeyError(f"map has no key {key!r}") from None


def wrap(value: Any) -> Any:
    if isinstance(value, dict):
        return Obj({k: wrap(v) for k, v in value.items()})
    if isinstance(value, list):
        return [wrap(v) for v in value]
    return value


def unwrap(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: unwrap(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unwrap(v) for v in value]
    return value


_STRING = re.compile(r'("(?:\\.|[^"\\])*")')
_WORDS = {"null": "None", "true": "True", "false": "False"}


def to_python(expression: str) -> str:
    """Workflows spellings outside string literals -> Python's (the odd pieces of the split are literals)."""
    pieces = _STRING.split(expression)
    return "".join(piece if i % 2 else re.sub(r"\b(null|true|false)\b", lambda m: _WORDS[m[1]], piece)
                   for i, piece in enumerate(pieces))


def _format(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


# time.parse takes RFC 3339 with at most microsecond precision (Workflows' documentation): Vertex AI's own
# timestamps may carry nine fractional digits, which the real function refuses, so this one does too.
_RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,6})?(Z|[+-]\d\d:\d\d)")


def _parse(text: str) -> float:
    if not isinstance(text, str) or not _RFC3339.fullmatch(text):
        raise ValueError(f"time.parse: {text!r} is not an RFC 3339 time with at most microsecond precision")
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _map_get(value: Any, key: str) -> Any:
    """map.get: the key's value, or null when it is missing or ``value`` is not a map."""
    return value.get(key) if isinstance(value, dict) else None


class Interpreter:
    """Runs `program` (the parsed YAML) with a clock, an environment and connectors {name: fn(args)}."""

    def __init__(self, program: Mapping[str, Any], *, now: float, env: Mapping[str, str],
                 connectors: Mapping[str, Callable[[dict], Any]]) -> None:
        self.program = program
        self.now = now
        self.env = dict(env)
        self.connectors = dict(connectors)
        self.logs: list[dict] = []
        self.calls: list[tuple[str, dict]] = []

    def run(self) -> Any:
        main = self.program["main"]
        assert set(main) <= {"steps", "params"}, main.keys()
        variables: dict[str, Any] = {}
        try:
            self._steps(main["steps"], variables)
        except _Return as done:
            return unwrap(done.value)
        return None

    # --- steps

    def _steps(self, steps: list, variables: dict) -> None:
        for step in steps:
            ((name, body),) = step.items()
            self._step(name, body, variables)

    def _step(self, name: str, body: dict, variables: dict) -> None:
        known = {"assign", "call", "args", "result", "for", "switch", "return", "raise", "next", "steps"}
        assert set(body) <= known, f"step {name}: unknown keys {set(body) - known}"
        if "assign" in body:
            for item in body["assign"]:
                ((var, value),) = item.items()
                variables[var] = self._value(value, variables)
        if "call" in body:
            result = self._call(body["call"], self._value(body.get("args", {}), variables))
            if "result" in body:
                variables[body["result"]] = wrap(result)
        if "for" in body:
            self._for(body["for"], variables)
        if "switch" in body:
            self._switch(body["switch"], variables)
        if "steps" in body:
            self._steps(body["steps"], variables)
        if "raise" in body:
            raise WorkflowRaised(self._value(body["raise"], variables))
        if "return" in body:
            raise _Return(self._value(body["return"], variables))
        if body.get("next") == "break":
            raise _Break()
        assert body.get("next") in (None, "break"), f"step {name}: next {body.get('next')!r}"

    def _for(self, spec: dict, variables: dict) -> None:
        assert set(spec) == {"value", "in", "steps"}, spec.keys()
        for item in self._value(spec["in"], variables):
            variables[spec["value"]] = item
            try:
                self._steps(spec["steps"], variables)
            except _Break:
                break

    def _switch(self, conditions: list, variables: dict) -> None:
        for condition in conditions:
            assert set(condition) <= {"condition", "steps", "return", "raise", "next", "assign"}
            if self._value(condition["condition"], variables):
                self._step("switch", {k: v for k, v in condition.items() if k != "condition"}, variables)
                return

    def _call(self, name: str, args: dict) -> Any:
        self.calls.append((name, unwrap(args)))
        if name == "sys.log":
            self.logs.append(unwrap(args))
            return None
        assert name in self.connectors, f"no connector {name}"
        return self.connectors[name](unwrap(args))

    # --- values

    def _value(self, value: Any, variables: dict) -> Any:
        if isinstance(value, dict):
            return Obj({k: self._value(v, variables) for k, v in value.items()})
        if isinstance(value, list):
            return [self._value(v, variables) for v in value]
        if isinstance(value, str) and value.startswith("${") and value.endswith("}"):
            return self.evaluate(value[2:-1], variables)
        assert not (isinstance(value, str) and "${" in value), f"a partial expression stays literal: {value}"
        return value

    def evaluate(self, expression: str, variables: dict) -> Any:
        def get_env(name: str) -> str:
            assert name in self.env, f"no workflow environment variable {name}"
            return self.env[name]

        namespace = {
            "sys": SimpleNamespace(now=lambda: self.now, get_env=get_env),
            "time": SimpleNamespace(format=_format, parse=_parse),
            "text": SimpleNamespace(substring=lambda s, a, b: s[a:b],
                                    replace_all_regex=lambda s, p, r: re.sub(p, r, s)),
            "map": SimpleNamespace(get=_map_get),
            "default": lambda value, fallback: fallback if value is None else value,
            "len": len,
            **variables,
        }
        return eval(to_python(expression), {"__builtins__": {}}, namespace)  # noqa: S307 - test-only, our own
