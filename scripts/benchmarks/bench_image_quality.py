"""Quality benchmark: the image classifier's default CNN on the shipped MNIST TFRecords.

    python scripts/benchmarks/bench_image_quality.py [--seeds 42 7 1234] [-- extra trainer flags]

Each seed runs ``python -m trainer.task --model image_classifier`` as a user would (8,000 training images,
the 2,000 held-out ones to evaluate, grayscale, default flags otherwise plus ``--num-epochs``), then prints
eval accuracy, the training wall time (``model.fit``, from the run's metrics.json) and the whole process's
wall time. Target: median accuracy >= 0.97 with training <= 120 s on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

from bench_runs import REPO, TrainerFailed
from bench_runs import train as train_once

MNIST = REPO / "data" / "mnist"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[42, 7, 1234])
    p.add_argument("--num-epochs", type=int, default=4)
    p.add_argument("extra", nargs="*", help="more trainer flags, after --")
    args = p.parse_args(argv)
    rows = []
    for seed in args.seeds:
        with tempfile.TemporaryDirectory(prefix="bench-image-") as job:
            try:
                flags = ["--channels", "1", "--train-files", str(MNIST / "mnist-train.tfrecord-*"),
                         "--eval-files", str(MNIST / "mnist-eval.tfrecord-*"),
                         "--num-epochs", str(args.num_epochs), *args.extra]
                run = train_once("image_classifier", flags, seed, job)
            except TrainerFailed as exc:
                print(exc, file=sys.stderr)
                return exc.returncode
        report, wall, load = run.report, run.wall, run.load
        accuracy, fit = report["eval"]["accuracy"], report["train_seconds"]
        rows.append((accuracy, fit))
        print(f"seed {seed:>5}: accuracy {accuracy:.4f}  train {fit:.1f} s  process {wall:.1f} s  "
              f"(load average {load:.2f})", flush=True)
    accuracy = statistics.median(r[0] for r in rows)
    train = statistics.median(r[1] for r in rows)
    ok = accuracy >= 0.97 and max(r[1] for r in rows) <= 120
    print(f"median of {len(rows)}: accuracy {accuracy:.4f} (>= 0.97)  train {train:.1f} s (each <= 120 s) "
          f"on {os.cpu_count()} CPUs: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
