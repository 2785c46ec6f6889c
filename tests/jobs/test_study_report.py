"""The one study report: a HyperparameterTuningJob's trials (REST JSON) converted to the report's trials, the
responses it refuses, and the same study.json from --local's Optuna trials and from Vertex AI's equivalent
trials. No plot is drawn here (tests/jobs/test_report_verb.py draws one)."""

from __future__ import annotations

import copy
import io
import math
from dataclasses import asdict

import pytest

from jobs import study_report
from jobs.cloud import report as cloud_report
from jobs.definition.errors import JobError
from jobs.definition.study import parse_study
from jobs.local import report as local_report
from jobs.local import search_space
from jobs.local.spec import parse_tuning_job
from tests.jobs.local.helpers import tuning_job

NAME = "projects/demo-project/locations/us-central1/hyperparameterTuningJobs/42"
PARAMS = [
    {"parameterId": "units", "integerValueSpec": {"minValue": "16", "maxValue": "128"}},
    {
        "parameterId": "momentum",
        "doubleValueSpec": {"minValue": 0.5, "maxValue": 0.999},
        "scaleType": "UNIT_REVERSE_LOG_SCALE",
    },
    {"parameterId": "scale", "discreteValueSpec": {"values": [0.25, 0.5, 0.75]}},
    {"parameterId": "opt", "categoricalValueSpec": {"values": ["adam", "sgd"]}},
]


def remote_job(trials: list[dict], state: str = "JOB_STATE_SUCCEEDED") -> dict:
    """A HyperparameterTuningJob as the client returns it: the local helpers' body, named, with trials."""
    body = tuning_job([], trials=8, parallel=2, params=PARAMS, base="gs://demo-models/runs/s/")
    return {**body, "name": NAME, "state": state, "trials": trials}


def trial(trial_id="1", state="SUCCEEDED", score=0.8, **extra) -> dict:
    found = {
        "id": trial_id,
        "state": state,
        "parameters": [
            {"parameterId": "units", "value": 64.0},  # every number is a double on the wire
            {"parameterId": "momentum", "value": 0.9},
            {"parameterId": "scale", "value": 0.5},
            {"parameterId": "opt", "value": "sgd"},
        ],
        **extra,
    }
    if score is not None:
        found["finalMeasurement"] = {"stepCount": "5", "metrics": [{"metricId": "score", "value": score}]}
    return found


def convert(trials: list[dict], state: str = "JOB_STATE_SUCCEEDED"):
    remote = remote_job(trials, state)
    study = parse_study(remote)
    return cloud_report.trial_results(remote, study.tuned, study.metric_id)


VALUES = {"units": 64, "momentum": 0.9, "scale": 0.5, "opt": "sgd"}


@pytest.mark.parametrize(
    "given, job_state, expected",
    [
        pytest.param(
            trial(
                startTime="2026-01-02T03:04:05.123456789Z",
                endTime="2026-01-02T03:06:05.623456Z",
                customJob="projects/123/locations/us-central1/customJobs/900",
                measurements=[
                    {"stepCount": "1", "metrics": [{"metricId": "score", "value": 0.7}]},
                    {"stepCount": "2", "metrics": [{"metricId": "loss", "value": 0.3}]},
                ],
            ),
            "JOB_STATE_SUCCEEDED",
            {
                "state": "SUCCEEDED",
                "parameters": VALUES,
                "metric": 0.8,
                "measurements": [{"step": 1, "value": 0.7}],
                "duration_s": 120.5,
                "model_dir": "gs://demo-models/runs/s/1/model/",
                "log": "https://console.cloud.google.com/agent-platform/locations/us-central1/training/900"
                "?project=123",
                "failure": None,
            },
            id="succeeded",
        ),
        pytest.param(
            trial(score=None),
            "JOB_STATE_SUCCEEDED",
            {
                "state": "FAILED",
                "metric": None,
                "model_dir": None,
                "failure": "reported no 'score' in its final measurement",
            },
            id="succeeded-without-final-measurement",
        ),
        pytest.param(
            trial(score="NaN"),
            "JOB_STATE_SUCCEEDED",
            {"state": "FAILED", "metric": None, "failure": "reported score=nan in its final measurement"},
            id="succeeded-with-nan",
        ),
        pytest.param(
            trial(
                state="INFEASIBLE", score=None, infeasibleReason="The replica workerpool0-0 ran out of memory"
            ),
            "JOB_STATE_SUCCEEDED",
            {"state": "FAILED", "metric": None, "failure": "The replica workerpool0-0 ran out of memory"},
            id="infeasible",
        ),
        pytest.param(
            trial(state="INFEASIBLE", score=None),
            "JOB_STATE_FAILED",
            {"state": "FAILED", "failure": "infeasible (Vertex AI gave no reason)"},
            id="infeasible-without-reason",
        ),
        pytest.param(
            trial(state="ACTIVE", score=None, startTime="2026-01-02T03:04:05Z"),
            "JOB_STATE_RUNNING",
            {"state": "ACTIVE", "metric": None, "duration_s": None, "failure": None},
            id="active-while-running",
        ),
        pytest.param(
            trial(state="STOPPING", score=None),
            "JOB_STATE_CANCELLED",
            {"state": "INTERRUPTED", "failure": "still STOPPING when the job ended CANCELLED"},
            id="stopping-when-cancelled",
        ),
        pytest.param(
            {**trial(), "parameters": [{"parameterId": "opt", "value": "adam"}]},
            "JOB_STATE_SUCCEEDED",
            {"parameters": {"opt": "adam"}, "state": "SUCCEEDED"},
            id="only-some-parameters",
        ),
    ],
)
def test_a_cloud_trial_becomes_a_report_trial(given, job_state, expected):
    (result,) = convert([given], job_state)
    row = asdict(result)
    assert {k: row[k] for k in expected} == expected
    assert row["id"] == "1"


@pytest.mark.parametrize(
    "mutate, field, allowed",
    [
        (lambda t: t.update(id="first"), "trials.0.id", "a trial number"),
        (lambda t: t.pop("id"), "trials.0.id", "a trial number"),
        (lambda t: t.update(id="../1"), "trials.0.id", "a trial number"),
        (lambda t: t.update(state="DONE"), "trials.0.state", "SUCCEEDED, INFEASIBLE"),
        (lambda t: t["parameters"][0].update(parameterId="lr"), "trials.0.parameters.0.parameterId", "units"),
        (
            lambda t: t["parameters"][0].update(value=64.5),
            "trials.0.parameters.0.value",
            "a number in its range",
        ),
        (
            lambda t: t["parameters"][0].update(value=4096),
            "trials.0.parameters.0.value",
            "a number in its range",
        ),
        (lambda t: t["parameters"][2].update(value=0.3), "trials.0.parameters.2.value", "one of its values"),
        (lambda t: t["parameters"][3].update(value="rmsprop"), "trials.0.parameters.3.value", "one of its"),
        (lambda t: t.update(parameters={"units": 64}), "trials.0.parameters", "[{parameterId, value}]"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_a_trial_vertex_ai_would_not_send_is_one_line_naming_the_field(mutate, field, allowed):
    given = trial()
    mutate(given)
    with pytest.raises(JobError) as raised:
        convert([trial("1"), given])
    line = str(raised.value).replace("trials.1", "trials.0")
    assert line.startswith(f"{NAME}: {field}: ") and "\n" not in line
    assert "; allowed: " in line and allowed in line.split("; allowed: ")[1]


def test_a_job_without_a_study_spec_is_refused_naming_it():
    remote = remote_job([trial()])
    del remote["studySpec"]
    with pytest.raises(JobError, match=rf"^{NAME}: studySpec: missing; allowed: a StudySpec"):
        cloud_report.study_summary(remote)


def test_a_study_with_no_succeeded_trial_says_so():
    failed = trial(state="INFEASIBLE", score=None, infeasibleReason="crashed")
    summary = cloud_report.study_summary(remote_job([failed, {**failed, "id": "2"}], "JOB_STATE_FAILED"))
    assert summary["state"] == "FAILED" and summary["best"] is None and summary["importance"] is None
    assert summary["counts"] == {"completed": 0, "failed": 2, "interrupted": 0}
    out = io.StringIO()
    study_report.print_summary(summary, out, results=None)
    text = out.getvalue()
    assert "Study failed: 0 succeeded, 2 failed" in text
    assert "No trial succeeded: no best trial and no parameter importance." in text
    assert "Trial 2 failed: crashed" in text


def _local_study(declared, outcomes):
    """An Optuna study as the local tuner leaves it: values from its own suggest(), its user attributes."""
    import optuna
    from optuna.trial import TrialState

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", sampler=search_space.make_sampler(declared))
    for number, score in enumerate(outcomes):
        t = study.ask()
        values = search_space.suggest(t, declared.parameters)
        trial_id = str(number + 1)
        t.set_user_attr("trial_id", trial_id)
        t.set_user_attr("params", values)
        t.set_user_attr("duration_s", 30.0 + number)
        t.set_user_attr("log", f"/runs/s/{trial_id}/replica-logs/workerpool0-0.log")
        t.set_user_attr("measurements", [] if score is None else [{"step": 5, "value": score}])
        if score is None:
            t.set_user_attr("failure", "exited with status 1")
            study.tell(t, state=TrialState.FAIL)
        else:
            t.set_user_attr("model_dir", f"/runs/s/{trial_id}/model/")
            study.tell(t, score)
    return study


def _as_vertex_sends_it(remote: dict) -> dict:
    """The REST JSON through aiplatform_v1.HyperparameterTuningJob and back, as the client hands it over."""
    from google.cloud import aiplatform_v1
    from google.protobuf import json_format

    message = aiplatform_v1.HyperparameterTuningJob()._pb
    json_format.ParseDict(remote, message, ignore_unknown_fields=True)
    return json_format.MessageToDict(message)


def test_local_and_cloud_trials_make_the_same_study_json():
    import optuna

    body = tuning_job([], trials=7, parallel=1, params=PARAMS, base="gs://demo-models/runs/s")
    declared = parse_tuning_job(body).study
    outcomes = [0.71, 0.8, None, 0.77, 0.9, 0.62, 0.85]
    study = _local_study(declared, outcomes)
    local = local_report.study_summary("fake-study", declared, study.trials, "/runs/s", 0)

    # The importance the local runner printed before the report was shared: Optuna's, on its own study.
    evaluator = optuna.importance.PedAnovaImportanceEvaluator()
    direct = optuna.importance.get_param_importances(study, evaluator=evaluator)
    assert local["importance"] == {k: round(float(v), 4) for k, v in direct.items()}
    assert list(local["importance"]) == list(direct)

    trials = []
    for row in local["trials"]:
        sent = {
            "id": row["id"],
            "state": "SUCCEEDED" if row["metric"] is not None else "INFEASIBLE",
            "parameters": [{"parameterId": k, "value": v} for k, v in row["parameters"].items()],
            "startTime": "2026-01-02T03:00:00Z",
            "endTime": f"2026-01-02T03:00:{row['duration_s']:02.0f}Z",
        }
        if row["metric"] is None:
            sent["infeasibleReason"] = row["failure"]
        else:
            sent["finalMeasurement"] = {
                "stepCount": "5",
                "metrics": [{"metricId": "score", "value": row["metric"]}],
            }
            sent["measurements"] = [sent["finalMeasurement"]]
        trials.append(sent)
    remote = _as_vertex_sends_it(
        {**copy.deepcopy(body), "name": NAME, "state": "JOB_STATE_SUCCEEDED", "trials": trials}
    )
    assert remote["trials"][0]["parameters"][0]["value"] == float(local["trials"][0]["parameters"]["units"])
    cloud = cloud_report.study_summary(remote)

    where = {"baseOutputDirectory", "model_dir", "log"}  # a local path or log file / gs:// and a console page
    assert list(cloud) == list(local)
    assert {k: v for k, v in cloud.items() if k not in where | {"best", "trials"}} == {
        k: v for k, v in local.items() if k not in where | {"best", "trials"}
    }
    assert cloud["baseOutputDirectory"] == "gs://demo-models/runs/s"
    for c, lo in zip(cloud["trials"], local["trials"], strict=True):
        assert list(c) == list(lo)
        assert {k: v for k, v in c.items() if k not in where} == {
            k: v for k, v in lo.items() if k not in where
        }
        assert all(type(c["parameters"][k]) is type(v) for k, v in lo["parameters"].items())
    assert {k: v for k, v in cloud["best"].items() if k not in where} == {
        k: v for k, v in local["best"].items() if k not in where
    }
    assert cloud["best"]["id"] == "5"
    assert cloud["best"]["model_dir"] == "gs://demo-models/runs/s/5/model/"
    assert set(cloud["importance"]) == {"units", "momentum", "scale", "opt"}
    assert math.isclose(sum(cloud["importance"].values()), 1.0, abs_tol=1e-3)
