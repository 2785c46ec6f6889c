"""Image input benchmark: the default small CNN fed from TFRecord files vs from in-memory tensors.

    python scripts/benchmarks/bench_image_pipeline.py [--steps 300] [--repeats 3] [--batch-size 128]
    python scripts/benchmarks/bench_image_pipeline.py --mnist-accuracy [--epochs 6] [--seeds 1 2 3]
    python scripts/benchmarks/bench_image_pipeline.py --scale [--mnist 1 10 100] [--flowers 2000 20000]
        [--workers 1 2] [--repo DIR] [--steps 100] [--keep DIR]

Default mode: trains image_classifier.model.build_cnn for a fixed number of steps on MNIST-like
data (data/mnist/*.tfrecord if present, else a synthetic 10,000-record PNG shard in a temporary directory),
once through trainer.models.image_classifier.data.image_dataset (scan, decode, cache, shuffle, batch) and once
through array_dataset (the same images decoded into memory first, untimed), in ABBA pairs, and prints
examples/s (wall-clock and per CPU-second, medians of ``--repeats``) and the median ratio of the pairs.
Target: TFRecord >= 0.9x in-memory. Timing includes the first pass over the files (decoding before the cache
fills), not model building or the train-function trace.

``--mnist-accuracy``: trains the CNN on the first 8,000 real MNIST t10k images and evaluates on the last
2,000 (idx files from ../shared/data/mnist, written to PNG TFRecord shards first and read through
image_dataset); prints eval accuracy and ``model.fit`` seconds per seed. Target: >= 0.97 within 120 s on
2 CPU cores.

``--scale``: the data layer at scale. :func:`scale_datasets` writes, under a temporary directory (nothing
large is committed), the shipped MNIST training shards replicated 1x/10x/100x (2 files per 1x: 8,000
records, 800,000 at 100x) and flowers-sized JPEG records (the shipped flowers photos, ~500x375, repeated
to 2,000 / 20,000 records in files of 1,000); then :func:`run_trainer` trains each once through
``python -m trainer.task`` from ``--repo`` (default this checkout; another checkout, e.g. an older commit
in a temporary worktree, gives the "before" figures) for one epoch of ``--steps`` steps, and prints the
phases of its metrics.json: pre-training (scan, checks), first step, steady examples/s and peak
RSS. With ``--workers 2`` each dataset also runs as a chief and a worker over loopback (TF_CONFIG), and
each process's share and phases come from its log. The lead's scale benchmark can import both functions.
"""

from __future__ import annotations

import argparse
import glob
import gzip
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
MNIST_IDX = REPO.parent / "shared" / "data" / "mnist"


def write_shard(path: str, images, labels) -> str:
    """uint8 [N, H, W, 1] + labels -> one PNG TFRecord shard in the flowers schema."""
    import tensorflow as tf

    def feature(v):
        if isinstance(v, bytes):
            return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v]))
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))

    with tf.io.TFRecordWriter(path) as writer:
        for image, label in zip(images, labels, strict=True):
            f = {"image/encoded": tf.io.encode_png(image).numpy(), "image/class/label": int(label),
                 "image/class/text": str(int(label)).encode(), "image/format": b"PNG"}
            ex = tf.train.Example(features=tf.train.Features(feature={k: feature(v) for k, v in f.items()}))
            writer.write(ex.SerializeToString())
    return path


def synthetic(n: int, seed: int = 0):
    """MNIST-like images (28x28x1, 10 classes) with a learnable bar per class."""
    import numpy as np

    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, n)
    images = rng.integers(0, 60, (n, 28, 28, 1)).astype(np.uint8)
    for i, y in enumerate(labels):
        images[i, 2 + int(y) * 24 // 10:4 + int(y) * 24 // 10, 3:25, 0] = 255
    return images, labels


def read_idx():
    import numpy as np

    with gzip.open(MNIST_IDX / "t10k-images-idx3-ubyte.gz") as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28, 1)
    with gzip.open(MNIST_IDX / "t10k-labels-idx1-ubyte.gz") as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    return images, labels


def fit_seconds(model, ds, steps: int) -> tuple[float, float]:
    """(wall, CPU) seconds of ``steps`` training steps; CPU time counts every thread of this process."""
    wall, cpu = time.perf_counter(), time.process_time()
    model.fit(ds, steps_per_epoch=steps, epochs=1, verbose=0)
    return time.perf_counter() - wall, time.process_time() - cpu


def bench(args) -> int:
    import keras

    from trainer.models.image_classifier import checks as image_checks
    from trainer.models.image_classifier import data as image_data
    from trainer.models.image_classifier import model as image_models

    with tempfile.TemporaryDirectory(prefix="bench-image-") as tmp:
        files = sorted(glob.glob(str(REPO / "data" / "mnist" / "*.tfrecord*")))
        source = "data/mnist"
        if not files:
            files = [write_shard(os.path.join(tmp, "synthetic.tfrecord"), *synthetic(10_000))]
            source = "synthetic 10k PNG shard"
        start = time.perf_counter()
        scan = image_checks.scan_images(files, channels=1)
        print(f"{source}: {scan.summary()}; scan {time.perf_counter() - start:.2f} s")
        images, labels = image_data.read_arrays(scan, 1)
        common = dict(image_size=28, batch_size=args.batch_size, training=True, seed=0, repeat=True)
        for kind, ds in (("tfrecord", image_data.image_dataset(scan, channels=1, **common)),
                         ("memory", image_data.array_dataset(images, labels, **common))):
            start = time.perf_counter()
            for _ in ds.take(args.steps):
                pass
            print(f"  {kind} pipeline alone (no model): "
                  f"{args.steps * args.batch_size / (time.perf_counter() - start):,.0f} examples/s")

        def run(kind: str) -> tuple[float, float]:
            keras.utils.set_random_seed(0)
            model = image_models.compile_classifier(image_models.build_cnn(28, 1, scan.num_classes),
                                                    num_classes=scan.num_classes)
            warm = image_data.array_dataset(images[:512], labels[:512], **common)
            model.fit(warm, steps_per_epoch=2, epochs=1, verbose=0)  # trace the train step outside the clock
            if kind == "tfrecord":
                ds = image_data.image_dataset(scan, channels=1, **common)
            else:
                ds = image_data.array_dataset(images, labels, **common)
            wall, cpu = fit_seconds(model, ds, args.steps)
            return args.steps * args.batch_size / wall, args.steps * args.batch_size / cpu

        # Pairs run in alternating order (ABBA) and are compared pair by pair, so a load change on a shared
        # machine hits both sides alike; per CPU-second rates are steadier still when other work competes.
        rates = {"tfrecord": [], "memory": []}
        ratios, cpu_ratios = [], []
        for repeat in range(args.repeats):
            for kind in ("tfrecord", "memory") if repeat % 2 == 0 else ("memory", "tfrecord"):
                rates[kind].append(run(kind))
                wall, cpu = rates[kind][-1]
                print(f"  {kind}: {wall:,.0f} examples/s ({cpu:,.0f} per CPU-second)", flush=True)
            ratios.append(rates["tfrecord"][-1][0] / rates["memory"][-1][0])
            cpu_ratios.append(rates["tfrecord"][-1][1] / rates["memory"][-1][1])
    med = {k: [statistics.median(r[i] for r in v) for i in (0, 1)] for k, v in rates.items()}
    ratio, cpu_ratio = statistics.median(ratios), statistics.median(cpu_ratios)
    print(f"TFRecord pipeline {med['tfrecord'][0]:,.0f} examples/s, in-memory {med['memory'][0]:,.0f} "
          f"examples/s: ratio {ratio:.3f}; per CPU-second {med['tfrecord'][1]:,.0f} vs "
          f"{med['memory'][1]:,.0f}: ratio {cpu_ratio:.3f} (medians of {args.repeats} pairs; "
          f"{args.steps} steps of {args.batch_size}; load average {os.getloadavg()[0]:.1f})")
    return 0 if ratio >= 0.9 else 1


def mnist_accuracy(args) -> int:
    import keras

    from trainer.models.image_classifier import checks as image_checks
    from trainer.models.image_classifier import data as image_data
    from trainer.models.image_classifier import model as image_models

    images, labels = read_idx()
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-mnist-") as tmp:
        train = write_shard(os.path.join(tmp, "train.tfrecord"), images[:8000], labels[:8000])
        test = write_shard(os.path.join(tmp, "eval.tfrecord"), images[-2000:], labels[-2000:])
        train_scan = image_checks.scan_images([train], channels=1)
        eval_scan = image_checks.scan_images([test], channels=1, class_names=train_scan.class_names)
        for seed in args.seeds:
            keras.utils.set_random_seed(seed)
            train_ds = image_data.image_dataset(train_scan, image_size=28, channels=1,
                                                batch_size=args.batch_size, training=True, seed=seed)
            eval_ds = image_data.image_dataset(eval_scan, image_size=28, channels=1, batch_size=512)
            steps = -(-train_scan.records // args.batch_size) * args.epochs
            model = image_models.compile_classifier(image_models.build_cnn(28, 1, 10, seed=seed),
                                                    args.optimizer, args.learning_rate, num_classes=10,
                                                    decay_steps=0 if args.constant_rate else steps)
            start = time.perf_counter()
            model.fit(train_ds, epochs=args.epochs, verbose=0)
            seconds = time.perf_counter() - start
            metrics = model.evaluate(eval_ds, verbose=0, return_dict=True)
            results.append((metrics["accuracy"], seconds))
            print(f"seed {seed}: eval accuracy {metrics['accuracy']:.4f}, "
                  f"top-5 {metrics['top_k_accuracy']:.4f}, fit {seconds:.1f} s ({args.epochs} epochs)",
                  flush=True)
    acc = statistics.median(r[0] for r in results)
    secs = statistics.median(r[1] for r in results)
    print(f"median: eval accuracy {acc:.4f}, fit {secs:.1f} s")
    return 0 if acc >= 0.97 and secs <= 120 else 1


def scale_datasets(root: str, mnist=(1, 10, 100), flowers=(2000, 20000)) -> dict[str, dict]:
    """Write the scaled datasets under ``root``: {name: {"train": glob, "eval": glob, "flags": [...],
    "records": n}}. MNIST copies the shipped shards' bytes (a TFRecord file concatenates); flowers writes
    the shipped photos' records round-robin (re-serialised, so each file is a valid TFRecord file)."""
    import tensorflow as tf

    out = {}
    shards = sorted(glob.glob(str(REPO / "data" / "mnist" / "mnist-train.tfrecord-*")))
    raw = [Path(f).read_bytes() for f in shards]
    for scale in mnist:
        folder = Path(root, f"mnist-x{scale}")
        folder.mkdir(parents=True, exist_ok=True)
        for copy in range(scale):
            for i, data in enumerate(raw):
                path = Path(folder, f"train-{copy:04d}-{i}.tfrecord")
                if not path.exists():  # --keep: written by an earlier run
                    path.write_bytes(data)
        out[f"mnist-x{scale}"] = {"train": str(folder / "train-*.tfrecord"),
                                  "eval": str(REPO / "data" / "mnist" / "mnist-eval.tfrecord-*"),
                                  "flags": ["--channels", "1"], "records": 8000 * scale}
    photos = [r for f in sorted(glob.glob(str(REPO / "data" / "flowers" / "*.tfrecord-*")))
              for r in tf.data.TFRecordDataset(f).as_numpy_iterator()]
    for n in flowers:
        folder = Path(root, f"flowers-{n}")
        folder.mkdir(parents=True, exist_ok=True)
        per_file = 1000
        for start in range(0, n, per_file):
            path = folder / f"train-{start // per_file:04d}.tfrecord"
            if path.exists():
                continue
            with tf.io.TFRecordWriter(str(path)) as writer:
                for i in range(start, min(n, start + per_file)):
                    writer.write(photos[i % len(photos)])
        out[f"flowers-{n}"] = {"train": str(folder / "train-*.tfrecord"),
                               "eval": str(REPO / "data" / "flowers" /
                                           "image_classification_builder-test.tfrecord-*"),
                               "flags": ["--image-size", "96"], "records": n}
    return out


def run_trainer(repo: str, data: dict, job_dir: str, steps: int, workers: int = 1) -> list[dict]:
    """One run of ``python -m trainer.task`` from ``repo`` on ``data`` (a :func:`scale_datasets` entry):
    [{"phases": ..., "share": the log's share line, "wall": s}] per process (chief first)."""
    import json
    import re
    import subprocess

    from bench_runs import free_ports

    args = [sys.executable, "-m", "trainer.task", "--model", "image_classifier",
            "--train-files", data["train"], "--eval-files", data["eval"], "--num-epochs", "1",
            "--steps-per-epoch", str(steps), "--job-dir", job_dir, "--verbosity", "INFO", *data["flags"]]
    env = {**os.environ, "PYTHONPATH": repo, "TF_CPP_MIN_LOG_LEVEL": "2"}
    envs = [env]
    if workers > 1:
        ports = free_ports(workers)
        cluster = {"chief": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{p}" for p in ports[1:]]}
        envs = [{**env, "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": t, "index": i}})}
                for t, i in [("chief", 0)] + [("worker", i) for i in range(workers - 1)]]
    start = time.perf_counter()
    procs = [subprocess.Popen(args, cwd=repo, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for e in envs]
    outputs = [p.communicate()[0] for p in procs]
    wall = time.perf_counter() - start
    results = []
    for proc, output in zip(procs, outputs, strict=True):
        if proc.returncode != 0:
            raise RuntimeError(f"trainer failed ({proc.returncode}):\n{output[-3000:]}")
        phases = re.search(r"trainer: phases: (.*)", output)
        share = re.search(r"this worker's share \((.*)", output)
        results.append({"phases": dict(kv.split("=") for kv in phases.group(1).split()) if phases else {},
                        "share": share.group(1) if share else "", "wall": wall})
    return results


def scale(args) -> int:
    import shutil

    root = args.keep or tempfile.mkdtemp(prefix="img-bench-", dir="/tmp")
    try:
        start = time.perf_counter()
        datasets = scale_datasets(root, args.mnist, args.flowers)
        print(f"data written under {root} in {time.perf_counter() - start:.0f} s", flush=True)
        for name, data in datasets.items():
            for workers in args.workers:
                with tempfile.TemporaryDirectory(prefix="img-bench-job-", dir="/tmp") as job:
                    load = os.getloadavg()[0]
                    runs = run_trainer(args.repo, data, job, args.steps, workers)
                for i, run in enumerate(runs):
                    ph = run["phases"]
                    print(f"{name:>14} x{workers} {'chief' if i == 0 else f'worker{i - 1}':>7}: pre-training "
                          f"{float(ph.get('pre_training_s', 0)):7.2f} s  first step "
                          f"{float(ph.get('first_step_s', 0)):6.2f} s  steady "
                          f"{float(ph.get('steady_examples_per_s', 0)):7.0f} ex/s  peak RSS "
                          f"{float(ph.get('peak_rss_mb', 0)):6.0f} MB  (load {load:.1f})"
                          f"{'  share ' + run['share'] if run['share'] else ''}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mnist-accuracy", action="store_true")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--optimizer", default="adam")
    p.add_argument("--learning-rate", type=float, default=1e-3)
    p.add_argument("--constant-rate", action="store_true", help="no cosine learning-rate decay")
    p.add_argument("--scale", action="store_true", help="the data layer at scale (see the docstring)")
    p.add_argument("--mnist", type=int, nargs="*", default=[1, 10, 100], help="MNIST replication factors")
    p.add_argument("--flowers", type=int, nargs="*", default=[2000, 20000], help="flowers-sized JPEG records")
    p.add_argument("--workers", type=int, nargs="+", default=[1], help="processes per run (loopback cluster)")
    p.add_argument("--repo", default=str(REPO), help="checkout whose trainer runs (default: this one)")
    p.add_argument("--keep", help="write the data here and keep it (default: a temporary directory)")
    args = p.parse_args(argv)
    if args.scale:
        args.steps = args.steps if "--steps" in (argv or sys.argv) else 100
        return scale(args)
    return mnist_accuracy(args) if args.mnist_accuracy else bench(args)


if __name__ == "__main__":
    sys.exit(main())
