"""`run_job.py serve MODEL_DIR`: a verb of its own, light (no TensorFlow until the server starts), bad input
is one line with exit status 2 before any server starts, and the server it starts stops with it. Serving a
real export through it is tested with the census export in tests/trainer/test_task.py (the verb is how those
tests start their server)."""

from __future__ import annotations

import os
import re
import signal
import socket
import sys
import time
from pathlib import Path

import pytest

from tests.jobs.helpers import CUSTOM
from tests.scripts.test_run_job import heavy_modules, probe
from tests.serving.helpers import alive, export_toy, serving
from tests.trainer.helpers import REPO_ROOT

RUN_JOB = REPO_ROOT / "scripts" / "run_job.py"


def test_help_is_light(script_env):
    result = probe(["serve", "--help"], script_env)
    assert result.returncode == 0, result.stderr
    usage = " ".join(result.stdout.split("\n\n")[0].split())  # argparse wraps it
    assert usage == "usage: run_job.py serve [-h] [--port PORT] [--host HOST] [--container] MODEL_DIR"
    assert heavy_modules(result.stderr) == ""


@pytest.mark.parametrize("case", ["missing", "file", "fifo", "no-saved-model", "pb-is-a-folder", "port-range",
                                  "port-word", "no-model-dir"])
def test_bad_input_is_one_line_exit_2(case, cli, capsys, tmp_path):
    model = tmp_path / "model"
    args = [model]
    if case == "missing":
        expected = f"run_job.py serve: error: {model}: no such file or directory"
    elif case == "file":
        model.write_text("not a folder")
        expected = f"run_job.py serve: error: {model}: not a directory (a SavedModel is a folder"
    elif case == "fifo":
        os.mkfifo(model)  # never opened: a read would block
        expected = f"run_job.py serve: error: {model}: not a directory"
    elif case in ("no-saved-model", "pb-is-a-folder"):
        (model / ("saved_model.pb" if case == "pb-is-a-folder" else "variables")).mkdir(parents=True)
        why = "saved_model.pb is not a file" if case == "pb-is-a-folder" else "no saved_model.pb"
        expected = f"run_job.py serve: error: {model}: no SavedModel here ({why})"
    elif case.startswith("port"):
        value = "65536" if case == "port-range" else "http"
        args += ["--port", value]
        expected = f"run_job.py serve: error: argument --port: invalid port value: '{value}'"
    else:
        args = []
        expected = "run_job.py serve: error: the following arguments are required: MODEL_DIR"
    rc, out, err = cli(["serve", *args])
    err += capsys.readouterr().err  # argparse writes to sys.stderr itself
    assert rc == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith(expected), err


def test_a_job_file_named_like_the_verb_is_given_as_a_path(cli, tmp_path, monkeypatch):
    (tmp_path / "serve").write_text(CUSTOM, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    rc, out, err = cli(["./serve", "--dry-run"])
    assert rc == 0, err
    assert '"workerPoolSpecs"' in out


# --- the server it starts never outlives it --------------------------------------------------------------


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return export_toy(tmp_path_factory.mktemp("toy") / "model")


def _server_pid(log: Path) -> int:
    """The server's own process id: uvicorn's first line names it."""
    return int(re.search(r"Started server process \[(\d+)\]", log.read_text())[1])


@pytest.mark.parametrize("sent", [signal.SIGTERM, signal.SIGKILL])
def test_a_signal_to_run_job_alone_stops_its_server(toy, tmp_path, sent):
    """A supervisor signals run_job.py, not its process group: SIGTERM is passed on (a graceful stop, exit 0);
    after a SIGKILL, which cannot be passed on, the kernel tells the server (PR_SET_PDEATHSIG)."""
    command = [sys.executable, str(RUN_JOB), "serve", str(toy), "--port", "0"]
    with serving(command, log_dir=tmp_path, clean_stop=sent == signal.SIGTERM) as server:
        child = _server_pid(server.log)
        assert alive(child) and child != server.proc.pid
        server.proc.send_signal(sent)
        assert server.proc.wait(timeout=60) == (0 if sent == signal.SIGTERM else -signal.SIGKILL)
        deadline = time.monotonic() + 30
        while alive(child):
            assert time.monotonic() < deadline, f"the server {child} outlived run_job.py"
            time.sleep(0.1)
        with pytest.raises(OSError):  # nothing answers on the port any more
            socket.create_connection(("127.0.0.1", server.port), timeout=2).close()


def test_sigterm_to_a_local_batch_prediction_stops_it_and_its_server_in_one_line(toy, tmp_path):
    """A supervisor's SIGTERM to `batch-predict --local` ends it as Ctrl-C does: its one line, exit 130,
    and the server it started gone (it used to die with Python's silent 143)."""
    import subprocess

    from tests.helpers import subprocess_env

    data = tmp_path / "root" / "gs" / "data" / "in" / "many.jsonl"
    data.parent.mkdir(parents=True)
    data.write_text("".join(f'{{"x": {i}.5, "name": "u{i}"}}\n' for i in range(400_000)))
    proc = subprocess.Popen(
        [sys.executable, str(RUN_JOB), "batch-predict", str(toy), "--local", "--local-root",
         str(tmp_path / "root"), "--input", "gs://data/in/many.jsonl", "--output", "gs://out/batch/",
         "--batch-size", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env(), cwd=REPO_ROOT,
    )
    try:
        for line in proc.stdout:  # the server is up and predictions are being written
            if line.startswith("server ready"):
                break
        children = [int(p) for p in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()]
        assert children, "no server process under run_job.py"
        proc.send_signal(signal.SIGTERM)
        rest, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    # Its own stderr is the server's log (the server shares it), then run_job.py's one line.
    assert proc.returncode == 130, err[-3000:]
    assert err.splitlines()[-1].startswith("run_job.py batch-predict: interrupted; the server is stopped")
    assert "Traceback" not in err
    assert not [pid for pid in children if alive(pid)]
