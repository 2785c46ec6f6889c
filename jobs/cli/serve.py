"""`run_job.py serve MODEL_DIR`: serve an exported SavedModel on this machine as its Model Registry entry
serves it on Vertex AI: ``python -m serving`` on this checkout's server and the lock's TensorFlow,
with the variables Vertex AI sets in the container (AIP_STORAGE_URI, AIP_HTTP_PORT, AIP_HEALTH_ROUTE,
AIP_PREDICT_ROUTE). The server runs in the foreground; Ctrl-C stops it. See serving/ for the requests it
takes.

    python scripts/run_job.py serve /tmp/census-run/model [--port 8080] [--host 127.0.0.1] [--container]

``--container`` runs it as Vertex AI does, in the trainer's cpu image built from this checkout (docker or
podman): ``python -m serving`` with those variables, port 8080 published on --host:--port, the model
mounted read-only; Ctrl-C or SIGTERM stops the container, which is removed.

Imports no TensorFlow: the server is a child process, and MODEL_DIR is checked before it starts. The child
runs in a session of its own and every stop signal this process gets (SIGINT, SIGTERM, SIGHUP) is passed on
to it once, so it stops gracefully exactly once whoever is signalled (a terminal's Ctrl-C, a supervisor's
SIGTERM to this process alone); on Linux it is also told to stop if this process dies without a word
(SIGKILL). Either way no server is left answering on the port.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import TextIO

from jobs.cli.common import EXIT_BAD_INPUT, EXIT_INTERRUPTED, Parser
from serving.cli import port
from trainer import contract

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="run_job.py serve",
        description=__doc__.split("\n\n")[0],
        epilog="e.g. the model a local run exported: python scripts/run_job.py serve "
        ".local/gs/<models bucket>/census-cpu/<job id>/model",
    )
    p.add_argument("model_dir", metavar="MODEL_DIR", help="an exported SavedModel folder (a job's .../model)")
    p.add_argument(
        "--port",
        type=port,
        default=int(contract.SERVING_DEFAULTS[contract.HTTP_PORT]),
        help="port to listen on (default %(default)s, as on Vertex AI; 0: any free port)",
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default %(default)s: this machine only; 0.0.0.0: every interface)",
    )
    p.add_argument(
        "--container",
        action="store_true",
        help="run the server in the trainer's cpu image built from this checkout (built first when missing), "
        "as Vertex AI runs a Model Registry entry: docker or podman, whichever is present; port 8080 of the "
        "container is published on --host:--port",
    )
    return p


def main(argv: list[str], *, out: TextIO, err: TextIO, repo_root: Path) -> int:
    args = build_parser().parse_args(argv)
    from jobs.api import model_problem

    problem = model_problem(args.model_dir)
    if problem:
        print(f"run_job.py serve: error: {problem}", file=err)
        return EXIT_BAD_INPUT
    from jobs.api import BuildError, JobError, container_port, container_serving, start_server

    model = str(Path(args.model_dir).resolve())
    if not args.container:
        return _serve(args, model, out, repo_root, start_server)
    try:
        # The port is checked (0: chosen) before anything is built: a taken one is refused at once.
        args.port = container_port(args.host, args.port)
        with container_serving(repo_root, out) as start:
            return _serve(args, model, out, repo_root, start, " in its container")
    except JobError as exc:
        print(f"run_job.py serve: error: {exc}", file=err)
        return EXIT_BAD_INPUT
    except BuildError as exc:
        print(f"run_job.py serve: error: {exc}", file=err)
        return 1
    except KeyboardInterrupt:  # while the image was built: the server never started
        return EXIT_INTERRUPTED


def _serve(args, model: str, out: TextIO, repo_root: Path, start, where: str = "") -> int:
    """Start the server (``start``: ``start_server``'s arguments) and wait for it, each stop signal passed
    on once; its exit status."""
    from jobs.api import HEALTH, PREDICT, STOP_WAIT_S, kill_server

    url = f"http://{args.host}:{args.port}" if args.port else "a free port (the server's first line names it)"
    health, predict = HEALTH, PREDICT
    print(
        f"serving {model}{where} on {url} (POST {predict}; GET {health} is 200 once it is loaded); Ctrl-C "
        "stops it",
        file=out,
        flush=True,
    )
    stopping: list[int] = []
    children: list[subprocess.Popen] = []

    def forward(signum, _frame) -> None:
        if not stopping:  # the first stop signal reaches the server; a second one changes nothing
            stopping.append(signum)
            for child in children:
                child.send_signal(signal.SIGTERM if signum == signal.SIGHUP else signum)

    # Signal handlers can only be set from the main thread (a caller on another thread keeps its own).
    main_thread = threading.current_thread() is threading.main_thread()
    previous = {signum: signal.signal(signum, forward) for signum in FORWARDED} if main_thread else {}
    try:
        proc = start(model, host=args.host, port=args.port, repo_root=repo_root)
        children.append(proc)
        if stopping:  # signalled while it was starting
            proc.send_signal(signal.SIGTERM)
        deadline = None
        while True:
            try:
                return proc.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                if stopping and deadline is None:
                    deadline = time.monotonic() + STOP_WAIT_S
                if deadline is not None and time.monotonic() > deadline:
                    return kill_server(proc)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

