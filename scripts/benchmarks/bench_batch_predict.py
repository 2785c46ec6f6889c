"""Batch prediction benchmark: ``run_job.py batch-predict`` on the recommender, three figures.

    python scripts/benchmarks/bench_batch_predict.py [--model-dir DIR] [--k 10] [--users 100000]

(a) the dry-run of the batch prediction of the shipped registered job's model (jobs/recommender.yaml's
    registry block: ``recommender@production``), its request printed as sent;
(b) ``--local`` on every known MovieLens user (``{"user": ..., "k": K}`` through ``top_k``): wall time of the
    command (server start-up included) and instances/s of the streaming alone (the command's own figure),
    and every prediction compared with the SavedModel's ``top_k`` called directly in this process on the
    same users (items equal, scores equal as float32);
(c) ``--users`` synthetic users (known ids and unknown ones mixed) through the same: the peak RSS (VmHWM) of
    the batch client (run_job.py) and of the server it starts, sampled from /proc while it runs; the client
    must stay within 1 GB of the server.

The model is ``--model-dir`` or the newest ``.local/gs/*/recommender/*/model`` (after
``python scripts/run_job.py jobs/recommender.yaml --local``). Inputs and outputs go to a temporary
``--local-root``.
"""

from __future__ import annotations

import argparse
import csv
import glob
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RUN_JOB = [sys.executable, str(REPO / "scripts" / "run_job.py"), "batch-predict"]
RATINGS = REPO / "data" / "movielens" / "ratings.csv"
BUCKET = "bench-batch"
GB = 1 << 30
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # (b) loads TensorFlow here: no CUDA probing noise


def newest_model() -> str:
    found = sorted(glob.glob(str(REPO / ".local/gs/*/recommender/*/model")), key=os.path.getmtime)
    if not found:
        sys.exit("no recommender export: first run "
                 "`.venv/bin/python scripts/run_job.py jobs/recommender.yaml --local`")
    return found[-1]


def known_users() -> list[str]:
    with open(RATINGS, newline="") as handle:
        return sorted({row["userId"] for row in csv.DictReader(handle)}, key=int)


def write_input(root: Path, name: str, users: list[str], k: int) -> str:
    folder = root / "gs" / BUCKET / "in"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{name}.jsonl", "w") as handle:
        for user in users:
            handle.write(json.dumps({"user": user, "k": k}) + "\n")
    return f"gs://{BUCKET}/in/{name}.jsonl"


def hwm_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as handle:
            return next(int(line.split()[1]) for line in handle if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return 0


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(c) for c in handle.read().split()]
    except OSError:
        return []


def run_local(model: str, uri: str, root: Path, out: str) -> tuple[float, str, int, int]:
    """The command's wall time, its stdout, and the peak RSS (KB) of the client and of its server."""
    command = [*RUN_JOB, model, "--local", "--input", uri, "--output", f"gs://{BUCKET}/{out}/",
               "--signature", "top_k", "--local-root", str(root)]
    start = time.perf_counter()
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    client_kb = server_kb = 0
    server = None
    while proc.poll() is None:
        client_kb = max(client_kb, hwm_kb(proc.pid))
        server = server or next(iter(children(proc.pid)), None)
        if server:
            server_kb = max(server_kb, hwm_kb(server))
        time.sleep(0.05)
    wall = time.perf_counter() - start
    stdout = proc.stdout.read()
    if proc.returncode:
        sys.exit(f"batch-predict exited {proc.returncode}: {stdout}")
    return wall, stdout, client_kb, server_kb


def results(root: Path, out: str) -> list[dict]:
    lines = []
    for path in sorted(glob.glob(str(root / "gs" / BUCKET / out / "prediction-*" / "prediction.results-*"))):
        with open(path) as handle:
            lines += [json.loads(line) for line in handle]
    return lines


def compare(model: str, users: list[str], k: int, lines: list[dict]) -> str:
    import numpy as np
    import tensorflow as tf

    top_k = tf.saved_model.load(model).signatures["top_k"]
    direct = top_k(user=tf.constant(users), k=tf.constant([k] * len(users), tf.int32))
    items = direct["items"].numpy().astype(str)
    scores = direct["scores"].numpy()
    by_user = {line["instance"]["user"]: line["prediction"] for line in lines}
    if sorted(by_user) != sorted(users):
        return f"DIFFERENT: {len(by_user)} users answered of {len(users)}"
    bad = [u for i, u in enumerate(users)
           if by_user[u]["items"] != list(items[i])
           or not np.array_equal(np.float32(by_user[u]["scores"]), scores[i])]
    return "identical" if not bad else f"DIFFERENT for {len(bad)} users, e.g. {bad[:3]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", help="a recommender export (default: the newest under .local/gs)")
    parser.add_argument("--k", type=int, default=10, help="items per user (default %(default)s)")
    parser.add_argument("--users", type=int, default=100_000, help="synthetic users for (c)")
    args = parser.parse_args()
    model = args.model_dir or newest_model()
    print(f"model: {model}; 1-minute load average {os.getloadavg()[0]:.1f} (other work shows in each figure)")

    print("\n(a) dry-run of the batch prediction of jobs/recommender.yaml's registry model:")
    command = [*RUN_JOB, "recommender@production", "--input", "gs://acme-ml-dev-data/batch/users-*.jsonl",
               "--output", "gs://acme-ml-dev-models/recommender-batch/", "--signature", "top_k", "--dry-run"]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=True)
    print(f"$ {' '.join(command[1:])}\n{done.stdout}{done.stderr}({time.perf_counter() - start:.2f} s)")

    with tempfile.TemporaryDirectory(prefix="bench-batch-") as folder:
        root = Path(folder)
        users = known_users()
        uri = write_input(root, "known", users, args.k)
        wall, stdout, client_kb, server_kb = run_local(model, uri, root, "known")
        print(f"\n(b) every known user ({len(users)}), k={args.k}, through top_k --local:")
        print(stdout.strip().splitlines()[-1])
        print(f"wall time {wall:.1f} s (server start-up included), {len(users) / wall:.0f} instances/s "
              f"over the wall time; vs the SavedModel's top_k called directly: "
              f"{compare(model, users, args.k, results(root, 'known'))}")

        rng = random.Random(0)
        synthetic = [rng.choice(users) if rng.random() < 0.5 else f"synthetic-{i}" for i in range(args.users)]
        uri = write_input(root, "synthetic", synthetic, args.k)
        size = (root / "gs" / BUCKET / "in" / "synthetic.jsonl").stat().st_size
        wall, stdout, client_kb, server_kb = run_local(model, uri, root, "synthetic")
        answered = sum(1 for _ in results(root, "synthetic"))
        print(f"\n(c) {args.users} synthetic users ({size / 1e6:.1f} MB of JSONL), k={args.k}:")
        print(stdout.strip().splitlines()[-1])
        verdict = "within" if client_kb * 1024 <= server_kb * 1024 + GB else "OVER"
        print(f"wall time {wall:.1f} s; {answered} result lines; peak RSS: batch client "
              f"{client_kb / 1024:.0f} MB, server {server_kb / 1024:.0f} MB: the client is {verdict} 1 GB "
              "of the server")


if __name__ == "__main__":
    main()
