"""A small interpreter of the Cloud Workflows subset infra/schedules.py writes, for tests: a main workflow and
subworkflows (`params`, called by name), steps with assign, call (connectors, subworkflows and sys.log), for,
switch (steps, return, raise), try/except, return, raise and `next: break`, and expressions of string
literals, variables, attribute and `in` tests, comparisons, arithmetic, map and list literals, and the
standard-library functions the program uses (sys.now, sys.get_env, time.format, time.parse, text.substring,
text.replace_all_regex, text.split, text.to_lower, text.url_encode, text.encode, hash.compute_checksum,
base64.encode, json.decode, list.concat, map.get, map.merge, default, len, keys, int, string, get_type),
and assignment to a map's computed key (`m[k]`).

Anything else (an unknown step key, function or connector) fails the test instead of being skipped, so a typo
in the generated program cannot pass; where Workflows documents that it refuses something (a duplicate step
name, a function given the wrong type, time.parse beyond microseconds), so does this. Errors are what
Workflows raises: a connector's failure is a map with `tags` (an HTTP error also has `code`, `message`,
`headers` and `body`), and inside `try` an error of an expression (a missing key, a wrong type) becomes a map
with `tags` [KeyError], [TypeError]... and `message`. Expressions are evaluated as Python after a
literal-aware rewrite of Workflows' spellings (null, true, false); the programs come from this repository,
never from users.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any


class WorkflowRaised(Exception):
    """An error the program raised or a connector returned; uncaught, the execution ends FAILED. `value` is
    what Workflows holds for it: the raised value (a string or a map), or an error map."""

    def __init__(self, value: Any) -> None:
        super().__init__(value)
        self.value = value


def http_error(code: int, message: str) -> WorkflowRaised:
    """What a connector raises for an HTTP error status (Workflows' HttpError)."""
    return WorkflowRaised({"code": code, "message": message, "tags": ["HttpError"], "headers": {},
                           "body": {"error": {"code": code, "message": message}}})


def operation_error(message: str, operation: dict) -> WorkflowRaised:
    """What a connector raises when the long-running operation it waits for fails."""
    return WorkflowRaised({"message": message, "tags": ["OperationError"], "operation": operation})


class _Break(Exception):
    pass


class _Return(Exception):
    def __init__(self, value: Any) -> None:
        self.value = value


# What Workflows tags an expression's error with; an error inside `try` becomes a map with that tag.
_ERROR_TAGS = (KeyError, IndexError, TypeError, ValueError, ZeroDivisionError)
LOG_SEVERITIES = ("DEFAULT", "DEBUG", "INFO", "NOTICE", "WARNING", "ERROR", "CRITICAL", "ALERT", "EMERGENCY")


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


def _map_get(value: Any, keys: Any) -> Any:
    """map.get: the value at `keys` (a key, or a list of keys into nested maps), or null when a key is missing
    or a value on the way is not a map."""
    if isinstance(keys, str):
        keys = [keys]
    if not (isinstance(keys, list) and all(isinstance(k, str) for k in keys)):
        raise TypeError(f"map.get: keys must be a string or a list of strings, got {keys!r}")
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _map_merge(first: Any, second: Any) -> Obj:
    if not (isinstance(first, dict) and isinstance(second, dict)):
        raise TypeError(f"map.merge: maps only, got {type(first).__name__} and {type(second).__name__}")
    return wrap({**first, **second})


def _list_concat(objs: Any, value: Any) -> list:
    if not isinstance(objs, list):
        raise TypeError(f"list.concat: {objs!r} is not a list")
    return wrap([*objs, value])


def _url_encode(source: Any) -> str:
    """text.url_encode: every byte but letters, digits and `.-_` percent-encoded ("~" too, unlike Python's
    quote), e.g. "a/b/c?item=d+e f" -> "a%2Fb%2Fc%3Fitem%3Dd%2Be%20f"."""
    if not isinstance(source, str):
        raise TypeError(f"text.url_encode: {source!r} is not a string")
    return "".join(chr(b) if chr(b).isascii() and (chr(b).isalnum() or chr(b) in ".-_") else f"%{b:02X}"
                   for b in source.encode("utf-8"))


def _strings(function: str, *values: Any) -> None:
    for value in values:
        if not isinstance(value, str):
            raise TypeError(f"{function}: {value!r} is not a string")


def _split(source: Any, separator: Any) -> list[str]:
    _strings("text.split", source, separator)
    return source.split(separator)


def _to_lower(source: Any) -> str:
    _strings("text.to_lower", source)
    return source.lower()


def _substring(source: Any, start: Any, end: Any) -> str:
    _strings("text.substring", source)
    return source[start:end]


def _replace_all_regex(source: Any, pattern: Any, replacement: Any) -> str:
    _strings("text.replace_all_regex", source, pattern, replacement)
    return re.sub(pattern, replacement, source)


def _text_encode(source: Any, charset: Any = "UTF-8") -> bytes:
    _strings("text.encode", source, charset)
    return source.encode(charset)


_CHECKSUMS = ("MD5", "SHA1", "SHA224", "SHA256", "SHA384", "SHA512")


def _compute_checksum(data: Any, algorithm: Any) -> bytes:
    """hash.compute_checksum: bytes only; MD5, SHA1, SHA224, SHA256, SHA384 or SHA512."""
    if not isinstance(data, bytes) or algorithm not in _CHECKSUMS:
        raise TypeError(f"hash.compute_checksum: bytes and one of {_CHECKSUMS}, got {data!r}, {algorithm!r}")
    return hashlib.new(algorithm.lower(), data).digest()


def _base64_encode(data: Any, padding: bool = True) -> str:
    if not isinstance(data, bytes):
        raise TypeError(f"base64.encode: {data!r} is not bytes")
    encoded = base64.b64encode(data).decode("ascii")
    return encoded if padding else encoded.rstrip("=")


def _json_decode(data: Any) -> Any:
    """json.decode: bytes (UTF-8) or a string; ValueError when it is not JSON, TypeError for anything else
    (a map, say: what a connector already decoded)."""
    if isinstance(data, bytes):
        data = data.decode("utf-8")  # UnicodeDecodeError is a ValueError
    if not isinstance(data, str):
        raise TypeError(f"json.decode: bytes or a string, got {type(data).__name__}")
    return wrap(json.loads(data))


def _string(value: Any) -> str:
    """string(): an integer, a double or a boolean (not null, a string, a list or a map)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    raise TypeError(f"string: {value!r} is not an integer, a double or a boolean")


def _int(value: Any) -> int:
    """int(): a string or a double (an integer passes)."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise TypeError(f"int: {value!r} is not a string or a double")
    return int(value)


def _get_type(value: Any) -> str:
    """get_type(): the Workflows name of a value's type."""
    types = ((bool, "bool"), (int, "integer"), (float, "double"), (str, "string"), (bytes, "bytes"),
             (list, "list"), (dict, "map"), (type(None), "null"))
    return next(name for kind, name in types if isinstance(value, kind))


def _keys(value: Any) -> list[str]:
    """keys(): a map's keys."""
    if not isinstance(value, dict):
        raise TypeError(f"keys: {value!r} is not a map")
    return list(value)


def _len(value: Any) -> int:
    if not isinstance(value, list | dict | str):
        raise TypeError(f"len: {value!r} is not a list, a map or a string")
    return len(value)


def _step_names(steps: list, found: list[str]) -> list[str]:
    """Every step name under `steps`, nested ones included."""
    for step in steps:
        ((name, body),) = step.items()
        found.append(name)
        bodies = [body, *(body.get("switch") or []), body.get("for") or {}, body.get("try") or {},
                  body.get("except") or {}]
        for inner in bodies:
            _step_names(inner.get("steps") or [], found)
    return found


class Interpreter:
    """Runs `program` (the parsed YAML) with a clock, an environment and connectors {name: fn(args)}; a
    connector signals an error by raising WorkflowRaised (see http_error)."""

    def __init__(self, program: Mapping[str, Any], *, now: float, env: Mapping[str, str],
                 connectors: Mapping[str, Callable[[dict], Any]]) -> None:
        self.program = program
        self.now = now
        self.env = dict(env)
        self.connectors = dict(connectors)
        self.logs: list[dict] = []
        self.calls: list[tuple[str, dict]] = []
        for name, workflow in program.items():
            assert set(workflow) <= {"steps", "params"}, (name, workflow.keys())
            # Workflows refuses a deployment that repeats a step name within a (sub)workflow.
            names = _step_names(workflow["steps"], [])
            assert len(names) == len(set(names)), f"{name}: repeated step names {sorted(names)}"

    def run(self) -> Any:
        return self._subworkflow("main", {})

    def _subworkflow(self, name: str, args: dict) -> Any:
        workflow = self.program[name]
        params = {}
        for param in workflow.get("params", []):
            ((key, default),) = param.items() if isinstance(param, dict) else ((param, ...),)
            params[key] = default
        assert set(args) <= set(params), f"{name}: unknown arguments {set(args) - set(params)}"
        missing = [key for key, default in params.items() if default is ... and key not in args]
        assert not missing, f"{name}: missing arguments {missing}"
        # Its own variables: the caller's are out of reach.
        variables = {**{k: v for k, v in params.items() if v is not ...}, **args}
        try:
            self._steps(workflow["steps"], variables)
        except _Return as done:
            return unwrap(done.value)
        return None

    # --- steps

    def _steps(self, steps: list, variables: dict) -> None:
        for step in steps:
            ((name, body),) = step.items()
            self._step(name, body, variables)

    def _step(self, name: str, body: dict, variables: dict) -> None:
        known = {"assign", "call", "args", "result", "for", "switch", "return", "raise", "next", "steps",
                 "try", "except"}
        assert set(body) <= known, f"step {name}: unknown keys {set(body) - known}"
        if "try" in body:
            self._try(name, body, variables)
            return
        assert "except" not in body, f"step {name}: except without try"
        if "assign" in body:
            for item in body["assign"]:
                ((var, value),) = item.items()
                self._assign(var, self._value(value, variables), variables)
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

    def _assign(self, target: str, value: Any, variables: dict) -> None:
        """`name: value`, or `name[key expression]: value` into an existing map (Workflows' only way to set a
        key a program computes)."""
        found = re.fullmatch(r"(\w+)\[(.+)\]", target)
        if found is None:
            variables[target] = value
            return
        into = variables[found[1]]
        key = self.evaluate(found[2], variables)
        assert isinstance(into, dict) and isinstance(key, str), f"assign {target}: a map and a string key"
        into[key] = value

    def _try(self, name: str, body: dict, variables: dict) -> None:
        assert set(body) == {"try", "except"}, f"step {name}: try takes except (and nothing else here)"
        handler = body["except"]
        assert set(handler) == {"as", "steps"}, f"step {name}: except {handler.keys()}"
        try:
            self._step(name, body["try"], variables)
            return
        except WorkflowRaised as raised:
            error = raised.value
        except _ERROR_TAGS as exc:
            # Its Workflows kind: a JSONDecodeError is a ValueError.
            tag = next(kind.__name__ for kind in _ERROR_TAGS if isinstance(exc, kind))
            error = {"message": str(exc), "tags": [tag]}
        before = set(variables)
        variables[handler["as"]] = wrap(error)
        self._steps(handler["steps"], variables)
        self._drop_new(variables, before)

    @staticmethod
    def _drop_new(variables: dict, before: set) -> None:
        """A variable first assigned inside a loop body (or an except block) does not outlive it: a program
        must declare before the block what it reads after it."""
        for var in set(variables) - before:
            del variables[var]

    def _for(self, spec: dict, variables: dict) -> None:
        assert set(spec) == {"value", "in", "steps"}, spec.keys()
        items = self._value(spec["in"], variables)
        assert isinstance(items, list), f"for: in {items!r} is not a list"
        before = set(variables)
        for item in items:
            variables[spec["value"]] = item
            try:
                self._steps(spec["steps"], variables)
            except _Break:
                break
            finally:
                self._drop_new(variables, before)

    def _switch(self, conditions: list, variables: dict) -> None:
        for condition in conditions:
            assert set(condition) <= {"condition", "steps", "return", "raise", "next", "assign"}
            test = self._value(condition["condition"], variables)
            assert isinstance(test, bool), f"condition {condition['condition']!r} is {test!r}, not a boolean"
            if test:
                self._step("switch", {k: v for k, v in condition.items() if k != "condition"}, variables)
                return

    def _call(self, name: str, args: dict) -> Any:
        if name in self.program and name != "main":
            return self._subworkflow(name, dict(args))
        self.calls.append((name, unwrap(args)))
        if name == "sys.log":
            self._log(unwrap(args))
            return None
        assert name in self.connectors, f"no connector {name}"
        return self.connectors[name](unwrap(args))

    def _log(self, args: dict) -> None:
        assert set(args) <= {"text", "json", "data", "severity", "timeout"}, args.keys()
        assert len(set(args) & {"text", "json", "data"}) == 1, f"sys.log: one of text, json, data: {args}"
        assert args.get("severity", "DEFAULT") in LOG_SEVERITIES, args
        assert "text" not in args or isinstance(args["text"], str), args
        self.logs.append(args)

    # --- values

    def _value(self, value: Any, variables: dict) -> Any:
        if isinstance(value, dict):
            return Obj({k: self._value(v, variables) for k, v in value.items()})
        if isinstance(value, list):
            return [self._value(v, variables) for v in value]
        if isinstance(value, str) and value.startswith("${") and value.endswith("}"):
            return wrap(self.evaluate(value[2:-1], variables))
        assert not (isinstance(value, str) and "${" in value), f"a partial expression stays literal: {value}"
        return value

    def evaluate(self, expression: str, variables: dict) -> Any:
        def get_env(name: str) -> str:
            assert name in self.env, f"no workflow environment variable {name}"
            return self.env[name]

        namespace = {
            "sys": SimpleNamespace(now=lambda: self.now, get_env=get_env),
            "time": SimpleNamespace(format=_format, parse=_parse),
            "text": SimpleNamespace(substring=_substring, replace_all_regex=_replace_all_regex, split=_split,
                                    to_lower=_to_lower, url_encode=_url_encode, encode=_text_encode),
            "json": SimpleNamespace(decode=_json_decode),
            "hash": SimpleNamespace(compute_checksum=_compute_checksum),
            "base64": SimpleNamespace(encode=_base64_encode),
            "list": SimpleNamespace(concat=_list_concat),
            "map": SimpleNamespace(get=_map_get, merge=_map_merge),
            "default": lambda value, fallback: fallback if value is None else value,
            "len": _len,
            "keys": _keys,
            "get_type": _get_type,
            "int": _int,
            "string": _string,
            **variables,
        }
        return eval(to_python(expression), {"__builtins__": {}}, namespace)  # noqa: S307 - test-only, our own
