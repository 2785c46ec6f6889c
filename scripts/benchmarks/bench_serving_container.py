"""Serving from the container against the bare server: ``run_job.py serve MODEL_DIR`` with and without
``--container``, one after the other on the same export, one client on keep-alive.

    python scripts/benchmarks/bench_serving_container.py [--model-dir DIR] [--requests 500]

For each: the seconds from the command's start to the first 200 on /health (the container's start, the
TensorFlow import and the model load), then ``--requests`` POSTs of the export's own example request
(``example_request.json``, one instance) with the median, p90 and p99 round trip, and the answers of the two
compared (identical bodies). The model is ``--model-dir`` or the newest ``.local/gs/*/census-cpu/*/model``
(after ``python scripts/run_job.py jobs/census_cpu.yaml --local``). The container needs Docker or Podman
and builds the cpu image first when its tag is missing (``make image``).
"""

from __future__ import annotations

import argparse
import glob
import http.client
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RUN_JOB = [sys.executable, str(REPO / "scripts" / "run_job.py"), "serve"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def newest_model() -> str:
    found = sorted(glob.glob(str(REPO / ".local/gs/*/census-cpu/*/model")), key=os.path.getmtime)
    if not found:
        sys.exit("no census export: first run "
                 "`.venv/bin/python scripts/run_job.py jobs/census_cpu.yaml --local`")
    return found[-1]


def measure(model: str, container: bool, requests: int) -> dict:
    port = free_port()
    command = [*RUN_JOB, model, "--port", str(port), *(["--container"] if container else [])]
    body = (Path(model) / "example_request.json").read_bytes()
    started = time.perf_counter()
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        conn = None
        while True:
            if proc.poll() is not None:
                sys.exit(f"{' '.join(command)} exited with status {proc.returncode}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                conn.request("GET", "/health")
                response = conn.getresponse()
                response.read()
                if response.status == 200:
                    break
            except OSError:
                pass
            conn.close()
            time.sleep(0.2)
        ready = time.perf_counter() - started
        times, answer = [], b""
        for _ in range(requests):
            t0 = time.perf_counter()
            conn.request("POST", "/predict", body, {"Content-Type": "application/json"})
            response = conn.getresponse()
            answer = response.read()
            times.append((time.perf_counter() - t0) * 1000)
            assert response.status == 200, answer
        conn.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        status = proc.wait(timeout=120)
    times.sort()
    return {"ready_s": ready, "p50": statistics.median(times), "p90": times[int(0.9 * len(times))],
            "p99": times[int(0.99 * len(times))], "answer": answer, "status": status}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", help="an exported SavedModel folder (default: the newest census one)")
    parser.add_argument("--requests", type=int, default=500)
    args = parser.parse_args()
    model = str(Path(args.model_dir or newest_model()).resolve())
    print(f"model: {model}")
    results = {}
    for name, container in (("bare", False), ("container", True)):
        results[name] = r = measure(model, container, args.requests)
        print(f"{name:>9}: ready in {r['ready_s']:.1f} s; {args.requests} requests, round trip p50 "
              f"{r['p50']:.2f} ms, p90 {r['p90']:.2f} ms, p99 {r['p99']:.2f} ms; exit status {r['status']}")
    same = results["bare"]["answer"] == results["container"]["answer"]
    print(f"answers identical: {same}")


if __name__ == "__main__":
    main()
