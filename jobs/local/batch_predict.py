"""A batch prediction on this machine (``run_job.py batch-predict MODEL_DIR --local``): the serving server on
the SavedModel, the JSONL input streamed through it, Vertex AI's output layout written as it goes.

Input: the gs:// files of ``--input`` (wildcards expanded), mapped under the local root as ``--local``
jobs map them, in name order. Output: ``<output>/prediction-<model>-<UTC time>/``, one shard per input
file, as a Vertex AI BatchPredictionJob on a custom container writes them:
``prediction.results-0000i-of-0000N`` (lines ``{"instance": ..., "prediction": ...}``) and
``prediction.errors_stats-0000i-of-0000N`` (lines ``{"instance": ..., "error": {"status", "message"}}``
for the instances the server refused).

Bounded memory whatever the input's size: each file is read a line at a time (a line is at most the
server's body limit, read no further), at most ``WINDOW`` requests are in flight, and each answer is
written out in input order as soon as the requests before it are. The input is checked in a first pass
(each line JSON, within the limit) before the server starts or anything is written: bad input is one line
naming the file and line. A request the server refuses is sent again one instance at a time, so only the
instances at fault go to the errors file, as on Vertex AI.
"""

from __future__ import annotations

import glob
import http.client
import json
import os
import stat
import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from common.reader import file_kind
from jobs.definition.errors import SHORT_NAME, short
from jobs.local.environment import free_ports, inside, to_local
from jobs.local.server import HEALTH, PREDICT, start_server, stop_server
from jobs.local.spec import LocalRunError
from serving.requests import MAX_BODY_BYTES

WINDOW = 8  # requests in flight: enough to keep the server's batcher fed, each at most MAX_BODY_BYTES
MAX_FILES = 10_000  # input files (output shards) of one run
RETRY_S = 60.0  # how long a request the server is too busy for (429, 503) is retried
REQUEST_TIMEOUT_S = 120.0
RESULTS = "prediction.results"
ERRORS = "prediction.errors_stats"
# gRPC status names of the HTTP answers a refused instance gets (google.rpc.Code), as Vertex AI writes them.
STATUS = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 408: "DEADLINE_EXCEEDED", 413: "INVALID_ARGUMENT",
          429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}


class BatchFailed(RuntimeError):
    """The run could not go on (the server exited or stopped answering): one line, exit status 1."""


@dataclass(frozen=True)
class Summary:
    instances: int
    predictions: int
    errors: int
    seconds: float
    folder: Path

    def line(self) -> str:
        rate = self.instances / self.seconds if self.seconds else 0.0
        return (
            f"{self.instances} instances: {self.predictions} predictions, {self.errors} errors in "
            f"{self.seconds:.1f} s ({rate:.0f} instances/s); output in {self.folder}"
        )


def envelope(parameters: dict[str, Any] | None) -> tuple[bytes, bytes]:
    """What surrounds the instances of a request body."""
    tail = b"]" + (b',"parameters":' + json.dumps(parameters).encode() if parameters else b"") + b"}"
    return b'{"instances":[', tail


def line_limit(parameters: dict[str, Any] | None) -> int:
    """The longest line that fits a request of its own under the server's body limit."""
    head, tail = envelope(parameters)
    return MAX_BODY_BYTES - len(head) - len(tail)


# --- the input and output paths -------------------------------------------------------------------------


def input_files(uris: tuple[str, ...], local_root: Path) -> list[Path]:
    """The files ``--input`` names under the local root, wildcards expanded: regular files only."""
    files: list[Path] = []
    for uri in uris:
        pattern = to_local(uri, local_root, "--input")
        found = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if len(files) + len(found) > MAX_FILES:
            raise LocalRunError("--input", f"{short(uri)} matches {len(found)} files",
                                f"at most {MAX_FILES} files in all (each is an output shard)")
        if not found:
            raise LocalRunError("--input", f"{short(uri)} matches no file under {local_root / 'gs'}",
                                "a gs:// URI of existing .jsonl files (mapped under --local-root)")
        for name in found:
            path = inside(name, local_root, "--input")
            try:
                mode = os.stat(path).st_mode
            except OSError as exc:
                problem = f"{_shown(path)}: {exc.strerror}"
                raise LocalRunError("--input", problem, "a readable .jsonl file") from None
            if not stat.S_ISREG(mode):  # a FIFO would block the scan, a device never end
                problem = f"{_shown(path)} is {file_kind(mode)}"
                raise LocalRunError("--input", problem, "a regular .jsonl file")
            if path not in files:
                files.append(path)
    return files


def output_folder(uri: str, local_root: Path) -> Path:
    """The folder ``--output`` names under the local root: one that exists, or can be made, as a folder."""
    folder = inside(to_local(uri, local_root, "--output"), local_root, "--output")
    probe = folder
    while not probe.exists():  # the nearest part that exists must be a writable folder
        probe = probe.parent
    if not probe.is_dir():
        what = "is a file" if probe == folder else f"lies under a file ({_shown(probe)})"
        raise LocalRunError("--output", f"{_shown(folder)} {what}", "a folder, new or existing")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise LocalRunError("--output", f"{_shown(probe)} is not writable", "a folder this user can write")
    return folder


def _shown(path: Path) -> str:
    return short(str(path), SHORT_NAME, quote=False)


# --- reading: one bounded line at a time ------------------------------------------------------------------


def read_lines(path: Path, limit: int) -> Iterator[tuple[int, bytes]]:
    """(line number, stripped line) of each non-blank line; LocalRunError at the first one over ``limit``
    bytes (read no further than that), not UTF-8 or not JSON."""
    with open(path, "rb") as handle:
        number = 0
        while True:
            raw = handle.readline(limit + 2)
            if not raw:
                return
            number += 1
            # The line as written counts (padding too): one cut short at the read's end is over the limit.
            if len(raw.rstrip(b"\r\n")) > limit:
                raise LocalRunError(
                    "--input",
                    f"{_shown(path)} line {number} is over {limit:,} bytes, more than fits the server's "
                    f"request body limit of {MAX_BODY_BYTES:,} bytes",
                    "one JSON instance per line, each under the limit",
                )
            line = raw.strip()
            if line:
                yield number, line


def check_line(path: Path, number: int, line: bytes) -> None:
    try:
        json.loads(line, parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        why = str(exc).split(":")[0] if not isinstance(exc, UnicodeDecodeError) else "not UTF-8"
        raise LocalRunError(
            "--input", f"{_shown(path)} line {number} is not JSON ({why})", "one JSON instance per line"
        ) from None


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def scan(files: list[Path], limit: int) -> int:
    """The first pass: every line of every file checked; the number of instances."""
    count = 0
    for path in files:
        for number, line in read_lines(path, limit):
            check_line(path, number, line)
            count += 1
    return count


# --- the server -----------------------------------------------------------------------------------------


class Client:
    """Requests to the server, one keep-alive connection per thread."""

    def __init__(self, port: int, parameters: dict[str, Any] | None) -> None:
        self.port = port
        self.head, self.tail = envelope(parameters)
        self.local = threading.local()

    def _request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes, float]:
        for attempt in (0, 1):  # a keep-alive connection the server closed in between is opened again once
            conn = getattr(self.local, "conn", None)
            if conn is None:
                conn = self.local.conn = http.client.HTTPConnection("127.0.0.1", self.port,
                                                                    timeout=REQUEST_TIMEOUT_S)
            try:
                headers = {"Content-Type": "application/json"} if body is not None else {}
                conn.request(method, path, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read()
                retry = float(response.getheader("Retry-After") or 1)
                if response.getheader("Connection", "").lower() == "close":
                    conn.close()
                    self.local.conn = None
                return response.status, data, retry
            except (OSError, http.client.HTTPException):
                conn.close()
                self.local.conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def signatures(self) -> list[str] | None:
        """The model's signatures once the server is ready (its health answer lists them); None before."""
        try:
            status, data, _ = self._request("GET", HEALTH)
        except (OSError, http.client.HTTPException):
            return None
        return sorted(json.loads(data)["signatures"]) if status == 200 else None

    def predict(self, lines: list[bytes]) -> list[tuple[bool, bytes]]:
        """(True, prediction JSON) or (False, error JSON) per line; a refused request is split into one
        request per instance, so that only the instances at fault are errors."""
        body = self.head + b",".join(lines) + self.tail
        deadline = time.monotonic() + RETRY_S
        while True:
            try:
                status, data, retry = self._request("POST", PREDICT, body)
            except (OSError, http.client.HTTPException) as exc:
                raise BatchFailed(f"the server stopped answering ({type(exc).__name__}: {exc})") from None
            if status in (429, 503) and time.monotonic() < deadline:  # busy: admission will come
                time.sleep(retry)
                continue
            break
        if status == 200:
            predictions = json.loads(data)["predictions"]
            if len(predictions) != len(lines):
                raise BatchFailed(f"{len(predictions)} predictions for {len(lines)} instances")
            return [(True, json.dumps(p, separators=(",", ":")).encode()) for p in predictions]
        try:
            refusal = json.loads(data)
            message, field = str(refusal.get("error")), str(refusal.get("field"))
        except (ValueError, AttributeError):
            message, field = data[:1000].decode(errors="replace"), ""
        if field.startswith("parameters"):  # every request would be refused alike: not an instance's fault
            raise BatchFailed(f"the server refused the request: {message}")
        if len(lines) > 1:
            return [result for line in lines for result in self.predict([line])]
        error = {"status": STATUS.get(status, f"HTTP_{status}"), "message": message}
        return [(False, json.dumps(error).encode())]


def wait_ready(client: Client, proc, parameters: dict[str, Any] | None) -> None:
    """Until the server has loaded the model; a --signature the model does not have is refused then, before
    anything is written."""
    while (signatures := client.signatures()) is None:
        if proc.poll() is not None:
            raise BatchFailed(f"the server exited with status {proc.returncode} before it was ready (its "
                              "lines above say why)")
        time.sleep(0.2)
    wanted = (parameters or {}).get("signature")
    if wanted and wanted not in signatures:
        problem = f"the model has no signature {short(wanted)}"
        raise LocalRunError("--signature", problem, ", ".join(signatures))


# --- the run --------------------------------------------------------------------------------------------


def prepare(inputs: tuple[str, ...], output: str, local_root: Path,
            parameters: dict[str, Any] | None) -> tuple[list[Path], Path, int]:
    """Everything checked before anything starts: the input files (every line), the output folder."""
    files = input_files(inputs, local_root)
    folder = output_folder(output, local_root)
    return files, folder, scan(files, line_limit(parameters))


def run_batch(
    model_dir: str,
    files: list[Path],
    folder: Path,
    *,
    parameters: dict[str, Any] | None,
    batch_size: int,
    repo_root: Path,
    out: TextIO,
    now: datetime | None = None,
    start=start_server,
) -> Summary:
    """Start the server on ``model_dir``, stream ``files`` through it into a new folder under ``folder``.
    ``start``: what starts the server (``start_server``'s arguments; a container's, with --container)."""
    model = str(Path(model_dir).resolve())
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    target = folder / f"prediction-{Path(model).name}-{stamp}"
    port = free_ports(1)[0]
    proc = start(model, host="127.0.0.1", port=port, repo_root=repo_root)
    try:
        client = Client(port, parameters)
        wait_ready(client, proc, parameters)
        print(f"server ready on 127.0.0.1:{port}; writing {target}", file=out, flush=True)
        start = time.perf_counter()
        target.mkdir(parents=True)
        counts = [0, 0]
        with ThreadPoolExecutor(WINDOW, thread_name_prefix="batch") as pool:
            for index, path in enumerate(files):
                shard = f"{index:05d}-of-{len(files):05d}"
                with open(target / f"{RESULTS}-{shard}", "wb") as results, \
                        open(target / f"{ERRORS}-{shard}", "wb") as errors:
                    _stream(client, pool, path, batch_size, line_limit(parameters), results, errors, counts,
                            proc)
        seconds = time.perf_counter() - start
    finally:
        stop_server(proc)
    return Summary(counts[0] + counts[1], counts[0], counts[1], seconds, target)


def _stream(client, pool, path, batch_size, limit, results, errors, counts, proc) -> None:
    pending: deque[tuple[list[bytes], Future]] = deque()

    def drain(keep: int) -> None:
        while len(pending) > keep:
            lines, future = pending.popleft()
            for line, (ok, payload) in zip(lines, future.result(), strict=True):
                key, sink = (b"prediction", results) if ok else (b"error", errors)
                sink.write(b'{"instance":' + line + b',"' + key + b'":' + payload + b"}\n")
                counts[0 if ok else 1] += 1

    batch: list[bytes] = []
    size = 0
    for number, line in read_lines(path, limit):
        check_line(path, number, line)  # the file may have changed since the scan: stop at a bad line
        if batch and (len(batch) == batch_size or size + 1 + len(line) > limit):
            pending.append((batch, pool.submit(client.predict, batch)))
            drain(WINDOW)
            batch, size = [], 0
            if proc.poll() is not None:
                raise BatchFailed(f"the server exited with status {proc.returncode}")
        batch.append(line)
        size += len(line) + (1 if len(batch) > 1 else 0)
    if batch:
        pending.append((batch, pool.submit(client.predict, batch)))
    drain(0)
