"""The ASGI application: Vertex AI's custom-container routes, every request bounded before the model sees it.

GET on the health route: 503 ``{"status": "loading"}`` until the model is loaded and warmed up, then 200
with each signature's inputs and outputs. POST on the predict route: a body of at most MAX_BODY_BYTES
(413 beyond, refused unread), admitted first come, first served (:class:`Admission`), read within
BODY_TIMEOUT_S of its admission and at MIN_BODY_RATE after BODY_GRACE_S (408 after), parsed
(serving.requests; 400 for anything wrong in it) and predicted through its signature's batcher
(serving.batching). Every answer is one line of JSON; a refusal is ``{"error": "FIELD: problem; allowed:
...", "field": FIELD}``, with Retry-After where the client should come back (429 the queue is full, 503
loading or stopping).
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import time
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from serving.batching import DEFAULT_BATCH_TIMEOUT_MS, DEFAULT_MAX_BATCH_SIZE, Batcher
from serving.limits import (
    BODY_BUDGET_BYTES,
    BODY_GRACE_S,
    BODY_TIMEOUT_S,
    MAX_HEADERS,
    MAX_IN_FLIGHT,
    MAX_QUEUE,
    MIN_BODY_RATE,
    QUEUE_TIMEOUT_S,
    RETRY_AFTER_S,
)
from serving.requests import MAX_BODY_BYTES, RequestError, Signature, parse_body, predictions, read_request

log = logging.getLogger("serving")
# Faults of clients (bad requests, stalls, disconnects): logged through serving.logs.RateLimit.
client_log = logging.getLogger("serving.clients")

INLINE_PARSE_BYTES = 64_000  # smaller bodies are parsed on the event loop: a thread hand-off costs more


class Full(Exception):
    """No admission: the queue is full, or the request waited QUEUE_TIMEOUT_S."""


class Admission:
    """First come, first served admission of at most ``slots`` requests and ``budget`` body bytes at once,
    with at most ``queue_limit`` waiting, each for at most ``wait_s``. A request that does not fit waits
    behind every earlier one (a large body is never overtaken for ever by small ones)."""

    def __init__(
        self,
        slots: int = MAX_IN_FLIGHT,
        budget: int = BODY_BUDGET_BYTES,
        queue_limit: int = MAX_QUEUE,
        wait_s: float = QUEUE_TIMEOUT_S,
    ):
        self.free_slots, self.free_bytes = slots, budget
        self.queue_limit, self.wait_s = queue_limit, wait_s
        self.waiting: collections.deque[tuple[int, asyncio.Future]] = collections.deque()

    async def enter(self, size: int) -> None:
        if not self.waiting and self._fits(size):
            self._take(size)
            return
        if len(self.waiting) >= self.queue_limit:
            raise Full(f"{len(self.waiting)} requests are waiting")
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        entry = (size, future)
        self.waiting.append(entry)
        timer = loop.call_later(self.wait_s, self._expire, entry)
        try:
            await future
        except BaseException:
            if future.done() and not future.cancelled() and future.exception() is None:
                self.leave(size)  # admitted just as the waiter was cancelled: give the room back
            elif entry in self.waiting:
                self.waiting.remove(entry)
                self._admit()  # those behind it may fit now
            raise
        finally:
            timer.cancel()

    def leave(self, size: int) -> None:
        self.free_slots += 1
        self.free_bytes += size
        self._admit()

    def _fits(self, size: int) -> bool:
        return self.free_slots > 0 and self.free_bytes >= size

    def _take(self, size: int) -> None:
        self.free_slots -= 1
        self.free_bytes -= size

    def _admit(self) -> None:
        while self.waiting and self._fits(self.waiting[0][0]):
            size, future = self.waiting.popleft()
            if not future.done():
                self._take(size)
                future.set_result(None)

    def _expire(self, entry: tuple[int, asyncio.Future]) -> None:
        if entry in self.waiting:
            self.waiting.remove(entry)
            if not entry[1].done():
                entry[1].set_exception(Full(f"no room within {self.wait_s:g} s"))
            self._admit()


@dataclass
class Response:
    status: int
    body: bytes
    headers: tuple[tuple[bytes, bytes], ...] = ()
    close: bool = False  # Connection: close (the body was left unread, or the client is not trusted)


def json_line(payload: Any) -> bytes:
    return (json.dumps(payload, separators=(",", ":"), allow_nan=False) + "\n").encode()


def error(status: int, problem: RequestError, *, close: bool = False, retry: bool = False) -> Response:
    headers = ((b"retry-after", str(RETRY_AFTER_S).encode()),) if retry else ()
    return Response(status, json_line({"error": str(problem), "field": problem.field}), headers, close)


class App:
    """The ASGI application (uvicorn calls it once per request)."""

    def __init__(
        self,
        health_route: str,
        predict_route: str,
        executor: Executor,
        parse_executor: Executor,
        *,
        max_batch_size: int = DEFAULT_MAX_BATCH_SIZE,
        batch_timeout_s: float = DEFAULT_BATCH_TIMEOUT_MS / 1000,
        body_timeout_s: float = BODY_TIMEOUT_S,
        admission: Admission | None = None,
    ):
        self.health_route, self.predict_route = health_route, predict_route
        self.executor, self.parse_executor = executor, parse_executor
        self.max_batch_size, self.batch_timeout_s = max_batch_size, batch_timeout_s
        self.body_timeout_s = body_timeout_s
        self.admission = admission or Admission()
        self.signatures: dict[str, Signature] | None = None  # set once loaded and warmed up
        self.batchers: dict[str, Batcher] = {}
        self.health_body = b""

    def ready(self, signatures: dict[str, Signature]) -> None:
        """Serve ``signatures`` from now on (called on the event loop)."""
        self.batchers = {
            name: Batcher(s, self.executor, self.max_batch_size, self.batch_timeout_s)
            for name, s in signatures.items()
        }
        self.health_body = json_line(
            {"status": "ready", "signatures": {n: s.describe() for n, s in sorted(signatures.items())}}
        )
        self.signatures = signatures

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":  # lifespan is off; websockets are not served
            return
        started = time.perf_counter()
        body_read = False

        async def receive_body():
            nonlocal body_read
            message = await receive()
            body_read = body_read or (message["type"] == "http.request" and not message.get("more_body"))
            return message

        try:
            response = await self._respond(scope, receive_body)
        except Exception as exc:  # noqa: BLE001 - a fault of this server's: logged; the client gets one line
            log.exception("%s %s failed", scope["method"], scope["raw_path"][:100].decode("latin-1"))
            response = error(500, RequestError("request", f"the server failed ({type(exc).__name__}; see its "
                                               "log)"), close=True)
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(response.body)).encode()),
            *response.headers,
        ]
        if not body_read and _declares_body(scope["headers"]):
            # Answered before its body was read (a 404, 405, 429, 503...): kept alive, the connection would
            # be held for ever by a body trickled a byte at a time (each byte restarts the idle timer).
            # Closed instead, after draining what comes for LINGER_S (serving.http).
            response.close = True
        if response.close:
            headers.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": response.status, "headers": headers})
        await send({"type": "http.response.body", "body": response.body})
        if 400 <= response.status < 500 and response.status != 404:
            client_log.info(
                "%s %s: %d in %.0f ms: %s",
                scope["method"],
                scope["raw_path"][:100].decode("latin-1"),
                response.status,
                1000 * (time.perf_counter() - started),
                response.body[:200].decode("utf-8", "replace").strip(),
            )

    async def _respond(self, scope, receive) -> Response:
        method = scope["method"]
        route = scope["raw_path"].decode("latin-1")
        if len(scope["headers"]) > MAX_HEADERS:  # also refused by the protocol before the app is called
            return error(
                431, RequestError("request", "Too many headers", f"at most {MAX_HEADERS}"), close=True
            )
        if method not in ("GET", "POST"):
            return error(501, RequestError("request", f"Unsupported method ({method!r})"), close=True)
        if route == self.health_route:
            if method == "POST":
                return error(405, RequestError("method", "POST", f"GET {route}"))
            if self.signatures is None:
                return Response(503, json_line({"status": "loading"}), ((b"retry-after", b"1"),))
            return Response(200, self.health_body)
        if route != self.predict_route:
            routes = f"GET {self.health_route}, POST {self.predict_route}"
            return error(404, RequestError("path", f"no route {_short(route)}", routes))
        if method == "GET":
            return error(405, RequestError("method", "GET", f"POST {route}"))
        return await self._predict(scope, receive)

    async def _predict(self, scope, receive) -> Response:
        try:
            length = _content_length(scope["headers"])
        except RequestError as exc:
            # The body is left unread in the socket: a next request on this connection would start inside it.
            return error(413 if exc.field == "body" else 400, exc, close=True)
        if self.signatures is None:
            return error(
                503,
                RequestError(
                    "model", "still loading", f"GET {self.health_route} answers 200 once it is ready"
                ),
                retry=True,
            )
        try:
            await self.admission.enter(length)
        except Full as exc:
            return error(
                429,
                RequestError("request", f"the server is full ({exc})", f"a retry after {RETRY_AFTER_S} s"),
                retry=True,
            )
        try:
            return await self._admitted(receive, length, self.signatures)
        finally:
            self.admission.leave(length)

    async def _admitted(self, receive, length: int, signatures: dict[str, Signature]) -> Response:
        loop = asyncio.get_running_loop()
        start = loop.time()
        got = [0]

        def deadline() -> float:  # the whole body within body_timeout_s, at MIN_BODY_RATE after the grace
            return start + min(self.body_timeout_s, BODY_GRACE_S + got[0] / MIN_BODY_RATE)

        try:
            async with asyncio.timeout_at(deadline()) as timer:  # a timer, not a task per request (wait_for)

                def received(size: int) -> None:
                    got[0] = size
                    timer.reschedule(deadline())

                body = await _read_body(receive, length, received)
        except TimeoutError:
            wait = f"{self.body_timeout_s:g} s"
            if loop.time() - start < self.body_timeout_s:  # fell behind the rate: the budget goes back now
                problem = f"{got[0]} of {length} bytes in {loop.time() - start:.1f} s"
                allowed = (
                    f"at least {MIN_BODY_RATE} bytes/s after the first {BODY_GRACE_S:g} s, the whole body "
                    f"within {wait}"
                )
                return error(408, RequestError("body", problem, allowed), close=True)
            return error(
                408,
                RequestError(
                    "body", f"not received within {wait}", f"the whole body within {wait} of its admission"
                ),
                close=True,
            )
        if body is None:  # the client left: nobody to answer
            return Response(499, b"", close=True)
        if len(body) != length:  # the protocol ended the body early: never parse part of one as the whole
            return error(
                400,
                RequestError(
                    "body", f"{len(body)} bytes received", f"the {length} bytes of its Content-Length"
                ),
                close=True,
            )
        try:
            if length <= INLINE_PARSE_BYTES:
                signature, columns, n = _parse(body, signatures)
            else:
                loop = asyncio.get_running_loop()
                signature, columns, n = await loop.run_in_executor(
                    self.parse_executor, _parse, body, signatures
                )
        except RequestError as exc:
            return error(400, exc)
        try:
            outputs, batch = await self.batchers[signature.name].predict(columns, n)
        except Exception as exc:  # noqa: BLE001 - sorted below; the client gets one line
            from serving.model import model_refusal

            refusal = model_refusal(exc)
            if refusal:  # e.g. bytes that are no image the model can decode
                return error(400, refusal)
            log.error(
                "signature %s failed: %s: %s",
                signature.name,
                type(exc).__name__,
                " ".join(str(exc).split())[:300],
            )
            return error(
                500, RequestError("model", f"the signature {signature.name} failed (see the server's log)")
            )
        try:
            payload = json_line({"predictions": predictions(outputs, n)})
        except ValueError as exc:  # a non-finite number, or an output that is not one row per instance
            log.error("signature %s: %s", signature.name, exc)
            return error(500, RequestError("model", str(exc)))
        return Response(200, payload, ((b"x-batch-size", str(batch).encode()),))


def _parse(body: bytes, signatures: dict[str, Signature]):
    try:
        return read_request(parse_body(body), signatures)
    except RecursionError:  # a value nested as deep as JSON allows, anywhere a check walks it
        raise RequestError("body", "JSON nested too deeply", "instances of the signature's shapes") from None


async def _read_body(receive, length: int, received=None) -> bytes | None:
    chunks, got = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunk = message.get("body", b"")
        got += len(chunk)
        if received is not None:
            received(got)
        if got > length:  # the protocol frames by Content-Length: never, but never unbounded either
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _declares_body(headers: list[tuple[bytes, bytes]]) -> bool:
    return any(
        name == b"transfer-encoding" or (name == b"content-length" and value.strip(b"0 ") != b"")
        for name, value in headers
    )


def _content_length(headers: list[tuple[bytes, bytes]]) -> int:
    found = {
        name: value
        for name, value in headers
        if name in (b"transfer-encoding", b"content-encoding", b"content-length")
    }
    for name, allowed in (
        (b"transfer-encoding", "a body with Content-Length"),
        (b"content-encoding", "identity"),
    ):
        value = found.get(name, b"identity").decode("latin-1")
        if value.lower() != "identity":
            raise RequestError(name.decode().title(), f"{value[:60]} is not supported", allowed)
    text = found.get(b"content-length")
    if text is None:
        raise RequestError("Content-Length", "missing", "the body's length in bytes")
    # The parser has checked the digits already; a second look costs nothing and bounds int() below.
    if not (text.isdigit() and text.isascii()) or len(text) > 20:
        raise RequestError("Content-Length", _short(text.decode("latin-1")), "the body's length in bytes")
    length = int(text)
    if length > MAX_BODY_BYTES:
        raise RequestError(
            "body",
            f"{length} bytes",
            f"at most {MAX_BODY_BYTES} bytes (Vertex AI's online prediction payload limit)",
        )
    return length


def _short(text: str) -> str:
    text = repr(text)
    return text if len(text) <= 60 else text[:57] + "..."
