"""What a finished (or interrupted) local study leaves behind: a table, study.json and a PNG plot."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import IO, Any

from jobs.local.spec import StudyConfig


def study_summary(name: str, cfg: StudyConfig, trials: list, base: Path, status: int) -> dict[str, Any]:
    rows = []
    for t in trials:
        attrs = t.user_attrs
        state = t.state.name
        if attrs.get("interrupted"):
            state = "INTERRUPTED"
        elif state == "FAIL":
            state = "FAILED"
        elif state == "COMPLETE":
            state = "SUCCEEDED"
        rows.append(
            {
                "id": attrs.get("trial_id", str(t.number + 1)),
                "state": state,
                "parameters": attrs.get("params", dict(t.params)),
                "metric": t.value if t.state.name == "COMPLETE" else None,
                "measurements": attrs.get("measurements", []),
                "duration_s": attrs.get("duration_s"),
                "model_dir": attrs.get("model_dir"),
                "log": attrs.get("log"),
                "failure": attrs.get("failure"),
            }
        )
    done = [r for r in rows if r["state"] == "SUCCEEDED"]
    pick = max if cfg.goal == "MAXIMIZE" else min
    best = pick(done, key=lambda r: r["metric"]) if done else None
    state = {0: "SUCCEEDED", 130: "INTERRUPTED"}.get(status, "FAILED")
    return {
        "displayName": name,
        "state": state,
        "metric": {"metricId": cfg.metric_id, "goal": cfg.goal},
        "algorithm": cfg.algorithm,
        "measurementSelectionType": cfg.measurement_selection,
        "maxTrialCount": cfg.max_trials,
        "parallelTrialCount": cfg.parallel_trials,
        "maxFailedTrialCount": cfg.max_failed_trials,
        "scales": {p.parameter_id: p.scale for p in cfg.parameters if p.kind in ("DOUBLE", "INTEGER")},
        "baseOutputDirectory": str(base),
        "counts": {
            "completed": len(done),
            "failed": sum(r["state"] == "FAILED" for r in rows),
            "interrupted": sum(r["state"] == "INTERRUPTED" for r in rows),
        },
        "best": best,
        "importance": None,  # filled in by the runner: {parameterId: PED-ANOVA importance}
        "trials": rows,
    }


def write_json(summary: dict[str, Any], path: Path) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary, indent=2) + "\n")
    os.replace(tmp, path)


def fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value)


def print_summary(summary: dict[str, Any], out: IO[str], plot: Path | None = None) -> None:
    rows = summary["trials"]
    names = list(rows[0]["parameters"]) if rows else []
    metric = summary["metric"]["metricId"]
    header = ["trial", *names, metric, "state", "duration"]
    table = [
        [
            r["id"],
            *(fmt(r["parameters"].get(n)) for n in names),
            fmt(r["metric"]),
            r["state"],
            "-" if r["duration_s"] is None else f"{r['duration_s']:.1f}s",
        ]
        for r in rows
    ]
    widths = [max(len(str(c)) for c in col) for col in zip(header, *table, strict=False)]
    print(file=out)
    for line in (header, *table):
        print("  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=False)).rstrip(), file=out)
    print(file=out)
    counts = summary["counts"]
    print(
        f"Study {summary['state'].lower()}: {counts['completed']} succeeded, {counts['failed']} failed"
        + (f", {counts['interrupted']} interrupted" if counts["interrupted"] else ""),
        file=out,
    )
    best = summary["best"]
    if best:
        params = " ".join(f"{k}={fmt(v)}" for k, v in best["parameters"].items())
        print(f"Best trial {best['id']}: {metric}={best['metric']:.4f} with {params}", file=out)
        print(f"  SavedModel: {best['model_dir']}", file=out)
    base = summary["baseOutputDirectory"]
    if summary.get("importance"):
        ranked = ", ".join(f"{k} {v:.2f}" for k, v in summary["importance"].items())
        print(f"Parameter importance (PED-ANOVA): {ranked}", file=out)
    print(f"Results: {Path(base) / 'study.json'}", file=out)
    if plot:
        print(f"Plot: {plot}", file=out)
    print(f"Compare trials: tensorboard --logdir {base}", file=out)
    for r in rows:
        if r["state"] == "FAILED":
            print(f"Trial {r['id']} failed: {r['failure']}", file=out)
    out.flush()


def plot_study(summary: dict[str, Any], path: Path) -> Path | None:
    """Metric per trial with the best-so-far line, and one panel per parameter (metric against its value)."""
    rows = summary["trials"]
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    maximize = summary["metric"]["goal"] == "MAXIMIZE"
    metric = summary["metric"]["metricId"]
    names = list(rows[0]["parameters"])
    importance = summary.get("importance") or {}
    names.sort(key=lambda n: -importance.get(n, 0.0))  # most influential first
    ok = [r for r in rows if r["metric"] is not None]
    bad = [r for r in rows if r["metric"] is None]
    if not ok:
        names = []  # nothing to relate the parameters to
    ncols = 2 if len(names) in (2, 4) else min(3, max(1, len(names)))
    nrows = 1 + math.ceil(len(names) / ncols)
    fig = plt.figure(figsize=(max(9.0, 4.2 * ncols + 1), 3.2 * nrows), constrained_layout=True)
    grid = fig.add_gridspec(nrows, ncols)
    ax = fig.add_subplot(grid[0, :])
    best_id = summary["best"]["id"] if summary["best"] else None
    if ok:
        xs = [int(r["id"]) for r in ok]
        ys = [r["metric"] for r in ok]
        ax.scatter(xs, ys, s=48, color="tab:blue", zorder=3, label="succeeded trial")
        best, line = None, []
        for r in sorted(ok, key=lambda r: int(r["id"])):
            if best is None or (r["metric"] > best if maximize else r["metric"] < best):
                best = r["metric"]
            line.append((int(r["id"]), best))
        ax.step(
            [p[0] for p in line],
            [p[1] for p in line],
            where="post",
            color="tab:orange",
            lw=2,
            label="best so far",
        )
        top = next(r for r in ok if r["id"] == best_id)
        ax.scatter(
            [int(top["id"])],
            [top["metric"]],
            s=160,
            marker="*",
            color="gold",
            edgecolor="black",
            zorder=4,
            label=f"best: trial {best_id} ({top['metric']:.4f})",
        )
    if bad:
        floor = min((r["metric"] for r in ok), default=0.0)
        ax.scatter(
            [int(r["id"]) for r in bad],
            [floor] * len(bad),
            marker="x",
            s=60,
            color="tab:red",
            zorder=3,
            label="failed / interrupted (no metric)",
        )
    if not ok:
        ax.text(
            0.5,
            0.5,
            "no trial reported a metric: see the failed trials' logs",
            transform=ax.transAxes,
            ha="center",
            va="center",
            fontsize=11,
        )
    ax.set_xlabel("trial")
    ax.set_ylabel(metric)
    ax.set_title(
        f"{summary['displayName']}: {metric} per trial ({'higher' if maximize else 'lower'} is better)"
    )
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    for i, name in enumerate(names):
        pax = fig.add_subplot(grid[1 + i // ncols, i % ncols])
        _parameter_panel(pax, name, ok, best_id, metric, summary["scales"].get(name), importance.get(name))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _parameter_panel(
    ax, name: str, ok: list, best_id: str | None, metric: str, scale: str | None, importance: float | None
) -> None:
    values = [r["parameters"].get(name) for r in ok]
    ys = [r["metric"] for r in ok]
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    if numeric:
        xs = values
        if scale in ("UNIT_LOG_SCALE", "UNIT_REVERSE_LOG_SCALE") and all(v > 0 for v in values):
            ax.set_xscale("log")
            from matplotlib.ticker import FuncFormatter, NullFormatter

            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.xaxis.set_minor_formatter(NullFormatter())
        elif all(isinstance(v, int) for v in values):
            ax.xaxis.get_major_locator().set_params(integer=True)
    else:
        cats = sorted({str(v) for v in values})
        xs = [cats.index(str(v)) for v in values]
        ax.set_xticks(range(len(cats)), cats)
    if ys:
        ax.scatter(xs, ys, c=ys, cmap="viridis", s=40, edgecolor="black", linewidth=0.4)
    for x, y, r in zip(xs, ys, ok, strict=False):
        if r["id"] == best_id:
            ax.scatter([x], [y], s=160, marker="*", color="gold", edgecolor="black", zorder=4)
    shown = f" ({scale.lower().replace('unit_', '').replace('_', ' ')})" if scale else ""
    weight = f": importance {importance:.2f}" if importance is not None else ""
    ax.set_title(f"{name}{shown}{weight}", fontsize=10)
    ax.set_xlabel(name)
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
