"""Environment configs and outputs resolution: pure code, no synthesis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from infra import outputs
from infra.config import (
    ENVIRONMENTS_DIR,
    ENVIRONMENTS_DIR_VAR,
    ConfigError,
    environments_dir,
    list_environments,
    load_environment,
)
from infra.outputs import (
    OUTPUT_KEYS,
    PENDING_DEPLOY,
    deployed_outputs,
    is_pending,
    planned_outputs,
    resolve_outputs,
)
from tests.infra.helpers import BASIC, CMEK, SCENARIOS, SCENARIOS_DIR

REPO_ROOT = Path(__file__).resolve().parents[2]


def _dev_doc() -> dict:
    """A valid config to break one field of: the `standard` scenario (us-central1, submitters, labels)."""
    return yaml.safe_load((SCENARIOS_DIR / f"{BASIC}.yaml").read_text())


@pytest.fixture
def env_dir(tmp_path, monkeypatch):
    """A private environments directory; tests write broken configs into it, never into infra/environments."""
    monkeypatch.setenv("INFRA_ENVIRONMENTS_DIR", str(tmp_path))
    return tmp_path


def _write(env_dir: Path, doc, name: str = "dev") -> Path:
    path = env_dir / f"{name}.yaml"
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    return path


def test_infra_tests_read_the_scenarios_not_the_shipped_environments():
    # The package fixture in conftest.py points the loader here for every infra test: a user's values in
    # infra/environments/*.yaml cannot make them fail (tests/scripts/test_synth.py covers those files).
    assert environments_dir() == SCENARIOS_DIR != ENVIRONMENTS_DIR
    assert os.environ[ENVIRONMENTS_DIR_VAR] == str(SCENARIOS_DIR)
    assert tuple(list_environments()) == SCENARIOS
    assert all(Path(load_environment(env).source).parent == SCENARIOS_DIR for env in SCENARIOS)


def test_reading_the_shipped_environments_in_an_infra_test_is_caught(monkeypatch):
    # conftest.py's guard, on which tests/user_copy.py leaves tests/infra out of the user-copy run: a file
    # opened or listed there, or a child process that would read there, is recorded (and fails the test).
    import subprocess
    import sys

    from tests.infra import conftest

    (ENVIRONMENTS_DIR / "dev.yaml").read_bytes()
    list(ENVIRONMENTS_DIR.glob("*.yaml"))
    monkeypatch.delenv(ENVIRONMENTS_DIR_VAR)
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    caught, conftest.SHIPPED_READS[:] = list(conftest.SHIPPED_READS), []  # recorded; this test passes
    assert [c.split(" ", 1)[0] for c in caught] == ["open", "os.scandir", "a"], caught
    assert f"{ENVIRONMENTS_DIR_VAR}=None" in caught[2]


def test_configs_fixture_is_the_scenarios(configs):
    assert tuple(configs) == SCENARIOS
    assert {Path(cfg.source).parent for cfg in configs.values()} == {SCENARIOS_DIR}


def test_scenarios_load():
    basic, cmek, minimal = load_environment(BASIC), load_environment(CMEK), load_environment("minimal")
    assert (basic.name, basic.project_id, basic.region, basic.cmek) == (
        "standard", "scn-std-proj", "us-central1", False)
    assert cmek.cmek and cmek.kms_key.split("/")[3] == cmek.region == "asia-northeast1"
    assert basic.github.repository_id == 2002 and basic.github.deploy_branch == "release"
    assert basic.all_labels == {"team": "scenario-ml", "cost-center": "scn-research",
                                "environment": "standard", "managed-by": "cdktn"}
    assert basic.job_submitters == ("group:ml-team@scenario.example", "user:lead@scenario.example")
    assert (basic.staging_retention_days, basic.noncurrent_retention_days, basic.registry_keep_versions,
            basic.registry_untagged_retention_days) == (9, 21, 5, 3)
    assert (basic.result_cache_retention_days, basic.study_prefixes, basic.study_retention_days) == (
        4, ("tuning/", "studies/nightly/"), 12)
    # `minimal` leaves every optional key out: the defaults.
    assert (minimal.job_submitters, minimal.labels, minimal.kms_key, minimal.github.deploy_branch) == (
        (), (), None, "main")
    assert (minimal.staging_retention_days, minimal.noncurrent_retention_days, minimal.registry_keep_versions,
            minimal.registry_untagged_retention_days) == (14, 30, 10, 7)
    assert (minimal.result_cache_retention_days, minimal.study_prefixes,
            minimal.study_retention_days) == (7, (), 30)
    with pytest.raises(AttributeError):
        basic.region = "europe-west4"  # frozen


def _set(doc, dotted, value):
    *parents, leaf = dotted.split(".")
    for key in parents:
        doc = doc[key]
    if value is _DELETE:
        del doc[leaf]
    else:
        doc[leaf] = value


_DELETE = object()


@pytest.mark.parametrize(
    ("field", "value", "reported", "allowed"),
    [
        ("project_id", _DELETE, "project_id", "required"),
        ("region", "US-Central1", "region", "us-central1"),
        ("region", "uscentral", "region", "us-central1"),
        ("surprise", 1, "surprise", "allowed: alerts, billing_budget, endpoints, github, job_service"),
        ("github.branch", "main", "github.branch", "deploy_branch"),
        ("github.repository_id", "acme/repo", "github.repository_id", "gh api repos"),
        ("project_number", "12ab", "project_number", "numeric"),
        ("name_prefix", "a-very-long-prefix-that-overflows", "name_prefix", "3-21"),
        ("name_prefix", "googly-ml", "name_prefix", "not starting with 'goog'"),
        ("name_prefix", "my-google-ml", "name_prefix", "containing 'google'"),
        ("job_submitters", ["ml@acme.example"], "job_submitters[0]", "group:"),
        ("labels", {"Team": "x"}, "labels.Team", "lowercase"),
        ("kms_key", "projects/sec-proj/locations/europe-west4/keyRings/r/cryptoKeys/k", "kms_key",
         "'us-central1'"),
        ("staging_retention_days", 0, "staging_retention_days", "1 to 3650"),
        ("result_cache_retention_days", 0, "result_cache_retention_days", "1 to 3650"),
        ("result_cache_retention_days", "7d", "result_cache_retention_days", "1 to 3650"),
        ("study_retention_days", 3651, "study_retention_days", "1 to 3650"),
        ("study_prefixes", "census-tuning/", "study_prefixes", "a list of at most 50 folders"),
        ("study_prefixes", [f"s{i}/" for i in range(51)], "study_prefixes", "a list of at most 50 folders"),
        # Without the '/', census-tuning would also expire census-tuning-grid/; '' or '/' the whole bucket.
        ("study_prefixes", ["census-tuning"], "study_prefixes[0]", "ending in '/'"),
        ("study_prefixes", [""], "study_prefixes[0]", "ending in '/'"),
        ("study_prefixes", ["/"], "study_prefixes[0]", "ending in '/'"),
        ("study_prefixes", ["/census-tuning/"], "study_prefixes[0]", "ending in '/'"),
        ("study_prefixes", ["Census/"], "study_prefixes[0]", "lowercase"),
        ("study_prefixes", ["a/", "a/"], "study_prefixes[1]", "each folder once"),
        ("job_submitters", ["group:ml@acme.example", "group:ml@acme.example"], "job_submitters[1]",
         "each member once"),
        # Different members, one construct id: a jsii traceback at synthesis if it got that far.
        ("job_submitters", ["user:a.b@acme.example", "user:a-b@acme.example"], "job_submitters[1]",
         "repeats job_submitters[0]"),
        ("job_service_accounts", "gpu@acme-ml.iam.gserviceaccount.com", "job_service_accounts", "a list"),
        ("job_service_accounts", ["serviceAccount:trainer-gpu@acme-ml.iam.gserviceaccount.com"],
         "job_service_accounts[0]", "a service account email"),
        ("job_service_accounts", ["gpu@acme-ml.iam.gserviceaccount.com"], "job_service_accounts[0]",
         "a service account email"),  # the account id is 6-30 characters
        ("job_service_accounts", ["trainer-gpu@acme.iam.gserviceaccount.com"], "job_service_accounts[0]",
         "a service account email"),  # ...and so is the project id
        ("job_service_accounts", ["trainer-gpu@acme-ml.gserviceaccount.com"], "job_service_accounts[0]",
         "a service account email"),
        ("job_service_accounts", ["Trainer-gpu@acme-ml.iam.gserviceaccount.com"], "job_service_accounts[0]",
         "a service account email"),
        ("job_service_accounts", [42], "job_service_accounts[0]", "a service account email"),
        ("job_service_accounts", ["trainer-gpu@acme-ml.iam.gserviceaccount.com"] * 2,
         "job_service_accounts[1]", "repeats job_service_accounts[0]; allowed: each account once"),
        # Schedules: the cron expression, the time zone and the job file, then the rest of the entry.
        ("schedules.nightly.cron", "0 25 * * *", "schedules.nightly.cron", "hour 25 is out of range"),
        ("schedules.nightly.cron", "0 3 * *", "schedules.nightly.cron", "4 fields; allowed: five"),
        ("schedules.nightly.cron", "@daily", "schedules.nightly.cron", "1 fields; allowed: five"),
        ("schedules.nightly.cron", "every 24 hours", "schedules.nightly.cron", "3 fields; allowed: five"),
        ("schedules.nightly.cron", "0 0 31 2 *", "schedules.nightly.cron", "never occurs in month '2'"),
        ("schedules.nightly.cron", "*/10 * * * *", "schedules.nightly.cron",
         "can run 10 minutes apart; allowed: runs at least 30 minutes apart"),
        ("schedules.nightly.cron", "0,20 3 * * *", "schedules.nightly.cron", "can run 20 minutes apart"),
        ("schedules.nightly.cron", 3, "schedules.nightly.cron", "a string of five fields"),
        ("schedules.nightly.time_zone", "Mars/Olympus", "schedules.nightly.time_zone", "IANA time zone"),
        ("schedules.nightly.time_zone", "../../etc/passwd", "schedules.nightly.time_zone", "IANA time zone"),
        ("schedules.nightly.time_zone", "CET ", "schedules.nightly.time_zone", "IANA time zone"),
        ("schedules.nightly.job", "jobs/nope.yaml", "schedules.nightly.job", "is not a regular file"),
        ("schedules.nightly.job", "jobs", "schedules.nightly.job", "a .yaml file under jobs/"),
        ("schedules.nightly.job", "jobs/../Pipfile", "schedules.nightly.job", "a .yaml file under jobs/"),
        ("schedules.nightly.job", "jobs/../infra/environments/dev.yaml", "schedules.nightly.job",
         "a .yaml file under jobs/"),
        ("schedules.nightly.job", "/etc/hosts.yaml", "schedules.nightly.job", "a .yaml file under jobs/"),
        ("schedules.nightly.job", "README.md", "schedules.nightly.job", "a .yaml file under jobs/"),
        ("schedules.nightly.job", "jobs/local", "schedules.nightly.job", "a .yaml file under jobs/"),
        ("schedules.nightly.job", "jobs\\recommender.yaml", "schedules.nightly.job",
         "a .yaml file under jobs/"),
        ("schedules.nightly.job", _DELETE, "schedules.nightly.job", "required"),
        ("schedules.nightly.paused", "yes", "schedules.nightly.paused", "true or false"),
        ("schedules.nightly.set", ["a=1"], "schedules.nightly.set", "a mapping of field path"),
        ("schedules.nightly.retries", 3, "schedules.nightly.retries",
         "allowed: batch_predict, cron, deploy, job, paused, set"),
        ("schedules.nightly.deploy", {"traffic": 10}, "schedules.nightly.deploy.endpoint", "required"),
        ("schedules.nightly.deploy", {"endpoint": "recommender", "traffic": 101},
         "schedules.nightly.deploy.traffic", "an integer from 1 to 100"),
        ("schedules.nightly.deploy", {"endpoint": "Recommender"}, "schedules.nightly.deploy.endpoint",
         "the name of one of this file's endpoints"),
        # batch_predict's shapes (the verb's own rules: tests/jobs/test_scheduled_batch.py).
        ("schedules.nightly.batch_predict", ["gs://b/u.jsonl"], "schedules.nightly.batch_predict",
         "a mapping with keys"),
        ("schedules.nightly.batch_predict", {"input": "gs://b/u.jsonl"},
         "schedules.nightly.batch_predict.output", "required"),
        ("schedules.nightly.batch_predict", {"input": [], "output": "gs://b/o/"},
         "schedules.nightly.batch_predict.input", "a gs:// JSONL URI or a list of them"),
        ("schedules.nightly.batch_predict", {"input": "gs://b/u.jsonl", "output": "gs://b/o/", "k": 10},
         "schedules.nightly.batch_predict.k", "unknown key; allowed: batch_size, input, machine_type"),
        ("schedules.nightly.batch_predict", {"input": "gs://b/u.jsonl", "output": "gs://b/o/",
                                             "batch_size": True},
         "schedules.nightly.batch_predict.batch_size", "an integer >= 1"),
        ("schedules.Nightly", {"job": "jobs/recommender.yaml", "cron": "0 3 * * *"}, "schedules.Nightly",
         "2-30 lowercase letters"),
        ("schedules", ["nightly"], "schedules", "a mapping of schedule name"),
        # Endpoints: the name (the outputs key's suffix), the entry's keys, its callers, logging and PSC.
        ("endpoints", ["recommender"], "endpoints", "a mapping of endpoint name -> settings"),
        ("endpoints", {f"e{i}": None for i in range(101)}, "endpoints", "at most 100 endpoints"),
        ("endpoints.Recommender", {}, "endpoints.Recommender", "1-32 lowercase letters, digits or '_'"),
        ("endpoints.rank-er", {}, "endpoints.rank-er", "1-32 lowercase letters, digits or '_'"),
        ("endpoints.recommender.traffic_split", {}, "endpoints.recommender.traffic_split",
         "unknown key; allowed: description, display_name, predictors, private_service_connect, "
         "request_response_logging"),
        ("endpoints.recommender", ["x"], "endpoints.recommender", "a mapping with keys"),
        ("endpoints.ranker_v2.display_name", " ", "endpoints.ranker_v2.display_name", "1-128 characters"),
        ("endpoints.ranker_v2.display_name", "x" * 129, "endpoints.ranker_v2.display_name", "1-128"),
        ("endpoints.ranker_v2.description", "two\nlines", "endpoints.ranker_v2.description", "on one line"),
        ("endpoints.recommender.predictors", "user:a@x.example", "endpoints.recommender.predictors",
         "a list of IAM members"),
        ("endpoints.recommender.predictors", ["frontend@x.example"], "endpoints.recommender.predictors[0]",
         "an IAM member such as group:"),
        ("endpoints.recommender.predictors", ["user:a.b@x.example", "user:a-b@x.example"],
         "endpoints.recommender.predictors[1]", "repeats endpoints.recommender.predictors[0]"),
        # (the file is written with sorted keys: ranker_v2's entry comes first)
        ("endpoints.ranker_v2.predictors", ["user:analyst@scenario-example"],
         "endpoints.recommender.predictors[1]", "and 'user:analyst@scenario-example' (endpoints.ranker_v2."
         "predictors[0]) are one grant; allowed: one spelling"),
        ("endpoints.recommender.request_response_logging.sampling_rate", 0,
         "endpoints.recommender.request_response_logging.sampling_rate", "greater than 0 and at most 1"),
        ("endpoints.recommender.request_response_logging.sampling_rate", 1.5,
         "endpoints.recommender.request_response_logging.sampling_rate", "greater than 0 and at most 1"),
        ("endpoints.recommender.request_response_logging.sampling_rate", True,
         "endpoints.recommender.request_response_logging.sampling_rate", "a number"),
        ("endpoints.recommender.request_response_logging.sampling_rate", "0.5",
         "endpoints.recommender.request_response_logging.sampling_rate", "a number"),
        ("endpoints.recommender.request_response_logging.sampling_rate", _DELETE,
         "endpoints.recommender.request_response_logging.sampling_rate", "required"),
        ("endpoints.recommender.request_response_logging.bigquery_table", "scn-std-proj.logs.t",
         "endpoints.recommender.request_response_logging.bigquery_table", "bq://PROJECT.DATASET.TABLE"),
        ("endpoints.recommender.request_response_logging.bigquery_table", "bq://scn-std-proj.logs",
         "endpoints.recommender.request_response_logging.bigquery_table", "an existing dataset and a new"),
        ("endpoints.recommender.request_response_logging.bigquery_table", "bq://scn-std-proj.logs.t\n",
         "endpoints.recommender.request_response_logging.bigquery_table", "bq://PROJECT.DATASET.TABLE"),
        ("endpoints.recommender.request_response_logging.bigquery_table", "bq://acme.com:proj.logs.t",
         "endpoints.recommender.request_response_logging.bigquery_table", "a project id"),
        ("endpoints.recommender.request_response_logging.bigquery_table", "bq://scn-std-proj.my-logs.t",
         "endpoints.recommender.request_response_logging.bigquery_table", "letters, digits, '_'"),
        ("endpoints.recommender.request_response_logging", "bq://scn-std-proj.logs.t",
         "endpoints.recommender.request_response_logging", "a mapping with keys"),
        ("endpoints.ranker_v2.private_service_connect.project_allowlist", [],
         "endpoints.ranker_v2.private_service_connect.project_allowlist", "a list of 1-100 project ids"),
        ("endpoints.ranker_v2.private_service_connect.project_allowlist", ["scn-std-proj", "Bad_Project"],
         "endpoints.ranker_v2.private_service_connect.project_allowlist[1]", "a project id"),
        ("endpoints.ranker_v2.private_service_connect.project_allowlist", ["scn-app-proj", "scn-app-proj"],
         "endpoints.ranker_v2.private_service_connect.project_allowlist[1]", "each project once"),
        ("endpoints.ranker_v2.private_service_connect.enabled", True,
         "endpoints.ranker_v2.private_service_connect.enabled", "unknown key; allowed: project_allowlist"),
    ],
)
def test_broken_config_is_one_line_naming_file_and_field(env_dir, field, value, reported, allowed):
    doc = _dev_doc()
    _set(doc, field, value)
    path = _write(env_dir, doc)
    with pytest.raises(ConfigError) as info:
        load_environment("dev")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: field '{reported}'")
    assert allowed in message


def test_schedules_load_with_defaults_and_overrides(env_dir):
    doc = _dev_doc()
    nightly, weekly = load_environment_from(env_dir, doc).schedules
    assert (nightly.name, nightly.job, nightly.cron, nightly.time_zone, nightly.overrides,
            nightly.paused) == ("nightly", "jobs/recommender.yaml", "30 2 * * *", "Etc/UTC", (), False)
    # `set` values become run_job.py --set texts (VALUE as JSON, which run_job.py reads as YAML).
    assert weekly.overrides == ('jobSpec.workerPoolSpecs.0.machineSpec.machineType="n1-standard-8"',)
    assert nightly.batch_predict is None
    # batch_predict: one input or a list, the verb's defaults where a key is left out.
    doc["schedules"]["nightly"]["batch_predict"] = {"input": "gs://b/u.jsonl", "output": "gs://b/o/",
                                                    "batch_size": 8}
    batch = load_environment_from(env_dir, doc).schedules[0].batch_predict
    assert (batch.input, batch.output, batch.machine_type, batch.starting_replica_count,
            batch.max_replica_count, batch.batch_size, batch.signature) == (
        ("gs://b/u.jsonl",), "gs://b/o/", None, 1, None, 8, "")
    assert (weekly.time_zone, weekly.paused) == ("Europe/Berlin", True)
    del doc["schedules"]
    assert load_environment_from(env_dir, doc).schedules == ()


def test_a_scheduled_job_file_must_be_a_regular_file(env_dir, tmp_path, monkeypatch):
    """A symlink or a directory named like a job file could stand for anything: refused as such. (In a copy
    of the repository root, so no other test sees the odd files.)"""
    import infra.config

    root = tmp_path / "repo"
    (root / "jobs" / "dir.yaml").mkdir(parents=True)
    (root / "jobs" / "link.yaml").symlink_to(REPO_ROOT / "jobs" / "recommender.yaml")
    (root / "jobs" / "ok.yaml").write_text((REPO_ROOT / "jobs" / "recommender.yaml").read_text())
    (root / "jobs" / "linked").symlink_to(REPO_ROOT / "jobs")  # a folder on the way that leads elsewhere
    monkeypatch.setattr(infra.config, "REPO_ROOT", root)
    doc = _dev_doc()
    del doc["schedules"]["weekly-wide"]
    for name in ("link.yaml", "dir.yaml", "linked/recommender.yaml"):
        doc["schedules"]["nightly"]["job"] = f"jobs/{name}"
        with pytest.raises(ConfigError, match=rf"nightly.job': 'jobs/{name}' is not a regular file"):
            load_environment_from(env_dir, doc)
    doc["schedules"]["nightly"]["job"] = "jobs/ok.yaml"
    assert load_environment_from(env_dir, doc).schedules[0].job == "jobs/ok.yaml"


def load_environment_from(env_dir: Path, doc: dict):
    _write(env_dir, doc)
    return load_environment("dev")


def test_job_service_accounts_are_optional_emails(env_dir):
    doc = _dev_doc()
    _write(env_dir, doc)
    assert load_environment("dev").job_service_accounts == ()  # the default
    accounts = ["trainer-gpu@acme-ml-dev.iam.gserviceaccount.com",
                "tpu-jobs@shared-ml-42.iam.gserviceaccount.com"]
    _write(env_dir, {**doc, "job_service_accounts": accounts})
    cfg = load_environment("dev")
    assert cfg.job_service_accounts == tuple(accounts)
    assert hash(cfg)  # still a frozen, hashable config
    # Neither stack grants them anything: their owner does (infra/README.md).
    assert cfg.job_service_accounts[0] not in json.dumps(planned_outputs(cfg))


def test_invalid_yaml_and_unknown_environment(env_dir):
    _write(env_dir, "project_id: [unclosed\n")
    with pytest.raises(ConfigError, match=r"dev.yaml: field '<document>': not valid YAML at line \d"):
        load_environment("dev")
    with pytest.raises(ConfigError, match=r"field '<environment>': unknown environment 'qa'; allowed: dev"):
        load_environment("qa")
    (env_dir / "dev.yaml").write_bytes(b"project_id: acme-ml-\xe9\n")  # Latin-1, not UTF-8
    with pytest.raises(ConfigError, match=r"dev.yaml: field '<document>': not UTF-8 \(byte 20\)"):
        load_environment("dev")
    _write(env_dir, _dev_doc(), name="ml-dev")  # would be silently skipped if the loader filtered names
    with pytest.raises(ConfigError, match=r"ml-dev.yaml: field '<environment>': the file name is the stack"):
        load_environment("ml-dev")


def _run_app(env_dir: Path, cwd: Path, **extra_env) -> subprocess.CompletedProcess:
    env = {**os.environ, "INFRA_ENVIRONMENTS_DIR": str(env_dir), "PYTHONPATH": str(REPO_ROOT), **extra_env}
    return subprocess.run([sys.executable, "-m", "infra.main"], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=60)


# The three broken configs the issue names, as the app reports them.
BROKEN_CONFIGS = [
    ("project_id", _DELETE, "field 'project_id': missing; this field is required"),
    ("region", "us_central1", "field 'region': got 'us_central1'; allowed: a Google Cloud region such as"),
    ("regoin", "us-central1",
     "field 'regoin': unknown key; allowed: alerts, billing_budget, endpoints, github, job_service_accounts"),
    # ...and the three a schedule can get wrong.
    ("schedules.nightly.cron", "0 3 * * * *", "field 'schedules.nightly.cron': '0 3 * * * *': 6 fields"),
    ("schedules.nightly.time_zone", "Europe/Atlantis",
     "field 'schedules.nightly.time_zone': got 'Europe/Atlantis'; allowed: an IANA time zone name"),
    ("schedules.nightly.job", "jobs/recommender.yml",
     "field 'schedules.nightly.job': 'jobs/recommender.yml' is not a regular file"),
    # ...and an endpoint's logging.
    ("endpoints.recommender.request_response_logging.sampling_rate", 2,
     "field 'endpoints.recommender.request_response_logging.sampling_rate': got 2; allowed: a number greater "
     "than 0 and at most 1"),
    # ...and a lifecycle folder.
    ("study_prefixes", ["census-tuning"],
     "field 'study_prefixes[0]': got 'census-tuning'; allowed: a folder of the models bucket ending in '/'"),
    # ...and schedules with nobody to tell of their failures.
    ("alerts", _DELETE, "field 'alerts': missing; required with schedules: {email: ADDRESS}"),
]


@pytest.mark.parametrize(("field", "value", "message"), BROKEN_CONFIGS,
                         ids=["missing", "region", "unknown", "cron", "time-zone", "job-file",
                              "sampling-rate", "study-prefix", "alerts"])
def test_app_exits_2_with_one_line_on_broken_config(env_dir, tmp_path_factory, field, value, message):
    doc = _dev_doc()
    _set(doc, field, value)
    path = _write(env_dir, doc)
    _write(env_dir, _dev_doc(), name="prod")
    cwd = tmp_path_factory.mktemp("cwd")
    result = _run_app(env_dir, cwd, CDKTF_OUTDIR=str(cwd / "out"))
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: {path}: {message}")
    assert result.stderr.count("\n") == 1 and result.stdout == ""
    assert list(cwd.iterdir()) == []  # nothing synthesized, nothing written


CDKTN = REPO_ROOT / "node_modules" / ".bin" / "cdktn"


@pytest.mark.skipif(not CDKTN.is_file(), reason="the cdktn CLI is not installed (npm ci)")
def test_cdktn_synth_reports_the_one_line_and_fails(env_dir, tmp_path):
    """Through the CLI users run: it relays the app's line and fails (with its own exit status, 1)."""
    doc = _dev_doc()
    del doc["project_id"]
    path = _write(env_dir, doc)
    venv_bin = Path(sys.executable).parent
    env = {**os.environ, "INFRA_ENVIRONMENTS_DIR": str(env_dir), "CHECKPOINT_DISABLE": "1",
           "PATH": f"{venv_bin}{os.pathsep}{CDKTN.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    out = tmp_path / "out"
    result = subprocess.run([str(CDKTN), "synth", "--output", str(out)], cwd=REPO_ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert f"error: {path}: field 'project_id': missing; this field is required" in result.stderr
    assert "exited with code 2" in result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert not out.exists()


def test_stack_selection(monkeypatch):
    from infra.main import selected_environments, selected_stacks

    monkeypatch.setenv("INFRA_STACKS", "cmek, standard,cmek")
    assert [cfg.name for cfg in selected_environments()] == ["cmek", "standard"]
    # An environment selects both of its stacks; `<env>-bootstrap` that stack alone.
    assert selected_stacks() == ["cmek-bootstrap", "cmek", "standard-bootstrap", "standard"]
    assert [cfg.name for cfg in selected_environments(["minimal", "minimal"])] == ["minimal"]
    assert selected_stacks(["minimal-bootstrap"]) == ["minimal-bootstrap"]
    assert [cfg.name for cfg in selected_environments(["minimal-bootstrap", "minimal"])] == ["minimal"]
    assert selected_stacks(["minimal-bootstrap", "minimal"]) == ["minimal-bootstrap", "minimal"]
    with pytest.raises(ConfigError, match="unknown environment 'nope'"):
        selected_environments(["nope-bootstrap"])
    monkeypatch.delenv("INFRA_STACKS")
    assert [cfg.name for cfg in selected_environments()] == list(SCENARIOS)
    assert len(selected_stacks()) == 2 * len(SCENARIOS)


def test_pure_modules_do_not_import_the_cdk():
    code = ("import sys, infra.config, infra.outputs, infra.naming, infra.policy, infra.schedules, "
            "infra.cron; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('cdktn', 'cdktn_provider_google', 'jsii', 'constructs', 'tensorflow')))")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True,
                            timeout=60, check=True)
    assert result.stdout.strip() == "[]"


# --- outputs
# -------------------------------------------------------------------------------------------------


def test_planned_outputs_from_config_alone():
    planned = planned_outputs(load_environment(BASIC))
    assert tuple(planned) == OUTPUT_KEYS + ("endpoint_recommender", "endpoint_ranker_v2")
    assert planned["data_bucket"] == "gs://scn-std-data"
    assert planned["tensorboard_logs_bucket"] == "gs://scn-std-tensorboard-logs"
    assert planned["runtime_service_account"] == "scn-std-runtime@scn-std-proj.iam.gserviceaccount.com"
    assert planned["builder_service_account"] == "scn-std-builder@scn-std-proj.iam.gserviceaccount.com"
    assert planned["artifact_registry"] == "us-central1-docker.pkg.dev/scn-std-proj/scn-std-images"
    assert planned["trainer_image"] == planned["artifact_registry"] + "/trainer"
    tensorboards = "projects/scn-std-proj/locations/us-central1/tensorboards"
    assert planned["tensorboard"] == f"{tensorboards}/{PENDING_DEPLOY}"
    assert is_pending(planned["tensorboard"])
    assert not any(is_pending(v) for k, v in planned.items() if k != "tensorboard")
    assert not is_pending("projects/scn-std-proj/locations/us-central1/tensorboards/123")


def _cli_outputs_file(tmp_path: Path, env: str, values: dict) -> Path:
    """The shape cdktn-cli's `deploy --outputs-file` writes: stack -> output id -> value, nested constructs as
    nested objects, sensitive outputs left out, other deployed stacks side by side."""
    path = tmp_path / f"{env}.json"
    path.write_text(json.dumps({
        env: {**values, "some-construct": {"inner_output": "x"}},
        "other": {"project": "elsewhere"},
    }, indent=2))
    return path


def test_deployed_outputs_reads_the_cli_outputs_file(tmp_path):
    values = {**planned_outputs(load_environment(BASIC)),
              "tensorboard": "projects/scn-std-proj/locations/us-central1/tensorboards/4711"}
    path = _cli_outputs_file(tmp_path, BASIC, values)
    assert deployed_outputs(path, BASIC, tuple(values)) == values
    assert resolve_outputs(BASIC, path) == values


def test_deployed_outputs_errors_are_one_line(tmp_path):
    path = _cli_outputs_file(tmp_path, "dev", {"project": "scn-std-proj"})
    with pytest.raises(ConfigError, match=r"field 'dev.project_number': got None"):
        deployed_outputs(path, "dev")
    with pytest.raises(ConfigError, match=r"field 'prod': no outputs for stack 'prod' \(stacks in file: dev"):
        deployed_outputs(path, "prod")
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(ConfigError, match="not valid JSON at line 1"):
        deployed_outputs(broken, "dev")


def test_resolve_outputs_prefers_the_default_file_for_that_environment(tmp_path, monkeypatch):
    assert outputs.default_outputs_file("dev") == REPO_ROOT / ".infra-outputs" / "dev.json"
    monkeypatch.setattr(outputs, "OUTPUTS_DIR", tmp_path)
    planned = planned_outputs(load_environment(BASIC))
    assert resolve_outputs(BASIC) == planned  # no deploy yet
    (tmp_path / f"{BASIC}.json").write_text(json.dumps({CMEK: {"project": "scn-cmek-proj"}}))
    assert resolve_outputs(BASIC) == planned  # a file without this stack is not this environment's deploy
    deployed = {**planned, "tensorboard": planned["tensorboard"].replace(PENDING_DEPLOY, "99")}
    _cli_outputs_file(tmp_path, BASIC, deployed)
    assert resolve_outputs(BASIC) == deployed


def test_outputs_of_another_deploy_are_refused(tmp_path):
    stale = {**planned_outputs(load_environment(BASIC)), "project": "someone-elses-project"}
    path = _cli_outputs_file(tmp_path, BASIC, stale)
    expected = (r"field 'standard.project': got 'someone-elses-project' but "
                r".*tests/infra/scenarios/standard.yaml says 'scn-std-proj'")
    with pytest.raises(ConfigError, match=expected):
        resolve_outputs(BASIC, path)
