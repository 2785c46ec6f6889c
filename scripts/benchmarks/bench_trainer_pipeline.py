"""Input-pipeline benchmark: the trainer's tf.data pipeline vs pre-built in-memory batches, same model.

    python scripts/benchmarks/bench_trainer_pipeline.py [--epochs 8] [--repeats 5] [--streaming]

Both figures come from one process: whole training runs of --epochs epochs, paired and in alternating
order so background load hits both alike; the ratio is the median over the pairs. "pipeline" is exactly
what ``trainer.task`` trains on: a fresh dataset every repeat, so it includes reading the files,
decoding, preprocessing and filling the cache in the first epoch. "memory" feeds the identical
preprocessed batches from tensors already in memory, the upper bound for any input pipeline.
"streaming" (no cache: every epoch re-reads and re-parses) is printed with --streaming.
Target: pipeline / memory >= 0.9.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--train-files", nargs="+", default=[str(REPO / "data/census/adult.data")])
    p.add_argument("--epochs", type=int, default=None, help="epochs per run (default: the trainer's)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--streaming", action="store_true", help="also measure the pipeline without its cache")
    args = p.parse_args(argv)

    import keras
    import tensorflow as tf

    from trainer.config import resolve_config
    from trainer.models import load_task

    base = ["--train-files", *args.train_files, "--eval-files", args.train_files[0]]
    cfg = resolve_config(base + (["--num-epochs", str(args.epochs)] if args.epochs else []))
    streaming_cfg = resolve_config(base + ["--cache-limit-mb", "0", "--num-epochs", str(cfg.num_epochs)])
    task = load_task(cfg.model)
    keras.utils.set_random_seed(cfg.seed)
    batch = cfg.train_batch_size

    def fresh_pipeline(c):
        return task.make_data(c, batch, cfg.eval_batch_size)

    data = fresh_pipeline(cfg)
    model = task.build_model(cfg, data)
    # Pre-built batches: the same preprocessed tensors, stacked so the dataset hands out whole batches.
    batches = list(data.train)
    full = [b for b in batches if int(tf.shape(b[1])[0]) == batch]
    rest = [b for b in batches if int(tf.shape(b[1])[0]) != batch]
    stacked = tf.nest.map_structure(lambda *xs: tf.stack(xs), *full)
    memory = tf.data.Dataset.from_tensor_slices(stacked)
    for b in rest:
        memory = memory.concatenate(tf.data.Dataset.from_tensors(b))
    rows = data.train_rows
    assert sum(int(tf.shape(b[1])[0]) for b in batches) == rows
    model.fit(memory, epochs=1, verbose=0)  # trace the train step before timing anything

    def run_seconds(dataset) -> tuple[float, float]:
        """Wall and CPU seconds of one training run (CPU time barely moves with other processes' load)."""
        wall, cpu = time.perf_counter(), time.process_time()
        model.fit(dataset, epochs=cfg.num_epochs, verbose=0, shuffle=False)
        return time.perf_counter() - wall, time.process_time() - cpu

    # Whole training runs, paired and in alternating order (ABBA), so background load on a shared machine
    # hits both feeds alike; each pipeline run starts from a fresh, empty cache.
    seconds: dict[str, list[float]] = {"pipeline": [], "memory": [], "streaming": []}
    cpu_seconds: dict[str, list[float]] = {"pipeline": [], "memory": [], "streaming": []}
    scans = []
    load_before = os.getloadavg()[0]
    for repeat in range(args.repeats):
        start = time.perf_counter()
        pipeline = fresh_pipeline(cfg).train  # the validating scan runs here, once per training run
        scans.append(time.perf_counter() - start)
        feeds = [("pipeline", pipeline), ("memory", memory)]
        if args.streaming:
            feeds.append(("streaming", fresh_pipeline(streaming_cfg).train))
        for name, dataset in (feeds if repeat % 2 == 0 else feeds[::-1]):
            wall, cpu = run_seconds(dataset)
            seconds[name].append(wall)
            cpu_seconds[name].append(cpu)
    results = {name: [rows * cfg.num_epochs / t for t in runs] for name, runs in seconds.items() if runs}
    print(f"rows={rows} batch={batch} epochs={cfg.num_epochs} repeats={args.repeats} cpus={os.cpu_count()} "
          f"load average before/after={load_before:.2f}/{os.getloadavg()[0]:.2f}")
    for name, runs in results.items():
        if runs:
            listed = " ".join(f"{x:,.0f}" for x in runs)
            print(f"{name:>9}: best {max(runs):>9,.0f} ex/s  median {statistics.median(runs):>9,.0f}"
                  f"  (runs: {listed})")
    def paired(name: str) -> float:
        return statistics.median(a / b for a, b in zip(results[name], results["memory"], strict=True))

    ratio = paired("pipeline")
    print(f"ratio pipeline/memory: {ratio:.3f} median of {args.repeats} pairs, "
          f"{max(results['pipeline']) / max(results['memory']):.3f} best/best "
          f"(target >= 0.9: {'PASS' if ratio >= 0.9 else 'FAIL'})")
    cpu = {name: statistics.median(runs) for name, runs in cpu_seconds.items() if runs}
    print("CPU seconds per run (median): " + ", ".join(f"{k} {v:.2f}" for k, v in cpu.items())
          + f"; CPU ratio memory/pipeline {cpu['memory'] / cpu['pipeline']:.3f} (load-independent check)")
    if "streaming" in results:
        print(f"ratio streaming/memory: {paired('streaming'):.3f} "
              "(no cache: every epoch re-reads and re-parses; for information)")
    print(f"validation scan before training (not in the figures above): "
          f"median {statistics.median(scans):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
