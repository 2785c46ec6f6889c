"""`run_job.py serve MODEL_DIR`: serve an exported SavedModel on this machine as its Model Registry entry
serves it on Vertex AI: ``python -m trainer.serve`` on this checkout's trainer and the lock's TensorFlow,
with the variables Vertex AI sets in the container (AIP_STORAGE_URI, AIP_HTTP_PORT, AIP_HEALTH_ROUTE,
AIP_PREDICT_ROUTE). The server runs in the foreground; Ctrl-C stops it. See trainer/serve.py for the
requests it takes.

    python scripts/run_job.py serve /tmp/census-run/model [--port 8080] [--host 127.0.0.1]

Imports no TensorFlow: the server is a child process, and MODEL_DIR is checked before it starts.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import TextIO

from jobs.api import SHORT_NAME, one_line, short
from jobs.cli.common import EXIT_BAD_INPUT, EXIT_INTERRUPTED, Parser
from trainer import contract
from trainer.serve import model_dir_problem, port

STOP_WAIT_S = 30  # after Ctrl-C, how long the server may take to finish the requests in flight


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
    return p


def main(argv: list[str], *, out: TextIO, err: TextIO, repo_root: Path) -> int:
    args = build_parser().parse_args(argv)
    problem = model_dir_problem(args.model_dir)
    if problem:
        # The problem names MODEL_DIR as given: a hostile one (100 KB, newlines) is shown shortened.
        problem = problem.replace(args.model_dir, short(args.model_dir, SHORT_NAME, quote=False), 1)
        print(f"run_job.py serve: error: {one_line(problem)}", file=err)
        return EXIT_BAD_INPUT
    model = str(Path(args.model_dir).resolve())
    defaults = contract.SERVING_DEFAULTS
    routes = {name: defaults[name] for name in (contract.HEALTH_ROUTE, contract.PREDICT_ROUTE)}
    env = {
        **os.environ,
        **routes,
        contract.STORAGE_URI: model,
        contract.HTTP_PORT: str(args.port),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(repo_root), os.environ.get("PYTHONPATH")])),
    }
    url = f"http://{args.host}:{args.port}" if args.port else "a free port (the server's first line names it)"
    health, predict = routes[contract.HEALTH_ROUTE], routes[contract.PREDICT_ROUTE]
    print(
        f"serving {model} on {url} (POST {predict}; GET {health} is 200 once it is loaded); Ctrl-C stops it",
        file=out,
        flush=True,
    )
    command = [sys.executable, "-m", contract.SERVE_MODULE, "--host", args.host]
    proc = subprocess.Popen(command, cwd=repo_root, env=env)
    try:
        return proc.wait()
    except KeyboardInterrupt:  # the server got the same SIGINT (one process group) and is stopping
        try:
            return proc.wait(timeout=STOP_WAIT_S)
        except (KeyboardInterrupt, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
            return EXIT_INTERRUPTED
