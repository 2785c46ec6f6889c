"""The prediction server as a child process on this machine: ``python -m serving`` on this checkout and the
lock's TensorFlow, given the variables Vertex AI sets in its container (AIP_STORAGE_URI, AIP_HTTP_PORT,
AIP_HEALTH_ROUTE, AIP_PREDICT_ROUTE). ``run_job.py serve`` runs it in the foreground; ``batch-predict
--local`` starts it, streams its input through it and stops it.

The child runs in a session of its own (a terminal's Ctrl-C reaches it only through its parent, once) and,
on Linux, is sent SIGTERM when its parent dies however it dies (SIGKILL included): no server outlives the
command that started it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from pathlib import Path

from jobs.definition.errors import SHORT_NAME, one_line, short
from serving.model import model_dir_problem
from trainer import contract

STOP_WAIT_S = 30  # after a stop signal, how long the server may take to finish the requests in flight
PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent dies
ROUTES = {name: contract.SERVING_DEFAULTS[name] for name in (contract.HEALTH_ROUTE, contract.PREDICT_ROUTE)}
HEALTH = ROUTES[contract.HEALTH_ROUTE]
PREDICT = ROUTES[contract.PREDICT_ROUTE]


def model_problem(model_dir: str) -> str | None:
    """Why the server would refuse ``model_dir`` (missing, no SavedModel, over a limit), on one line; None
    when it would load it. The problem names MODEL_DIR as given: a hostile one (100 KB, newlines) is shown
    shortened."""
    problem = model_dir_problem(model_dir)
    if not problem:
        return None
    return one_line(problem.replace(model_dir, short(model_dir, SHORT_NAME, quote=False), 1))


def start_server(model: str, *, host: str, port: int, repo_root: Path, **popen) -> subprocess.Popen:
    """Start the server on ``model`` (an absolute SavedModel folder) listening on ``host``:``port``."""
    env = {
        **os.environ,
        **ROUTES,
        contract.STORAGE_URI: model,
        contract.HTTP_PORT: str(port),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(repo_root), os.environ.get("PYTHONPATH")])),
    }
    command = [sys.executable, "-m", contract.SERVE_MODULE, "--host", host]
    death = _die_with_parent if sys.platform.startswith("linux") else None
    return subprocess.Popen(
        command, cwd=repo_root, env=env, start_new_session=True, preexec_fn=death, **popen
    )


def stop_server(proc: subprocess.Popen, wait_s: float = STOP_WAIT_S) -> int:
    """SIGTERM (the server finishes what is in flight), then SIGKILL after ``wait_s``; its exit status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            return kill_server(proc)
    return proc.returncode


def kill_server(proc: subprocess.Popen) -> int:
    proc.kill()
    proc.wait()
    return 130


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when its parent dies, however it dies."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
