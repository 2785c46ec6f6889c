"""Requests and responses: a request body -> the signature's batched NumPy inputs, its outputs -> one JSON
prediction per instance. No TensorFlow and no HTTP here (serving.app does HTTP, serving.model TensorFlow).

The request is Vertex AI's: ``{"instances": [...], "parameters": {"signature": NAME}}`` (the signature
defaults to ``serving_default``; ``GET`` on the health route lists them). Each instance is an object keyed by
the signature's input names, or, for a one-input signature, the bare value. A string input takes a JSON
string (UTF-8) or ``{"b64": "..."}`` for raw bytes (an image's); numbers and booleans are checked against the
input's dtype, nested lists against its shape. The response is ``{"predictions": [...]}``, one per instance:
an object keyed by output name (the bare value for a one-output signature), strings as JSON strings, or
``{"b64": ...}`` where they are not UTF-8. A refused request is a :class:`RequestError`: one line naming the
field, the problem and what is allowed.
"""

from __future__ import annotations

import base64
import functools
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from trainer.contract import BYTES_SUFFIX, TINY_PNG_B64
from trainer.contract import example_instance as contract_example

DEFAULT_SIGNATURE = "serving_default"
PARAMETERS = ("signature",)  # what "parameters" may hold
MAX_BODY_BYTES = 1_500_000  # Vertex AI's online prediction payload limit ("1.5 MB"): no larger body arrives
MAX_INSTANCES = 1000  # instances in one request: each is one row of one batch through the model
# Pixels the images of one request may declare (image_classifier.decoding.image_pixels): one 48 MP
# photo, not a decompression bomb (a 1 MB PNG can declare 20000 x 20000 pixels, 1.2 GB decoded as RGB).
MAX_REQUEST_PIXELS = 50_000_000
# The example and warm-up value of a *_bytes input (trainer.contract), as bytes.
TINY_PNG = base64.b64decode(TINY_PNG_B64)


class RequestError(ValueError):
    """A refused request (HTTP 400, or the status the handler gives it): ``str()`` is one line naming the
    field, the problem and what is allowed."""

    def __init__(self, field: str, problem: str, allowed: str = ""):
        super().__init__(f"{field}: {problem}" + (f"; allowed: {allowed}" if allowed else ""))
        self.field = field



# --- signatures: what a request must send (serving.model reads them from the SavedModel) ---------------


@dataclass(frozen=True)
class InputSpec:
    """One input of a signature: its name, TensorFlow dtype name and shape (the first dimension the batch)."""

    name: str
    dtype: str  # "string", "int64", "float32", "bool", ...
    shape: tuple[int | None, ...]

    def describe(self) -> str:
        dims = ", ".join("N" if i == 0 else ("?" if d is None else str(d)) for i, d in enumerate(self.shape))
        return f"{self.dtype} [{dims}]"


@dataclass(frozen=True)
class Signature:
    name: str
    inputs: tuple[InputSpec, ...]  # sorted by name
    outputs: tuple[str, ...]  # sorted
    call: Callable[[dict[str, Any]], dict[str, Any]]  # {input: numpy array} -> {output: numpy array}

    def describe(self) -> dict:
        return {"inputs": {i.name: i.describe() for i in self.inputs}, "outputs": list(self.outputs)}


# --- requests: JSON in, NumPy columns out ----------------------------------------------------------------


def _not_json(constant: str):
    raise RequestError("body", f"{constant} is not JSON", "finite numbers")


def parse_body(body: bytes) -> dict:
    """The request body as a JSON object with ``instances`` (and optionally ``parameters``)."""
    try:
        payload = json.loads(body, parse_constant=_not_json)
    except RecursionError:
        raise RequestError("body", "JSON nested too deeply", "instances of the signature's shapes") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an int of more than 4300 digits
        if isinstance(exc, RequestError):
            raise
        reason = " ".join(str(exc).split())[:200]
        raise RequestError("body", f"not JSON ({reason})", '{"instances": [...]}') from None
    if not isinstance(payload, dict):
        raise RequestError("body", f"a JSON {_kind(payload)}, not an object", '{"instances": [...]}')
    unknown = sorted(set(payload) - {"instances", "parameters"})
    if unknown:
        raise RequestError(unknown[0][:60], "unknown field", "instances, parameters")
    if "instances" not in payload:
        raise RequestError("instances", "missing", f"a list of 1 to {MAX_INSTANCES} instances")
    return payload


def read_request(payload: Mapping, signatures: Mapping[str, Signature]) -> tuple[Signature, dict, int]:
    """(signature, {input name: NumPy array}, number of instances) for a parsed body."""
    parameters = payload.get("parameters", {})
    if parameters is None:
        parameters = {}
    if not isinstance(parameters, dict):
        raise RequestError("parameters", f"a JSON {_kind(parameters)}", '{"signature": NAME}')
    unknown = sorted(set(parameters) - set(PARAMETERS))
    if unknown:
        raise RequestError(f"parameters.{unknown[0][:60]}", "unknown parameter", ", ".join(PARAMETERS))
    name = parameters.get("signature", DEFAULT_SIGNATURE)
    if not isinstance(name, str) or name not in signatures:
        raise RequestError("parameters.signature", f"no signature {_short(name)}",
                           ", ".join(sorted(signatures)))
    signature = signatures[name]
    instances = payload["instances"]
    if not isinstance(instances, list) or not 1 <= len(instances) <= MAX_INSTANCES:
        got = f"{len(instances)} instances" if isinstance(instances, list) else f"a JSON {_kind(instances)}"
        raise RequestError("instances", got, f"a list of 1 to {MAX_INSTANCES} instances")
    rows = [_instance(value, signature, f"instances[{i}]") for i, value in enumerate(instances)]
    columns = {spec.name: _stack([row[spec.name] for row in rows], spec) for spec in signature.inputs}
    _check_pixels(columns, signature)
    return signature, columns, len(instances)


def _instance(value: Any, signature: Signature, field: str) -> dict[str, Any]:
    """One instance -> {input name: its value, converted}. A one-input signature also takes the bare value
    (an object with exactly that input's key is the keyed form; ``{"b64": ...}`` is a bare bytes value)."""
    names = [spec.name for spec in signature.inputs]
    keyed = isinstance(value, dict) and not _is_b64(value)
    if len(names) == 1 and not (keyed and set(value) == set(names)):
        if keyed:
            got = f"unknown input {_short(sorted(value)[0])}" if value else "an empty object"
            raise RequestError(field, got, f"{names[0]}, or its bare value")
        return {names[0]: _value(value, signature.inputs[0], field, 1)}
    if not keyed:
        got = "a bare value" if _is_b64(value) else f"a JSON {_kind(value)}"
        raise RequestError(field, got, "an object with " + ", ".join(names))
    unknown = sorted(set(value) - set(names))
    if unknown:
        raise RequestError(f"{field}.{unknown[0][:60]}", "unknown input", ", ".join(names))
    missing = [name for name in names if name not in value]
    if missing:
        raise RequestError(f"{field}.{missing[0]}", "missing", "an object with " + ", ".join(names))
    return {spec.name: _value(value[spec.name], spec, f"{field}.{spec.name}", 1) for spec in signature.inputs}


def _value(value: Any, spec: InputSpec, field: str, axis: int) -> Any:
    """A value of ``spec`` from axis ``axis`` on: a leaf converted to its Python type, or nested lists."""
    if axis < len(spec.shape):
        size = spec.shape[axis]
        if not isinstance(value, list) or (size is not None and len(value) != size):
            got = f"{len(value)} values" if isinstance(value, list) else f"a JSON {_kind(value)}"
            raise RequestError(field, got, f"{spec.describe()}: a list of {'any' if size is None else size} "
                                           "values here")
        items = [_value(v, spec, f"{field}[{i}]", axis + 1) for i, v in enumerate(value)]
        if any(_dims(item) != _dims(items[0]) for item in items):
            raise RequestError(field, "rows of different lengths", f"{spec.describe()}: a rectangular list")
        return items
    return _leaf(value, spec, field)


def _leaf(value: Any, spec: InputSpec, field: str) -> Any:
    kind = spec.dtype
    if kind == "string":
        if isinstance(value, str):
            return value.encode("utf-8", "surrogatepass")
        if _is_b64(value) and isinstance(value["b64"], str):
            try:
                return base64.b64decode(value["b64"], validate=True)
            except ValueError:
                raise RequestError(f"{field}.b64", "not base64", "standard base64 (RFC 4648)") from None
        raise RequestError(field, f"a JSON {_kind(value)}", 'a string, or {"b64": BASE64} for bytes')
    if kind == "bool":
        if isinstance(value, bool):
            return value
        raise RequestError(field, f"a JSON {_kind(value)}", "true or false")
    limits = _limits(kind)
    if limits is None:
        raise RequestError(field, f"the input is {kind}, which this server cannot fill",
                           "string, bool, integer and float inputs")
    low, high, integral = limits
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if integral:
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # Vertex AI may pass a whole number as 5.0 (JSON numbers are doubles there)
        if number and isinstance(value, int) and low <= value <= high:
            return value
        raise RequestError(field, f"got {_short(value)}", f"an integer in {low}..{high} ({kind})")
    # An int compares with the largest float exactly (a 400-digit one would overflow math.isfinite).
    if number and (isinstance(value, int) or math.isfinite(value)) and abs(value) <= high:
        return float(value)
    raise RequestError(field, f"got {_short(value)}", f"a finite number up to {high:.4g} in size ({kind})")


@functools.cache
def _limits(kind: str) -> tuple[float, float, bool] | None:
    """(lowest, highest, integral) of a numeric dtype, or None where this server cannot fill it."""
    import numpy as np

    try:
        dtype = np.dtype(kind)
    except TypeError:  # bfloat16, resource, variant: no NumPy equivalent to convert JSON into
        return None
    if dtype.kind in "iu":
        return int(np.iinfo(dtype).min), int(np.iinfo(dtype).max), True
    if dtype.kind == "f":
        return -float(np.finfo(dtype).max), float(np.finfo(dtype).max), False
    return None


def _stack(values: list, spec: InputSpec):
    """The instances' values of one input as one NumPy array, the batch first."""
    import numpy as np

    first = _dims(values[0])
    for i, value in enumerate(values):
        if _dims(value) != first:
            raise RequestError(f"instances[{i}].{spec.name}", f"shape {list(_dims(value))} differs from "
                               f"instances[0]'s {list(first)}", "one shape for every instance in a request")
    return np.array(values, dtype=object if spec.dtype == "string" else spec.dtype)


def _check_pixels(columns: dict, signature: Signature) -> None:
    """Refuse a request whose images would decode to more than MAX_REQUEST_PIXELS, before any is decoded."""
    total = 0
    for spec in signature.inputs:
        if spec.dtype != "string":
            continue
        from trainer.models.image_classifier.decoding import image_pixels

        for value in columns[spec.name].reshape(-1):
            pixels = image_pixels(value)
            if pixels is None:  # TensorFlow would decode it, to a size nothing here can bound
                raise RequestError(spec.name, "an image whose header gives no size",
                                   "JPEG/PNG/GIF/BMP/WebP images whose header gives their size")
            total += pixels
            if total > MAX_REQUEST_PIXELS:
                raise RequestError(spec.name, f"images of over {MAX_REQUEST_PIXELS} pixels in one request",
                                   f"at most {MAX_REQUEST_PIXELS} pixels of images a request")


def _dims(value: Any) -> tuple[int, ...]:
    dims = []
    while isinstance(value, list):
        dims.append(len(value))
        value = value[0] if value else None
    return tuple(dims)


def _is_b64(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"b64"}


def _kind(value: Any) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number")


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# --- responses: NumPy out, JSON back ----------------------------------------------------------------------


def predictions(outputs: Mapping[str, Any], n: int) -> list:
    """One prediction per instance from the signature's batched outputs: an object keyed by output name, or
    the bare value when there is one output."""
    names = sorted(outputs)
    values = {}
    for name in names:
        array = outputs[name]
        if array.ndim == 0 or array.shape[0] != n:
            raise ValueError(f"output {name} has shape {list(array.shape)}, not one row per instance ({n})")
        values[name] = array.tolist()  # NumPy numbers and booleans become JSON's; strings are bytes here
        if array.dtype == object:
            values[name] = _jsonable(values[name], name.endswith(BYTES_SUFFIX))
    if len(names) == 1:
        return values[names[0]]
    return [{name: values[name][i] for name in names} for i in range(n)]


def _jsonable(value: Any, raw: bool) -> Any:
    if isinstance(value, list):
        return [_jsonable(v, raw) for v in value]
    if isinstance(value, bytes):
        if not raw:
            try:
                return value.decode("utf-8")
            except UnicodeDecodeError:
                pass
        return {"b64": base64.b64encode(value).decode("ascii")}
    return value


def example_instance(signature: Signature) -> dict:
    """An instance every input of ``signature`` accepts (trainer.contract's rule, which the export's
    example request follows too)."""
    return contract_example(tuple((spec.name, spec.dtype, spec.shape) for spec in signature.inputs))
