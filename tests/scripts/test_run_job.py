"""scripts/run_job.py as users run it: a subprocess, the real (or, before infra lands, stubbed) environment
outputs, one-line errors with exit status 2 and no traceback, and no heavy imports for --help/--dry-run."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from infra.config import list_environments
from tests.jobs.helpers import CUSTOM, JOBS_DIR, REPO_ROOT, SHIPPED, TUNING, refusal, run_script

PROBE = textwrap.dedent("""\
    import atexit, runpy, sys
    def report():
        heavy = [m for m in ("tensorflow", "keras", "google.cloud.aiplatform",
                             "google.cloud.aiplatform_v1.services",
                             "grpc", "cdktn") if m in sys.modules]
        print("HEAVY=" + ",".join(heavy), file=sys.stderr)
    atexit.register(report)
    sys.argv = ["scripts/run_job.py"] + sys.argv[1:]
    runpy.run_path("scripts/run_job.py", run_name="__main__")
    """)


def probe(args, env):
    import subprocess

    return subprocess.run(
        [sys.executable, "-c", PROBE, *map(str, args)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def heavy_modules(stderr: str) -> str:
    return [line for line in stderr.splitlines() if line.startswith("HEAVY=")][-1].removeprefix("HEAVY=")


def test_help_is_light(script_env):
    result = probe(["--help"], script_env)
    assert result.returncode == 0
    assert (
        "--dry-run" in result.stdout
        and "python scripts/run_job.py jobs/census_cpu.yaml --dry-run" in result.stdout
    )
    assert heavy_modules(result.stderr) == ""


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_dry_run_of_shipped_definitions_with_the_environment(path, script_env):
    result = probe([path.relative_to(REPO_ROOT), "--dry-run", "--env", "dev"], script_env)
    assert result.returncode == 0, result.stderr
    assert heavy_modules(result.stderr) == ""  # no TensorFlow, no SDK clients, no CDK
    request = json.loads(result.stdout)
    assert request["parent"].startswith("projects/") and "/locations/" in request["parent"]
    assert "plan (not executed)" in result.stderr
    assert "${" not in result.stdout


@pytest.mark.parametrize("env", list_environments())
def test_every_definition_is_valid_in_every_environment(env, cli):
    from infra.outputs import resolve_outputs

    for path in SHIPPED:
        rc, out, err = cli([path, "--dry-run", "--env", env], outputs=resolve_outputs(env))
        assert rc == 0, f"{path.name} in {env}: {err}"
        assert json.loads(out)["parent"].endswith(f"/locations/{resolve_outputs(env)['region']}")


BAD = [
    # id, file text (None: use args only), extra args, field path expected right after the file name
    ("tab", "kind: CustomJob\njobSpec:\n\tworkerPoolSpecs: []\n", [], "line 3"),
    ("duplicate-key", CUSTOM + "labels: {b: c}\n", [], "labels"),
    ("not-a-mapping", "- CustomJob\n", [], "line 1"),
    (
        "unknown-field",
        CUSTOM.replace("machineType:", "machinetype:"),
        [],
        "jobSpec.workerPoolSpecs.0.machineSpec.machinetype",
    ),
    (
        "unknown-machine",
        CUSTOM.replace("n1-standard-4", "n1-standard-5"),
        [],
        "jobSpec.workerPoolSpecs.0.machineSpec.machineType",
    ),
    (
        "accelerator-without-count",
        CUSTOM.replace(
            "{machineType: n1-standard-4}", "{machineType: n1-standard-4, acceleratorType: NVIDIA_TESLA_T4}"
        ),
        [],
        "jobSpec.workerPoolSpecs.0.machineSpec.acceleratorCount",
    ),
    (
        "chief-replicas",
        CUSTOM,
        ["--set", "jobSpec.workerPoolSpecs.0.replicaCount=3"],
        "jobSpec.workerPoolSpecs.0.replicaCount",
    ),
    (
        "min-ge-max",
        TUNING.replace("maxValue: 128", "maxValue: 16"),
        [],
        "studySpec.parameters.0.integerValueSpec.minValue",
    ),
    (
        "log-scale",
        TUNING.replace("minValue: 0.001", "minValue: 0"),
        [],
        "studySpec.parameters.1.doubleValueSpec.minValue",
    ),
    (
        "discrete-order",
        TUNING.replace("[0.25, 0.5, 0.75]", "[0.25, 0.75, 0.5]"),
        [],
        "studySpec.parameters.2.discreteValueSpec.values.2",
    ),
    (
        "grid-double",
        TUNING.replace("studySpec:\n", "studySpec:\n  algorithm: GRID_SEARCH\n"),
        [],
        "studySpec.parameters.1.doubleValueSpec",
    ),
    ("parallel-gt-max", TUNING, ["--set", "parallelTrialCount=9"], "parallelTrialCount"),
    (
        "metric",
        TUNING.replace("metricId: accuracy", "metricId: precision"),
        [],
        "studySpec.metrics.0.metricId",
    ),
    (
        "parameter-flag",
        TUNING.replace("parameterId: learning-rate", "parameterId: lr"),
        [],
        "studySpec.parameters.1.parameterId",
    ),
    ("bad-enum", TUNING.replace("goal: MAXIMIZE", "goal: MAX"), [], "studySpec.metrics.0.goal"),
    ("unknown-env", CUSTOM, ["--env", "staging-nope"], "--env"),
    (
        "unresolvable-ref",
        CUSTOM.replace("${infra.tensorboard}", "${infra.tensorboard_id}"),
        [],
        "jobSpec.tensorboard",
    ),
    ("bad-set-path", TUNING, ["--set", "studySpec.metric.0.goal=MINIMIZE"], "--set studySpec.metric"),
    ("bad-set-syntax", TUNING, ["--set", "maxTrialCount"], "--set maxTrialCount"),
    ("missing-file", None, ["jobs/no_such_job.yaml"], "(file)"),
]


@pytest.mark.parametrize("text, args, path", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input_is_one_line_exit_2(text, args, path, tmp_path, script_env):
    if text is None:
        file, argv = args[0], args[1:]
    else:
        file = tmp_path / "job.yaml"
        file.write_text(text, encoding="utf-8")
        argv = args
    before = sorted(p.name for p in REPO_ROOT.iterdir())
    refusal(run_script([file, *argv], script_env), file, path)
    assert sorted(p.name for p in REPO_ROOT.iterdir()) == before  # nothing written


def test_local_passes_the_compiled_job_to_the_local_runner(cli, monkeypatch, tmp_path):
    import jobs.local.run

    calls = []

    def fake_run_local(kind, body, outputs, **kwargs):
        calls.append((kind, body, outputs, kwargs))
        return 0

    monkeypatch.setattr(jobs.local.run, "run_local", fake_run_local)
    rc, out, err = cli(
        [
            JOBS_DIR / "census_tuning.yaml",
            "--local",
            "--resume",
            "--strict-accelerators",
            "--local-root",
            tmp_path,
            "--set",
            "maxTrialCount=2",
        ]
    )
    assert rc == 0, err
    ((kind, body, outputs, kwargs),) = calls
    assert kind == "HyperparameterTuningJob" and body["maxTrialCount"] == 2
    assert outputs["data_bucket"] == "gs://demo-project-data"
    assert kwargs["resume"] is True and kwargs["strict_accelerators"] is True
    assert kwargs["local_root"] == tmp_path and kwargs["repo_root"] == REPO_ROOT


def test_exit_status_of_the_local_run_is_returned(cli, monkeypatch):
    import jobs.local.run

    monkeypatch.setattr(jobs.local.run, "run_local", lambda *a, **k: 3)
    assert cli([JOBS_DIR / "census_cpu.yaml", "--local"])[0] == 3


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "JOB_FILE is required"),
        (["jobs/census_cpu.yaml", "--bogus"], "unrecognized arguments: --bogus"),
        (["jobs/census_cpu.yaml", "--dry-run", "--local"], "not allowed with argument --dry-run"),
        (["jobs/census_cpu.yaml", "--max-trial-count", "two"], "invalid int value: 'two'"),
    ],
    ids=["no-job-file", "unknown-flag", "exclusive-modes", "bad-int"],
)
def test_usage_errors_are_one_line_exit_2(argv, message, cli, capsys):
    rc, out, err = cli(argv)
    captured = capsys.readouterr()  # argparse writes to sys.stderr itself
    assert rc == 2 and out == "" and captured.out == ""
    lines = (err + captured.err).splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("run_job.py: error: ") and message in lines[0], lines[0]


def test_follow_needs_a_job_resource_name(cli):
    rc, out, err = cli(["--follow", "customJobs/1"])
    assert rc == 2
    assert err.startswith("--follow: RESOURCE_NAME: 'customJobs/1' is not a job resource name; allowed:")


def deployed_file(tmp_path, env="dev"):
    from infra.config import load_environment
    from infra.outputs import planned_outputs

    outputs = planned_outputs(load_environment(env))
    outputs["tensorboard"] = outputs["tensorboard"].replace("PENDING_DEPLOY", "5566778899")
    path = tmp_path / f"{env}.json"
    path.write_text(json.dumps({env: outputs}), encoding="utf-8")
    return path, outputs


def test_dry_run_uses_deployed_outputs(tmp_path, script_env):
    path, outputs = deployed_file(tmp_path)
    result = run_script([JOBS_DIR / "census_cpu.yaml", "--dry-run", "--outputs-file", path], script_env)
    assert result.returncode == 0, result.stderr
    spec = json.loads(result.stdout)["customJob"]["jobSpec"]
    assert spec["tensorboard"] == outputs["tensorboard"]
    assert spec["serviceAccount"] == outputs["runtime_service_account"]


def test_broken_outputs_file_is_one_line(tmp_path, script_env):
    path = tmp_path / "dev.json"
    path.write_text(json.dumps({"dev": {"project": "x"}}), encoding="utf-8")
    result = run_script([JOBS_DIR / "census_cpu.yaml", "--dry-run", "--outputs-file", path], script_env)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(f"{path}: dev.")
    job = JOBS_DIR / "census_cpu.yaml"
    missing = run_script([job, "--outputs-file", tmp_path / "nope.json"], script_env)
    assert missing.returncode == 2 and missing.stderr.startswith(f"{job}: --outputs-file:")


def test_jobs_run_as_the_runtime_account_or_one_the_environment_lists(cli, tmp_path, monkeypatch):
    from infra.config import ENVIRONMENTS_DIR, ENVIRONMENTS_DIR_VAR

    listed = "batch-trainer@acme-ml-dev.iam.gserviceaccount.com"
    job = JOBS_DIR / "census_cpu.yaml"
    as_listed = ["--set", f"jobSpec.serviceAccount={listed}"]

    # The shipped dev config lists no other account: only the runtime account runs jobs.
    rc, _, err = cli([job, "--dry-run", *as_listed])
    assert rc == 2
    assert f"jobSpec.serviceAccount: '{listed}' is not an account this environment runs jobs as" in err

    environments = tmp_path / "environments"
    environments.mkdir()
    config = (ENVIRONMENTS_DIR / "dev.yaml").read_text(encoding="utf-8")
    (environments / "dev.yaml").write_text(config + f"job_service_accounts: [{listed}]\n", encoding="utf-8")
    monkeypatch.setenv(ENVIRONMENTS_DIR_VAR, str(environments))
    rc, out, err = cli([job, "--dry-run", *as_listed])
    assert rc == 0, err
    assert json.loads(out)["customJob"]["jobSpec"]["serviceAccount"] == listed

    rc, _, err = cli(
        [job, "--dry-run", "--set", "jobSpec.serviceAccount=other@acme-ml-dev.iam.gserviceaccount.com"]
    )
    assert rc == 2
    assert f"or one of job_service_accounts in the environment config: {listed}" in err
