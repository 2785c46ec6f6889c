"""Alerts on scheduled retraining (infra/constructs/alerts.py, config `alerts`): what the synthesized stacks
hold per environment, and what the config accepts. The workflow failing when its job does, which the
failure alert relies on, is tested with the workflow interpreter in test_schedules.py."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from infra.config import MAX_NO_SUCCESS_DAYS, ConfigError, parse_environment
from infra.constructs.alerts import HISTORY_DAYS
from infra.naming import resource_names
from tests.infra.helpers import BASIC, CMEK, SCENARIOS_DIR

POLICY = "google_monitoring_alert_policy"
CHANNEL = "google_monitoring_notification_channel"


def _resources(stack: dict, rtype: str) -> dict:
    return stack.get("resource", {}).get(rtype, {})


def test_each_schedule_alerts_on_failed_runs_and_triggers_and_unpaused_ones_on_missing_successes(
        stacks, configs):
    cfg = configs[BASIC]
    stack = stacks[BASIC]
    (channel_key, channel), = _resources(stack, CHANNEL).items()
    assert (channel["type"], channel["labels"]) == ("email", {"email_address": cfg.alerts.email})
    policies = {p["display_name"]: p for p in _resources(stack, POLICY).values()}
    names = resource_names(cfg)
    nightly, weekly = (names.schedule(s.name) for s in cfg.schedules)
    assert [s.paused for s in cfg.schedules] == [False, True]
    days = cfg.alerts.no_success_days
    assert set(policies) == {f"{nightly}: a scheduled run failed", f"{weekly}: a scheduled run failed",
                             f"{nightly}: the trigger could not start a run",
                             f"{weekly}: the trigger could not start a run",
                             f"{nightly}: no successful run in {days} days"}
    for policy in policies.values():
        assert policy["notification_channels"] == [f"${{{CHANNEL}.{channel_key}.name}}"]
        assert policy["project"] == cfg.project_id and policy["combiner"] == "OR"
        assert policy["user_labels"] == cfg.all_labels
        (condition,) = policy["conditions"]
        workflow = policy["display_name"].split(":")[0]
        assert f"`{workflow}`" in policy["documentation"]["content"]
        if "trigger" in policy["display_name"]:
            assert condition["condition_matched_log"]["filter"] == (
                f'resource.type = "cloud_scheduler_job" AND resource.labels.job_id = "{workflow}" AND '
                f'resource.labels.location = "{cfg.region}" AND severity >= ERROR')
            # A log-matching policy must limit its emails.
            assert policy["alert_strategy"] == {"auto_close": "1800s",
                                                "notification_rate_limit": {"period": "3600s"}}
        elif "failed" in policy["display_name"]:
            threshold = condition["condition_threshold"]
            assert threshold["filter"] == (
                'resource.type = "workflows.googleapis.com/Workflow" AND resource.label.workflow_id = '
                f'"{workflow}" AND resource.label.location = "{cfg.region}" AND metric.type = '
                '"workflows.googleapis.com/finished_execution_count" AND metric.label.status = "FAILED"')
            # Any one FAILED execution, at once, and its own incident.
            assert (threshold["comparison"], threshold["threshold_value"], threshold["duration"]) == (
                "COMPARISON_GT", 0, "0s")
            assert threshold["aggregations"] == [
                {"alignment_period": "300s", "per_series_aligner": "ALIGN_SUM"}]
            assert policy["alert_strategy"] == {"auto_close": "1800s"} and policy["severity"] == "ERROR"
        else:
            promql = condition["condition_prometheus_query_language"]
            series = ('workflows_googleapis_com:finished_execution_count{monitored_resource='
                      f'"workflows.googleapis.com/Workflow",workflow_id="{workflow}",location="{cfg.region}"')
            succeeded = f'{series},status="SUCCEEDED"}}[{days}d]'
            assert promql["query"] == (
                f'(absent_over_time({succeeded}) or sum(sum_over_time({succeeded})) < 1) and on() '
                f'count_over_time({series}}}[{HISTORY_DAYS - days}d] offset {days}d)')
            assert (promql["duration"], promql["evaluation_interval"]) == ("0s", "300s")
            assert policy["severity"] == "WARNING"


@pytest.mark.parametrize("env", ["minimal", CMEK])
def test_no_schedules_or_an_opt_out_means_no_alerts(stacks, configs, env):
    """`minimal` has no schedules, `cmek` has one and `alerts: false` (the deployer's roles follow:
    test_bootstrap.py)."""
    cfg = configs[env]
    assert cfg.alerts is None and bool(cfg.schedules) == (env == CMEK)
    text = json.dumps(stacks[env])
    assert POLICY not in text and CHANNEL not in text


def _doc() -> dict:
    return yaml.safe_load((SCENARIOS_DIR / f"{BASIC}.yaml").read_text())


def test_no_success_days_defaults_to_the_longest_gap_between_runs_plus_a_day():
    doc = _doc()
    doc["alerts"] = {"email": "oncall@scenario.example"}
    assert parse_environment("env", doc).alerts.no_success_days == 2  # nightly (weekly-wide is paused)
    doc["schedules"]["weekly-wide"]["paused"] = False
    assert parse_environment("env", doc).alerts.no_success_days == 8
    doc["schedules"]["nightly"]["cron"] = "0 3 1 * *"  # up to 31 days apart
    assert parse_environment("env", doc).alerts.no_success_days == 32


def test_alerts_without_schedules_change_nothing_and_false_opts_out():
    doc = _doc()
    assert parse_environment("env", {**doc, "alerts": False}).alerts is None
    del doc["schedules"]
    assert parse_environment("env", doc).alerts.email == "ml-oncall@scenario.example"
    del doc["alerts"]
    assert parse_environment("env", doc).alerts is None


@pytest.mark.parametrize(
    ("alerts", "cron", "field", "allowed"),
    [
        (None, None, "alerts", "missing; required with schedules: {email: ADDRESS}"),
        (True, None, "alerts", "allowed: {email: ADDRESS, no_success_days: N}, or false for no alerts"),
        ({"no_success_days": 3}, None, "alerts.email", "missing; this field is required"),
        ({"email": "oncall"}, None, "alerts.email", "an email address"),
        ({"email": "a@b.example", "pager": "x"}, None, "alerts.pager", "allowed: email, no_success_days"),
        ({"email": "a@b.example", "no_success_days": 0}, None, "alerts.no_success_days",
         f"1 to {MAX_NO_SUCCESS_DAYS}"),
        ({"email": "a@b.example", "no_success_days": MAX_NO_SUCCESS_DAYS + 1}, None, "alerts.no_success_days",
         f"1 to {MAX_NO_SUCCESS_DAYS}"),
        ({"email": "a@b.example", "no_success_days": "3d"}, None, "alerts.no_success_days", "whole number"),
        ({"email": "a@b.example", "no_success_days": 1}, None, "alerts.no_success_days",
         "got 1; schedule 'nightly' ('30 2 * * *') runs up to 1 day apart and a run takes time; "
         "allowed: at least 2"),
        # Once a year is more than the alert can wait for: pause it or opt out.
        ({"email": "a@b.example"}, "0 3 1 1 *", "alerts.no_success_days",
         f"runs up to 366 days apart; allowed: schedules at most {MAX_NO_SUCCESS_DAYS - 1} days apart"),
    ],
)
def test_bad_alerts_are_one_line_naming_the_file_and_field(alerts, cron, field, allowed):
    doc = copy.deepcopy(_doc())
    del doc["alerts"]
    if alerts is not None:
        doc["alerts"] = alerts
    if cron is not None:
        doc["schedules"]["nightly"]["cron"] = cron
    with pytest.raises(ConfigError) as info:
        parse_environment("env", doc, "envs/env.yaml")
    message = str(info.value)
    assert message.startswith(f"envs/env.yaml: field '{field}'") and "\n" not in message
    assert allowed in message
