"""One report of a tuning study, whoever ran it: a table of every trial, the best trial, parameter importance,
``study.json`` and ``study.png``.

Two runners feed it plain data, each converting its own trials to :class:`TrialResult`: ``--local``'s
Optuna trials (``jobs/local/report.py``) and a Vertex AI HyperparameterTuningJob's ``trials``
(``jobs/cloud/report.py``). Everything after that conversion is here, once: the summary (``study.json``), the
importance, the printed table and the plot, so a study looks the same wherever it ran.

Parameter importance is Optuna's PED-ANOVA evaluator (no scikit-learn), from 3 succeeded trials on, computed
on an in-memory study rebuilt from the trials' values and the StudySpec's distributions. Rebuilt the way the
local tuner samples them (``jobs/local/search_space.py``: a reverse-log value x is stored as min + max - x on
a log scale), the local importance is the one Optuna computed on the tuner's own study.

    from jobs.report import study
    summary = study.summarize("census-tuning", parsed_study, trials, state="SUCCEEDED", base="gs://b/run")
    study.publish(summary, Path(".local/reports/123"), sys.stdout)  # study.json, study.png, the table

Imports nothing heavy: Optuna only to compute importance, matplotlib only to draw.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from jobs.definition.study import LOG_SCALES, Parameter, Study

# Report states of a trial: the local runner's (SUCCEEDED, FAILED, INTERRUPTED), and ACTIVE for a trial of a
# cloud study that is still running when the report is made.
SUCCEEDED, FAILED, INTERRUPTED, ACTIVE = "SUCCEEDED", "FAILED", "INTERRUPTED", "ACTIVE"
MIN_TRIALS_FOR_IMPORTANCE = 3


@dataclass(frozen=True)
class TrialResult:
    """One trial as the report sees it; the fields, in this order, are a trial's row in study.json."""

    id: str  # "1", "2", ...: Vertex AI's trial ids, which --local keeps
    state: str  # SUCCEEDED | FAILED | INTERRUPTED | ACTIVE
    parameters: dict[str, Any]  # by parameterId, as the trial received them (INTEGER int, DOUBLE float, ...)
    metric: float | None  # the objective; None unless SUCCEEDED
    measurements: list[dict[str, float]] = field(default_factory=list)  # [{step, value}] as reported
    duration_s: float | None = None
    model_dir: str | None = None  # the trial's SavedModel, when it succeeded
    log: str | None = None  # where to read why it failed: a log file, or the trial's CustomJob page
    failure: str | None = None


def summarize(
    name: str,
    study: Study,
    trials: Sequence[TrialResult],
    *,
    state: str,
    base: str,
    parameters: Sequence[Parameter] | None = None,
) -> dict[str, Any]:
    """The study as study.json holds it. ``parameters``: every tuned one (default ``study.parameters``; a
    cloud study passes its conditional ones too), for the scales and the importance."""
    parameters = tuple(study.parameters if parameters is None else parameters)
    rows = [asdict(t) for t in trials]
    done = [r for r in rows if r["state"] == SUCCEEDED and r["metric"] is not None]
    pick = max if study.goal == "MAXIMIZE" else min
    best = pick(done, key=lambda r: r["metric"]) if done else None
    return {
        "displayName": name,
        "state": state,
        "metric": {"metricId": study.metric_id, "goal": study.goal},
        "algorithm": study.algorithm,
        "measurementSelectionType": study.measurement_selection,
        "maxTrialCount": study.max_trials,
        "parallelTrialCount": study.parallel_trials,
        "maxFailedTrialCount": study.max_failed_trials,
        "scales": {p.parameter_id: p.scale for p in parameters if p.kind in ("DOUBLE", "INTEGER")},
        "baseOutputDirectory": base,
        "counts": {
            "completed": len(done),
            "failed": sum(r["state"] == FAILED for r in rows),
            "interrupted": sum(r["state"] == INTERRUPTED for r in rows),
        },
        "best": best,
        "importance": importance(parameters, study.goal, trials),  # {parameterId: PED-ANOVA importance}
        "trials": rows,
    }


def importance(
    parameters: Sequence[Parameter], goal: str, trials: Sequence[TrialResult]
) -> dict[str, float] | None:
    """PED-ANOVA importance of each parameter, most important first; None under 3 succeeded trials or when
    the evaluator cannot rank them (e.g. every trial has the same value)."""
    done = [t for t in trials if t.state == SUCCEEDED and t.metric is not None]
    if len(done) < MIN_TRIALS_FOR_IMPORTANCE:
        return None
    import warnings

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    specs = {p.parameter_id: p for p in parameters}
    spaces = {name: _distribution(p) for name, p in specs.items()}
    study = optuna.create_study(direction="maximize" if goal == "MAXIMIZE" else "minimize")
    for t in done:
        values = {k: _internal(specs[k], v) for k, v in t.parameters.items() if k in specs}
        try:
            study.add_trial(
                optuna.trial.create_trial(
                    params=values, distributions={k: spaces[k] for k in values}, value=t.metric
                )
            )
        except (ValueError, TypeError):
            continue  # a value outside its spec (a study edited since): it says nothing about this space
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            evaluator = optuna.importance.PedAnovaImportanceEvaluator()
            found = optuna.importance.get_param_importances(study, evaluator=evaluator)
    except (ValueError, RuntimeError, ZeroDivisionError):
        return None
    return {name: round(float(value), 4) for name, value in found.items()} or None


def _distribution(p: Parameter):
    """The distribution --local's tuner suggests ``p`` from (jobs/local/search_space.suggest)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if p.kind in ("DISCRETE", "CATEGORICAL"):
        return CategoricalDistribution(list(p.values))
    log = p.scale in LOG_SCALES
    if p.kind == "INTEGER":
        return IntDistribution(int(p.low), int(p.high), log=log)
    return FloatDistribution(p.low, p.high, log=log)


def _internal(p: Parameter, value: Any) -> Any:
    """A trial's value as the tuner's Optuna study stores it: a reverse-log x as min + max - x."""
    if p.scale != "UNIT_REVERSE_LOG_SCALE" or p.kind not in ("DOUBLE", "INTEGER"):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        return value  # not a number: create_trial refuses it, and the trial is left out
    if p.kind == "INTEGER":
        return int(p.low + p.high - value)
    return min(p.high, max(p.low, p.low + p.high - value))


def publish(summary: dict[str, Any], folder: Path, out: IO[str], keep: str | None = None) -> Path | None:
    """study.json and study.png in ``folder``, then the table and the results on ``out``; the plot's path.
    ``keep``: as :func:`print_summary` takes it."""
    folder.mkdir(parents=True, exist_ok=True)
    write_json(summary, folder / "study.json")
    plot = plot_study(summary, folder / "study.png")
    print_summary(summary, out, plot=plot, results=folder / "study.json", keep=keep)
    return plot


def parameter_names(rows: list[dict[str, Any]]) -> list[str]:
    """Every parameter some trial received, in the order trials first name them (a conditional parameter
    is missing from the trials its parent's value leaves it out of)."""
    return list(dict.fromkeys(name for r in rows for name in r["parameters"]))


def write_json(summary: dict[str, Any], path: Path) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary, indent=2) + "\n")
    os.replace(tmp, path)


def fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value)


def print_summary(
    summary: dict[str, Any],
    out: IO[str],
    plot: Path | None = None,
    results: Path | None = None,
    keep: str | None = None,
) -> None:
    """The table of trials, then the counts, the best trial, importance and where the files are.

    ``results``: where study.json was written (default: in the base output directory, as --local writes it).
    ``keep``: the line under the best trial's SavedModel on keeping it past its folder's lifecycle (the cloud
    report's, which holds it: jobs.cloud.report); None: the command that holds a gs:// one by hand.
    """
    rows = summary["trials"]
    names = parameter_names(rows)
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
    active = sum(r["state"] == ACTIVE for r in rows)  # a cloud study reported while it runs
    print(
        f"Study {summary['state'].lower()}: {counts['completed']} succeeded, {counts['failed']} failed"
        + (f", {counts['interrupted']} interrupted" if counts["interrupted"] else "")
        + (f", {active} active" if active else ""),
        file=out,
    )
    best = summary["best"]
    if best:
        params = " ".join(f"{k}={fmt(v)}" for k, v in best["parameters"].items())
        print(f"Best trial {best['id']}: {metric}={best['metric']:.4f} with {params}", file=out)
        print(f"  SavedModel: {best['model_dir']}", file=out)
        if keep:
            print(f"  {keep}", file=out)
        elif best["model_dir"].startswith("gs://"):
            # A study folder's lifecycle rule (infra/README.md, "Retention") spares only objects under a hold.
            print(f"  Keep it past its folder's lifecycle: {hold_command(best['model_dir'])}", file=out)
    else:
        print(
            f"No trial succeeded{' yet' if active else ''}: no best trial and no parameter importance.",
            file=out,
        )
    base = summary["baseOutputDirectory"]
    if summary.get("importance"):
        ranked = ", ".join(f"{k} {v:.2f}" for k, v in summary["importance"].items())
        print(f"Parameter importance (PED-ANOVA): {ranked}", file=out)
    print(f"Results: {results or Path(base) / 'study.json'}", file=out)
    if plot:
        print(f"Plot: {plot}", file=out)
    if base:
        print(f"Compare trials: tensorboard --logdir {base}", file=out)
    for r in rows:
        if r["state"] == FAILED:
            print(f"Trial {r['id']} failed: {r['failure']}", file=out)
    out.flush()


def hold_command(model_dir: str, hold: bool = True) -> str:
    """The gcloud command that puts (``hold``) or takes off a temporary hold on each object under a folder."""
    flag = "--temporary-hold" if hold else "--no-temporary-hold"
    return f"gcloud storage objects update --recursive {flag} {model_dir.rstrip('/')}"


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
    names = parameter_names(rows)
    weights = summary.get("importance") or {}
    names.sort(key=lambda n: -weights.get(n, 0.0))  # most influential first
    ok = [r for r in rows if r["metric"] is not None]
    bad = [r for r in rows if r["metric"] is None and r["state"] != ACTIVE]  # a running trial is no failure
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
        _parameter_panel(pax, name, ok, best_id, metric, summary["scales"].get(name), weights.get(name))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _parameter_panel(
    ax, name: str, ok: list, best_id: str | None, metric: str, scale: str | None, weight: float | None
) -> None:
    ok = [r for r in ok if name in r["parameters"]]  # a conditional parameter: the trials that had it
    values = [r["parameters"][name] for r in ok]
    ys = [r["metric"] for r in ok]
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    if numeric:
        xs = values
        if scale in LOG_SCALES and all(v > 0 for v in values):
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
    ranked = f": importance {weight:.2f}" if weight is not None else ""
    ax.set_title(f"{name}{shown}{ranked}", fontsize=10)
    ax.set_xlabel(name)
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
