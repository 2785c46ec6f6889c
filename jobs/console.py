"""The console of a single run: the trainer's progress lines (``trainer.contract.PROGRESS_TAG``, one JSON
object each) rendered as compact lines, and a run's closing lines (the eval metrics beside the model folder,
the task's baselines, its notes).

Two runners feed it log lines: ``--local`` the chief's replica log (``jobs/local/console.py``), a followed
Vertex AI job its Cloud Logging stream (``jobs/cloud/logs.py``); ``run_job.py report`` prints the closing
lines from a run's ``metrics.json``. Everything here is a pure function of plain data, so the console is the
same wherever the run was, and tests feed it recorded lines. A job's output is not trusted: a line that is not
a well-formed progress line is no event, and every value shown is escaped and shortened.

    event = parse(line)                      # None unless the line is a progress line
    for text in render(event): print(text)   # "epoch 3/8  loss 0.2819  auc 0.9265 | val ... (1.6 s)"
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, TextIO

from jobs import study_report
from jobs.definition.errors import printable, short
from trainer.contract import PROGRESS_EVENTS, PROGRESS_MAX_CHARS, PROGRESS_TAG

# The most metrics a line shows per side (a task logs a handful; a hostile line could hold thousands).
MAX_METRICS = 8
MAX_BASELINES = 8
MAX_NOTES = 4
SHOWN_CHARS = 500  # the most of a text field (a stage's detail, a note, a folder) a line shows
# The most of a run's metrics.json a report or a console reads (the trainer's is a few KiB: eval, history,
# phases).
METRICS_LIMIT = 1 << 20


def parse(line: str) -> dict[str, Any] | None:
    """The progress event a log line carries (``{"event": ..., <its fields>}``), or None."""
    if not isinstance(line, str) or len(line) > PROGRESS_MAX_CHARS:
        return None
    at = line.find(PROGRESS_TAG)
    if at < 0:
        return None
    try:
        event = json.loads(line[at + len(PROGRESS_TAG):])
    except (ValueError, RecursionError):
        return None
    if not isinstance(event, dict) or event.get("event") not in PROGRESS_EVENTS:
        return None
    if not set(PROGRESS_EVENTS[event["event"]]) <= set(event):
        return None
    return event


def render(event: dict[str, Any]) -> list[str]:
    """The console lines of one event (see ``trainer.contract.PROGRESS_EVENTS``)."""
    kind = event["event"]
    if kind == "start":
        line, epochs = f"trainer started: --model {_text(event['model'])}", event["epochs"]
        if _count(epochs) != "?":
            line += f", {epochs} epoch{'s' if epochs != 1 else ''}"
        return [line]
    if kind == "stage":
        return [f"pre-training: {_text(event['what'])}: {_text(event['detail'])}{_seconds(event['seconds'])}"]
    if kind == "note":
        return [f"note: {_text(event['text'])}"]
    if kind == "epoch":
        head = f"epoch {_count(event['epoch'])}/{_count(event['epochs'])}"
        val = _metrics(event["val"])
        return [f"{head}  {_metrics(event['train'])}" + (f" | val {val}" if val else "")
                + _seconds(event["seconds"])]
    return closing_lines(event["model_dir"], event["eval"], event["baselines"])


def closing_lines(model_dir: Any, evaluation: Any, baselines: Any, notes: Any = ()) -> list[str]:
    """The end of a run: its model folder, the eval metrics, each baseline measured on the same eval data
    (the task's, e.g. the recommender's popularity and EASE), and its notes."""
    lines = [f"  SavedModel: {_text(model_dir)}"]
    if isinstance(evaluation, dict):
        lines.append(f"  eval: {_metrics(evaluation) or 'none'}")
    if isinstance(baselines, dict):
        for name, figures in list(baselines.items())[:MAX_BASELINES]:
            lines.append(f"  baseline {_text(name)} (same eval data): {_metrics(figures) or 'none'}")
    for text in notes[:MAX_NOTES] if isinstance(notes, list) else ():
        lines.append(f"  note: {_text(text)}")
    return lines


def job_report_lines(report: dict[str, Any], note: str | None = None) -> list[str]:
    """A CustomJob's report (``run_job.py report``, job.json's fields), wherever it ran: its state, times,
    model folder with the closing lines of its metrics.json, and ``note`` (why they are missing)."""
    lines = [f"CustomJob {_text(report.get('displayName'))} ({_text(report.get('name'))}): "
             f"{_text(report.get('state'))}"]
    times = [f"{k} {_text(report[f'{k}Time'])}" for k in ("create", "start", "end") if report.get(f"{k}Time")]
    duration = report.get("duration_s")
    lines.append(f"  {', '.join(times) or 'no times yet'}" + (f" ({duration:.0f}s)" if duration else ""))
    model_dir = report.get("modelDir") or "none (the job has no baseOutputDirectory)"
    lines += closing_lines(model_dir, *metrics_parts(report.get("metrics")))
    if note:
        lines.append(f"  {_text(note, 2000)}")
    if report.get("error"):
        lines.append(f"Job error: {_text(' '.join(str(report['error']).split()), 2000)}")
    return lines


def publish_job_report(report: dict[str, Any], note: str | None, folder: Path, out: TextIO) -> None:
    """job.json in ``folder``, then the report's lines and where it went on ``out``."""
    folder.mkdir(parents=True, exist_ok=True)
    study_report.write_json(report, folder / "job.json")
    print("\n".join(job_report_lines(report, note)), file=out)
    print(f"Results: {folder / 'job.json'}", file=out)
    out.flush()


def parse_metrics(where: str, data: bytes) -> tuple[Any, str | None]:
    """(a metrics.json's bytes, read up to one byte past METRICS_LIMIT, parsed; None), or (None, why not)."""
    if len(data) > METRICS_LIMIT:
        return None, f"{where}: over {METRICS_LIMIT} bytes, not read"
    try:
        return json.loads(data), None
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        return None, f"{where}: not JSON"


def metrics_parts(metrics: Any) -> tuple[Any, Any, Any]:
    """(eval, baselines, notes) of a run's metrics.json as the trainer writes it (trainer.train)."""
    if not isinstance(metrics, dict):
        return None, None, ()
    data = metrics.get("data") if isinstance(metrics.get("data"), dict) else {}
    return metrics.get("eval"), data.get("baselines"), data.get("notes") or ()


def _metrics(figures: Any) -> str:
    """``loss 0.2767  accuracy 0.8710  auc 0.9274``: loss first, then the others by name, so that a run's
    lines and its baselines' read alike whichever order the trainer or metrics.json (sorted) gave them in."""
    if not isinstance(figures, dict):
        return ""
    names = sorted(figures, key=lambda name: (name != "loss", str(name)))[:MAX_METRICS]
    return "  ".join(f"{_text(name, 40)} {_number(figures[name])}" for name in names)


def _number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return short(value, 40)
    if isinstance(value, float) and math.isfinite(value) and not value.is_integer():
        return f"{value:.4f}"
    return str(value)


def _count(value: Any) -> str:
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else "?"


def _seconds(value: Any) -> str:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return f" ({value:.1f} s)" if ok else ""


def _text(value: Any, limit: int = SHOWN_CHARS) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return printable(short(text, limit, quote=False))
