"""Serving benchmark: the latency of ``python -m trainer.serve`` (what the Model Registry entry runs) per
model and signature, over HTTP on this machine.

    python scripts/benchmarks/bench_serving.py [--requests 100] [--census|--image|--recommender DIR]

Each model is exported by a short ``python -m trainer.task`` run with its default flags (census: one epoch on
adult.data; image_classifier: one epoch on the shipped flowers shards; recommender: one epoch on MovieLens,
EASE skipped), unless ``--census/--image/--recommender DIR`` names an export to reuse. Then the server is
started on it (as ``run_job.py serve`` does), its start-up time read from its log (TensorFlow import, load,
one warm-up call per signature), and ``--requests`` POSTs of one instance each are sent one after another on
one keep-alive connection: a census row of adult.test, one flowers JPEG (~85 KB, as {"b64": ...}), and to
each of the recommender's signatures user 1, item 1, k = 10 as it takes them. Printed per model and
signature: the median and p90 latency of the HTTP round trip, the median of the same instance through the
loaded signature in this process (what the server adds is the difference), and the 1-minute load average
before the requests (the machine's other work shows in every figure).
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_runs import REPO, TrainerFailed, trainer_env
from bench_runs import train as train_once

sys.path.insert(0, str(REPO))  # run as a file, only the script's own folder is on sys.path: trainer too

CENSUS = REPO / "data" / "census"
FLOWERS = REPO / "data" / "flowers"
RATINGS = REPO / "data" / "movielens" / "ratings.csv"
TRAINING = {
    "census": ("wide_deep", ["--train-files", str(CENSUS / "adult.data"), "--eval-files",
                             str(CENSUS / "adult.test"), "--num-epochs", "1"]),
    "image": ("image_classifier", ["--train-files", str(FLOWERS / "*-validation.tfrecord-*"),
                                   "--eval-files", str(FLOWERS / "*-test.tfrecord-*"), "--num-epochs", "1"]),
    "recommender": ("recommender", ["--train-files", str(RATINGS), "--num-epochs", "1",
                                    "--ease-max-items", "0"]),
}


# The recommender's inputs by name: whichever signatures its export has (pairs, top_k, similar_items), each
# gets user 1, item 1 and k = 10.
RECOMMENDER_VALUES = {"user": "1", "item": "1", "k": 10}


def requests_of(model: str, port: int) -> dict[str, dict]:
    """{signature: one instance} the benchmark sends to ``model`` (served on ``port``)."""
    if model == "census":
        from trainer.tasks.census.data import SCHEMA

        line = next(line for line in (CENSUS / "adult.test").read_text().splitlines()[1:] if line.strip())
        row = [field.strip() for field in line.split(",")]
        return {"serving_default": {c.name: int(v) if c.kind == "int" else v
                                    for c, v in zip(SCHEMA.features, row[:14], strict=True)}}
    if model == "image":
        import tensorflow as tf

        record = next(iter(tf.data.TFRecordDataset(sorted(map(str, FLOWERS.glob("*-test.tfrecord-*"))))))
        example = tf.train.Example.FromString(record.numpy())
        image = example.features.feature["image/encoded"].bytes_list.value[0]
        return {"serving_default": {"image_bytes": {"b64": base64.b64encode(image).decode()}}}
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", "/health")
    signatures = json.loads(conn.getresponse().read())["signatures"]
    conn.close()
    return {name: {key: RECOMMENDER_VALUES[key] for key in about["inputs"]}
            for name, about in signatures.items()}


def http_latencies(port: int, signature: str, instance: dict, n: int) -> list[float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    body = json.dumps({"instances": [instance], "parameters": {"signature": signature}}).encode()
    times = []
    for _ in range(n):
        start = time.perf_counter()
        conn.request("POST", "/predict", body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        payload = response.read()
        times.append(time.perf_counter() - start)
        if response.status != 200:
            raise SystemExit(f"{signature}: HTTP {response.status}: {payload[:300]!r}")
    conn.close()
    return times


def direct_latencies(model_dir: str, signature: str, instance: dict, n: int) -> list[float]:
    """The same instance through the loaded signature in this process, as the server calls it."""
    from trainer.serve import load_model, read_request

    signatures, _ = load_model(model_dir)
    found, columns, _ = read_request({"instances": [instance], "parameters": {"signature": signature}},
                                     signatures)
    times = []
    for _ in range(n):
        start = time.perf_counter()
        found.call(columns)
        times.append(time.perf_counter() - start)
    return times


def serve(model_dir: str, log: Path) -> tuple[subprocess.Popen, int, float]:
    """The server on a free port once it is ready: (process, port, start-up seconds from its log)."""
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "trainer.serve", "--model-dir", model_dir, "--host",
                                 "127.0.0.1", "--port", "0"], cwd=REPO, env=trainer_env(), stdout=out,
                                stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        text = log.read_text()
        port = re.search(r"listening on http://[\d.]+:(\d+)", text)
        ready = re.search(r"ready in ([\d.]+) s", text)
        if port and ready:
            return proc, int(port[1]), float(ready[1])
        if proc.poll() is not None:
            raise SystemExit(f"the server exited: {text[-3000:]}")
        time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"the server was not ready in 300 s: {log.read_text()[-3000:]}")


def ms(times: list[float], q: float = 0.5) -> float:
    ordered = sorted(times)
    return 1000 * (statistics.median(ordered) if q == 0.5 else ordered[round(q * (len(ordered) - 1))])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=100)
    for model in TRAINING:
        p.add_argument(f"--{model}", metavar="DIR", help=f"reuse this {model} export instead of training one")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-serving-") as root:
        for model, (task, flags) in TRAINING.items():
            model_dir = getattr(args, model)
            if model_dir is None:
                try:
                    train_once(task, flags, 42, f"{root}/{model}")
                except TrainerFailed as exc:
                    print(exc, file=sys.stderr)
                    return exc.returncode
                model_dir = f"{root}/{model}/model"
            proc, port, ready = serve(model_dir, Path(root, f"{model}.log"))
            try:
                instances = requests_of(model, port)
                rows = []
                for signature, instance in instances.items():
                    load = os.getloadavg()[0]
                    rows.append((signature, http_latencies(port, signature, instance, args.requests), load))
            finally:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=60)
            print(f"{model}: server ready {ready:.1f} s after it started listening", flush=True)
            for signature, times, load in rows:
                direct = direct_latencies(model_dir, signature, instances[signature], args.requests)
                print(f"  {signature:16s} HTTP median {ms(times):6.2f} ms  p90 {ms(times, 0.9):6.2f} ms | "
                      f"signature alone median {ms(direct):6.2f} ms | {len(times)} requests, load average "
                      f"{load:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
