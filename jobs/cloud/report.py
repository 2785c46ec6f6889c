"""The report of a job on Vertex AI, as REST JSON: a HyperparameterTuningJob's study report, the same one
``--local`` writes (``jobs/study_report.py``), and a short report of a CustomJob.

A tuning job's ``trials`` become the report's trials here (:func:`trial_results`): the objective is the
studySpec metric in each trial's ``finalMeasurement``; an INFEASIBLE trial is FAILED with its
``infeasibleReason``, as is a SUCCEEDED one with no finite objective (--local fails a trial that reports
none); a trial still REQUESTED, ACTIVE or STOPPING is ACTIVE while the job runs and INTERRUPTED once it has
ended. Parameter values are typed by the studySpec (Vertex AI sends every number as a double: INTEGER 64
arrives as 64.0). A trial's SavedModel is ``<baseOutputDirectory>/<trial id>/model/``, the AIP_MODEL_DIR
Vertex AI gave it. A SUCCEEDED study's best SavedModel is held (a temporary hold on each object) so that its
study folder's lifecycle rule spares it (:func:`keep_best_model`).

A response that is not what was asked (a trial id that is not a number, a state or parameter the study does
not have, a studySpec that does not parse) is a JobError naming the job and the field: one line, exit 2.

    from jobs import api
    api.report_job("projects/p/locations/us-central1/hyperparameterTuningJobs/123", None, sys.stdout)
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from common.reader import file_kind
from jobs import console, study_report
from jobs.cloud.client import SUCCESS_STATE, TERMINAL_STATES, Storage, console_url, job_id_of
from jobs.definition.body import final_metric, job_spec, measured_number
from jobs.definition.cost import Earlier
from jobs.definition.errors import SHORT_NAME, JobError, one_of, short
from jobs.definition.kinds import runs_study
from jobs.definition.study import Parameter, StudyError, parse_study
from jobs.study_report import ACTIVE, FAILED, INTERRUPTED, SUCCEEDED, TrialResult
from trainer.contract import METRICS_FILE

# Where a report goes unless --report-dir says otherwise: beside what --local keeps under .local/ (gs/, runs/,
# studies/), one folder per job id.
REPORTS = Path(".local") / "reports"
REPORT_DIR_ALLOWED = "a writable folder, or a new one under a writable folder"
TRIAL_STATES = ("STATE_UNSPECIFIED", "REQUESTED", "ACTIVE", "STOPPING", "SUCCEEDED", "INFEASIBLE")
_TRIAL_ID = re.compile(r"[0-9]{1,19}")  # int64 ids, as Vertex AI numbers trials ("1", "2", ...)
_CUSTOM_JOB = re.compile(r"projects/[^/]+/locations/[^/]+/customJobs/[0-9]+")


def report_folder(repo_root: Path, name: str, given: Path | None = None) -> Path:
    """Where the report of job ``name`` goes: ``given`` (--report-dir), else .local/reports/<job id>."""
    return Path(given) if given is not None else repo_root / REPORTS / job_id_of(name)


def check_folder(path: Path) -> None:
    """JobError (on --report-dir) unless ``path`` is a writable folder or can be made one: each part of it
    that exists is a folder and the deepest one that exists is writable. Writes nothing."""

    def refused(problem: str, part: Path | None = None) -> JobError:
        if part is not None:  # the part of the path that refuses it
            problem = f"{short(str(part), SHORT_NAME, quote=False)} {problem}"
        return JobError("--report-dir", str(path), problem, REPORT_DIR_ALLOWED)

    probe = path
    while True:
        try:
            mode = probe.stat().st_mode
            break
        except FileNotFoundError:
            if probe.is_symlink():
                raise refused("is a dangling symlink", probe) from None
            if probe.parent == probe:
                raise refused("no part of it exists") from None
            probe = probe.parent
        except OSError as exc:  # a part of it is a file (ENOTDIR), a loop of symlinks (ELOOP), ...
            raise refused(exc.strerror or str(exc)) from None
    if not stat.S_ISDIR(mode):
        raise refused(f"is {file_kind(mode)}", probe)
    if not os.access(probe, os.W_OK | os.X_OK):
        raise refused("is not writable", probe)


def check_report_dir(kind: str, given: Path | None, fallback: Path) -> None:
    """Before following a ``kind`` job: the folder its report will go to (``given``, else ``fallback``) can be
    written, and --report-dir is given only for a job that ends with a report (a tuning job)."""
    if not runs_study(kind):
        if given is not None:
            raise JobError(
                "--report-dir",
                str(given),
                f"a {kind} writes no study report when it ends",
                "--report-dir with a tuning job (`run_job.py report RESOURCE_NAME` reports any job)",
            )
        return
    check_folder(given if given is not None else fallback)


def output_prefix(remote: dict[str, Any], spec_field: str) -> str:
    """The job's baseOutputDirectory (in ``jobSpec`` or ``trialJobSpec``) without a trailing slash, or ""."""
    spec = remote.get(spec_field) or {}
    return str((spec.get("baseOutputDirectory") or {}).get("outputUriPrefix") or "").rstrip("/")


def trial_results(
    remote: dict[str, Any], parameters: tuple[Parameter, ...], metric_id: str
) -> list[TrialResult]:
    """The report's trials from a HyperparameterTuningJob's ``trials``; a JobError for a trial Vertex AI
    would not send."""
    name = str(remote.get("name", "the job"))
    trials = remote.get("trials") or []
    if not isinstance(trials, list):
        raise JobError(name, "trials", f"{type(trials).__name__} instead of a list", "a list of Trials")
    job_state = str(remote.get("state", "JOB_STATE_UNSPECIFIED"))
    base = output_prefix(remote, "trialJobSpec")
    specs = {p.parameter_id: p for p in parameters}
    results = []
    for i, trial in enumerate(trials):
        where = f"trials.{i}"
        if not isinstance(trial, dict):
            raise JobError(name, where, f"{short(trial)} is not a Trial", "a Trial object")
        trial_id = trial.get("id")
        if not isinstance(trial_id, str) or not _TRIAL_ID.fullmatch(trial_id):
            raise JobError(name, f"{where}.id", short(trial_id), "a trial number such as '1'")
        state = trial.get("state", "STATE_UNSPECIFIED")
        if state not in TRIAL_STATES:
            raise JobError(name, f"{where}.state", short(state), one_of(TRIAL_STATES))
        report_state, metric, failure = _outcome(trial, state, metric_id, job_state)
        custom_job = str(trial.get("customJob", ""))
        results.append(
            TrialResult(
                id=trial_id,
                state=report_state,
                parameters=_values(trial.get("parameters") or [], specs, name, f"{where}.parameters"),
                metric=metric,
                measurements=_measurements(trial, metric_id),
                duration_s=_duration(trial.get("startTime"), trial.get("endTime")),
                model_dir=f"{base}/{trial_id}/model/" if base and report_state == SUCCEEDED else None,
                log=console_url(custom_job) if _CUSTOM_JOB.fullmatch(custom_job) else None,
                failure=failure,
            )
        )
    return results


def _outcome(
    trial: dict[str, Any], state: str, metric_id: str, job_state: str
) -> tuple[str, float | None, str | None]:
    """(report state, objective, why it failed) of a trial in ``state`` of a job in ``job_state``."""
    metric = final_metric(trial, metric_id)
    if state == "SUCCEEDED":
        if metric is not None and math.isfinite(metric):
            return SUCCEEDED, metric, None
        # As --local fails a trial that reports no finite objective: there is nothing to rank it by.
        shown = f"reported {metric_id}={metric}" if metric is not None else f"reported no '{metric_id}'"
        return FAILED, None, f"{shown} in its final measurement"
    if state == "INFEASIBLE":
        return FAILED, None, trial.get("infeasibleReason") or "infeasible (Vertex AI gave no reason)"
    if job_state in TERMINAL_STATES:
        return INTERRUPTED, None, f"still {state} when the job ended {job_state.removeprefix('JOB_STATE_')}"
    return ACTIVE, None, None


def _values(parameters: Any, specs: dict[str, Parameter], name: str, where: str) -> dict[str, Any]:
    """A trial's ``[{parameterId, value}]`` as the trial received them: typed by the studySpec."""
    if not isinstance(parameters, list):
        raise JobError(
            name, where, f"{type(parameters).__name__} instead of a list", "[{parameterId, value}]"
        )
    values: dict[str, Any] = {}
    for j, item in enumerate(parameters):
        pid = item.get("parameterId") if isinstance(item, dict) else None
        spec = specs.get(pid) if isinstance(pid, str) else None
        if spec is None:
            raise JobError(name, f"{where}.{j}.parameterId", short(pid), one_of(specs) or "(no parameters)")
        value = _typed(spec, item.get("value"))
        if value is None:
            allowed = (
                "one of its values" if spec.kind in ("DISCRETE", "CATEGORICAL") else "a number in its range"
            )
            raise JobError(name, f"{where}.{j}.value", f"{short(item.get('value'))} for {pid}", allowed)
        values[pid] = value
    return values


def _typed(spec: Parameter, value: Any) -> Any:
    """The value as --local passes it (INTEGER int, DOUBLE and DISCRETE float, CATEGORICAL str), or None when
    it is not one the parameter takes."""
    if spec.kind == "CATEGORICAL":
        return value if isinstance(value, str) and value in spec.values else None
    number = measured_number(value)
    if number is None or not math.isfinite(number):
        return None
    if spec.kind == "DISCRETE":
        return number if number in spec.values else None
    if not spec.low <= number <= spec.high:
        return None
    if spec.kind == "INTEGER":
        return int(number) if number == int(number) else None
    return number


def _measurements(trial: dict[str, Any], metric_id: str) -> list[dict[str, float]]:
    """Each intermediate measurement of the objective, {step, value}, as --local records them."""
    found = []
    for m in trial.get("measurements") or []:
        value = final_metric({"finalMeasurement": m}, metric_id) if isinstance(m, dict) else None
        if value is not None:
            step = str(m.get("stepCount", 0))  # int64: a JSON string
            found.append({"step": int(step) if step.lstrip("-").isdigit() else 0, "value": value})
    return found


def _duration(start: Any, end: Any) -> float | None:
    """Seconds from startTime to endTime (RFC 3339; Vertex AI writes up to nine fractional digits)."""
    try:
        seconds = (datetime.fromisoformat(str(end)) - datetime.fromisoformat(str(start))).total_seconds()
    except (TypeError, ValueError):
        return None  # still running (no endTime), or a time this Python cannot read: no duration shown
    return round(seconds, 2)


def study_summary(remote: dict[str, Any]) -> dict[str, Any]:
    """A HyperparameterTuningJob (REST JSON) as study.json holds a study, --local's or Vertex AI's."""
    name = str(remote.get("name", "the job"))
    try:
        study = parse_study(remote)
    except StudyError as exc:
        raise exc.to_job_error(file=name) from None
    trials = trial_results(remote, study.tuned, study.metric_id)
    state = str(remote.get("state", "JOB_STATE_UNSPECIFIED")).removeprefix("JOB_STATE_")
    display = str(remote.get("displayName") or job_id_of(name))
    base = output_prefix(remote, "trialJobSpec")
    return study_report.summarize(display, study, trials, state=state, base=base, parameters=study.tuned)


def write_study_report(
    remote: dict[str, Any], folder: Path, storage: Storage, out: TextIO
) -> dict[str, Any]:
    """study.json and study.png in ``folder``, the table and the best trial on ``out``; the summary. A
    SUCCEEDED study's best model is held first (:func:`keep_best_model`)."""
    summary = study_summary(remote)
    keep = keep_best_model(summary, str(remote.get("name")), storage)
    print(f"Study of {remote.get('name')}:", file=out)
    study_report.publish(summary, folder, out, keep=keep)
    _print_error(remote, out)
    return summary


def keep_best_model(summary: dict[str, Any], name: str, storage: Storage) -> str | None:
    """A temporary hold on each object of a SUCCEEDED study's best model (gs://.../<trial>/model/), which its
    folder's lifecycle rule would delete with the other trials' (infra/README.md, "Retention"); the line that
    says so. A failure to hold is that line too, with the command to hold it by hand: the report goes on.

    A study still running has no final best yet; a failed or cancelled one is a person's call (None: the
    report prints the manual command)."""
    best = summary.get("best") or {}
    model_dir = str(best.get("model_dir") or "")
    if not model_dir.startswith("gs://"):
        return None  # no best trial, or a --local study's folder: no lifecycle rule to outlive
    state = str(summary.get("state"))
    if "JOB_STATE_" + state not in TERMINAL_STATES:
        return (f"Once the study has SUCCEEDED, `run_job.py report {name}` holds its best model past its "
                "folder's lifecycle")
    if "JOB_STATE_" + state != SUCCESS_STATE:
        return None
    try:
        held = storage.hold(model_dir)
    except Exception as exc:  # noqa: BLE001 - permissions, network: the report goes on, the hold by hand
        manual = study_report.hold_command(model_dir)
        return f"Not held ({_why(exc)}); keep it past its folder's lifecycle: {manual}"
    if not held:
        return f"Nothing to hold: {model_dir} has no objects (the trial exported no model)"
    objects = f"{held} object{'s' if held != 1 else ''}"
    release = study_report.hold_command(model_dir, hold=False)
    return f"Held its {objects} past its folder's lifecycle; to let them expire: {release}"


def write_custom_job_report(
    remote: dict[str, Any], storage: Storage, folder: Path, out: TextIO
) -> dict[str, Any]:
    """job.json in ``folder`` and a few lines on ``out``: state, times, model folder, its eval metrics."""
    base = output_prefix(remote, "jobSpec")
    model_dir = f"{base}/model/" if base else None  # AIP_MODEL_DIR, where the trainer writes metrics.json
    metrics, note = _read_metrics(storage, model_dir + METRICS_FILE) if model_dir else (None, None)
    report = {
        "name": remote.get("name"),
        "displayName": remote.get("displayName"),
        "state": str(remote.get("state", "JOB_STATE_UNSPECIFIED")).removeprefix("JOB_STATE_"),
        "createTime": remote.get("createTime"),
        "startTime": remote.get("startTime"),
        "endTime": remote.get("endTime"),
        "duration_s": _duration(remote.get("startTime"), remote.get("endTime")),
        "modelDir": model_dir,
        "error": (remote.get("error") or {}).get("message"),
        "metrics": metrics,  # the trainer's metrics.json, when readable
    }
    console.publish_job_report(report, note, folder, out)
    return report


def _read_metrics(storage: Storage, uri: str) -> tuple[Any, str | None]:
    """(the parsed metrics.json, None), or (None, why it is not shown)."""
    try:
        data = storage.read_bytes(uri, console.METRICS_LIMIT)
    except Exception as exc:  # noqa: BLE001 - permissions, network: the report goes on without it
        return None, f"{uri}: not readable ({_why(exc)})"
    if data is None:
        return None, f"{uri}: not found (the job wrote no model yet, or failed before)"
    return console.parse_metrics(uri, data)


def _why(exc: Exception) -> str:
    """An exception on one shortened line: a 403's body can run to pages."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"


def _print_error(remote: dict[str, Any], out: TextIO) -> None:
    message = (remote.get("error") or {}).get("message")
    if message:
        print(f"Job error: {' '.join(str(message).split())}", file=out)


def write_report(
    remote: dict[str, Any], kind: str, folder: Path, storage: Storage, out: TextIO
) -> dict[str, Any]:
    """The report of any job: a study's for a tuning job, the short one for a CustomJob."""
    if runs_study(kind):
        return write_study_report(remote, folder, storage, out)
    return write_custom_job_report(remote, storage, folder, out)


def earlier_run(reports: Path, kind: str, body: dict[str, Any], job_id: str) -> Earlier | None:
    """The newest report under ``reports`` (``run_job.py report``'s folders, .local/reports/<job id>/) of a
    run of the same definition in the same environment: one whose output folder sits beside this job's
    (``gs://<models bucket>/<definition>/<job id>``). Its duration: a SUCCEEDED CustomJob's, or a study's
    mean SUCCEEDED trial duration. None when no report measured one; an unreadable report is passed over."""
    study = runs_study(kind)
    prefix = ((job_spec(body, kind) or {}).get("baseOutputDirectory") or {}).get("outputUriPrefix") or ""
    family = _family(str(prefix), job_id)
    if not family:
        return None
    found: list[tuple[float, Earlier]] = []
    name = "study.json" if study else "job.json"
    try:
        candidates = sorted(reports.glob(f"*/{name}"))
    except OSError:
        return None
    for path in candidates:
        try:
            info = path.stat()
            small = info.st_size <= console.METRICS_LIMIT
            report = json.loads(path.read_text(encoding="utf-8")) if small else None
            when = info.st_mtime
        except (OSError, ValueError, RecursionError):
            continue
        if not isinstance(report, dict):
            continue
        seconds = _measured(report, study)
        base = report.get("baseOutputDirectory") if study else str(report.get("modelDir") or "").removesuffix(
            "/model/")
        if seconds is None or not isinstance(base, str) or _family(base, base.rsplit("/", 1)[-1]) != family:
            continue
        job = str(report.get("name") or report.get("displayName") or path.parent.name)
        found.append((when, Earlier(job=job, seconds=seconds, report=str(path))))
    return max(found, key=lambda f: f[0])[1] if found else None


def _family(prefix: str, job_id: str) -> str:
    """The folder a definition's runs write beside each other in: the output prefix without its job id."""
    head, _, last = prefix.rstrip("/").rpartition("/")
    return head if last == job_id and head.startswith("gs://") else ""


def _measured(report: dict[str, Any], study: bool) -> float | None:
    if not study:
        seconds = measured_number(report.get("duration_s"))
        return seconds if report.get("state") == "SUCCEEDED" and seconds and math.isfinite(seconds) else None
    trials = report.get("trials") if isinstance(report.get("trials"), list) else []
    durations = [measured_number(t.get("duration_s")) for t in trials
                 if isinstance(t, dict) and t.get("state") == SUCCEEDED]
    durations = [d for d in durations if d and math.isfinite(d) and d > 0]
    return sum(durations) / len(durations) if durations else None
