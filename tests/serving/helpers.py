"""Shared by the serving tests: a prediction server (``python -m serving``, or ``run_job.py serve``) started
as a subprocess on a free port, and requests to it over real HTTP (fixtures stay in the test modules, which
start one server per exported model)."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import subprocess_env
from tests.trainer.helpers import REPO_ROOT

READY_TIMEOUT_S = 180  # a TensorFlow import and a model load on a loaded 2-core machine
TOY_MODEL = REPO_ROOT / "tests" / "serving" / "toy_model.py"


def export_toy(out: Path) -> Path:
    """The toy SavedModel (tests/serving/toy_model.py) exported into ``out``, in a process of its own."""
    proc = subprocess.run([sys.executable, str(TOY_MODEL), str(out)], cwd=REPO_ROOT, env=subprocess_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie waiting for its parent to reap it does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@dataclass
class Server:
    port: int
    log: Path
    health_route: str = "/health"
    predict_route: str = "/predict"
    loading_answers: int = 0  # how many health checks answered 503 before the first 200
    proc: subprocess.Popen | None = None

    def request(self, method: str, route: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, dict]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.request(method, route, body=body, headers=headers or {})
            response = conn.getresponse()
            return response.status, parse_one_line(response.read())
        finally:
            conn.close()

    def predict(self, instances: list, signature: str | None = None) -> tuple[int, dict]:
        payload = {"instances": instances}
        if signature:
            payload["parameters"] = {"signature": signature}
        return self.request("POST", self.predict_route, json.dumps(payload).encode(),
                            {"Content-Type": "application/json"})

    def predictions(self, instances: list, signature: str | None = None) -> list:
        status, body = self.predict(instances, signature)
        assert status == 200, body
        assert len(body["predictions"]) == len(instances)
        return body["predictions"]

    def raw(self, data: bytes) -> tuple[int, dict]:
        """Send ``data`` as the whole request (whatever http.client would not send); the status and body."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=60) as sock:
            sock.sendall(data)
            status, _, body = read_response(sock)
        return status, parse_one_line(body)


def read_response(sock: socket.socket) -> tuple[int, bytes, bytes]:
    """One HTTP response from ``sock``: (status, head, body); the body read by its Content-Length."""
    reply = b""
    while chunk := sock.recv(65536):
        reply += chunk
        head, _, body = reply.partition(b"\r\n\r\n")
        length = re.search(rb"content-length: (\d+)", head, re.I)
        if length and len(body) >= int(length[1]):
            break
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head, "no answer"
    return int(head.split()[1]), head, body


def parse_one_line(body: bytes) -> dict:
    """A response body: one line of JSON (errors included), never a traceback."""
    text = body.decode()
    assert text.endswith("\n") and "\n" not in text[:-1] and "Traceback" not in text, text[:500]
    return json.loads(text)


@contextlib.contextmanager
def serving(command: list[str], *, env: dict[str, str] | None = None, health_route: str = "/health",
            predict_route: str = "/predict", log_dir: Path, stop: int = signal.SIGTERM,
            clean_stop: bool = True) -> Iterator[Server]:
    """Run ``command`` (a server on ``--port 0`` or AIP_HTTP_PORT=0) until it answers its health route 200;
    on leaving, send it ``stop`` (unless the test stopped it) and check that it stopped cleanly (exit 0,
    "stopped" logged) unless ``clean_stop`` is False."""
    log = log_dir / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, cwd=REPO_ROOT, env=env or subprocess_env(), stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        server = Server(_port(proc, log), log, health_route, predict_route, proc=proc)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            assert proc.poll() is None, log.read_text()[-3000:]
            status, body = server.request("GET", health_route)
            if status == 200:
                break
            assert (status, body) == (503, {"status": "loading"}), body
            server.loading_answers += 1
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        yield server
        if proc.poll() is None:  # a test may have stopped it itself
            os.killpg(proc.pid, stop)  # the whole group, as a terminal's Ctrl-C reaches run_job.py
        status = proc.wait(timeout=60)
        if clean_stop:
            assert status == 0, log.read_text()[-3000:]
            assert "serving: stopped" in log.read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _port(proc: subprocess.Popen, log: Path) -> int:
    """The port the server names in its first line (it listens before TensorFlow is imported)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = re.search(r"listening on http://127\.0\.0\.1:(\d+)", log.read_text())
        if found:
            return int(found[1])
        assert proc.poll() is None, log.read_text()[-3000:]
        time.sleep(0.05)
    raise AssertionError(f"no 'listening on' line: {log.read_text()[-3000:]}")
