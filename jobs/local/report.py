"""A local study's Optuna trials as the one study report's trials (``jobs/study_report.py``), which writes
what a finished (or interrupted) local study leaves behind: a table, study.json and study.png."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jobs.definition.study import Study
from jobs.study_report import FAILED, INTERRUPTED, SUCCEEDED, TrialResult, summarize

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
