"""What a job costs (jobs/definition/cost.py): the price table against the machine catalogue, the ceiling's
arithmetic, Spot, TPUs, unknown prices, an environment's prices and caps, the earlier run's expected cost,
the README's hand-computed ceilings, and a submit over its cap refused offline before any client exists."""

from __future__ import annotations

import copy
import json
import os
import re
import time
from pathlib import Path

import pytest
import yaml

from common.prices import ACCELERATORS, MACHINES, Price, load_table
from infra.config import ConfigError, list_environments, load_environment, parse_environment
from jobs.cloud.report import earlier_run
from jobs.definition.cost import Cap, check_cap, estimate
from jobs.definition.errors import JobError
from jobs.definition.machines import FAMILIES, example_types
from tests.jobs.helpers import REPO_ROOT, SHIPPED, run_cli

TABLE = load_table()
REGION = "us-central1"
PROD = REPO_ROOT / "infra" / "environments" / "prod.yaml"


def custom(machine="n1-standard-4", replicas=1, timeout="3600s", accelerator=None, count=0, strategy=None,
           workers=0):
    spec = {"machineType": machine}
    if accelerator:
        spec |= {"acceleratorType": accelerator, "acceleratorCount": count}
    pools = [{"machineSpec": spec, "replicaCount": replicas}]
    if workers:
        pools.append({"machineSpec": dict(spec), "replicaCount": workers})
    scheduling = {"timeout": timeout} | ({"strategy": strategy} if strategy else {})
    return {"displayName": "x", "jobSpec": {"workerPoolSpecs": pools, "scheduling": scheduling,
                                            "baseOutputDirectory": {"outputUriPrefix": "gs://b/census/x"}}}


def study(trials=8, parallel=2, **pool):
    body = custom(**pool)
    return {"displayName": "x", "maxTrialCount": trials, "parallelTrialCount": parallel,
            "trialJobSpec": body["jobSpec"]}


def ceiling(body, kind="CustomJob", table=TABLE, region=REGION):
    return estimate(kind, body, region, table).ceiling


# --- the table ------------------------------------------------------------------------------------------


def test_the_table_prices_exactly_the_catalogue_in_every_region_the_environments_use():
    machines = {t for f in FAMILIES for t in example_types(f).split(", ")}
    accelerators = {a for f in FAMILIES for a in f.accelerators}
    regions = {load_environment(env).region for env in list_environments()}
    assert TABLE.source.startswith("https://cloud.google.com/vertex-ai/pricing") and re.fullmatch(
        r"\d{4}-\d{2}-\d{2}", TABLE.date)
    for region in regions:
        assert set(TABLE.regions[region][MACHINES]) == machines, region
        assert set(TABLE.regions[region][ACCELERATORS]) == accelerators, region
        for kind in (MACHINES, ACCELERATORS):
            assert all(p.on_demand is not None for p in TABLE.regions[region][kind].values())


def test_spot_is_cheaper_wherever_the_table_knows_it():
    for kinds in TABLE.regions.values():
        for prices in kinds.values():
            for name, price in prices.items():
                if price.spot is not None and price.on_demand:
                    assert price.spot < price.on_demand, name


# --- the arithmetic -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "kind", "usd"),
    [
        (custom(), "CustomJob", 0.22),  # 1 h x $0.218499, rounded up to the cent
        (custom(timeout="7200s"), "CustomJob", 0.44),
        (custom(workers=2), "CustomJob", 0.66),  # chief + 2 workers: 3 x $0.218499
        (custom("n1-standard-8", accelerator="NVIDIA_TESLA_V100", count=2), "CustomJob", 6.15),
        (custom("cloud-tpu", accelerator="TPU_V3", count=8), "CustomJob", 9.20),  # v3-8: $9.20/h
        (custom("ct5lp-hightpu-4t", accelerator="TPU_V5_LITEPOD", count=4), "CustomJob", 5.52),  # 4 chips
        (study(trials=8, parallel=2, timeout="1800s"), "HyperparameterTuningJob", 0.88),
        (study(trials=8, parallel=8, timeout="1800s"), "HyperparameterTuningJob", 0.88),  # parallel: same
        (study(trials=16, parallel=2, timeout="1800s"), "HyperparameterTuningJob", 1.75),
        # No timeout: Vertex AI's default of 7 days bounds it.
        ({"jobSpec": {"workerPoolSpecs": [{"machineSpec": {"machineType": "n1-standard-4"},
                                           "replicaCount": 1}]}}, "CustomJob", 36.71),
    ],
)
def test_the_ceiling_is_timeout_times_every_replica_times_the_trials(body, kind, usd):
    assert ceiling(body, kind) == usd


def test_the_ceiling_doubles_with_the_timeout_grows_with_replicas_and_is_lower_on_spot():
    base = estimate("CustomJob", custom("n1-standard-8", accelerator="NVIDIA_TESLA_T4", count=1), REGION,
                    TABLE)
    doubled = estimate("CustomJob", custom("n1-standard-8", accelerator="NVIDIA_TESLA_T4", count=1,
                                           timeout="7200s"), REGION, TABLE)
    more = estimate("CustomJob", custom("n1-standard-8", accelerator="NVIDIA_TESLA_T4", count=1, workers=3),
                    REGION, TABLE)
    spot = estimate("CustomJob", custom("n1-standard-8", accelerator="NVIDIA_TESLA_T4", count=1,
                                        strategy="SPOT"), REGION, TABLE)
    assert doubled.hourly == base.hourly and doubled.ceiling == pytest.approx(2 * base.ceiling, abs=0.01)
    assert more.ceiling == pytest.approx(4 * base.ceiling, abs=0.02)
    assert spot.ceiling < base.ceiling and spot.tier == "spot"
    assert any("Spot in us-central1" in line for line in spot.lines())
    # FLEX_START is priced on-demand: never below what it is billed.
    flex = estimate("CustomJob", custom("n1-standard-8", accelerator="NVIDIA_TESLA_T4", count=1,
                                        strategy="FLEX_START"), REGION, TABLE)
    assert flex.ceiling == base.ceiling


@pytest.mark.parametrize(
    ("body", "region", "missing"),
    [
        (custom(), "europe-north9", "n1-standard-4"),  # a region the table lacks
        (custom("a3-highgpu-8g", accelerator="NVIDIA_H100_80GB", count=8, strategy="SPOT"), REGION,
         "NVIDIA_H100_80GB"),  # no Spot price known for it
    ],
)
def test_an_unknown_price_says_so_never_zero(body, region, missing):
    cost = estimate("CustomJob", body, region, TABLE)
    text = "\n".join(cost.lines())
    assert cost.ceiling is None
    assert f"no price known for {missing}" in text and "at most" not in text and "$0.00" not in text
    with pytest.raises(JobError) as refused:
        check_cap(cost, Cap(100.0, "max_job_cost", "prod.yaml"), "job.yaml")
    assert "cannot be checked" in refused.value.problem
    check_cap(cost, None, "job.yaml")  # no cap: nothing to refuse


def test_the_environment_overrides_and_extends_the_table():
    table = TABLE.with_overrides({REGION: {MACHINES: {"n1-standard-4": Price(on_demand=0.10)}},
                                  "europe-north9": {MACHINES: {"n1-standard-4": Price(0.5, 0.1)}}},
                                 "prod.yaml")
    assert ceiling(custom(), table=table) == 0.10
    assert table.price(REGION, MACHINES, "n1-standard-4").spot == TABLE.price(REGION, MACHINES,
                                                                               "n1-standard-4").spot
    assert ceiling(custom(), table=table, region="europe-north9") == 0.50
    assert "with prod.yaml's prices over them" in estimate("CustomJob", custom(), REGION, table).lines()[0]


def test_the_cap_refuses_the_ceiling_over_it_in_one_line_with_how_to_allow_it():
    cost = estimate("HyperparameterTuningJob", study(trials=8, timeout="3600s", machine="n1-standard-8",
                                                     accelerator="NVIDIA_TESLA_V100", count=2), REGION, TABLE)
    check_cap(cost, Cap(49.13, "max_study_cost", "prod.yaml"), "job.yaml")
    with pytest.raises(JobError) as refused:
        check_cap(cost, Cap(40.0, "max_study_cost", "prod.yaml"), "job.yaml")
    message = str(refused.value)
    assert "\n" not in message
    assert "$49.13 is over max_study_cost of prod.yaml $40.00" in message and "--max-cost 49.13" in message


# --- the expected cost from an earlier run --------------------------------------------------------------


def _report(folder: Path, name: str, body: dict, mtime: float):
    folder.mkdir(parents=True)
    (folder / name).write_text(json.dumps(body))
    os.utime(folder / name, (mtime, mtime))


def test_the_expected_cost_comes_from_the_newest_report_of_the_same_definition(tmp_path):
    job = {"state": "SUCCEEDED", "name": "projects/p/locations/r/customJobs/1"}
    _report(tmp_path / "1", "job.json", job | {"duration_s": 900.0, "modelDir": "gs://b/census/a-1/model/"},
            1)
    _report(tmp_path / "2", "job.json", job | {"duration_s": 1800.0, "modelDir": "gs://b/census/a-2/model/",
                                               "name": "projects/p/locations/r/customJobs/2"}, 2)
    _report(tmp_path / "3", "job.json", job | {"duration_s": 60.0, "modelDir": "gs://b/other/a-3/model/"}, 3)
    _report(tmp_path / "4", "job.json", job | {"duration_s": 60.0, "modelDir": "gs://b/census/a-4/model/",
                                               "state": "FAILED"}, 4)
    body = custom(workers=1)
    earlier = earlier_run(tmp_path, "CustomJob", body, "x")
    assert earlier.seconds == 1800.0 and earlier.job.endswith("customJobs/2")
    cost = estimate("CustomJob", body, REGION, TABLE, earlier)
    assert cost.expected == 0.22  # half an hour of two n1-standard-4
    assert any(line.startswith("  expected: $0.22") for line in cost.lines())
    assert earlier_run(tmp_path / "none", "CustomJob", body, "x") is None


def test_a_study_expects_its_mean_trial_duration_times_its_trials(tmp_path):
    trials = [{"state": "SUCCEEDED", "duration_s": 600.0}, {"state": "SUCCEEDED", "duration_s": 1200.0},
              {"state": "FAILED", "duration_s": 5.0}]
    _report(tmp_path / "9", "study.json", {"displayName": "s", "baseOutputDirectory": "gs://b/census/s-9",
                                           "trials": trials}, 1)
    body = study(trials=8, timeout="3600s")
    earlier = earlier_run(tmp_path, "HyperparameterTuningJob", body, "x")
    assert earlier.seconds == 900.0
    assert estimate("HyperparameterTuningJob", body, REGION, TABLE, earlier).expected == 0.44  # 8 x 15 min


# --- the shipped jobs and the README ---------------------------------------------------------------------


def _dry_run_ceiling(path: Path) -> str:
    rc, _, err = run_cli([path.relative_to(REPO_ROOT), "--dry-run"])
    assert rc == 0, err
    (line,) = [line for line in err.splitlines() if line.startswith("  ceiling: ")]
    return re.search(r"at most \$(\d+\.\d\d)", line).group(1)


def test_the_readme_ceilings_are_the_tools():
    text = (REPO_ROOT / "jobs" / "README.md").read_text(encoding="utf-8")
    section = text.split("## What a job costs", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| (\w+\.yaml) \|.*\| \$(\d+\.\d\d) \|$", section, re.M))
    assert set(rows) == {p.name for p in SHIPPED}
    for path in SHIPPED:
        assert rows[path.name] == _dry_run_ceiling(path), path.name


# --- caps through run_job.py ------------------------------------------------------------------------------


@pytest.fixture
def capped(tmp_path, monkeypatch):
    """An environment `capped`: prod's config with a $1 job cap and a $5 study cap."""
    doc = yaml.safe_load(PROD.read_text())
    doc |= {"max_job_cost": 1, "max_study_cost": 5}
    (tmp_path / "capped.yaml").write_text(yaml.safe_dump(doc))
    monkeypatch.setenv("INFRA_ENVIRONMENTS_DIR", str(tmp_path))
    return tmp_path / "capped.yaml"


def _no_clients(*_):
    raise AssertionError("a client was asked for: credentials would have been looked for")


def test_a_submit_over_the_cap_is_refused_in_one_line_before_any_client(capped):
    job = "jobs/image_tuning.yaml"  # 8 trials x 1 h x n1-standard-8 + 2 V100: $49.13 > $5
    run_cli([job, "--env", "capped", "--dry-run"])  # imports warm: the refusal itself is timed
    start = time.monotonic()
    rc, out, err = run_cli([job, "--env", "capped"], factory=_no_clients)
    elapsed = time.monotonic() - start
    assert rc == 2 and out == ""
    assert err.count("\n") == 1
    assert err.startswith("jobs/image_tuning.yaml: cost: the ceiling $49.13 is over max_study_cost of ")
    assert "$5.00" in err and "--max-cost 49.13 to allow this run" in err
    assert elapsed < 1.0
    # A CustomJob meets max_job_cost: image_mirrored's $6.15 is over $1.
    rc, _, err = run_cli(["jobs/image_mirrored.yaml", "--env", "capped"], factory=_no_clients)
    assert rc == 2 and "over max_job_cost of " in err and "$1.00" in err
    # The dry-run shows the request, the cost, and that a submit would be refused.
    rc, out, err = run_cli([job, "--env", "capped", "--dry-run"])
    assert rc == 0 and json.loads(out)["hyperparameterTuningJob"]
    assert "  cap: a submit is refused: the ceiling $49.13 is over max_study_cost" in err


def test_max_cost_allows_one_run_and_the_cost_is_printed_before_the_submit(capped):
    def factory(*_):
        raise RuntimeError("no credentials here")

    rc, out, err = run_cli(["jobs/image_tuning.yaml", "--env", "capped", "--max-cost", "49.13"],
                           factory=factory)
    # The clients are asked for only once the cap allowed it: here they fail, a cloud failure (exit 1).
    assert rc == 1 and "no credentials here" in err
    assert "  ceiling: at most $49.13" in out and "  cap: --max-cost $49.13: the ceiling is within it" in out


@pytest.mark.parametrize("value", ["-1", "0", "ten", "nan", "inf", ""])
def test_a_bad_max_cost_is_one_line_exit_2(value):
    rc, out, err = run_cli(["jobs/census_cpu.yaml", "--dry-run", "--max-cost", value])
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("jobs/census_cpu.yaml: --max-cost: ") and "a positive number of US dollars" in err


@pytest.mark.parametrize(
    ("extra", "field", "allowed"),
    [
        ({"max_job_cost": -5}, "max_job_cost", "a positive number of US dollars"),
        ({"max_study_cost": "lots"}, "max_study_cost", "a positive number of US dollars"),
        ({"max_job_cost": True}, "max_job_cost", "a positive number of US dollars"),
        ({"prices": {REGION: {"machines": {"n1-standard-3": {"on_demand": 0.1}}}}},
         "prices.us-central1.machines.n1-standard-3", "a machine type Vertex AI offers"),
        ({"prices": {REGION: {"accelerators": {"NVIDIA_TESLA_K80": {"spot": 0.1}}}}},
         "prices.us-central1.accelerators.NVIDIA_TESLA_K80", "an accelerator type Vertex AI offers"),
        ({"prices": {REGION: {"machines": {"n1-standard-4": {"on_demand": -0.1}}}}},
         "prices.us-central1.machines.n1-standard-4.on_demand", "0 or more"),
        ({"prices": {REGION: {"gpus": {}}}}, "prices.us-central1.gpus", "allowed: accelerators, machines"),
        ({"billing_budget": {"billing_account": "123", "amount": 10}}, "billing_budget.billing_account",
         "012345-6789AB-CDEF01"),
        ({"billing_budget": {"billing_account": "012345-6789AB-CDEF01", "amount": 1, "thresholds": [90, 50]}},
         "billing_budget.thresholds", "increasing"),
        ({"billing_budget": {"billing_account": "012345-6789AB-CDEF01", "amount": 10, "pubsub_topic": "t"}},
         "billing_budget.pubsub_topic", "projects/PROJECT_ID/topics/TOPIC"),
    ],
)
def test_bad_cost_settings_are_one_line_naming_the_field_exit_2(tmp_path, monkeypatch, extra, field, allowed):
    doc = yaml.safe_load(PROD.read_text()) | extra
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError) as info:
        parse_environment("bad", copy.deepcopy(doc), path)
    assert str(info.value).startswith(f"{path}: field '{field}'") and allowed in str(info.value)
    monkeypatch.setenv("INFRA_ENVIRONMENTS_DIR", str(tmp_path))
    rc, out, err = run_cli(["jobs/census_cpu.yaml", "--env", "bad", "--dry-run"])
    assert rc == 2 and out == "" and err.count("\n") == 1 and err.startswith(f"{path}: {field}: ")


def test_shipped_prod_carries_caps_and_a_budget():
    cfg = load_environment("prod")
    assert cfg.max_job_cost and cfg.max_study_cost and cfg.billing_budget is not None
    assert cfg.billing_budget.email and cfg.billing_budget.pubsub_topic


def test_the_schedules_are_checked_against_the_cap_when_synthesized():
    from jobs.schedule import compile_schedules

    doc = yaml.safe_load((REPO_ROOT / "infra" / "environments" / "dev.yaml").read_text())
    assert compile_schedules(parse_environment("dev", doc | {"max_job_cost": 1}, "dev.yaml"))
    with pytest.raises(ConfigError) as refused:
        compile_schedules(parse_environment("dev", doc | {"max_job_cost": 0.1}, "dev.yaml"))
    message = str(refused.value)
    assert re.match(r"jobs/recommender\.yaml: field 'cost': the ceiling \$0\.\d\d is over max_job_cost",
                    message)
    assert "schedules.recommender-daily" in message and "--max-cost" not in message

