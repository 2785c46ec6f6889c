"""Prediction server: serves an exported SavedModel over HTTP as Vertex AI serves a custom container.

On this machine (``run_job.py serve`` runs this with the variables Vertex AI sets)::

    python scripts/run_job.py serve /tmp/census-run/model            # http://127.0.0.1:8080
    python -m trainer.serve --model-dir /tmp/census-run/model --port 8080

    curl -s localhost:8080/health     # 503 while loading; 200 and each signature's inputs once ready
    curl -s localhost:8080/predict -d '{"instances": [{"user": "1", "k": 10}]}'      # a recommender
    curl -s localhost:8080/predict -d '{"instances": [{"item": "1", "k": 10}],
                                        "parameters": {"signature": "similar_items"}}'
    curl -s localhost:8080/predict -d "{\\"instances\\": [{\\"b64\\": \\"$(base64 -w0 rose.jpg)\\"}]}"

On Vertex AI the Model Registry entry runs ``python -m trainer.serve`` on the trainer's cpu image: the stack
the model was trained and exported with (TF 2.21 / Keras 3), every signature of the export. Vertex AI's
prebuilt TensorFlow prediction images end at TF 2.15, are no longer updated, and serve ``serving_default``
only (the recommender's ``top_k`` and ``similar_items`` would be out of reach); TF 2.15.1 itself does load
these exports (checked 2026-11 with Python TF, not the images' model server). The model comes from
``AIP_STORAGE_URI`` (Vertex AI's gs:// copy of the Model's artifactUri), the port from ``AIP_HTTP_PORT`` and
the routes from ``AIP_HEALTH_ROUTE`` and ``AIP_PREDICT_ROUTE`` (:mod:`trainer.contract`). A gs:// (any
``scheme://``) model is first copied to a local folder with ``tf.io.gfile``, whose gs:// support is built into
TensorFlow 2.21 (no tensorflow-io, no google-cloud-storage in the image); a local MODEL_DIR is loaded where
it is.

The request is Vertex AI's: ``{"instances": [...], "parameters": {"signature": NAME}}`` (the signature
defaults to ``serving_default``; ``GET`` on the health route lists them). Each instance is an object keyed by
the signature's input names, or, for a one-input signature, the bare value. A string input takes a JSON
string (UTF-8) or ``{"b64": "..."}`` for raw bytes (an image's); numbers and booleans are checked against the
input's dtype, nested lists against its shape. All instances go through the signature as one batch and the
response is ``{"predictions": [...]}``, one per instance: an object keyed by output name (the bare value for
a one-output signature), strings as JSON strings, or ``{"b64": ...}`` where they are not UTF-8.

Every request is bounded before the model sees it: at most MAX_BODY_BYTES of body (Vertex AI's online
payload limit), MAX_INSTANCES instances, MAX_REQUEST_PIXELS image pixels by the images' headers (a small
PNG can declare a huge decode) and MAX_CONCURRENT requests at once; a connection idle or stalled for
IDLE_TIMEOUT_S is closed. A refused request gets one line of JSON, ``{"error": "FIELD: problem; allowed:
...", "field": FIELD}``: HTTP 400 for anything wrong in it (404 an unknown route, 405 the wrong method, 503
before the model is loaded); nothing a request sends stops the server or returns a traceback.

The server listens at once (TensorFlow is imported and the model loaded and warmed up in the background, each
signature called once so that the first request is not slow) and answers the health route 503 until then.
SIGTERM (what Vertex AI sends) or Ctrl-C stops it after the requests in flight.

Exit status: 0 stopped by SIGTERM/SIGINT; 1 the model failed to load for another reason; 2 bad flags, a
MODEL_DIR that is missing, not a directory or no SavedModel, or a port that cannot be listened on (one line
on stderr each).
"""

from __future__ import annotations

import argparse
import base64
import functools
import json
import logging
import math
import os
import shutil
import signal
import socketserver
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from trainer.contract import (
    HEALTH_ROUTE,
    HTTP_PORT,
    PREDICT_ROUTE,
    SERVE_MODULE,
    SERVING_DEFAULTS,
    STORAGE_URI,
)

log = logging.getLogger(SERVE_MODULE)

EXIT_FAILED = 1
EXIT_USAGE = 2

DEFAULT_SIGNATURE = "serving_default"
PARAMETERS = ("signature",)  # what "parameters" may hold
MAX_BODY_BYTES = 1_500_000  # Vertex AI's online prediction payload limit ("1.5 MB"): no larger body arrives
MAX_INSTANCES = 1000  # instances in one request: each is one row of one batch through the model
# Pixels the images of one request may declare (trainer.tasks.image_classifier.decoding.image_pixels): one 48
# MP photo, not a decompression bomb (a 1 MB PNG can declare 20000 x 20000 pixels, 1.2 GB decoded as RGB).
MAX_REQUEST_PIXELS = 50_000_000
MAX_CONCURRENT = 8  # requests parsed and predicted at once; later ones wait with their bodies read
IDLE_TIMEOUT_S = 30  # a connection that sends nothing for this long (mid-request or between two) is closed
STOP_GRACE_S = 20  # after SIGTERM, how long requests in flight may take to finish
# Outputs that are raw bytes whatever their content (TF Serving's and Vertex AI's naming convention).
BYTES_SUFFIX = "_bytes"
# A valid 1x1 grayscale PNG: the example and warm-up value of a *_bytes input, so that an image signature runs
# its whole graph once at start-up (a text input gets "" instead).
TINY_PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAAAAAA6fptVAAAACklEQVR4nGNgAAAAAgABSK+kcQAAAABJ"
                            "RU5ErkJggg==")


class RequestError(ValueError):
    """A refused request (HTTP 400, or the status the handler gives it): ``str()`` is one line naming the
    field, the problem and what is allowed."""

    def __init__(self, field: str, problem: str, allowed: str = ""):
        super().__init__(f"{field}: {problem}" + (f"; allowed: {allowed}" if allowed else ""))
        self.field = field


class ServeError(Exception):
    """Bad flags or a model that cannot be served: one line on stderr, exit status ``status``."""

    def __init__(self, message: str, status: int = EXIT_USAGE):
        super().__init__(message)
        self.status = status


# --- signatures: what a request must send, read from the SavedModel ----------------------------------------


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


def signatures_of(loaded) -> dict[str, Signature]:
    """The serving signatures of a loaded SavedModel, each callable with a dict of NumPy arrays."""
    import tensorflow as tf

    found = {}
    for name, fn in loaded.signatures.items():
        specs = fn.structured_input_signature[1]
        # An input of unknown rank takes one value per instance.
        inputs = tuple(InputSpec(key, spec.dtype.name,
                                 tuple(spec.shape.as_list()) if spec.shape.rank is not None else (None,))
                       for key, spec in sorted(specs.items()))
        dtypes = {key: spec.dtype for key, spec in specs.items()}

        def call(columns, fn=fn, dtypes=dtypes):
            out = fn(**{key: tf.constant(value, dtype=dtypes[key]) for key, value in columns.items()})
            return {key: value.numpy() for key, value in out.items()}

        found[name] = Signature(name, inputs, tuple(sorted(fn.structured_outputs)), call)
    return found


# --- requests: JSON in, NumPy columns out (no TensorFlow here) ----------------------------------------------


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
        from trainer.tasks.image_classifier.decoding import image_pixels

        for value in columns[spec.name].reshape(-1):
            total += image_pixels(value)
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
    """An instance every input of ``signature`` accepts: "" for text, a 1x1 PNG for a *_bytes input, 1 for
    integers (a count such as top_k's k), 0.0, false; a list of 1 along dimensions of any length."""
    def leaf(spec: InputSpec):
        if spec.dtype == "string":
            return {"b64": base64.b64encode(TINY_PNG).decode()} if spec.name.endswith(BYTES_SUFFIX) else ""
        return {"bool": False}.get(spec.dtype, 0.0 if spec.dtype.startswith(("float", "bfloat")) else 1)

    def nest(spec: InputSpec, axis: int):
        if axis == len(spec.shape):
            return leaf(spec)
        return [nest(spec, axis + 1)] * (spec.shape[axis] or 1)

    return {spec.name: nest(spec, 1) for spec in signature.inputs}


# --- the model: local or copied down, loaded, warmed up ---------------------------------------------------


def model_dir_problem(path: str) -> str | None:
    """Why a local MODEL_DIR cannot be served (one line), or None. Reads metadata only: a FIFO or device in
    its place is refused, never opened."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return f"{path}: {exc.strerror.lower() if exc.strerror else 'cannot be read'}"
    if not stat.S_ISDIR(mode):
        return f"{path}: not a directory (a SavedModel is a folder with saved_model.pb)"
    graph = os.path.join(path, "saved_model.pb")
    try:
        regular = stat.S_ISREG(os.stat(graph).st_mode)
    except OSError:
        regular = None
    if not regular:
        why = "saved_model.pb is not a file" if regular is False else "no saved_model.pb"
        return f"{path}: no SavedModel here ({why})"
    return None


def _remote(uri: str) -> bool:
    return "://" in uri


def copy_down(uri: str, into: str) -> str:
    """Copy the SavedModel folder ``uri`` (gs://, or any tf.io.gfile scheme) into the local folder ``into``.

    One walk of whole files, finished before loading starts: a missing or unreadable model fails here with
    one line, and the loaded model never reads Cloud Storage again.
    """
    import tensorflow as tf

    start = time.perf_counter()
    root = uri.rstrip("/")
    if not tf.io.gfile.exists(f"{root}/saved_model.pb"):
        raise ServeError(f"{uri}: no SavedModel here (no saved_model.pb)")
    copied = 0
    for folder, _, files in tf.io.gfile.walk(root):
        local = os.path.join(into, os.path.relpath(folder, root) if folder != root else "")
        os.makedirs(local, exist_ok=True)
        for name in files:
            tf.io.gfile.copy(f"{folder}/{name}", os.path.join(local, name), overwrite=True)
            copied += os.path.getsize(os.path.join(local, name))
    log.info("copied %s to %s (%.1f MB in %.1f s)", uri, into, copied / 1e6, time.perf_counter() - start)
    return into


def load_model(source: str) -> tuple[dict[str, Signature], str | None]:
    """Load ``source`` (a local folder or a gs:// URI) -> (its signatures, the temporary copy to remove)."""
    copy = tempfile.mkdtemp(prefix="trainer-serve-") if _remote(source) else None
    try:
        return _load(copy_down(source, copy) if copy else source, source), copy
    except BaseException:
        if copy:
            shutil.rmtree(copy, ignore_errors=True)
        raise


def _load(path: str, source: str) -> dict[str, Signature]:
    import tensorflow as tf

    try:
        loaded = tf.saved_model.load(path)
    except Exception as exc:  # noqa: BLE001 - whatever TensorFlow raises for a damaged model: one line
        reason = " ".join(str(exc).split())[:300] or type(exc).__name__
        raise ServeError(f"{source}: not a SavedModel that loads: {reason}") from None
    found = signatures_of(loaded)
    if not found:
        raise ServeError(f"{source}: the SavedModel has no serving signatures")
    for signature in found.values():
        _warm_up(signature)
    return found


def _warm_up(signature: Signature) -> None:
    """Call ``signature`` once: its first call optimises the graph and creates its kernels (~90 ms for the
    image classifier), which the first request would otherwise wait for."""
    try:
        payload = {"instances": [example_instance(signature)]}
        _, columns, _ = read_request(payload, {signature.name: signature})
        signature.call(columns)
    except Exception as exc:  # noqa: BLE001 - a model that refuses the example still got its graph built
        log.debug("warm-up of %s: %s", signature.name, exc)


# --- HTTP ---------------------------------------------------------------------------------------------------


class Server(ThreadingHTTPServer):
    daemon_threads = True  # idle keep-alive connections never hold up a stop
    # Connections the kernel queues before the server accepts them: socketserver's 5 drops a burst's
    # surplus SYNs, which the clients resend only after a second.
    request_queue_size = 128

    def __init__(self, address, health: str, predict: str):
        super().__init__(address, Handler)
        self.health_route, self.predict_route = health, predict
        self.signatures: dict[str, Signature] | None = None  # set once loaded and warmed up
        self.health_body = b""
        self.busy = threading.BoundedSemaphore(MAX_CONCURRENT)
        self.in_flight = 0
        self.idle = threading.Condition()

    def server_bind(self):
        # HTTPServer's own looks the host's name up (socket.getfqdn): seconds without DNS, and unused here.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def ready(self, signatures: dict[str, Signature]) -> None:
        self.health_body = _json({"status": "ready",
                                  "signatures": {n: s.describe() for n, s in sorted(signatures.items())}})
        self.signatures = signatures

    def drain(self, timeout: float) -> None:
        with self.idle:
            self.idle.wait_for(lambda: self.in_flight == 0, timeout)

    def handle_error(self, request, client_address):  # noqa: D102 - a dropped client is no traceback
        log.warning("connection from %s: %s", client_address[0], sys.exc_info()[1])


class Handler(BaseHTTPRequestHandler):
    server: Server
    protocol_version = "HTTP/1.1"  # keep-alive: a client's next request skips the TCP handshake
    # What a request line without a valid version is taken for: HTTP/0.9 (http.server's default) would
    # answer it with a bare body, no status line.
    default_request_version = "HTTP/1.0"
    server_version = "trainer-serve"
    timeout = IDLE_TIMEOUT_S
    # The headers and the body are two writes: with Nagle's algorithm the body would wait for the client's
    # delayed ACK of the headers, 40 ms on Linux, ten times a prediction.
    disable_nagle_algorithm = True

    def do_GET(self):  # noqa: N802 - http.server's naming
        route = urlsplit(self.path).path
        if route == self.server.health_route:
            if self.server.signatures is None:
                self._send(HTTPStatus.SERVICE_UNAVAILABLE, _json({"status": "loading"}))
            else:
                self._send(HTTPStatus.OK, self.server.health_body)
        elif route == self.server.predict_route:
            self._error(HTTPStatus.METHOD_NOT_ALLOWED, RequestError("method", "GET", f"POST {route}"))
        else:
            self._not_found(route)

    def do_POST(self):  # noqa: N802
        route = urlsplit(self.path).path
        if route != self.server.predict_route:
            if route == self.server.health_route:
                self._error(HTTPStatus.METHOD_NOT_ALLOWED, RequestError("method", "POST", f"GET {route}"))
            else:
                self._not_found(route)
            return
        try:
            length = self._content_length()
        except RequestError as exc:
            # The body is left unread in the socket: a next request on this connection would start inside it.
            self.close_connection = True
            self._error(HTTPStatus.BAD_REQUEST, exc)
            return
        # The body is read before the request takes one of the MAX_CONCURRENT slots: a client that stalls
        # mid-body holds its own connection's thread until IDLE_TIMEOUT_S, never a slot.
        try:
            body = self.rfile.read(length)
        except OSError:  # a stalled or dropped client (the socket timeout): nobody to answer
            self.close_connection = True
            return
        if len(body) < length:
            self.close_connection = True
            return
        with self.server.busy:
            self._predict(body)

    def _content_length(self) -> int:
        if self.headers.get("Transfer-Encoding", "identity").lower() != "identity":
            raise RequestError("Transfer-Encoding", f"{self.headers['Transfer-Encoding']} is not supported",
                               "a body with Content-Length")
        if self.headers.get("Content-Encoding", "identity").lower() != "identity":
            raise RequestError("Content-Encoding", f"{self.headers['Content-Encoding']} is not supported",
                               "identity")
        text = self.headers.get("Content-Length")
        if text is None:
            raise RequestError("Content-Length", "missing", "the body's length in bytes")
        if not text.isdigit():
            raise RequestError("Content-Length", f"{_short(text)}", "the body's length in bytes")
        if int(text) > MAX_BODY_BYTES:
            raise RequestError("body", f"{int(text)} bytes", f"at most {MAX_BODY_BYTES} bytes (Vertex AI's "
                               "online prediction payload limit)")
        return int(text)

    def _predict(self, body: bytes) -> None:
        signatures = self.server.signatures
        if signatures is None:
            self._error(HTTPStatus.SERVICE_UNAVAILABLE, RequestError(
                "model", "still loading", f"GET {self.server.health_route} answers 200 once it is ready"))
            return
        with self.server.idle:
            self.server.in_flight += 1
        try:
            self._answer(body, signatures)
        finally:
            with self.server.idle:
                self.server.in_flight -= 1
                self.server.idle.notify_all()

    def _answer(self, body: bytes, signatures: dict[str, Signature]) -> None:
        import tensorflow as tf

        from trainer.data import op_reason

        try:
            signature, columns, n = read_request(parse_body(body), signatures)
        except RequestError as exc:
            self._error(HTTPStatus.BAD_REQUEST, exc)
            return
        try:
            outputs = signature.call(columns)
        except tf.errors.InvalidArgumentError as exc:  # e.g. bytes that are no image the model can decode
            self._error(HTTPStatus.BAD_REQUEST, RequestError("instances", f"the model refused them: "
                                                             f"{op_reason(exc)[:300]}"))
            return
        except Exception:  # noqa: BLE001 - logged in full here; the client gets one line
            log.exception("signature %s failed", signature.name)
            self._error(HTTPStatus.INTERNAL_SERVER_ERROR, RequestError(
                "model", f"the signature {signature.name} failed (see the server's log)"))
            return
        try:
            payload = _json({"predictions": predictions(outputs, n)})
        except ValueError as exc:  # a non-finite number, or an output that is not one row per instance
            log.error("signature %s: %s", signature.name, exc)
            self._error(HTTPStatus.INTERNAL_SERVER_ERROR, RequestError("model", str(exc)))
            return
        self._send(HTTPStatus.OK, payload)

    def _not_found(self, route: str) -> None:
        routes = f"GET {self.server.health_route}, POST {self.server.predict_route}"
        self._error(HTTPStatus.NOT_FOUND, RequestError("path", f"no route {_short(route)}", routes))

    def _error(self, status: HTTPStatus, error: RequestError) -> None:
        if status >= 500:
            log.warning("%s %s: %d %s", self.command, self.path[:100], status, error)
        self._send(status, _json({"error": str(error), "field": error.field}))

    def send_error(self, code, message=None, explain=None):  # noqa: D102 - http.server's own errors as JSON
        self.close_connection = True
        status = HTTPStatus(code)
        self._error(status, RequestError("request", (message or status.phrase)[:300]))

    def _send(self, status: HTTPStatus, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, format, *args):  # noqa: A002, D102 - no access log: it would cost every request
        pass


def _json(payload: Any) -> bytes:
    return (json.dumps(payload, separators=(",", ":"), allow_nan=False) + "\n").encode()


# --- command line -------------------------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # noqa: D102 - argparse hook: one line, exit 2
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def port(text: str) -> int:
    """A TCP port, 0..65535 (0: any free one, named in the server's first line)."""
    value = int(text)
    if not 0 <= value <= 65535:
        raise ValueError(text)
    return value


port.__name__ = "port"  # argparse names the type in its error: "invalid port value: '70000'"


def build_parser(env: Mapping[str, str]) -> argparse.ArgumentParser:
    p = _Parser(prog=SERVE_MODULE, description=__doc__.split("\n\n")[0],
                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--model-dir", default=env.get(STORAGE_URI), metavar="DIR_OR_URI",
                   help=f"the SavedModel folder, local or gs:// (default ${STORAGE_URI})")
    p.add_argument("--port", type=port, default=env.get(HTTP_PORT, SERVING_DEFAULTS[HTTP_PORT]),
                   help=f"port to listen on (default ${HTTP_PORT}, else {SERVING_DEFAULTS[HTTP_PORT]})")
    p.add_argument("--host", default="0.0.0.0",
                   help="address to listen on (default %(default)s, as Vertex AI requires)")
    return p


def _route(env: Mapping[str, str], name: str) -> str:
    value = env.get(name) or SERVING_DEFAULTS[name]
    if not value.startswith("/") or any(c.isspace() for c in value):
        raise ServeError(f"{name}={value!r}: not an HTTP path; allowed: a path starting with /")
    return value


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    env = os.environ if env is None else env
    prog = f"{SERVE_MODULE}: error: "
    args = build_parser(env).parse_args(argv)
    try:
        if not args.model_dir:
            raise ServeError(f"no model: give --model-dir DIR or set {STORAGE_URI}")
        source = args.model_dir if _remote(args.model_dir) else str(Path(args.model_dir).resolve())
        problem = None if _remote(source) else model_dir_problem(args.model_dir)
        if problem:
            raise ServeError(problem)
        health, predict = _route(env, HEALTH_ROUTE), _route(env, PREDICT_ROUTE)
        try:
            server = Server((args.host, args.port), health, predict)
        except (OSError, OverflowError) as exc:
            raise ServeError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    except ServeError as exc:
        print(prog + str(exc), file=sys.stderr)
        return exc.status
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow's import: no CUDA probing noise
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    for name in ("tensorflow", "absl"):  # their INFO lines (loading, fingerprints) would drown the server's
        logging.getLogger(name).setLevel(logging.WARNING)
    host, bound = server.server_address[:2]
    url = f"http://{'127.0.0.1' if host == '0.0.0.0' else host}:{bound}"
    log.info("listening on %s (GET %s, POST %s); loading %s", url, health, predict, source)
    outcome: dict[str, Any] = {"status": 0}

    def stop(status: int) -> None:
        outcome["status"] = status
        threading.Thread(target=server.shutdown, daemon=True).start()  # shutdown() waits for serve_forever

    def load() -> None:
        start = time.perf_counter()
        try:
            signatures, outcome["copy"] = load_model(source)
        except ServeError as exc:
            print(prog + str(exc), file=sys.stderr)
            stop(exc.status)
            return
        except Exception as exc:  # noqa: BLE001 - e.g. Cloud Storage refusing the copy: one line, exit 1
            reason = " ".join(str(exc).split())[:300]
            print(prog + f"{source}: {type(exc).__name__}: {reason}", file=sys.stderr)
            stop(EXIT_FAILED)
            return
        server.ready(signatures)
        listed = (f"{n}({', '.join(i.name for i in s.inputs)})" for n, s in sorted(signatures.items()))
        log.info("ready in %.1f s: %s", time.perf_counter() - start, "; ".join(listed))
        example = json.dumps({"instances": [example_instance(signatures.get(DEFAULT_SIGNATURE)
                                                             or next(iter(signatures.values())))]})
        log.info("e.g. curl -s %s%s -H 'Content-Type: application/json' -d '%s'", url, predict, example)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop(0))
    threading.Thread(target=load, name="load-model", daemon=True).start()
    try:
        server.serve_forever()
        server.drain(STOP_GRACE_S)
    finally:
        server.server_close()
        if outcome.get("copy"):
            shutil.rmtree(outcome["copy"], ignore_errors=True)
    if outcome["status"] == 0:
        log.info("stopped")
    return outcome["status"]


if __name__ == "__main__":
    status = main()
    # Skip the interpreter's teardown: with TensorFlow loaded it takes ~2 s after the server has stopped, and
    # nothing in it matters once the log is flushed.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
