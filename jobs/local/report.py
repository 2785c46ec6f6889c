"""A local study's Optuna trials as the one study report's trials (``jobs/study_report.py``), which writes
what a finished (or interrupted) local study leaves behind: a table, study.json and study.png; and
``run_job.py report PATH``'s reading of a local run's or study's folder, reported as a cloud job is."""

from __future__ import annotations

import json
import stat
from contextlib import closing
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

from common.reader import file_kind
from jobs import console
from jobs.definition.errors import JobError, short
from jobs.definition.study import Study, StudyError, parse_study
from jobs.study_report import FAILED, INTERRUPTED, SUCCEEDED, TrialResult, summarize
from trainer.contract import METRICS_FILE

# Exit status of the local runner -> the study's state in study.json.
STUDY_STATES = {0: SUCCEEDED, 130: INTERRUPTED}


def trial_result(t: Any) -> TrialResult:
    """An Optuna FrozenTrial of the local tuner (its user attributes set by tuning.StudyRunner)."""
    attrs = t.user_attrs
    state = {"COMPLETE": SUCCEEDED, "FAIL": FAILED}.get(t.state.name, t.state.name)
    if attrs.get("interrupted"):
        state = INTERRUPTED
    return TrialResult(
        id=attrs.get("trial_id", str(t.number + 1)),
        state=state,
        # The values the trial received; Optuna's params hold a reverse-log value reflected (search_space).
        parameters=attrs.get("params", dict(t.params)),
        metric=t.value if t.state.name == "COMPLETE" else None,
        measurements=attrs.get("measurements", []),
        duration_s=attrs.get("duration_s"),
        model_dir=attrs.get("model_dir"),
        log=attrs.get("log"),
        failure=attrs.get("failure"),
    )


def study_summary(name: str, study: Study, trials: list, base: Path, status: int) -> dict[str, Any]:
    state = STUDY_STATES.get(status, FAILED)
    return summarize(name, study, [trial_result(t) for t in trials], state=state, base=str(base))


# `run_job.py report PATH`: a local run's folder or a local study's, reported as a cloud job is
# (jobs/cloud/report.py): the same lines, job.json or study.json and study.png.
PATH_ALLOWED = ("the folder of a --local run (holding model/metrics.json or replica-logs/) or of a --local "
                "study (holding study.db)")
STUDY_DB = "study.db"


def run_kind(path: Path) -> str:
    """"study" or "job": what the folder ``path`` holds, from a few fixed names in it (never a walk of the
    tree, so a huge or looping one is refused as fast); a JobError (on PATH) when it holds no run."""
    from jobs.local.environment import REPLICA_LOGS

    def refused(problem: str) -> JobError:
        return JobError("report", "PATH", f"{short(str(path))} {problem}", PATH_ALLOWED)

    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise refused("does not exist") from None
    except OSError as exc:  # a part of it is a file, a loop of symlinks, a name too long
        raise refused(f"cannot be read ({exc.strerror or type(exc).__name__})") from None
    if not stat.S_ISDIR(mode):
        raise refused(f"is {file_kind(mode)}, not a folder")
    if _kind(path / STUDY_DB) is not None:
        if _kind(path / STUDY_DB) != stat.S_IFREG:
            raise refused(f"holds a {STUDY_DB} that is not a regular file")
        return "study"
    if _kind(path / "model" / METRICS_FILE) == stat.S_IFREG or _kind(path / REPLICA_LOGS) == stat.S_IFDIR:
        return "job"
    raise refused(f"holds no run (no model/{METRICS_FILE}, {REPLICA_LOGS}/ or {STUDY_DB})")


def _kind(path: Path) -> int | None:
    """The file type of ``path`` (stat.S_IFREG, S_IFDIR, ...), None when there is none to stat."""
    try:
        return stat.S_IFMT(path.stat().st_mode)
    except OSError:
        return None


def job_report(path: Path) -> tuple[dict[str, Any], str | None]:
    """A local run's job.json, with job.json's fields as a cloud CustomJob's report has them, and the note
    saying why its metrics are missing (None when they are there)."""
    from jobs.local.console import read_metrics
    from jobs.local.environment import REPLICA_LOGS

    model_dir = path / "model"
    metrics_path = model_dir / METRICS_FILE
    metrics, note = read_metrics(metrics_path)
    if metrics is None and _kind(metrics_path) is None:
        note += f" (the run is still going, failed or was stopped; its logs: {path / REPLICA_LOGS})"
    start, end = _mtime(path / REPLICA_LOGS), _mtime(metrics_path) if metrics is not None else None
    return {
        "name": str(path),
        "displayName": path.name,
        "state": "SUCCEEDED" if isinstance(metrics, dict) else "UNKNOWN",
        "createTime": None,
        # A local run's clock: its replica logs are created as it starts, its metrics.json written at its end.
        "startTime": _rfc3339(start),
        "endTime": _rfc3339(end),
        "duration_s": round(end - start, 2) if start is not None and end is not None else None,
        "modelDir": f"{model_dir}/",
        "error": None,
        "metrics": metrics,
    }, note


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _rfc3339(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def study_summary_of(path: Path) -> dict[str, Any]:
    """The study report's summary of the local study in ``path`` (its study.db, opened read-only), as the
    study left it: finished, interrupted or still running."""
    import sqlite3

    db = path / STUDY_DB

    def refused(problem: str) -> JobError:
        return JobError("report", "PATH", f"{short(str(db))} {problem}", PATH_ALLOWED)

    try:  # Optuna would create its tables in a file that has none: check it read-only first
        uri = f"file:{quote(str(db))}?mode=ro"
        with closing(sqlite3.connect(uri, uri=True)) as conn:
            studies = conn.execute("SELECT count(*) FROM studies").fetchone()[0]
    except sqlite3.Error as exc:
        raise refused(f"is not a study's database ({exc})") from None
    if studies != 1:
        raise refused(f"holds {studies} studies, not one")
    import optuna
    from optuna.storages import RDBStorage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        storage = RDBStorage(f"sqlite:///file:{quote(str(db))}?mode=ro&uri=true", skip_table_creation=True,
                             skip_compatibility_check=True)
        study = optuna.load_study(study_name=None, storage=storage)
        request = study.user_attrs.get("request")
        trials = [t for t in study.get_trials(deepcopy=False) if t.state.name != "WAITING"]
    except Exception as exc:  # noqa: BLE001 - a damaged or foreign database: one line
        raise refused(f"is not readable as a study ({type(exc).__name__})") from None
    try:
        declared = parse_study(request if isinstance(request, dict) else {})
    except StudyError as exc:
        raise refused(f"records no studySpec this checkout reads ({exc.problem})") from None
    display = str(study.user_attrs.get("display_name") or path.name)
    state = _study_state(path, trials)
    return summarize(display, declared, [trial_result(t) for t in trials], state=state, base=str(path))


def _study_state(path: Path, trials: list) -> str:
    """RUNNING while a trial runs; else the state the study's own report (study.json) recorded when it ended,
    INTERRUPTED when it wrote none (its runner was stopped before)."""
    if any(t.state.name == "RUNNING" for t in trials):
        return "RUNNING"
    try:
        if _kind(path / "study.json") != stat.S_IFREG:  # a FIFO would block the open
            raise ValueError("no study.json")
        with open(path / "study.json", "rb") as f:
            state = json.loads(f.read(console.METRICS_LIMIT)).get("state")
    except (OSError, ValueError, RecursionError, AttributeError):
        state = None
    return state if state in (SUCCEEDED, FAILED, INTERRUPTED) else INTERRUPTED
