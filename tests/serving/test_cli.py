"""serving/cli.py: bad flags, variables and models are one line on stderr with exit status 2, before
TensorFlow is imported; a model directory built to hang or exhaust the load (a 3 GB sparse graph, a FIFO in
variables/) is refused the same way within seconds."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from tests.helpers import subprocess_env


def _taken_port():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


@pytest.mark.parametrize("case", ["no-model", "missing", "fifo", "no-saved-model", "bad-port", "port-taken",
                                  "bad-route", "bad-batch-size", "sparse-3-gb-graph", "fifo-variables"])
def test_command_line_bad_input_is_one_line_exit_2(case, tmp_path):
    env = subprocess_env()
    args = ["--host", "127.0.0.1", "--port", "0", "--model-dir", str(tmp_path)]
    taken = None
    if case == "no-model":
        args = args[:4]
        expected = "serving: error: no model: give --model-dir DIR or set AIP_STORAGE_URI"
    elif case == "missing":
        args[-1] += "/nothing"
        expected = f"serving: error: {tmp_path}/nothing: no such file or directory"
    elif case == "fifo":
        os.mkfifo(tmp_path / "model")
        args[-1] += "/model"
        expected = f"serving: error: {tmp_path}/model: not a directory"
    elif case == "no-saved-model":
        expected = f"serving: error: {tmp_path}: no SavedModel here (no saved_model.pb)"
    elif case == "bad-port":
        args, env = args[:2] + args[4:], subprocess_env(AIP_HTTP_PORT="80808")  # Vertex AI's variable
        expected = "serving: error: argument --port: invalid port value: '80808'"
    else:
        (tmp_path / "saved_model.pb").write_bytes(b"")
        if case == "port-taken":
            taken = _taken_port()
            args[3] = str(taken.getsockname()[1])
            expected = f"serving: error: cannot listen on 127.0.0.1:{args[3]}: Address already in use"
        elif case == "bad-route":
            env = subprocess_env(AIP_PREDICT_ROUTE="predict")
            expected = "serving: error: AIP_PREDICT_ROUTE='predict': not an HTTP path"
        elif case == "bad-batch-size":
            env = subprocess_env(SERVING_MAX_BATCH_SIZE="0")  # the variable a Model's containerSpec.env sets
            expected = "serving: error: argument --max-batch-size: invalid batch size value: '0'"
        elif case == "sparse-3-gb-graph":
            with open(tmp_path / "saved_model.pb", "wb") as pb:
                pb.truncate(3 << 30)
            expected = f"serving: error: {tmp_path}/saved_model.pb: {3 << 30} bytes; allowed:"
        else:
            (tmp_path / "variables").mkdir()
            os.mkfifo(tmp_path / "variables" / "variables.index")
            expected = f"serving: error: {tmp_path}/variables/variables.index: not a regular file (a FIFO)"
    start = time.monotonic()
    try:
        out = subprocess.run([sys.executable, "-m", "serving", *args], env=env, capture_output=True,
                             text=True, timeout=30)
    finally:
        if taken:
            taken.close()
    assert out.returncode == 2 and out.stdout == ""
    assert time.monotonic() - start < 10  # refused by metadata, before TensorFlow is imported
    assert len(out.stderr.splitlines()) == 1 and out.stderr.startswith(expected), out.stderr


def test_the_log_rate_limit_drops_client_lines_only():
    """A burst of client faults is cut to the limit; the server's errors and uvicorn's start-up and shutdown
    lines pass however many came before them."""
    import logging

    import uvicorn.protocols.http.httptools_impl as protocol_module
    import uvicorn.server as server_module

    from serving.cli import RateLimit

    limit = RateLimit(2, 0.001)

    def record(level, path, msg, name="uvicorn.error"):
        return logging.LogRecord(name, level, path, 1, msg, (), None)

    invalid = "Invalid HTTP request received."
    client = [limit.filter(record(logging.WARNING, protocol_module.__file__, invalid)) for _ in range(5)]
    assert client == [True, True, False, False, False]
    assert limit.filter(record(logging.INFO, server_module.__file__, "Shutting down"))
    assert limit.filter(record(logging.ERROR, protocol_module.__file__, "Exception in ASGI application"))
    assert limit.filter(record(logging.ERROR, __file__, "signature failed", name="serving.clients"))
    assert not limit.filter(record(logging.INFO, __file__, "400", name="serving.clients"))
