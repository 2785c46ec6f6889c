"""Scale benchmark of the recommender (issue 26): synthetic MovieLens-shaped ratings generated on the fly, the
trainer's phases, peak memory and SavedModel size at each size.

    python scripts/benchmarks/bench_recommender_scale.py [--sizes 100000 1000000 10000000 25000000] \\
        [--steps 300] [--catalogue-of N] [--workdir /tmp/rec-scale] [-- extra trainer flags]

For each size N the script writes ``N`` ratings to a CSV under ``--workdir`` (deleted afterwards): users and
items drawn from long-tailed distributions (item popularity Zipf-like with exponent 1, user activity
log-normal), scaled so that 25M ratings have MovieLens-25M's 162k users and 59k items (and 100k ratings about
the shipped data's 610 users and 9.7k items); ``--catalogue-of N`` draws every size from the users and items
of N ratings instead, so that only the number of ratings grows. It then runs ``python -m trainer.task --model
recommender`` for one epoch capped at ``--steps`` steps (``--steps 0``: a whole epoch), EASE off and 1000 eval
users, and prints from metrics.json: pre-training, first step, steady ratings/s, validation, eval, export and
peak RSS, with the SavedModel's size. Targets: steady ratings/s at 25M >= 0.5x the rate at 100k, peak RSS at
25M <= 6 GB, SavedModel at 20M ratings <= 2x its size at 100k.

The export holds, per user, its ``--top-k`` best unseen items and, per item, its id and factors: its size
follows the catalogue, not the ratings. The last lines compare the largest and smallest runs, with the
ratios of users and items that the export holds beside the ratio of sizes; with ``--catalogue-of`` the
SavedModel's ratio is the export's growth with the ratings alone.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

import numpy as np
from bench_runs import TrainerFailed
from bench_runs import train as train_once

FULL = (25_000_000, 162_541, 59_047)  # MovieLens-25M: ratings, users, items
SMALL = (100_836, 610, 9_724)  # the shipped latest-small


def catalogue(n: int) -> tuple[int, int]:
    """Users and items for ``n`` ratings: log-linear between the shipped data and MovieLens-25M."""
    t = np.clip(np.log(n / SMALL[0]) / np.log(FULL[0] / SMALL[0]), 0, 1)
    users = int(round(np.exp(np.log(SMALL[1]) + t * (np.log(FULL[1]) - np.log(SMALL[1])))))
    items = int(round(np.exp(np.log(SMALL[2]) + t * (np.log(FULL[2]) - np.log(SMALL[2])))))
    return users, items


def write_ratings(path: Path, n: int, seed: int = 0, chunk: int = 1_000_000,
                  shape: int | None = None) -> tuple[int, int]:
    """``n`` ratings drawn from the users and items of ``shape`` ratings (default ``n``)."""
    users, items = catalogue(shape or n)
    rng = np.random.default_rng(seed)
    item_p = 1 / np.arange(1, items + 1)
    item_p /= item_p.sum()
    user_p = rng.lognormal(0, 1.2, users)
    user_p /= user_p.sum()
    ids = rng.permutation(items) + 1  # the popular items are not the first ids
    with open(path, "w") as f:
        f.write("userId,movieId,rating,timestamp\n")
        for start in range(0, n, chunk):
            m = min(chunk, n - start)
            u = rng.choice(users, m, p=user_p) + 1
            i = ids[rng.choice(items, m, p=item_p)]
            r = rng.integers(1, 11, m) / 2
            t = rng.integers(800_000_000, 1_600_000_000, m)
            columns = (u.tolist(), i.tolist(), r.tolist(), t.tolist())
            rows = [v for row in zip(*columns, strict=True) for v in row]
            f.write(("%d,%d,%.1f,%d\n" * m) % tuple(rows))
    return users, items


def size_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000, 10_000_000, 25_000_000])
    p.add_argument("--steps", type=int, default=300, help="training steps per run (0: one whole epoch)")
    p.add_argument("--catalogue-of", type=int, default=None, metavar="N",
                   help="draw every size from the users and items of N ratings (default: each size's own)")
    p.add_argument("--workdir", default="/tmp/rec-scale")
    p.add_argument("extra", nargs="*", help="more trainer flags, after --")
    args = p.parse_args(argv)
    root = Path(args.workdir)
    root.mkdir(parents=True, exist_ok=True)
    rates, sizes, held = {}, {}, {}
    try:
        for n in args.sizes:
            data = root / f"ratings-{n}.csv"
            users, items = write_ratings(data, n, shape=args.catalogue_of)
            flags = ["--train-files", str(data), "--num-epochs", "1", "--ease-max-items", "0",
                     "--eval-users", "1000", *(["--steps-per-epoch", str(args.steps)] if args.steps else []),
                     *args.extra]
            try:
                run = train_once("recommender", flags, 42, str(root / f"job-{n}"))
            except TrainerFailed as exc:
                print(exc, file=sys.stderr)
                return exc.returncode
            phases = run.report["phases"]
            # The users and items the export holds: those in the training split, not the generator's.
            trained = run.report["data"]
            held[n] = (trained["train"]["users"], trained["train"]["items"])
            rates[n] = phases["steady_examples_per_s"]
            model_mb = sizes[n] = size_mb(root / f"job-{n}" / "model")
            csv_mb = data.stat().st_size / 1e6
            ph = phases
            print(f"{n:>11,} ratings ({users:,} users, {items:,} items, CSV {csv_mb:.0f} MB): "
                  f"pre-training {ph['pre_training_s']:.1f} s | first step {ph['first_step_s']:.2f} s | "
                  f"steady {ph['steady_examples_per_s']:,.0f} ratings/s | validation "
                  f"{ph['validation_s']:.1f} s | eval {ph['eval_s']:.1f} s | export {ph['export_s']:.1f} s | "
                  f"peak RSS {ph['peak_rss_mb']:,.0f} MB | SavedModel {model_mb:.1f} MB | recall@10 "
                  f"{run.report['eval']['recall_at_k']:.3f} | wall {run.wall:.0f} s (load {run.load:.1f})",
                  flush=True)
            data.unlink()
            shutil.rmtree(root / f"job-{n}", ignore_errors=True)
    finally:
        if not os.environ.get("KEEP"):
            shutil.rmtree(root, ignore_errors=True)
    if len(rates) > 1:
        small, large = min(rates), max(rates)
        print(f"steady rate at {large:,} / at {small:,}: {rates[large] / rates[small]:.2f} (>= 0.5)")
        (users_s, items_s), (users_l, items_l) = held[small], held[large]
        print(f"SavedModel at {large:,} / at {small:,}: {sizes[large] / sizes[small]:.2f}x (<= 2), for "
              f"{users_l / users_s:.2f}x the users and {items_l / items_s:.2f}x the items; bytes per rating "
              f"{sizes[small] * 1e6 / small:.1f} -> {sizes[large] * 1e6 / large:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
