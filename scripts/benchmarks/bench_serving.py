"""Serving benchmark: ``python -m serving`` (what the Model Registry entry runs) against today's server
(``python -m trainer.serve`` at --baseline REF, by default 08b6d44, the last commit before serving/), both
measured in the same run on this machine, over HTTP on loopback (127.0.0.1) only.

    python scripts/benchmarks/bench_serving.py [--requests 100] [--census|--image|--recommender DIR]
        [--baseline REF | --no-baseline] [--seconds 5] [--rounds 3] [--no-load] [--no-latency]

Each model is exported by a short ``python -m trainer.task`` run with its default flags (census: one epoch on
adult.data; image_classifier: one epoch on the shipped flowers shards; recommender: one epoch on MovieLens,
EASE skipped), unless ``--census/--image/--recommender DIR`` names an export to reuse. The baseline is the
tree of REF (``git archive``, no worktree), run as it was with this interpreter.

Latency per model (one client): each server is started on the export, its start-up time read from its log,
and ``--requests`` POSTs of one instance each are sent one after another on one keep-alive connection: a
census row of adult.test, one flowers JPEG (~85 KB, as {"b64": ...}), and to each of the recommender's
signatures user 1, item 1, k = 10 as it takes them. Printed per model, signature and server: the median and
p90 latency of the HTTP round trip, and the median of the same instance through the loaded signature in this
process (what a server adds is the difference).

Load (census, one-instance requests):
- 1, 8 and 64 keep-alive clients for --seconds each, every server up at once and taken in turns for
  --rounds rounds (the machine's other work falls on both alike): the median of the rounds' requests/s,
  p50 and p99 (each round's requests/s in brackets), the server's peak RSS, and the batch sizes the server
  reported (its ``x-batch-size`` header: instances in the signature call);
- then each server started afresh for each of: a burst of 1000 connections each sending a 1.4 MB body at
  once (one row padded with JSON whitespace):
  what each got back, and the peak RSS over the idle RSS;
- 1000 slowloris connections trickling a request's headers a byte a second for 15 s, while one good client
  sends requests one after another: its p50/p99 during the attack, and what the attackers got;
- SIGTERM under 16 keep-alive clients: when new connections were first refused, how many requests begun
  over 1 s after the signal were still answered 200, how many in flight failed, the exit status and time.

The load generator (serving_load.py) is a separate process: asyncio over raw sockets with prebuilt requests;
its own CPU seconds are printed beside each figure, so a client that was the limit would show (near one CPU
second per second). The 1-minute load average is printed too: the machine's other work shows in every figure.
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
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bench_runs import REPO, TrainerFailed, trainer_env
from bench_runs import train as train_once

sys.path.insert(0, str(REPO))  # run as a file, only the script's own folder is on sys.path: trainer too

CENSUS = REPO / "data" / "census"
FLOWERS = REPO / "data" / "flowers"
RATINGS = REPO / "data" / "movielens" / "ratings.csv"
TRAINING = {
    "census": (
        "wide_deep",
        [
            "--train-files",
            str(CENSUS / "adult.data"),
            "--eval-files",
            str(CENSUS / "adult.test"),
            "--num-epochs",
            "1",
        ],
    ),
    "image": (
        "image_classifier",
        [
            "--train-files",
            str(FLOWERS / "*-validation.tfrecord-*"),
            "--eval-files",
            str(FLOWERS / "*-test.tfrecord-*"),
            "--num-epochs",
            "1",
        ],
    ),
    "recommender": (
        "recommender",
        ["--train-files", str(RATINGS), "--num-epochs", "1", "--ease-max-items", "0"],
    ),
}


# The recommender's inputs by name: whichever signatures its export has (pairs, top_k, similar_items), each
# gets user 1, item 1 and k = 10.
RECOMMENDER_VALUES = {"user": "1", "item": "1", "k": 10}


def requests_of(model: str, port: int) -> dict[str, dict]:
    """{signature: one instance} the benchmark sends to ``model`` (served on ``port``)."""
    if model == "census":
        from trainer.models.census.data import SCHEMA

        line = next(line for line in (CENSUS / "adult.test").read_text().splitlines()[1:] if line.strip())
        row = [field.strip() for field in line.split(",")]
        return {
            "serving_default": {
                c.name: int(v) if c.kind == "int" else v
                for c, v in zip(SCHEMA.features, row[:14], strict=True)
            }
        }
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
    return {
        name: {key: RECOMMENDER_VALUES[key] for key in about["inputs"]} for name, about in signatures.items()
    }


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
    from serving.model import load_model
    from serving.requests import read_request

    signatures, _ = load_model(model_dir)
    found, columns, _ = read_request(
        {"instances": [instance], "parameters": {"signature": signature}}, signatures
    )
    times = []
    for _ in range(n):
        start = time.perf_counter()
        found.call(columns)
        times.append(time.perf_counter() - start)
    return times


def ms(times: list[float], q: float = 0.5) -> float:
    ordered = sorted(times)
    return 1000 * (statistics.median(ordered) if q == 0.5 else ordered[round(q * (len(ordered) - 1))])


BASELINE_REF = "08b6d44"  # the last commit whose server is trainer/serve.py (stdlib http.server)
LOAD = Path(__file__).with_name("serving_load.py")
BURST_BODY_BYTES = 1_400_000
CLIENTS = (1, 8, 64)


@dataclass
class Tree:
    """A checkout whose server is benchmarked: its folder and the module its server runs as."""

    name: str
    root: Path
    module: str


def baseline_tree(ref: str, into: Path) -> Tree:
    """The tracked files of ``ref`` under ``into`` (git archive: no worktree, nothing in .git changes)."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", "--format=tar", ref], cwd=REPO, capture_output=True)
    if archive.returncode != 0:
        raise SystemExit(f"--baseline {ref}: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    module = "serving" if (into / "serving" / "__init__.py").exists() else "trainer.serve"
    return Tree(f"baseline {ref}", into, module)


class Served:
    """A server of ``tree`` on ``model_dir`` (a free port), ready; ``rss()`` its resident memory now."""

    def __init__(self, tree: Tree, model_dir: str, log: Path):
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    tree.module,
                    "--model-dir",
                    model_dir,
                    "--host",
                    "127.0.0.1",
                    "--port",
                    "0",
                ],
                cwd=tree.root,
                env=trainer_env(tree.root),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            text = log.read_text()
            port = re.search(r"listening on http://[\d.]+:(\d+)", text)
            ready = re.search(r"ready in ([\d.]+) s", text)
            if port and ready:
                self.port, self.ready = int(port[1]), float(ready[1])
                return
            if self.proc.poll() is not None:
                raise SystemExit(f"the server exited: {text[-3000:]}")
            time.sleep(0.1)
        self.stop()
        raise SystemExit(f"the server was not ready in 300 s: {log.read_text()[-3000:]}")

    def rss(self) -> int:
        try:
            with open(f"/proc/{self.proc.pid}/status") as status:
                return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))
        except (FileNotFoundError, StopIteration):
            return 0

    def stop(self, timeout: float = 60) -> tuple[int | None, float]:
        """SIGTERM, then SIGKILL after ``timeout``: (exit status, seconds to exit)."""
        start = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            status = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            status = None
        return status, time.monotonic() - start


class Peak:
    """The peak RSS of a server while the ``with`` block runs (sampled every 20 ms)."""

    def __init__(self, served: Served):
        self.served, self.peak, self._stop = served, served.rss(), threading.Event()

    def __enter__(self):
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, self.served.rss())

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def client(scenario: str, **spec) -> dict:
    """One run of the load generator (a process of its own, the scenario on its stdin); its JSON result."""
    out = subprocess.run(
        [sys.executable, str(LOAD)],
        input=json.dumps({"scenario": scenario, **spec}),
        capture_output=True,
        text=True,
        timeout=600,
    )
    if out.returncode != 0:
        raise SystemExit(f"the load generator failed: {out.stderr[-3000:]}")
    return json.loads(out.stdout)


def census_body() -> str:
    instance = requests_of("census", 0)["serving_default"]
    return json.dumps({"instances": [instance]})


def mb(n: int) -> str:
    return f"{n / 1e6:.0f} MB"


def batch_summary(batches: dict[str, int]) -> str:
    """Requests by the batch they were computed in: the mean and largest batch a request saw."""
    if not batches:
        return "-"
    total = sum(batches.values())
    mean = sum(int(size) * count for size, count in batches.items()) / total
    return f"mean {mean:.1f}, max {max(map(int, batches))}"


def level_figures(trees: list[Tree], model_dir: str, root: Path, seconds: float, rounds: int) -> dict:
    """Keep-alive load at each of CLIENTS with every server up at once, taken in turns (``rounds`` rounds of
    ``seconds`` each): on a shared machine, what the others do then falls on every server alike. Per server
    and level: the median of the rounds' requests/s, p50 and p99, the peak RSS, the batches seen."""
    body = census_body()
    served = {tree.name: Served(tree, model_dir, root / f"{tree.module}-levels.log") for tree in trees}
    figures = {name: {"idle_rss": server.rss(), "levels": {}} for name, server in served.items()}
    try:
        for clients in CLIENTS:
            runs: dict[str, list] = {name: [] for name in served}
            for _ in range(rounds):
                for name, server in served.items():
                    load = os.getloadavg()[0]
                    with Peak(server) as peak:
                        result = client(
                            "keepalive",
                            port=server.port,
                            route="/predict",
                            body=body,
                            clients=clients,
                            seconds=seconds,
                        )
                    runs[name].append({**result, "peak_rss": peak.peak, "load": load})
            for name, results in runs.items():
                figures[name]["levels"][clients] = _median_level(results)
    finally:
        for server in served.values():
            server.stop()
    return figures


def _median_level(results: list[dict]) -> dict:
    def median(key):
        return statistics.median(r[key] or 0 for r in results)

    batches: dict[str, int] = {}
    statuses: dict[str, int] = {}
    for r in results:
        for size, count in r["batches"].items():
            batches[size] = batches.get(size, 0) + count
        for status, count in r["statuses"].items():
            statuses[status] = statuses.get(status, 0) + count
    return {
        "rps": median("rps"),
        "p50_ms": median("p50_ms"),
        "p99_ms": median("p99_ms"),
        "rounds": [(r["rps"], r["p50_ms"], r["p99_ms"]) for r in results],
        "peak_rss": max(r["peak_rss"] for r in results),
        "load": median("load"),
        "batches": batches,
        "statuses": statuses,
        "error_count": sum(r["error_count"] for r in results),
        "client_cpu": max(r["client_cpu_s"] / r["wall_s"] for r in results),
    }


def attack_figures(tree: Tree, model_dir: str, root: Path) -> dict:
    """The burst, slowloris and SIGTERM parts, each on a server of its own."""
    body = census_body()
    figures = {}
    served = Served(tree, model_dir, root / f"{tree.module}-burst.log")
    try:
        idle = served.rss()
        big = body[:-1] + " " * (BURST_BODY_BYTES - len(body)) + "}"
        with Peak(served) as peak:
            result = client(
                "burst", port=served.port, route="/predict", body=big, connections=1000, timeout=120
            )
        time.sleep(1)
        figures["burst"] = {**result, "idle_rss": idle, "peak_rss": peak.peak, "after_rss": served.rss()}
    finally:
        served.stop()
    served = Served(tree, model_dir, root / f"{tree.module}-slowloris.log")
    try:
        figures["slowloris"] = client(
            "slowloris", port=served.port, route="/predict", body=body, connections=1000, seconds=15
        )
    finally:
        served.stop()
    served = Served(tree, model_dir, root / f"{tree.module}-sigterm.log")
    try:
        start = time.monotonic()
        result = client(
            "shutdown",
            port=served.port,
            route="/predict",
            body=body,
            clients=16,
            pid=served.proc.pid,
            seconds=30,
        )
        status, _ = served.stop(timeout=60)
        figures["sigterm"] = {
            **result,
            "exit": status,
            "exit_after_s": round(time.monotonic() - start - 2, 1),
        }
    finally:
        served.stop()
    return figures


def print_load(results: dict[str, dict]) -> None:
    print("\nload (census, one instance a request; RSS peak during the level):", flush=True)
    print(
        f"  {'server':22s} {'clients':>7s} {'req/s':>8s} {'p50 ms':>8s} {'p99 ms':>8s} {'RSS':>8s} "
        f"{'batch':>18s} {'client CPU':>10s} {'load':>5s}"
    )
    for name, figures in results.items():
        for clients, level in figures["levels"].items():
            errors = (
                f" ({level['error_count']} errors, {level['statuses']})"
                if level["error_count"] or set(level["statuses"]) - {"200"}
                else ""
            )
            rounds = " ".join(f"{rps:.0f}" for rps, _, _ in level["rounds"])
            print(
                f"  {name:22s} {clients:7d} {level['rps']:8.0f} {level['p50_ms'] or 0:8.2f} "
                f"{level['p99_ms'] or 0:8.2f} {mb(level['peak_rss']):>8s} "
                f"{batch_summary(level['batches']):>18s} "
                f"{level['client_cpu']:9.0%} {level['load']:5.2f}  [{rounds}]{errors}",
                flush=True,
            )
    names = list(results)
    for name in names:
        levels = results[name]["levels"]
        print(f"  {name}: 64 clients / 1 client = {levels[64]['rps'] / levels[1]['rps']:.2f}x", flush=True)
    if len(names) == 2:
        (old, new) = (results[names[0]]["levels"], results[names[1]]["levels"])
        print(
            f"  {names[1]} / {names[0]} at 64 clients: {new[64]['rps'] / old[64]['rps']:.2f}x requests/s; "
            f"one client p50 {new[1]['p50_ms'] / old[1]['p50_ms']:.2f}x",
            flush=True,
        )
    print("\nburst (1000 connections, a 1.4 MB body each, at once):", flush=True)
    for name, figures in results.items():
        burst = figures["burst"]
        print(
            f"  {name:22s} answers {burst['outcomes']} in {burst['wall_s']} s; "
            f"RSS idle {mb(burst['idle_rss'])}, "
            f"peak {mb(burst['peak_rss'])} (+{mb(burst['peak_rss'] - burst['idle_rss'])}), after "
            f"{mb(burst['after_rss'])}",
            flush=True,
        )
    print(
        "\nslowloris (1000 connections trickling headers a byte a second, 15 s; one good client):", flush=True
    )
    for name, figures in results.items():
        attack = figures["slowloris"]
        good = attack["good_client"]
        print(
            f"  {name:22s} good client {good['requests']} requests, p50 {good['p50_ms']} ms, p99 "
            f"{good['p99_ms']} ms, {good['error_count']} errors; attackers got {attack['attackers']}",
            flush=True,
        )
    print("\nSIGTERM under 16 keep-alive clients:", flush=True)
    for name, figures in results.items():
        stop = figures["sigterm"]
        print(
            f"  {name:22s} new connections refused after {stop['refused_after_s']} s; "
            f"{stop['answered_200_begun_over_1s_after']} requests begun over 1 s after it answered 200; "
            f"{stop['in_flight_failed']} in flight failed; "
            f"exit {stop['exit']} after {stop['exit_after_s']} s",
            flush=True,
        )


def latency_figures(tree: Tree, model: str, model_dir: str, root: Path, n: int) -> tuple[float, list]:
    served = Served(tree, model_dir, root / f"{tree.module}-{model}.log")
    try:
        instances = requests_of(model, served.port)
        rows = []
        for signature, instance in instances.items():
            load = os.getloadavg()[0]
            rows.append((signature, instance, http_latencies(served.port, signature, instance, n), load))
    finally:
        served.stop()
    return served.ready, rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=100)
    p.add_argument(
        "--seconds", type=float, default=5, help="each load level's duration (default %(default)s)"
    )
    p.add_argument(
        "--baseline",
        default=BASELINE_REF,
        metavar="REF",
        help="the commit whose server is measured beside this checkout's (default %(default)s)",
    )
    p.add_argument(
        "--rounds", type=int, default=3, help="load rounds per level and server (default %(default)s)"
    )
    p.add_argument("--no-baseline", action="store_true", help="measure this checkout's server only")
    p.add_argument("--no-load", action="store_true", help="skip the load, burst, slowloris and SIGTERM parts")
    p.add_argument("--no-latency", action="store_true", help="skip the per-model latency part")
    for model in TRAINING:
        p.add_argument(f"--{model}", metavar="DIR", help=f"reuse this {model} export instead of training one")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-serving-") as tmp:
        root = Path(tmp)
        trees = [] if args.no_baseline else [baseline_tree(args.baseline, root / "baseline")]
        trees.append(Tree("this checkout", REPO, "serving"))
        exports = {}
        for model, (task, flags) in TRAINING.items():
            if args.no_latency and model != "census":
                continue
            exports[model] = getattr(args, model)
            if exports[model] is None:
                try:
                    train_once(task, flags, 42, f"{root}/{model}")
                except TrainerFailed as exc:
                    print(exc, file=sys.stderr)
                    return exc.returncode
                exports[model] = f"{root}/{model}/model"
        if not args.no_latency:
            print("latency at one client (one instance a request, one keep-alive connection):", flush=True)
            for model, model_dir in exports.items():
                for tree in trees:
                    ready, rows = latency_figures(tree, model, model_dir, root, args.requests)
                    print(
                        f"  {model} on {tree.name} ({tree.module}): ready {ready:.1f} s after it started "
                        "listening",
                        flush=True,
                    )
                    for signature, instance, times, load in rows:
                        direct = direct_latencies(model_dir, signature, instance, args.requests)
                        print(
                            f"    {signature:16s} HTTP median {ms(times):6.2f} ms  p90 {ms(times, 0.9):6.2f} "
                            f"ms | signature alone median {ms(direct):6.2f} ms | {len(times)} requests, load "
                            f"average {load:.2f}",
                            flush=True,
                        )
        if not args.no_load:
            results = level_figures(trees, exports["census"], root, args.seconds, args.rounds)
            for tree in trees:
                results[tree.name].update(attack_figures(tree, exports["census"], root))
            print_load(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
