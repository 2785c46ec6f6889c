"""The CDK app as `cdktn synth` runs it (scripts/synth.py: infra/ with the jobs layer's schedule compiler), on
the shipped infra/environments/*.yaml, whatever valid values a user has put in them.

Users replace every value there first thing (infra/README.md), so nothing here asserts a value of those files:
they load, synthesize and pass the policy scan as they are, and so do copies rewritten with other valid values
(another project, number, region, prefix, repository...), read through the same override the infra tests
point at tests/infra/scenarios/. A shipped schedule sends exactly the request `run_job.py --dry-run` prints.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from infra.config import ENVIRONMENTS_DIR, ENVIRONMENTS_DIR_VAR, list_environments, load_environment
from infra.naming import BUCKET_ROLES, resource_names
from infra.outputs import OUTPUT_KEYS, endpoints_in, output_keys, planned_outputs
from infra.policy import collect_skips, scan, write_checkov_config

REPO_ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted(p.stem for p in ENVIRONMENTS_DIR.glob("*.yaml"))


def rewritten(doc: dict, env: str, index: int) -> dict:
    """Other valid values for every field a user sets, keeping the file's shape (CMEK on or off)."""
    region = "europe-west1" if doc.get("region") != "europe-west1" else "us-east4"
    doc = {
        **doc,
        "project_id": f"rw-{env}-project",
        "project_number": str(987650000000 + index),
        "region": region,
        "name_prefix": f"rw{env}",
        "state_bucket": f"rw{env}-state",
        "github": {"owner": "rewritten-org", "repository": f"rewritten-{env}", "repository_id": 4242 + index,
                   "deploy_branch": "trunk"},
        "job_submitters": [f"group:rw-{env}@rewritten.example", "user:someone@rewritten.example"],
        "labels": {"team": "rewritten", "owner": env},
        "staging_retention_days": 3,
        "noncurrent_retention_days": 7,
        "registry_keep_versions": 4,
        "registry_untagged_retention_days": 2,
    }
    if doc.get("kms_key"):
        doc["kms_key"] = f"projects/rw-keys-project/locations/{region}/keyRings/rw/cryptoKeys/{env}"
    # The endpoints' callers and logging tables are the user's too (same shape, new copies of the entries).
    doc["endpoints"] = {name: {
        **(endpoint or {}),
        **({"predictors": [f"serviceAccount:rw-caller@{doc['project_id']}.iam.gserviceaccount.com"]}
           if (endpoint or {}).get("predictors") else {}),
        **({"request_response_logging": {"bigquery_table": f"bq://{doc['project_id']}.rw_logs.{name}",
                                         "sampling_rate": 0.5}}
           if (endpoint or {}).get("request_response_logging") else {}),
    } for name, endpoint in (doc.get("endpoints") or {}).items()}
    return doc


def _load_and_synth(env_dir: Path, outdir: Path) -> tuple[dict, dict]:
    """Configs of `env_dir` (through the override) and their synthesized stacks, schedules compiled as the
    app compiles them."""
    from infra.main import build_app, compile_schedules
    from jobs.schedule import compile_schedules as compiler

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(ENVIRONMENTS_DIR_VAR, str(env_dir))
        configs = {env: load_environment(env) for env in list_environments()}
        schedules = compile_schedules(list(configs.values()), compiler)
    app, built = build_app(list(configs.values()), outdir, schedules=schedules)
    app.synth()
    # Both stacks of each environment: `<env>` and `<env>-bootstrap`.
    stacks = {name: json.loads((outdir / "stacks" / name / "cdk.tf.json").read_text()) for name in built}
    return configs, stacks


@pytest.fixture(scope="module")
def shipped_and_rewritten(tmp_path_factory):
    """Copies of the shipped files as they are and rewritten, both synthesized and scanned by one checkov run
    (its start-up is most of its time) from one directory, stacks/<as-is|rewritten>-<stack>/cdk.tf.json, each
    stack judged by its own skips (infra.policy.scan)."""
    as_is, other = tmp_path_factory.mktemp("shipped"), tmp_path_factory.mktemp("rewritten")
    for index, env in enumerate(SHIPPED):
        shutil.copy(ENVIRONMENTS_DIR / f"{env}.yaml", as_is / f"{env}.yaml")
        doc = yaml.safe_load((ENVIRONMENTS_DIR / f"{env}.yaml").read_text(encoding="utf-8"))
        (other / f"{env}.yaml").write_text(yaml.safe_dump(rewritten(doc, env, index)), encoding="utf-8")
    results = {name: _load_and_synth(env_dir, tmp_path_factory.mktemp(f"{name}.out"))
               for name, env_dir in (("as-is", as_is), ("rewritten", other))}
    results["as-is-dir"] = as_is
    scanned = tmp_path_factory.mktemp("scan")
    for name, (_, stacks) in _synthesized(results).items():
        for env, stack in stacks.items():
            (scanned / "stacks" / f"{name}-{env}").mkdir(parents=True)
            (scanned / "stacks" / f"{name}-{env}" / "cdk.tf.json").write_text(json.dumps(stack, indent=2))
    write_checkov_config(scanned)
    return results, scan(scanned, separately=False)


def _synthesized(results: dict) -> dict:
    return {name: value for name, value in results.items() if name in ("as-is", "rewritten")}


def test_the_shipped_environments_load_and_synthesize(shipped_and_rewritten):
    assert SHIPPED, f"no environment in {ENVIRONMENTS_DIR}"
    configs, stacks = shipped_and_rewritten[0]["as-is"]
    assert sorted(configs) == SHIPPED
    assert sorted(stacks) == sorted([*SHIPPED, *(f"{env}-bootstrap" for env in SHIPPED)])
    for env in configs:
        stack = stacks[env]
        assert set(stack["output"]) == set(output_keys(configs[env])) > set(OUTPUT_KEYS)
        assert stack["output"]["project"]["value"] == planned_outputs(configs[env])["project"]
        # The model jobs/recommender.yaml registers has its endpoint in every shipped environment.
        assert "recommender" in endpoints_in(planned_outputs(configs[env]))
        assert stacks[f"{env}-bootstrap"]["output"]["project"]["value"] == configs[env].project_id


def test_rewritten_copies_load_and_synthesize_with_their_own_values(shipped_and_rewritten):
    configs, stacks = shipped_and_rewritten[0]["rewritten"]
    assert sorted(configs) == SHIPPED
    for index, (env, cfg) in enumerate(sorted(configs.items())):
        # What was loaded is the rewritten copy, and the stack is built from it.
        assert (cfg.project_id, cfg.name_prefix, cfg.github.repository_id) == (
            f"rw-{env}-project", f"rw{env}", 4242 + index)
        for name in (f"{env}-bootstrap", env):
            bootstrap = stacks[name]
            assert bootstrap["terraform"]["backend"]["gcs"]["bucket"] == f"rw{env}-state"
            assert bootstrap["provider"]["google"][0]["project"] == cfg.project_id
            assert {body["project"] for items in bootstrap["resource"].values() for body in items.values()
                    if "project" in body} == {cfg.project_id}
        stack = stacks[env]
        assert stack["provider"]["google"][0]["project"] == cfg.project_id
        assert stack["provider"]["google"][0]["region"] == cfg.region
        projects = {body["project"] for items in stack["resource"].values() for body in items.values()
                    if "project" in body}
        assert projects == {cfg.project_id}
        buckets = {b["name"] for b in stack["resource"]["google_storage_bucket"].values()}
        assert buckets == {resource_names(cfg).bucket(role) for role in BUCKET_ROLES}
        # The config literals and the bootstrap stack's names (accounts, provider), as planned from this copy.
        literal = {k: v["value"] for k, v in stack["output"].items() if "${" not in v["value"]}
        assert literal == {k: v for k, v in planned_outputs(cfg).items() if k in (
            "project", "project_number", "region", "runtime_service_account", "builder_service_account",
            "deployer_service_account", "workload_identity_provider")}


def test_shipped_and_rewritten_stacks_pass_the_policy_scan(shipped_and_rewritten):
    results, figures = shipped_and_rewritten
    results = _synthesized(results)
    # Every stack was scanned, bootstrap stacks included: each one's written skips come back as skipped, and
    # nothing else does.
    assert set(figures) == {f"{n}-{name}" for n, (_, stacks) in results.items() for name in stacks}
    for n, (_, stacks) in results.items():
        for name, stack in stacks.items():
            result = figures[f"{n}-{name}"]
            assert result.ok and result.passed > 0, result.line()
            assert set(result.skipped) == {(logical_id, entry["id"])
                                           for (_, logical_id), entries in collect_skips(stack).items()
                                           for entry in entries}


# --- schedules: the request is the dry-run's
# ------------------------------------------------------------------------------


def test_each_shipped_schedule_sends_exactly_the_dry_run_request(shipped_and_rewritten, monkeypatch):
    """Run each synthesized workflow (the Workflows interpreter of the infra tests, a fake Vertex AI) and
    compare the job it creates with what `run_job.py JOB --dry-run --env ENV --set ...` prints: equal, once
    the dry-run's job id is this run's id and the planned TensorBoard the deployed one. A schedule whose job
    registers its model uploads the model the dry-run's upload request names, served by the same container;
    one with batch_predict then creates the batch job `run_job.py batch-predict --dry-run` prints for its
    flags, with this run's id where the config has ${job.id}, at this run's start."""
    from datetime import datetime, timezone
    from io import StringIO

    from infra.outputs import planned_outputs
    from infra.schedules import (
        BATCH_CONNECTOR,
        CREATE_CONNECTOR,
        GET_MODEL_CONNECTOR,
        LIST_CONNECTOR,
        LIST_VERSIONS_CONNECTOR,
        MERGE_ALIASES_CONNECTOR,
        READ_OBJECT_CONNECTOR,
        UPLOAD_CONNECTOR,
    )
    from jobs.cli.run_job import main as run_job
    from jobs.definition.references import resolve
    from tests.infra.test_schedule_registry import FakeRegistry, FakeStorage
    from tests.infra.workflows_interpreter import Interpreter

    results, _ = shipped_and_rewritten
    configs, stacks = results["as-is"]
    monkeypatch.setenv(ENVIRONMENTS_DIR_VAR, str(results["as-is-dir"]))
    scheduled = [(env, s) for env, cfg in configs.items() for s in cfg.schedules]
    assert scheduled, "the shipped dev environment schedules the recommender"
    now = 1_795_000_000.0  # 2026-11-18T11:06:40Z
    for env, schedule in scheduled:
        cfg = configs[env]
        (workflow,) = [w for w in stacks[env]["resource"]["google_workflows_workflow"].values()
                       if w["name"] == resource_names(cfg).schedule(schedule.name)]
        created: list[dict] = []
        batches: list[dict] = []

        storage = FakeStorage()

        def create(args, created=created, storage=storage):
            created.append(args)
            model = args["body"]["jobSpec"]["baseOutputDirectory"]["outputUriPrefix"] + "/model"
            storage.files[model + "/metrics.json"] = b'{"eval": {"recall_at_k": 0.3}}'
            return {**args["body"], "name": "n", "state": "JOB_STATE_SUCCEEDED"}

        parent = f"projects/{planned_outputs(cfg)['project']}/locations/{planned_outputs(cfg)['region']}"
        registry = FakeRegistry(parent)
        program = yaml.safe_load(workflow["source_contents"].replace("$${", "${"))
        Interpreter(program, now=now, env={"GOOGLE_CLOUD_WORKFLOW_EXECUTION_ID": "abcdef12-3456",
                                            "TENSORBOARD": "projects/p/locations/r/tensorboards/77"},
                    connectors={LIST_CONNECTOR: lambda args: {}, CREATE_CONNECTOR: create,
                                LIST_VERSIONS_CONNECTOR: registry.list_versions,
                                GET_MODEL_CONNECTOR: registry.get, UPLOAD_CONNECTOR: registry.upload,
                                MERGE_ALIASES_CONNECTOR: registry.merge,
                                READ_OBJECT_CONNECTOR: storage.get,
                                BATCH_CONNECTOR: lambda args, batches=batches: batches.append(args) or {
                                    "name": "b", "state": "JOB_STATE_SUCCEEDED"}}).run()
        ((sent,),) = [created]
        batch = schedule.batch_predict
        assert len(batches) == (batch is not None)
        if batch is not None:
            names = {"infra": planned_outputs(cfg), "job": {"id": sent["body"]["displayName"]}}
            flags = {"--machine-type": batch.machine_type, "--batch-size": batch.batch_size,
                     "--starting-replica-count": batch.starting_replica_count,
                     "--max-replica-count": batch.max_replica_count, "--signature": batch.signature or None}
            argv = ["batch-predict", "recommender@production", "--dry-run", "--env", env,
                    "--output", resolve(batch.output, names, "dev.yaml"),
                    *(f"--input={resolve(uri, names, 'dev.yaml')}" for uri in batch.input),
                    *(f"{flag}={value}" for flag, value in flags.items() if value is not None)]
            out, err = StringIO(), StringIO()
            assert run_job(argv, out=out, err=err, outputs=planned_outputs(cfg),
                           now=datetime.fromtimestamp(now, timezone.utc)) == 0, err.getvalue()
            ((predicted,),) = [batches]
            assert {"parent": predicted["parent"], "batchPredictionJob": predicted["body"]} == json.loads(
                out.getvalue())

        out, err = StringIO(), StringIO()
        argv = [schedule.job, "--dry-run", "--env", env, *(f"--set={o}" for o in schedule.overrides)]
        assert run_job(argv, out=out, err=err, outputs=planned_outputs(cfg)) == 0, err.getvalue()
        if schedule.job == "jobs/recommender.yaml":  # the shipped daily job registers its model
            printed = err.getvalue()
            # The upload request's JSON, up to its end: the Experiments requests follow it.
            upload, _ = json.JSONDecoder().raw_decode(
                printed, printed.index("\n{", printed.index("model upload request")) + 1)
            ((uploaded,),) = [registry.uploads]
            dry_run_id = json.loads(out.getvalue())["customJob"]["displayName"]
            run_id = sent["body"]["displayName"]
            assert uploaded["model"]["artifactUri"] == upload["model"]["artifactUri"].replace(
                dry_run_id, run_id)
            assert uploaded["model"]["containerSpec"] == upload["model"]["containerSpec"]
            assert uploaded["modelId"] == upload["modelId"] == "recommender"
            assert registry.holder("production") == "1"  # the first version takes the alias
        request = json.loads(out.getvalue())
        dry_run_id = request["customJob"]["displayName"]
        run_id = sent["body"]["displayName"]
        assert re.fullmatch(r"[a-z0-9-]+-20261118-110640-abcdef", run_id), run_id
        expected = json.loads(json.dumps(request["customJob"]).replace(dry_run_id, run_id).replace(
            planned_outputs(cfg)["tensorboard"], "projects/p/locations/r/tensorboards/77"))
        assert sent["body"] == expected
        assert sent["parent"] == request["parent"]


# --- schedules: bad input through the app
# -------------------------------------------------------------------------------


def _synth_app(env_dir: Path, out: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, ENVIRONMENTS_DIR_VAR: str(env_dir), "CDKTF_OUTDIR": str(out)}
    return subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "synth.py")], cwd=out.parent, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ({"job": "jobs/recommender_tuning.yaml"},
         "dev.yaml: field 'schedules.nightly.job': jobs/recommender_tuning.yaml is a "
         "HyperparameterTuningJob; allowed: a CustomJob definition"),
        ({"job": "jobs/census_prebuilt.yaml"},
         "dev.yaml: field 'schedules.nightly.job': jobs/census_prebuilt.yaml installs the trainer sdist"),
        # A bad override is the job file's field, said to come from the schedule.
        ({"set": {"jobSpec.workerPoolSpecs.0.machineSpec.machineType": "n1-nonsense-3"}},
         "jobs/recommender.yaml: field 'jobSpec.workerPoolSpecs.0.machineSpec.machineType': unknown machine "
         "type 'n1-nonsense-3'"),
        ({"set": {"jobSpec.nope": 1}},
         "jobs/recommender.yaml: field '--set jobSpec.nope': no such field in the file (scheduled by "),
    ],
    ids=["tuning-job", "package-job", "bad-machine", "bad-path"],
)
def test_a_schedule_that_does_not_compile_is_one_line_and_synthesizes_nothing(tmp_path, schedule, message):
    doc = yaml.safe_load((ENVIRONMENTS_DIR / "dev.yaml").read_text(encoding="utf-8"))
    doc["schedules"] = {"nightly": {"job": "jobs/recommender.yaml", "cron": "0 3 * * *", **schedule}}
    env_dir = tmp_path / "envs"
    env_dir.mkdir()
    (env_dir / "dev.yaml").write_text(yaml.safe_dump(doc), encoding="utf-8")
    result = _synth_app(env_dir, tmp_path / "out")
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    assert message in result.stderr
    # Which schedule compiled it, where the job file's own field is at fault.
    assert "schedules.nightly.job" in result.stderr
    assert not (tmp_path / "out").exists()
