"""Shared by the jobs and scripts tests: fixed infra outputs, clock and hashes (so requests are reproducible),
runners for scripts/*.py in-process and as a subprocess, minimal valid definitions and their mutations, and
a small checkout with a trainer image build context."""

from __future__ import annotations

import copy
import io
import sys
import textwrap
from datetime import datetime, timezone
from pathlib import Path

from jobs.cli.run_job import main
from jobs.definition.compile import Context, compile_job
from jobs.definition.gcloud_flags import JobFlags
from jobs.definition.loader import load_text
from jobs.definition.trainer_spec import load_trainer_spec
from jobs.definition.validate import validate

REPO_ROOT = Path(__file__).resolve().parents[2]
JOBS_DIR = REPO_ROOT / "jobs"
SHIPPED = sorted(JOBS_DIR.glob("*.yaml"))
NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
CODE_HASH = "0123456789abcdef"
IMAGE_HASH = "fedcba9876543210"
OUTPUTS = {
    "project": "demo-project",
    "project_number": "123456789012",
    "region": "us-central1",
    "data_bucket": "gs://demo-project-data",
    "staging_bucket": "gs://demo-project-staging",
    "models_bucket": "gs://demo-project-models",
    "tensorboard_logs_bucket": "gs://demo-project-tensorboard",
    "runtime_service_account": "vertex-runtime@demo-project.iam.gserviceaccount.com",
    "tensorboard": "projects/demo-project/locations/us-central1/tensorboards/1234567890",
    "artifact_registry": "us-central1-docker.pkg.dev/demo-project/ml",
    "trainer_image": "us-central1-docker.pkg.dev/demo-project/ml/trainer",
    "builder_service_account": "image-builder@demo-project.iam.gserviceaccount.com",
}
PLANNED_OUTPUTS = {
    **OUTPUTS,
    "tensorboard": "projects/demo-project/locations/us-central1/tensorboards/PENDING_DEPLOY",
}


def run_cli(
    argv,
    *,
    outputs=None,
    factory=None,
    now=NOW,
    code_hash=CODE_HASH,
    image_hash=IMAGE_HASH,
    repo_root=REPO_ROOT,
):
    """Run run_job.py's main in-process: (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    try:
        rc = main(
            [str(a) for a in argv],
            outputs=OUTPUTS if outputs is None else outputs,
            factory=factory,
            now=now,
            code_hash=code_hash,
            image_hash=image_hash,
            repo_root=repo_root,
            out=out,
            err=err,
        )
    except SystemExit as exc:  # argparse usage errors
        rc = exc.code
    return rc, out.getvalue(), err.getvalue()


def run_script(args, env, cwd=REPO_ROOT, timeout=60, script="run_job.py"):
    import subprocess

    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "scripts" / script), *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def refusal(result, file, path: str) -> str:
    """The one line a refused run printed: exit 2, no stdout, no traceback, addressed to file and path."""
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"{file}: {path}"), lines[0]
    assert "; allowed: " in lines[0]
    return lines[0]


DELETE = object()
PREBUILT_CPU = "us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-17.py310:latest"
PREBUILT_GPU = "us-docker.pkg.dev/vertex-ai/training/tf-gpu.2-17.py310:latest"


def on_trainer_image(variant: str, pool: str = "jobSpec.workerPoolSpecs.0") -> dict:
    """Mutations that move CUSTOM's pool from the prebuilt image to the trainer image of ``variant``."""
    return {
        "trainer": {"delivery": "container"},
        f"{pool}.pythonPackageSpec": DELETE,
        f"{pool}.containerSpec": {
            "imageUri": "${infra.trainer_image}:" + variant + "-${job.image_tag}",
            "args": ["--train-files=${infra.data_bucket}/a.csv", "--eval-files=${infra.data_bucket}/b.csv"],
        },
    }


CUSTOM = textwrap.dedent("""\
    kind: CustomJob
    trainer: {delivery: python-package}
    labels: {app: census}
    jobSpec:
      workerPoolSpecs:
        - machineSpec: {machineType: n1-standard-4}
          replicaCount: 1
          pythonPackageSpec:
            executorImageUri: us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-17.py310:latest
            packageUris: ["${job.package_uri}"]
            pythonModule: trainer.task
            args: ["--train-files=${infra.data_bucket}/a.csv", "--eval-files=${infra.data_bucket}/b.csv"]
      baseOutputDirectory: {outputUriPrefix: "${infra.models_bucket}/t/${job.id}"}
      serviceAccount: ${infra.runtime_service_account}
      tensorboard: ${infra.tensorboard}
      scheduling: {timeout: 600s}
    """)

TUNING = textwrap.dedent("""\
    kind: HyperparameterTuningJob
    trainer: {delivery: python-package}
    maxTrialCount: 4
    parallelTrialCount: 2
    maxFailedTrialCount: 1
    studySpec:
      metrics: [{metricId: accuracy, goal: MAXIMIZE}]
      parameters:
        - parameterId: first-layer-size
          integerValueSpec: {minValue: 16, maxValue: 128}
          scaleType: UNIT_LOG_SCALE
        - parameterId: learning-rate
          doubleValueSpec: {minValue: 0.001, maxValue: 0.1}
          scaleType: UNIT_LOG_SCALE
        - parameterId: scale-factor
          discreteValueSpec: {values: [0.25, 0.5, 0.75]}
    trialJobSpec:
      workerPoolSpecs:
        - machineSpec: {machineType: n1-standard-4}
          replicaCount: 1
          pythonPackageSpec:
            executorImageUri: us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-17.py310:latest
            pythonModule: trainer.task
            args: [--train-files=gs://demo-data/a.csv, --eval-files=gs://demo-data/b.csv]
      baseOutputDirectory: {outputUriPrefix: "${infra.models_bucket}/t/${job.id}"}
      serviceAccount: ${infra.runtime_service_account}
    """)


def set_path(data, path: str, value) -> None:
    """Set (or with DELETE remove) a field, creating mappings on the way: test-only, unlike --set."""
    parts = path.split(".")
    node = data
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    last = parts[-1]
    if isinstance(node, list) and int(last) == len(node):
        node.append(value)
    elif isinstance(node, list):
        node[int(last)] = value
    elif value is DELETE:
        node.pop(last, None)
    else:
        node[last] = value


def compile_text(
    text: str,
    mutations: dict | None = None,
    *,
    flags: JobFlags | None = None,
    outputs=None,
    now=NOW,
    overrides=(),
    file="job.yaml",
    image_hash=IMAGE_HASH,
    job_id="",
):
    document = load_text(text, file)
    document.data = copy.deepcopy(document.data)
    for path, value in (mutations or {}).items():
        set_path(document.data, path, value)
    context = Context(
        env="dev",
        outputs=outputs or OUTPUTS,
        code_hash=CODE_HASH,
        image_hash=image_hash,
        now=now,
        flags=flags or JobFlags(),
        overrides=tuple(overrides),
        job_id=job_id,
    )
    return compile_job(document, context)


def check(text: str, mutations: dict | None = None, **kwargs):
    job = compile_text(text, mutations, **kwargs)
    validate(
        job,
        load_trainer_spec,
        trainer_image=OUTPUTS["trainer_image"],
        accounts=(OUTPUTS["runtime_service_account"],),
    )
    return job


GCLOUD_CUSTOM = textwrap.dedent("""\
    workerPoolSpecs:
      - machineSpec: {machineType: n1-standard-4}
        replicaCount: 1
        containerSpec:
          imageUri: ${infra.trainer_image}:cpu-${job.image_tag}
          args: [--train-files=gs://demo-data/a.csv, --eval-files=gs://demo-data/b.csv]
    serviceAccount: ${infra.runtime_service_account}
    """)


def make_repo(root: Path, dockerignore: str | None = None) -> Path:
    """A small checkout with a Dockerfile, an allowlist .dockerignore and some files it must leave out."""
    files = {
        "Dockerfile": "FROM python:3.11-slim AS cpu\n",
        "docker/requirements-cpu.txt": "keras==3.15.1\n",
        "trainer/__init__.py": "",
        "trainer/task.py": "print('train')\n",
        "trainer/__pycache__/task.cpython-311.pyc": "bytecode",
        "trainer/models/census.py": "TASK = 1\n",
        "data/census/adult.data": "39, State-gov\n",
        "tests/test_x.py": "",
        ".venv/lib/site.py": "",
        "README.md": "readme\n",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (root / ".dockerignore").write_text(
        dockerignore
        if dockerignore is not None
        else "# allowlist\n*\n!Dockerfile\n!docker/\n!trainer\n**/__pycache__\n**/*.pyc\n"
    )
    return root


def arg_path(job_file: Path, flag: str, pool: str = "jobSpec.workerPoolSpecs.0") -> str:
    """The --set path of the arg ``flag=...`` in a shipped definition's pool, found by the flag's name (so a
    reordered args list moves the path with it), e.g. ``jobSpec.workerPoolSpecs.0.containerSpec.args.3``."""
    from jobs.definition.loader import load_file

    node = load_file(job_file).data
    for key in pool.split("."):
        node = node[int(key)] if isinstance(node, list) else node[key]
    program = next(k for k in ("containerSpec", "pythonPackageSpec") if k in node)
    index = next(i for i, arg in enumerate(node[program]["args"]) if str(arg).startswith(flag + "="))
    return f"{pool}.{program}.args.{index}"
