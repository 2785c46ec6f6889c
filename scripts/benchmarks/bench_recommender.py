"""Quality and serving benchmark: the recommender's default run on the shipped MovieLens latest-small ratings.

    python scripts/benchmarks/bench_recommender.py [--seeds 42 7 1234] [-- extra trainer flags]

Each seed runs ``python -m trainer.task --model recommender`` as a user would (default flags: a random 80/20
split by that seed, so the baselines change with it) and prints, from the run's metrics.json, the model's
recall@10 and NDCG@10 on each eval user's held-out positives (ratings >= 4 of items the user did not rate in
training), the same figures for the most-rated unseen items (popularity) and EASE computed by the same run on
the same users, the ratios, and the training wall time (``model.fit``). The last seed's SavedModel is
reloaded in this process and its ``top_k`` signature called 100 times for one user (k = 10): the median
latency is printed. Targets (issue 27): median recall@10 >= 0.95x EASE's and >= 1.5x popularity's, each
training <= 120 s on 2 CPU cores, top_k median latency <= 5 ms.
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
            if "ease" not in base:
                print(f"EASE was not computed: {report['data']['skipped_baselines']}", file=sys.stderr)
                return 1
            row = {"recall": evaluation["recall_at_k"], "ndcg": evaluation["ndcg_at_k"],
                   "train": report["train_seconds"]}
            for name in ("popularity", "ease"):
                row[f"{name}_recall"] = base[name]["recall_at_k"]
                row[f"{name}_ndcg"] = base[name]["ndcg_at_k"]
            row["vs_ease"] = row["recall"] / row["ease_recall"]
            row["vs_popularity"] = row["recall"] / row["popularity_recall"]
            rows.append(row)
            print(f"seed {seed:>5}: model recall@10 {row['recall']:.4f} NDCG@10 {row['ndcg']:.4f} | "
                  f"popularity {row['popularity_recall']:.4f} / {row['popularity_ndcg']:.4f} | EASE "
                  f"{row['ease_recall']:.4f} / {row['ease_ndcg']:.4f} | recall {row['vs_ease']:.3f}x EASE, "
                  f"{row['vs_popularity']:.2f}x popularity | train {row['train']:.1f} s (load average "
                  f"{load:.2f})", flush=True)
        latency = top_k_latency_ms(f"{root}/{args.seeds[-1]}/model", "1")

    def median(key):
        return statistics.median(r[key] for r in rows)

    quality = median("vs_ease") >= 0.95 and median("vs_popularity") >= 1.5
    fast = max(r["train"] for r in rows) <= 120 and latency <= 5
    print(f"median of {len(rows)}: model recall@10 {median('recall'):.4f} NDCG@10 {median('ndcg'):.4f} | "
          f"popularity {median('popularity_recall'):.4f} / {median('popularity_ndcg'):.4f} | EASE "
          f"{median('ease_recall'):.4f} / {median('ease_ndcg'):.4f} | recall {median('vs_ease'):.3f}x EASE "
          f"(>= 0.95), {median('vs_popularity'):.2f}x popularity (>= 1.5) | train {median('train'):.1f} s "
          f"(each <= 120 s) on {os.cpu_count()} CPUs")
    print(f"top_k serving latency, one user, k=10: median of {LATENCY_CALLS} calls {latency:.2f} ms (<= 5)")
    print("PASS" if quality and fast else "FAIL")
    return 0 if quality and fast else 1


if __name__ == "__main__":
    sys.exit(main())
