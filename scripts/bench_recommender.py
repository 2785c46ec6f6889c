"""Quality and serving benchmark: the recommender's default run on the shipped MovieLens latest-small ratings.

    python scripts/bench_recommender.py [--seeds 42 7 1234] [-- extra trainer flags]

Each seed runs ``python -m trainer.task --model recommender`` as a user would (default flags: a random 80/20
split by that seed, so the baselines change with it), then prints the evaluation RMSE and MAE beside the
global-mean and bias-only baselines of the same split, and the training wall time (``model.fit``, from the
run's metrics.json). The last seed's SavedModel is reloaded in this process and its ``top_k`` signature
called 100 times for one user (k = 10): the median latency is printed. Targets: median RMSE <= 0.85 and at
least 2% below the bias-only baseline, training <= 60 s on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

from bench_runs import REPO, TrainerFailed
from bench_runs import train as train_once

RATINGS = REPO / "data" / "movielens" / "ratings.csv"
LATENCY_CALLS = 100


def top_k_latency_ms(model_dir: str, user: str, k: int = 10) -> float:
    """Median wall time of one ``top_k`` call for one user on the reloaded SavedModel (after a warm-up)."""
    import tensorflow as tf

    serve = tf.saved_model.load(model_dir).signatures["top_k"]
    args = {"user": tf.constant([user]), "k": tf.constant([k], tf.int32)}
    serve(**args)
    times = []
    for _ in range(LATENCY_CALLS):
        start = time.perf_counter()
        serve(**args)["items"].numpy()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[42, 7, 1234])
    p.add_argument("extra", nargs="*", help="more trainer flags, after --")
    args = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-recommender-") as root:
        for seed in args.seeds:
            try:
                run = train_once("recommender", ["--train-files", str(RATINGS), *args.extra], seed,
                                 f"{root}/{seed}")
            except TrainerFailed as exc:
                print(exc, file=sys.stderr)
                return exc.returncode
            report, load = run.report, run.load
            evaluation, base = report["eval"], report["data"]["baselines"]
            row = {"rmse": evaluation["rmse"], "mae": evaluation["mae"], "train": report["train_seconds"]}
            for name, key in (("bias", "bias_only"), ("mean", "global_mean")):
                row.update({f"{name}_{m}": base[key][m] for m in ("rmse", "mae")})
            row["gain"] = 1 - row["rmse"] / row["bias_rmse"]
            rows.append(row)
            print(f"seed {seed:>5}: RMSE {row['rmse']:.4f} MAE {row['mae']:.4f} | bias-only RMSE "
                  f"{row['bias_rmse']:.4f} MAE {row['bias_mae']:.4f} | global mean RMSE "
                  f"{row['mean_rmse']:.4f} MAE {row['mean_mae']:.4f} | {100 * row['gain']:.2f}% below "
                  f"bias-only | train {row['train']:.1f} s (load average {load:.2f})", flush=True)
        latency = top_k_latency_ms(f"{root}/{args.seeds[-1]}/model", "1")

    def median(key):
        return statistics.median(r[key] for r in rows)

    ok = median("rmse") <= 0.85 and median("gain") >= 0.02 and max(r["train"] for r in rows) <= 60
    print(f"median of {len(rows)}: RMSE {median('rmse'):.4f} (<= 0.85) MAE {median('mae'):.4f} | bias-only "
          f"RMSE {median('bias_rmse'):.4f} MAE {median('bias_mae'):.4f} | global mean RMSE "
          f"{median('mean_rmse'):.4f} MAE {median('mean_mae'):.4f} | {100 * median('gain'):.2f}% below "
          f"bias-only (>= 2%) | train {median('train'):.1f} s (each <= 60 s) on {os.cpu_count()} CPUs: "
          f"{'PASS' if ok else 'FAIL'}")
    print(f"top_k serving latency, one user, k=10: median of {LATENCY_CALLS} calls {latency:.2f} ms")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
