"""uvicorn, held to limits it does not have by itself: a connection cap, a header deadline, a cap on
header lines and bytes, one-line JSON for the requests its parser refuses, and a stop on SIGTERM that
always ends in an exit.

uvicorn (httptools' llhttp parser, asyncio) parses HTTP/1.1, frames bodies, keeps connections alive and
stops gracefully: on a stop it closes the listener, closes idle connections, answers the requests in
flight with ``Connection: close`` and waits for them up to its graceful-shutdown timeout. What it leaves
open is added here by subclassing its protocol:

- At most ``max_connections`` connections: one more is answered 503 with Retry-After at once (before its
  request is read) and closed, instead of holding a file descriptor until the process runs out.
- A request's headers must arrive within HEADER_TIMEOUT_S of its first byte (or of the connection, for the
  first request): uvicorn's keep-alive timer is reset by every byte, so one byte a second held a connection
  for ever. 408, then closed.
- At most MAX_HEADERS header lines and MAX_HEADER_BYTES of request line and headers: 431.
- Until the application reads the body (after admission: serving.app), the connection is not read at all:
  the body waits in the kernel's socket buffer, not in this process, and reads are READ_BYTES while headers
  are awaited, so that a thousand waiting connections hold a few MB, not a thousand bodies.
- A response whose write stalls (the client reads nothing) for SEND_TIMEOUT_S is aborted, connection and
  all: a reader that never read held its connection and its response for ever (and a stop for its grace).
- A refusal made here is written, the write side shut, and whatever the client still sends is read and
  dropped for up to LINGER_S before the socket is closed: closing with unread data would send a reset that
  can destroy the answer before the client reads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import signal
import threading

import httptools
import uvicorn
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from serving.limits import (
    BODY_READ_BYTES,
    HEADER_TIMEOUT_S,
    LAST_CALL_S,
    LINGER_S,
    MAX_CONNECTIONS,
    MAX_HEADER_BYTES,
    MAX_HEADERS,
    READ_BYTES,
    RETRY_AFTER_S,
    SEND_TIMEOUT_S,
)

log = logging.getLogger("serving")


class _Refused(Exception):
    """Raised in a parser callback: the request breaks a limit (its status and one-line body are set)."""


def refusal(status: int, field: str, problem: str, allowed: str = "", retry: bool = False) -> bytes:
    """A whole HTTP/1.1 response with a one-line JSON error, closing the connection."""
    body = (
        json.dumps(
            {"error": f"{field}: {problem}" + (f"; allowed: {allowed}" if allowed else ""), "field": field},
            separators=(",", ":"),
        )
        + "\n"
    ).encode()
    phrase = {
        400: "Bad Request",
        408: "Request Timeout",
        431: "Request Header Fields Too Large",
        503: "Service Unavailable",
    }[status]
    head = [
        f"HTTP/1.1 {status} {phrase}",
        "content-type: application/json",
        f"content-length: {len(body)}",
        "connection: close",
    ]
    if retry:
        head.append(f"retry-after: {RETRY_AFTER_S}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class Protocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the limits above (``max_connections`` is set by serving.cli)."""

    max_connections = MAX_CONNECTIONS
    header_timeout_s = HEADER_TIMEOUT_S
    send_timeout_s = SEND_TIMEOUT_S

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._deadline: asyncio.TimerHandle | None = None
        self._send_deadline: asyncio.TimerHandle | None = None
        self._lingering = False
        self._refusal: bytes | None = None
        self._stopping = False
        self._header_bytes = self._header_lines = 0
        self._upgrade_body: int | None = None  # body bytes still due after an Upgrade header (see below)
        transport.max_size = READ_BYTES  # asyncio's selector transport reads this many bytes at most
        if len(self.connections) > self.max_connections:
            self._refuse(
                refusal(
                    503,
                    "request",
                    f"{self.max_connections} connections are open",
                    f"a retry after {RETRY_AFTER_S} s",
                    retry=True,
                )
            )
            return
        self._arm()

    def connection_lost(self, exc) -> None:
        self._disarm()
        self._send_resumed()
        if self._lingering:
            self.connections.discard(self)
            return
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._lingering:
            return  # dropped: the answer is written, the connection is closing
        if self._upgrade_body is not None:
            self._body_after_upgrade(data)
            return
        # uvicorn's own, but for an Upgrade header (see _ignore_upgrade).
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            self.logger.warning("Invalid HTTP request received.")
            self.send_400_response("Invalid HTTP request received.")
        except httptools.HttpParserUpgrade as upgrade:
            self._ignore_upgrade(data[upgrade.args[0]:])

    def _ignore_upgrade(self, rest: bytes) -> None:
        """A request with an Upgrade header (curl --http2 sends Upgrade: h2c; websockets are not served) is
        answered as if it had none, as RFC 9110 lets a server do. httptools ends the message at its headers
        and leaves the body in ``rest``: it is handed to the request here, and the connection closed after
        the answer (the parser reads no further request on it)."""
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            self.transport.close()
            return
        cycle.keep_alive = False
        length = next((value for name, value in self.headers if name == b"content-length"), b"0")
        self._upgrade_body = int(length) if length.isdigit() else 0  # the parser has checked its digits
        if self._upgrade_body:
            cycle.more_body = True
            self._body_after_upgrade(rest)

    def _body_after_upgrade(self, data: bytes) -> None:
        cycle = self.cycle
        if cycle is None or cycle.response_complete or not self._upgrade_body:
            return  # answered already, or bytes past the body: dropped
        chunk = data[:self._upgrade_body]
        self._upgrade_body -= len(chunk)
        cycle.body += chunk
        if len(cycle.body) > HIGH_WATER_LIMIT:
            self.flow.pause_reading()
        if not self._upgrade_body:
            cycle.more_body = False
        cycle.message_event.set()

    def eof_received(self) -> bool | None:
        if self._lingering:
            self.transport.close()
        return None

    # --- writes: the transport's flow control ------------------------------------------------------------

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._send_deadline is None:
            self._send_deadline = self.loop.call_later(self.send_timeout_s, self._send_late)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._send_resumed()

    def _send_resumed(self) -> None:
        if self._send_deadline is not None:
            self._send_deadline.cancel()
            self._send_deadline = None

    def _send_late(self) -> None:
        self._send_deadline = None
        # Aborted even when closing: a close waits for the buffered response to be read, which never comes.
        logging.getLogger("serving.clients").info(
            "%s: the response not read for %g s: connection aborted",
            self.client[0] if self.client else "?",
            self.send_timeout_s,
        )
        # Nothing can be said to a client that reads nothing; connection_lost releases the response's send
        # (uvicorn's flow control), which returns quietly as for any client that left.
        self.transport.abort()

    # --- the parser's callbacks -----------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._header_bytes = self._header_lines = 0
        if self._deadline is None:
            self._arm()

    def on_url(self, url: bytes) -> None:
        self._count(len(url), 0)
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4, 1)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._disarm()
        if self.parser.get_method() == b"POST" and not any(
            name in (b"content-length", b"transfer-encoding") for name, _ in self.headers
        ):
            # Without a length the parser takes the body for the next request and refuses that instead.
            self._refusal = refusal(400, "Content-Length", "missing", "the body's length in bytes")
            raise _Refused()
        super().on_headers_complete()
        # Not a byte more until the application asks for the body (serving.app, after admission); then
        # reads of the usual size.
        self.transport.max_size = BODY_READ_BYTES
        if self.cycle is not None and not self.cycle.response_complete:
            self.flow.pause_reading()
            self.cycle.transport = _LingerOnClose(self.transport, self)
            if self._stopping:
                self.cycle.keep_alive = False  # answered, then closed: the server is stopping

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self.transport.max_size = READ_BYTES

    # --- refusals -------------------------------------------------------------------------------------------

    def _count(self, size: int, lines: int) -> None:
        """Headers so far: over MAX_HEADERS lines or MAX_HEADER_BYTES, the request is refused with 431."""
        self._header_bytes += size
        self._header_lines += lines
        if self._header_lines > MAX_HEADERS:
            self._refusal = refusal(431, "request", "Too many headers", f"at most {MAX_HEADERS}")
        elif self._header_bytes > MAX_HEADER_BYTES:
            self._refusal = refusal(
                431, "request", f"over {MAX_HEADER_BYTES} bytes of headers", f"at most {MAX_HEADER_BYTES}"
            )
        else:
            return
        raise _Refused()  # the parser stops; uvicorn calls send_400_response, which sends this instead

    def send_400_response(self, msg: str) -> None:
        """What uvicorn sends for a request its parser refuses (``msg`` is its plain-text line): the refusal a
        callback set, else a 400."""
        self._refuse(self._refusal or refusal(400, "request", "invalid HTTP request", "HTTP/1.1 (RFC 9112)"))

    def _arm(self) -> None:
        self._deadline = self.loop.call_later(self.header_timeout_s, self._headers_late)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _headers_late(self) -> None:
        self._deadline = None
        if self.transport.is_closing() or self._lingering:
            return
        if self.cycle is not None and not self.cycle.response_complete:
            return  # a request is being answered: its own deadlines hold (serving.app)
        logging.getLogger("serving.clients").info(
            "%s: no whole request headers within %g s",
            self.client[0] if self.client else "?",
            self.header_timeout_s,
        )
        self._refuse(
            refusal(
                408,
                "request",
                f"headers not received within {self.header_timeout_s:g} s",
                f"a request's headers within {self.header_timeout_s:g} s of its first byte",
            )
        )

    def _refuse(self, response: bytes) -> None:
        """Write ``response``, shut the write side, drain for up to LINGER_S, close."""
        if self.cycle is not None:
            self.cycle.disconnected = True  # an application still running for it writes nothing more
            self.cycle.message_event.set()
        if not self.transport.is_closing():
            self.transport.write(response)
        self._linger()

    def _linger(self) -> None:
        """Shut the write side (what was written goes first), drop what the client still sends for up to
        LINGER_S, close."""
        self._disarm()
        self._unset_keepalive_if_required()
        self._lingering = True
        self.connections.discard(self)  # no longer a connection the server waits for or counts
        transport = self.transport
        if transport.is_closing():
            return
        transport.resume_reading()
        with contextlib.suppress(OSError, RuntimeError, NotImplementedError):
            transport.write_eof()
        self.loop.call_later(LINGER_S, transport.close)

    def timeout_keep_alive_handler(self) -> None:
        if not self._lingering:
            super().timeout_keep_alive_handler()

    def shutdown(self) -> None:
        """The server is stopping: a request in progress is answered with Connection: close (uvicorn's own);
        an idle connection gets LAST_CALL_S for a request already on its way, then is closed."""
        self._stopping = True
        if self._lingering:
            return
        if self.cycle is None or self.cycle.response_complete:
            self._unset_keepalive_if_required()
            self.loop.call_later(LAST_CALL_S, self._last_call)
        else:
            self.cycle.keep_alive = False

    def _last_call(self) -> None:
        if self.transport.is_closing() or self._lingering:
            return
        if self.cycle is None or self.cycle.response_complete:
            self.transport.close()  # nothing came: closed as uvicorn closes an idle connection
        else:
            self.cycle.keep_alive = False


class _LingerOnClose:
    """The transport as a request's response cycle sees it: closing it (after an answer with Connection:
    close) while the request's body is still coming lingers instead (a 413 for a body sent anyway)."""

    def __init__(self, transport, protocol: Protocol):
        self._transport, self._protocol = transport, protocol

    def close(self) -> None:
        cycle = self._protocol.cycle
        if cycle is not None and cycle.more_body and not self._transport.is_closing():
            self._protocol._linger()
        else:
            self._transport.close()

    def __getattr__(self, name):
        return getattr(self._transport, name)


class Server(uvicorn.Server):
    """uvicorn's server with the signals handled here: SIGTERM and SIGINT start a graceful stop, a second
    one changes nothing (``run_job.py serve`` forwards what a terminal's Ctrl-C also delivers), and the
    signal is not raised again afterwards (uvicorn's own handling ends the process by it: exit -15, not 0)."""

    def __init__(self, config: uvicorn.Config):
        super().__init__(config)
        self.status = 0

    @contextlib.contextmanager
    def capture_signals(self):
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {
            signum: signal.signal(signum, self.handle_exit) for signum in (signal.SIGTERM, signal.SIGINT)
        }
        try:
            yield
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def handle_exit(self, sig, frame) -> None:
        if not self.should_exit:
            log.info(
                "%s: stopping (no new connections; requests in flight may take %s s)",
                signal.Signals(sig).name,
                self.config.timeout_graceful_shutdown,
            )
        self.should_exit = True

    def stop(self, status: int) -> None:
        self.status = status
        self.should_exit = True
