"""The server process: flags and Vertex AI's variables, the listening socket (before TensorFlow is imported),
logging, the model load in the background under a deadline, and uvicorn until SIGTERM.

Exit status: 0 stopped by SIGTERM/SIGINT; 1 the model failed to load for another reason or not within
--load-timeout; 2 bad flags, a MODEL_DIR that is missing, not a directory, no SavedModel or over a limit of
serving.model, or a port that cannot be listened on (one line on stderr each).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import resource
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import serving
from serving.batching import DEFAULT_BATCH_TIMEOUT_MS, DEFAULT_MAX_BATCH_SIZE
from serving.limits import (
    BODY_TIMEOUT_S,
    HEADER_TIMEOUT_S,
    IDLE_TIMEOUT_S,
    MAX_CONNECTIONS,
    SEND_TIMEOUT_S,
    STOP_GRACE_S,
)
from serving.model import EXIT_FAILED, EXIT_USAGE, ServeError, model_dir_problem, remote
from trainer.contract import (
    HEALTH_ROUTE,
    HTTP_PORT,
    PREDICT_ROUTE,
    SERVE_MODULE,
    SERVING_DEFAULTS,
    STORAGE_URI,
)

log = logging.getLogger(SERVE_MODULE)

# Flags a Model's containerSpec.env can set as well (Vertex AI passes no flags to a custom container's
# command unless containerSpec.args names them).
MAX_BATCH_SIZE_ENV = "SERVING_MAX_BATCH_SIZE"
BATCH_TIMEOUT_ENV = "SERVING_BATCH_TIMEOUT_MS"
LOAD_TIMEOUT_ENV = "SERVING_LOAD_TIMEOUT_S"
DEFAULT_LOAD_TIMEOUT_S = 600  # TensorFlow's import, a gs:// copy, the load and the warm-up calls
FD_RESERVE = 128  # descriptors kept for TensorFlow, the model's files and the listener
BACKLOG = 2048  # connections the kernel queues before they are accepted (a burst is not refused by SYN drops)
LOG_RATE = (10, 1.0)  # client-fault log lines: a burst of 10, then one a second


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # noqa: D102 - argparse hook: one line, exit 2
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def _bounded(kind, low, high, name):
    def parse(text: str):
        value = kind(text)
        if not low <= value <= high:
            raise ValueError(text)
        return value

    parse.__name__ = name  # argparse names the type in its error: "invalid port value: '70000'"
    return parse


port = _bounded(int, 0, 65535, "port")
port.__doc__ = "A TCP port, 0..65535 (0: any free one, named in the server's first line)."


def build_parser(env: Mapping[str, str]) -> argparse.ArgumentParser:
    doc = serving.__doc__
    p = _Parser(
        prog=SERVE_MODULE,
        description=doc.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=doc.split("\n\n", 1)[1],
    )
    p.add_argument(
        "--model-dir",
        default=env.get(STORAGE_URI),
        metavar="DIR_OR_URI",
        help=f"the SavedModel folder, local or gs:// (default ${STORAGE_URI})",
    )
    p.add_argument(
        "--port",
        type=port,
        default=env.get(HTTP_PORT, SERVING_DEFAULTS[HTTP_PORT]),
        help=f"port to listen on (default ${HTTP_PORT}, else {SERVING_DEFAULTS[HTTP_PORT]})",
    )
    p.add_argument(
        "--host", default="0.0.0.0", help="address to listen on (default %(default)s, as Vertex AI requires)"
    )
    p.add_argument(
        "--max-batch-size",
        type=_bounded(int, 1, 100_000, "batch size"),
        default=env.get(MAX_BATCH_SIZE_ENV, DEFAULT_MAX_BATCH_SIZE),
        help="most instances in one signature call; concurrent requests are batched up to it, a "
        f"larger one runs alone (default ${MAX_BATCH_SIZE_ENV}, else %(default)s)",
    )
    p.add_argument(
        "--batch-timeout-ms",
        type=_bounded(float, 0, 10_000, "milliseconds"),
        default=env.get(BATCH_TIMEOUT_ENV, DEFAULT_BATCH_TIMEOUT_MS),
        help="how long a batch that is not full waits for more requests; 0: none, a batch forms "
        "from what arrives while the previous call runs "
        f"(default ${BATCH_TIMEOUT_ENV}, else %(default)s)",
    )
    p.add_argument(
        "--load-timeout",
        type=_bounded(float, 1, 86_400, "seconds"),
        default=env.get(LOAD_TIMEOUT_ENV, DEFAULT_LOAD_TIMEOUT_S),
        help="seconds the model may take to copy, load and warm up before the server exits 1 "
        f"(default ${LOAD_TIMEOUT_ENV}, else %(default)s)",
    )
    p.add_argument(
        "--max-connections",
        type=_bounded(int, 1, 1_000_000, "count"),
        default=None,
        help=f"open connections at most; one more is answered 503 (default {MAX_CONNECTIONS}, or "
        "fewer where the file-descriptor limit is lower)",
    )
    p.add_argument(
        "--header-timeout",
        type=_bounded(float, 0.1, 3600, "seconds"),
        default=HEADER_TIMEOUT_S,
        help="seconds from a request's first byte to its last header line, however slowly they "
        "trickle; 408 after (default %(default)s)",
    )
    p.add_argument(
        "--body-timeout",
        type=_bounded(float, 0.1, 3600, "seconds"),
        default=BODY_TIMEOUT_S,
        help="seconds from a request's admission to its body's last byte; 408 after (default %(default)s)",
    )
    p.add_argument(
        "--send-timeout",
        type=_bounded(float, 0.1, 3600, "seconds"),
        default=SEND_TIMEOUT_S,
        help="seconds a response's write may stall (the client reads nothing) before the connection is "
        "aborted (default %(default)s)",
    )
    return p


def _route(env: Mapping[str, str], name: str) -> str:
    value = env.get(name) or SERVING_DEFAULTS[name]
    if not value.startswith("/") or any(c.isspace() for c in value):
        raise ServeError(f"{name}={value!r}: not an HTTP path; allowed: a path starting with /")
    return value


def _listen(host: str, number: int) -> socket.socket:
    try:
        infos = socket.getaddrinfo(host, number, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        # The protocol number too: asyncio sets TCP_NODELAY only on sockets that say IPPROTO_TCP, and without
        # it a response's second write waits for the client's delayed ACK (40 ms on a keep-alive connection).
        sock = socket.socket(infos[0][0], socket.SOCK_STREAM, infos[0][2])
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(infos[0][4])
            sock.listen(BACKLOG)
        except BaseException:
            sock.close()
            raise
    except (OSError, OverflowError) as exc:
        raise ServeError(
            f"cannot listen on {host}:{number}: {getattr(exc, 'strerror', None) or exc}"
        ) from None
    sock.setblocking(False)
    return sock


def connection_limit() -> int:
    """MAX_CONNECTIONS, or what the file-descriptor limit leaves room for (raised to its hard limit first)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(1, min(MAX_CONNECTIONS, soft - FD_RESERVE))


class RateLimit(logging.Filter):
    """At most ``burst`` records at once and ``per_s`` a second after that; the next record let through
    says how many were dropped (a thousand clients that drop their connections are not a thousand lines).
    ERROR and above, and uvicorn's start-up and shutdown lines (its server module's), always pass: they are
    the server's own, not clients', and are never lost in a burst of client faults."""

    def __init__(self, burst: int, per_s: float):
        super().__init__()
        self.burst, self.per_s = burst, per_s
        self.tokens, self.last, self.dropped = float(burst), time.monotonic(), 0
        self.lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR or (record.name == "uvicorn.error" and record.module == "server"):
            return True
        with self.lock:
            now = time.monotonic()
            self.tokens = min(self.burst, self.tokens + (now - self.last) * self.per_s)
            self.last = now
            if self.tokens < 1:
                self.dropped += 1
                return False
            self.tokens -= 1
            if self.dropped:
                record.msg = f"{record.msg} ({self.dropped} similar lines dropped)"
                self.dropped = 0
        return True


def _configure_logging() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow's import: no CUDA probing noise
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    for name in ("tensorflow", "absl"):  # their INFO lines (loading, fingerprints) would drown the server's
        logging.getLogger(name).setLevel(logging.WARNING)
    # uvicorn's own warnings are about clients (invalid requests, unsupported upgrades) but for a few.
    logging.getLogger("uvicorn.error").addFilter(RateLimit(*LOG_RATE))
    logging.getLogger(f"{SERVE_MODULE}.clients").addFilter(RateLimit(*LOG_RATE))


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    # A stop signal from the very start is kept and acted on once the server exists: uvicorn's handler comes
    # later, and until then SIGTERM killed the process (exit 143, not 0). Only the main thread may set them.
    early: list[int] = []
    main_thread = threading.current_thread() is threading.main_thread()
    stops = (signal.SIGTERM, signal.SIGINT)
    previous = {s: signal.signal(s, lambda sig, _: early.append(sig)) for s in stops} if main_thread else {}
    try:
        return _main(argv, env, early)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _main(argv: Sequence[str] | None, env: Mapping[str, str] | None, early: list[int]) -> int:
    env = os.environ if env is None else env
    prog = f"{SERVE_MODULE}: error: "
    args = build_parser(env).parse_args(argv)
    try:
        if not args.model_dir:
            raise ServeError(f"no model: give --model-dir DIR or set {STORAGE_URI}")
        source = args.model_dir if remote(args.model_dir) else str(Path(args.model_dir).resolve())
        problem = None if remote(source) else model_dir_problem(args.model_dir)
        if problem:
            raise ServeError(problem)
        health, predict = _route(env, HEALTH_ROUTE), _route(env, PREDICT_ROUTE)
        sock = _listen(args.host, args.port)
    except ServeError as exc:
        print(prog + str(exc), file=sys.stderr)
        return exc.status
    _configure_logging()
    import uvicorn  # after the checks: bad input is answered before anything heavy is imported

    from serving.app import App
    from serving.http import Protocol, Server

    host, bound = sock.getsockname()[:2]
    url = f"http://{'127.0.0.1' if host == '0.0.0.0' else host}:{bound}"
    log.info("listening on %s (GET %s, POST %s); loading %s", url, health, predict, source)
    limit = connection_limit()
    protocol = type(
        "Protocol",
        (Protocol,),
        {
            "max_connections": min(args.max_connections or limit, limit),
            "header_timeout_s": args.header_timeout,
            "send_timeout_s": args.send_timeout,
        },
    )
    predicting = ThreadPoolExecutor(max_workers=8, thread_name_prefix="predict")
    parsing = ThreadPoolExecutor(max_workers=1, thread_name_prefix="parse")
    app = App(
        health,
        predict,
        predicting,
        parsing,
        max_batch_size=args.max_batch_size,
        batch_timeout_s=args.batch_timeout_ms / 1000,
        body_timeout_s=args.body_timeout,
    )
    config = uvicorn.Config(
        app,
        http=protocol,
        loop="asyncio",
        lifespan="off",
        # No websockets: with them, a POST with Upgrade: websocket was handed to a websocket handshake that
        # never answered and held its connection for ever.
        ws="none",
        log_config=None,
        access_log=False,
        server_header=False,
        proxy_headers=False,
        timeout_keep_alive=IDLE_TIMEOUT_S,
        timeout_graceful_shutdown=STOP_GRACE_S,
        backlog=BACKLOG,
    )
    server = Server(config)
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGINT):  # until uvicorn installs the same: a stop at start-up
            signal.signal(signum, server.handle_exit)
    if early:
        server.handle_exit(early[0], None)
    # The gs:// copy's folder is made here, not in the loading thread: a load cut short (its deadline, a stop)
    # leaves the thread behind, and the folder must still be removed below.
    copy = tempfile.mkdtemp(prefix="serving-") if remote(source) else None

    def load(loop: asyncio.AbstractEventLoop) -> None:
        start = time.perf_counter()
        try:
            from serving.model import example_request, load_model

            signatures, _ = load_model(source, copy)
        except ServeError as exc:
            print(prog + str(exc), file=sys.stderr, flush=True)
            loop.call_soon_threadsafe(server.stop, exc.status)
            return
        except Exception as exc:  # noqa: BLE001 - e.g. Cloud Storage refusing the copy: one line, exit 1
            reason = " ".join(str(exc).split())[:300]
            print(prog + f"{source}: {type(exc).__name__}: {reason}", file=sys.stderr, flush=True)
            loop.call_soon_threadsafe(server.stop, EXIT_FAILED)
            return
        # TensorFlow and the loaded model leave ~400k Python objects that live as long as the process: out of
        # the collector's way, a full collection no longer walks them (0.2-0.9 s a time here, a stall of every
        # request in flight), only what requests allocate.
        gc.collect()
        gc.freeze()
        loop.call_soon_threadsafe(ready, signatures, time.perf_counter() - start, example_request(signatures))

    def ready(signatures, seconds: float, example: dict) -> None:
        if server.should_exit:
            return
        app.ready(signatures)
        listed = (f"{n}({', '.join(i.name for i in s.inputs)})" for n, s in sorted(signatures.items()))
        log.info("ready in %.1f s: %s", seconds, "; ".join(listed))
        log.info(
            "e.g. curl -s %s%s -H 'Content-Type: application/json' -d '%s'", url, predict, json.dumps(example)
        )

    def load_late() -> None:
        if app.signatures is None and not server.should_exit:
            print(
                prog + f"{source}: not loaded within {args.load_timeout:g} s (--load-timeout)",
                file=sys.stderr,
                flush=True,
            )
            server.stop(EXIT_FAILED)

    async def run() -> None:
        loop = asyncio.get_running_loop()
        # A daemon thread, not an executor's: a load that hangs (a model file that never answers) must not
        # hold up the exit.
        threading.Thread(target=load, args=(loop,), name="load-model", daemon=True).start()
        loop.call_later(args.load_timeout, load_late)
        await server.serve(sockets=[sock])

    try:
        asyncio.run(run())
    finally:
        sock.close()
        if copy:
            shutil.rmtree(copy, ignore_errors=True)
    if server.status == 0:
        log.info("stopped")
    return server.status


def run() -> None:
    """``python -m serving``: main(), then out at once."""
    status = main()
    # Skip the interpreter's teardown: with TensorFlow loaded it takes ~2 s after the server has stopped, and
    # a model load that hangs in a daemon thread would hold it up for ever. Nothing in it matters once the
    # log is flushed.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
