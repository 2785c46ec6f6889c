"""Building blocks for the table-driven compile/validate tests: minimal valid definitions and mutations."""

from __future__ import annotations

import copy
import textwrap

from jobs.compile import Context, JobFlags, compile_job
from jobs.loader import load_text
from jobs.trainer_contract import load_trainer_contract
from jobs.validate import validate
from tests.jobs.conftest import CODE_HASH, IMAGE_HASH, NOW, OUTPUTS

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
            args: [--train-files=gs://d/a.csv, --eval-files=gs://d/b.csv]
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
    )
    return compile_job(document, context)


def check(text: str, mutations: dict | None = None, **kwargs):
    job = compile_text(text, mutations, **kwargs)
    validate(job, load_trainer_contract, trainer_image=OUTPUTS["trainer_image"])
    return job
