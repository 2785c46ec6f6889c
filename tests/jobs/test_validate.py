"""Table-driven tests of jobs.definition.validate: each row breaks one thing in a valid definition and names
the field path and the words the one-line error must contain."""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path

import pytest

from jobs.definition.errors import JobError
from tests.jobs.helpers import (
    CUSTOM,
    DELETE,
    PREBUILT_CPU,
    PREBUILT_GPU,
    TUNING,
    check,
    on_trainer_image,
    set_path,
)

POOL = "jobSpec.workerPoolSpecs.0"
MACHINE = f"{POOL}.machineSpec"
TRIAL_POOL = "trialJobSpec.workerPoolSpecs.0"
PARAM = "studySpec.parameters"


def test_the_base_definitions_are_valid():
    check(CUSTOM)
    check(TUNING)


def _conditional(child: str, low: int, high: int, model: str = "wide_deep") -> dict:
    """A tuned --model whose one value enables an INTEGER child parameter (a ConditionalParameterSpec)."""
    return {
        "parameterId": "model",
        "categoricalValueSpec": {"values": [model]},
        "conditionalParameterSpecs": [
            {
                "parentCategoricalValues": {"values": [model]},
                "parameterSpec": {
                    "parameterId": child,
                    "integerValueSpec": {"minValue": low, "maxValue": high},
                },
            }
        ],
    }


SCHEDULING = "jobSpec.scheduling"
TPU_V3 = {"machineType": "cloud-tpu", "acceleratorType": "TPU_V3", "acceleratorCount": 8}
L4 = {"machineType": "g2-standard-8", "acceleratorType": "NVIDIA_L4", "acceleratorCount": 1}
SPOT = {f"{SCHEDULING}.strategy": "SPOT"}
FLEX = {f"{SCHEDULING}.strategy": "FLEX_START", f"{SCHEDULING}.maxWaitDuration": "7200s"}


def _on(machine: dict, variant: str, workers: int = 0) -> dict:
    """Mutations that run CUSTOM's chief (and ``workers`` replicas in pool 1, the same program) on
    ``machine`` with the trainer image's ``variant``."""
    mutations = {MACHINE: machine, **on_trainer_image(variant)}
    if workers:
        mutations["jobSpec.workerPoolSpecs.1"] = {
            "machineSpec": dict(machine),
            "replicaCount": workers,
            "containerSpec": mutations[f"{POOL}.containerSpec"],
        }
    return mutations


VALID = [
    (
        "script-with-newlines-and-env",
        CUSTOM,
        {
            f"{POOL}.pythonPackageSpec.env": [
                {"name": "TF_CPP_MIN_LOG_LEVEL", "value": "2"},
                {"name": "NOTE", "value": "line one\n\tline two"},
            ]
        },
    ),
    ("trailing-slash-prefix", CUSTOM, {"jobSpec.baseOutputDirectory.outputUriPrefix": "gs://demo-models/t/"}),
    ("unicode-display-name", CUSTOM, {"displayName": "recensement \u00e9t\u00e9 \u4eba\u53e3"}),
    (
        "t4",
        CUSTOM,
        {
            MACHINE: {
                "machineType": "n1-standard-8",
                "acceleratorType": "NVIDIA_TESLA_T4",
                "acceleratorCount": 1,
            },
            f"{POOL}.pythonPackageSpec.executorImageUri": PREBUILT_GPU,
        },
    ),
    (
        "v100x8",
        CUSTOM,
        {
            MACHINE: {
                "machineType": "n1-highmem-16",
                "acceleratorType": "NVIDIA_TESLA_V100",
                "acceleratorCount": 8,
            },
            f"{POOL}.pythonPackageSpec.executorImageUri": PREBUILT_GPU,
        },
    ),
    (
        "a100",
        CUSTOM,
        {
            MACHINE: {
                "machineType": "a2-highgpu-2g",
                "acceleratorType": "NVIDIA_TESLA_A100",
                "acceleratorCount": 2,
            },
            f"{POOL}.pythonPackageSpec.executorImageUri": PREBUILT_GPU,
        },
    ),
    (
        "a100-80",
        CUSTOM,
        {
            MACHINE: {
                "machineType": "a2-ultragpu-1g",
                "acceleratorType": "NVIDIA_A100_80GB",
                "acceleratorCount": 1,
            },
            f"{POOL}.pythonPackageSpec.executorImageUri": PREBUILT_GPU,
        },
    ),
    (
        "h100",
        CUSTOM,
        {
            MACHINE: {
                "machineType": "a3-highgpu-8g",
                "acceleratorType": "NVIDIA_H100_80GB",
                "acceleratorCount": 8,
            },
            f"{POOL}.pythonPackageSpec.executorImageUri": PREBUILT_GPU,
        },
    ),
    (
        "l4",
        CUSTOM,
        {
            MACHINE: {"machineType": "g2-standard-8", "acceleratorType": "NVIDIA_L4", "acceleratorCount": 1},
            f"{POOL}.pythonPackageSpec.executorImageUri": PREBUILT_GPU,
        },
    ),
    (
        "l4x4",
        CUSTOM,
        {
            MACHINE: {"machineType": "g2-standard-48", "acceleratorType": "NVIDIA_L4", "acceleratorCount": 4},
            f"{POOL}.pythonPackageSpec.executorImageUri": PREBUILT_GPU,
        },
    ),
    (
        "tpu-v2",
        CUSTOM,
        {
            MACHINE: {"machineType": "cloud-tpu", "acceleratorType": "TPU_V2", "acceleratorCount": 8},
            **on_trainer_image("tpu"),
        },
    ),
    (
        "v5e",
        CUSTOM,
        {
            MACHINE: {
                "machineType": "ct5lp-hightpu-4t",
                "acceleratorType": "TPU_V5_LITEPOD",
                "acceleratorCount": 4,
                "tpuTopology": "2x2",
            },
            **on_trainer_image("tpu"),
        },
    ),
    (
        "v5e-1",
        CUSTOM,
        {MACHINE: {"machineType": "ct5lp-hightpu-1t", "tpuTopology": "1x1"}, **on_trainer_image("tpu")},
    ),
    ("e2", CUSTOM, {MACHINE: {"machineType": "e2-standard-8"}}),
    ("c2", CUSTOM, {MACHINE: {"machineType": "c2-standard-16"}}),
    (
        "workers",
        CUSTOM,
        {
            "jobSpec.workerPoolSpecs": [
                {
                    "machineSpec": {"machineType": "n1-standard-4"},
                    "replicaCount": 1,
                    "pythonPackageSpec": {
                        "executorImageUri": PREBUILT_CPU,
                        "pythonModule": "trainer.task",
                        "args": ["--train-files=a", "--eval-files=b"],
                    },
                },
                {},  # empty placeholder pool
                {
                    "machineSpec": {"machineType": "n1-standard-4"},
                    "replicaCount": 3,
                    "pythonPackageSpec": {
                        "executorImageUri": PREBUILT_CPU,
                        "pythonModule": "trainer.task",
                        "args": ["--train-files=a", "--eval-files=b"],
                    },
                },
            ]
        },
    ),
    (
        "other-module",
        CUSTOM,
        {
            f"{POOL}.pythonPackageSpec.pythonModule": "mypkg.train",
            f"{POOL}.pythonPackageSpec.args": ["--anything"],
        },
    ),
    (
        "grid",
        TUNING,
        {
            "studySpec.algorithm": "GRID_SEARCH",
            f"{PARAM}.1": {"parameterId": "learning-rate", "discreteValueSpec": {"values": [0.001, 0.01]}},
        },
    ),
    (
        "metric-from-args",
        TUNING,
        {
            "studySpec.metrics.0.metricId": "auc",
            f"{TRIAL_POOL}.pythonPackageSpec.args": [
                "--train-files=a",
                "--eval-files=b",
                "--hypertune-metric",
                "auc",
            ],
        },
    ),
    (
        "minimize-loss",
        TUNING,
        {
            "studySpec.metrics.0": {"metricId": "loss", "goal": "MINIMIZE"},
            f"{TRIAL_POOL}.pythonPackageSpec.args": [
                "--train-files=a",
                "--eval-files=b",
                "--hypertune-metric=loss",
            ],
        },
    ),
    ("underscore-id", TUNING, {f"{PARAM}.0.parameterId": "first_layer_size"}),
    ("tuned-model-with-its-own-flag", TUNING, {f"{PARAM}.2": _conditional("num-layers", 1, 4)}),
    (
        "categorical-int-flag",
        TUNING,
        {f"{PARAM}.2": {"parameterId": "num-layers", "categoricalValueSpec": {"values": ["1", "2", "3"]}}},
    ),
    # Capacity (jobs/definition/validate_scheduling.py)
    ("spot-cpu", CUSTOM, SPOT),
    ("spot-one-tpu-vm", CUSTOM, {**_on(TPU_V3, "tpu"), **SPOT}),
    (
        "spot-workers-restart-together",
        CUSTOM,
        {**_on({"machineType": "n1-standard-4"}, "cpu", workers=2), **SPOT,
         f"{SCHEDULING}.restartJobOnWorkerRestart": True},
    ),
    ("flex-start-l4", CUSTOM, {**_on(L4, "gpu"), **FLEX}),
    ("flex-start-waits-forever", CUSTOM, {**_on(L4, "gpu"), **FLEX, f"{SCHEDULING}.maxWaitDuration": "0s"}),
    ("flex-start-l4-workers", CUSTOM, {**_on(L4, "gpu", workers=1), **FLEX}),
    ("standard-by-name", CUSTOM, {f"{SCHEDULING}.strategy": "STANDARD"}),
]


@pytest.mark.parametrize("base, mutations", [v[1:] for v in VALID], ids=[v[0] for v in VALID])
def test_valid_variants(base, mutations):
    check(base, mutations)


@pytest.fixture
def tiny_task():
    """A second registered model beside wide_deep: the test-only task of tests/trainer/test_models_registry.py
    (flag --tiny-units, metrics mae and loss, both MINIMIZE)."""
    from tests.trainer.helpers import tiny_task_registered

    with tiny_task_registered():
        yield


INVALID = [
    # id, base, mutations, field path in the error, words in the error
    (
        "unknown-field",
        CUSTOM,
        {f"{MACHINE}.machineTyp": "x"},
        f"{MACHINE}.machineTyp",
        "unknown field for MachineSpec; allowed: acceleratorCount, acceleratorType",
    ),
    ("unknown-top-field", TUNING, {"maxTrials": 3}, "maxTrials", "unknown field for HyperparameterTuningJob"),
    (
        "bad-enum",
        TUNING,
        {"studySpec.algorithm": "BAYESIAN"},
        "studySpec.algorithm",
        "invalid value 'BAYESIAN' for Algorithm; allowed: ALGORITHM_UNSPECIFIED, GRID_SEARCH, RANDOM_SEARCH",
    ),
    (
        "bad-accelerator-enum",
        CUSTOM,
        {f"{MACHINE}.acceleratorType": "T4"},
        f"{MACHINE}.acceleratorType",
        "invalid value 'T4' for AcceleratorType",
    ),
    ("bad-int", CUSTOM, {f"{POOL}.replicaCount": "two"}, f"{POOL}.replicaCount", "expected an integer"),
    (
        "bad-duration",
        CUSTOM,
        {"jobSpec.scheduling.timeout": "2h"},
        "jobSpec.scheduling.timeout",
        "not a duration: '2h'; allowed: seconds with an 's' suffix",
    ),
    (
        "list-expected",
        CUSTOM,
        {"jobSpec.workerPoolSpecs": {"a": 1}},
        "jobSpec.workerPoolSpecs",
        "expected a list",
    ),
    ("output-only", CUSTOM, {"state": "JOB_STATE_RUNNING"}, "state", "output only"),
    (
        "unknown-machine",
        CUSTOM,
        {f"{MACHINE}.machineType": "n1-standard-3"},
        f"{MACHINE}.machineType",
        "unknown machine type 'n1-standard-3'; allowed: n1-standard-4, n1-standard-8, n1-standard-16",
    ),
    (
        "unknown-family",
        CUSTOM,
        {f"{MACHINE}.machineType": "m1-ultramem-40"},
        f"{MACHINE}.machineType",
        "allowed: n1-standard-*, n1-highmem-*, n1-highcpu-*, a2-highgpu-*",
    ),
    (
        "gpu-on-cpu-family",
        CUSTOM,
        {
            f"{MACHINE}.machineType": "e2-standard-4",
            f"{MACHINE}.acceleratorType": "NVIDIA_TESLA_T4",
            f"{MACHINE}.acceleratorCount": 1,
        },
        f"{MACHINE}.acceleratorType",
        "e2-standard-4 does not take NVIDIA_TESLA_T4; allowed: none",
    ),
    (
        "wrong-gpu",
        CUSTOM,
        {
            f"{MACHINE}.machineType": "g2-standard-8",
            f"{MACHINE}.acceleratorType": "NVIDIA_TESLA_T4",
            f"{MACHINE}.acceleratorCount": 1,
        },
        f"{MACHINE}.acceleratorType",
        "allowed: NVIDIA_L4",
    ),
    (
        "type-without-count",
        CUSTOM,
        {f"{MACHINE}.machineType": "n1-standard-8", f"{MACHINE}.acceleratorType": "NVIDIA_TESLA_T4"},
        f"{MACHINE}.acceleratorCount",
        "acceleratorType NVIDIA_TESLA_T4 without a count",
    ),
    (
        "count-without-type",
        CUSTOM,
        {f"{MACHINE}.acceleratorCount": 2},
        f"{MACHINE}.acceleratorType",
        "acceleratorCount 2 without a type",
    ),
    (
        "a2-count",
        CUSTOM,
        {
            f"{MACHINE}.machineType": "a2-highgpu-4g",
            f"{MACHINE}.acceleratorType": "NVIDIA_TESLA_A100",
            f"{MACHINE}.acceleratorCount": 2,
        },
        f"{MACHINE}.acceleratorCount",
        "allowed: 4",
    ),
    (
        "a2-no-gpu",
        CUSTOM,
        {f"{MACHINE}.machineType": "a2-highgpu-1g"},
        f"{MACHINE}.acceleratorType",
        "comes with accelerators",
    ),
    (
        "t4-x3",
        CUSTOM,
        {
            f"{MACHINE}.machineType": "n1-standard-8",
            f"{MACHINE}.acceleratorType": "NVIDIA_TESLA_T4",
            f"{MACHINE}.acceleratorCount": 3,
        },
        f"{MACHINE}.acceleratorCount",
        "3 x NVIDIA_TESLA_T4 on n1-standard-8; allowed: 1, 2, 4",
    ),
    (
        "t4-x8",
        CUSTOM,
        {
            f"{MACHINE}.machineType": "n1-standard-32",
            f"{MACHINE}.acceleratorType": "NVIDIA_TESLA_T4",
            f"{MACHINE}.acceleratorCount": 8,
        },
        f"{MACHINE}.acceleratorCount",
        "allowed: 1, 2, 4",
    ),
    (
        "tpu-count",
        CUSTOM,
        {
            f"{MACHINE}.machineType": "cloud-tpu",
            f"{MACHINE}.acceleratorType": "TPU_V3",
            f"{MACHINE}.acceleratorCount": 4,
        },
        f"{MACHINE}.acceleratorCount",
        "allowed: 8",
    ),
    (
        "tpu-type",
        CUSTOM,
        {
            f"{MACHINE}.machineType": "cloud-tpu",
            f"{MACHINE}.acceleratorType": "TPU_V5_LITEPOD",
            f"{MACHINE}.acceleratorCount": 8,
        },
        f"{MACHINE}.acceleratorType",
        "allowed: TPU_V2, TPU_V3",
    ),
    (
        "v5e-topology",
        CUSTOM,
        {f"{MACHINE}.machineType": "ct5lp-hightpu-4t", f"{MACHINE}.tpuTopology": "4x4"},
        f"{MACHINE}.tpuTopology",
        "allowed: 2x2",
    ),
    (
        "v5e-no-topology",
        CUSTOM,
        {f"{MACHINE}.machineType": "ct5lp-hightpu-8t"},
        f"{MACHINE}.tpuTopology",
        "allowed: 2x4",
    ),
    (
        "topology-on-gpu",
        CUSTOM,
        {f"{MACHINE}.tpuTopology": "2x2"},
        f"{MACHINE}.tpuTopology",
        "takes no tpuTopology",
    ),
    (
        "chief-replicas",
        CUSTOM,
        {f"{POOL}.replicaCount": 2},
        f"{POOL}.replicaCount",
        "the first pool is the chief and has 2 replicas; allowed: 1",
    ),
    ("zero-replicas", CUSTOM, {f"{POOL}.replicaCount": 0}, f"{POOL}.replicaCount", "replicaCount is 0"),
    ("no-pools", CUSTOM, {"jobSpec.workerPoolSpecs": []}, "jobSpec.workerPoolSpecs", "no worker pools"),
    (
        "two-programs",
        CUSTOM,
        {f"{POOL}.containerSpec": {"imageUri": "x"}},
        POOL,
        "sets both pythonPackageSpec and containerSpec, which exclude each other; allowed: exactly one of",
    ),
    (
        "delivery-mismatch",
        CUSTOM,
        {"trainer.delivery": "container"},
        f"{POOL}.pythonPackageSpec",
        "the header says trainer.delivery: container",
    ),
    (
        "bad-delivery",
        CUSTOM,
        {"trainer.delivery": "wheel"},
        "trainer.delivery",
        "allowed: python-package, container",
    ),
    ("bad-kind", CUSTOM, {"kind": "TrainingPipeline"}, "kind", "allowed: CustomJob, HyperparameterTuningJob"),
    (
        "output-not-gs",
        CUSTOM,
        {"jobSpec.baseOutputDirectory.outputUriPrefix": "/tmp/out"},
        "jobSpec.baseOutputDirectory.outputUriPrefix",
        "is not a gs:// URI",
    ),
    (
        "bad-service-account",
        CUSTOM,
        {"jobSpec.serviceAccount": "trainer"},
        "jobSpec.serviceAccount",
        "not a service account email",
    ),
    (
        "tensorboard-region",
        CUSTOM,
        {"jobSpec.tensorboard": "projects/p/locations/europe-west4/tensorboards/1"},
        "jobSpec.tensorboard",
        "TensorBoard is in europe-west4, the job in us-central1",
    ),
    (
        "no-service-account",
        CUSTOM,
        {"jobSpec.serviceAccount": DELETE, "jobSpec.tensorboard": DELETE},
        "jobSpec.serviceAccount",
        "missing: the job would run as the Vertex AI Custom Code Service Agent; "
        "allowed: ${infra.runtime_service_account} (vertex-runtime@demo-project.iam.gserviceaccount.com)",
    ),
    (
        "trials-without-service-account",
        TUNING,
        {"trialJobSpec.serviceAccount": DELETE},
        "trialJobSpec.serviceAccount",
        "the job would run as the Vertex AI Custom Code Service Agent",
    ),
    (
        "another-projects-account",
        CUSTOM,
        {"jobSpec.serviceAccount": "trainer@other-project.iam.gserviceaccount.com"},
        "jobSpec.serviceAccount",
        "'trainer@other-project.iam.gserviceaccount.com' is not an account this environment runs jobs as",
    ),
    (
        "compute-default-account",
        CUSTOM,
        {"jobSpec.serviceAccount": "123456789012-compute@developer.gserviceaccount.com"},
        "jobSpec.serviceAccount",
        "is not an account this environment runs jobs as",
    ),
    (
        "output-prefix-climbs-out",
        CUSTOM,
        {"jobSpec.baseOutputDirectory.outputUriPrefix": "${infra.models_bucket}/../../etc"},
        "jobSpec.baseOutputDirectory.outputUriPrefix",
        "has a '..' path segment; allowed: gs://<bucket>/<path> with plain segments",
    ),
    (
        "data-path-climbs-out",
        CUSTOM,
        {f"{POOL}.pythonPackageSpec.args.0": "--train-files=${infra.data_bucket}/x/../../../a.csv"},
        f"{POOL}.pythonPackageSpec.args.0",
        "has a '..' path segment",
    ),
    (
        # The URI goes on after ';' (gcsfuse and --local read it whole), so its '..' is seen too.
        "climbs-out-after-a-semicolon",
        CUSTOM,
        {f"{POOL}.pythonPackageSpec.args.0": "--train-files=${infra.data_bucket}/x;/../../../etc"},
        f"{POOL}.pythonPackageSpec.args.0",
        "has a '..' path segment",
    ),
    (
        "dot-segment",
        CUSTOM,
        {f"{POOL}.pythonPackageSpec.args.1": "--eval-files=gs://demo-data/./b.csv"},
        f"{POOL}.pythonPackageSpec.args.1",
        "has a '.' path segment",
    ),
    (
        "empty-segment",
        CUSTOM,
        {"jobSpec.baseOutputDirectory.outputUriPrefix": "gs://demo-models//t"},
        "jobSpec.baseOutputDirectory.outputUriPrefix",
        "has an empty path segment",
    ),
    (
        "no-bucket",
        CUSTOM,
        {"jobSpec.baseOutputDirectory.outputUriPrefix": "gs:///t"},
        "jobSpec.baseOutputDirectory.outputUriPrefix",
        "names no valid bucket",
    ),
    (
        "escape-in-name",
        CUSTOM,
        {"displayName": "census\x1b[2Jcleared"},
        "displayName",
        "contains the control character U+001B; allowed: printable text",
    ),
    (
        "bidi-in-name",
        CUSTOM,
        {"displayName": "census\u202egnp.exe"},
        "displayName",
        "contains the control character U+202E",
    ),
    (
        "newline-in-name",
        CUSTOM,
        {"displayName": "two\nlines"},
        "displayName",
        "contains the control character U+000A",
    ),
    (
        "zero-width-in-parameter",
        TUNING,
        {f"{PARAM}.0.parameterId": "first\u200blayer-size"},
        f"{PARAM}.0.parameterId",
        "contains the format character U+200B",
    ),
    (
        "bidi-in-args",
        CUSTOM,
        {f"{POOL}.pythonPackageSpec.args.1": "--eval-files=gs://demo-data/b.csv\u2066"},
        f"{POOL}.pythonPackageSpec.args.1",
        "contains the control character U+2066; allowed: printable text, newlines and tabs",
    ),
    (
        "nul-in-env-value",
        CUSTOM,
        {f"{POOL}.pythonPackageSpec.env": [{"name": "MODE", "value": "a\x00b"}]},
        f"{POOL}.pythonPackageSpec.env.0.value",
        "contains the control character U+0000",
    ),
    (
        "env-name-not-an-identifier",
        CUSTOM,
        {f"{POOL}.pythonPackageSpec.env": [{"name": "MY-VAR", "value": "1"}]},
        f"{POOL}.pythonPackageSpec.env.0.name",
        "'MY-VAR' is not an environment variable name; allowed: a C identifier",
    ),
    (
        "env-name-reserved",
        CUSTOM,
        {f"{POOL}.pythonPackageSpec.env": [{"name": "AIP_MODEL_DIR", "value": "/tmp/x"}]},
        f"{POOL}.pythonPackageSpec.env.0.name",
        "AIP_MODEL_DIR is set by Vertex AI for each replica",
    ),
    (
        "env-tf-config",
        CUSTOM,
        {f"{POOL}.pythonPackageSpec.env": [{"name": "TF_CONFIG", "value": "{}"}]},
        f"{POOL}.pythonPackageSpec.env.0.name",
        "TF_CONFIG is set by Vertex AI for each replica",
    ),
    (
        "env-name-twice",
        CUSTOM,
        {f"{POOL}.pythonPackageSpec.env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]},
        f"{POOL}.pythonPackageSpec.env.1.name",
        "A is set twice (first at env.0)",
    ),
    ("bad-label", CUSTOM, {"labels.App": "x"}, "labels.App", "invalid label key"),
    ("bad-label-value", CUSTOM, {"labels.app": "Census Income"}, "labels.app", "invalid label value"),
    (
        "unknown-trainer-flag",
        CUSTOM,
        {f"{POOL}.pythonPackageSpec.args": ["--train-files=a", "--eval-files=b", "--epochs=3"]},
        f"{POOL}.pythonPackageSpec.args",
        "the trainer rejects these args: unrecognized arguments: --epochs=3",
    ),
    (
        "missing-required-flag",
        CUSTOM,
        {f"{POOL}.pythonPackageSpec.args": ["--train-files=a"]},
        f"{POOL}.pythonPackageSpec.args",
        "--eval-files",
    ),
    (
        "bad-model",
        CUSTOM,
        {f"{POOL}.pythonPackageSpec.args": ["--train-files=a", "--eval-files=b", "--model=xgb"]},
        f"{POOL}.pythonPackageSpec.args",
        "invalid choice: 'xgb'",
    ),
    (
        "workers-differ-from-chief",
        CUSTOM,
        {
            "jobSpec.workerPoolSpecs.1": {
                "machineSpec": {"machineType": "n1-standard-4"},
                "replicaCount": 2,
                "pythonPackageSpec": {
                    "executorImageUri": PREBUILT_CPU,
                    "pythonModule": "trainer.task",
                    "args": ["--train-files=gs://demo-project-data/a.csv", "--eval-files=other"],
                },
            }
        },
        "jobSpec.workerPoolSpecs.1.pythonPackageSpec.args.1",
        "worker pool 1 runs the trainer with other args than the chief (pool 0)",
    ),
    # Studies
    (
        "metric-not-reportable",
        TUNING,
        {"studySpec.metrics.0.metricId": "f1"},
        "studySpec.metrics.0.metricId",
        "the trainer cannot report 'f1'; allowed: accuracy",
    ),
    (
        "metric-not-the-reported-one",
        TUNING,
        {"studySpec.metrics.0.metricId": "auc"},
        "studySpec.metrics.0.metricId",
        "trials report 'accuracy' (the default --hypertune-metric (accuracy)",
    ),
    (
        "metric-vs-args",
        TUNING,
        {
            f"{TRIAL_POOL}.pythonPackageSpec.args": [
                "--train-files=a",
                "--eval-files=b",
                "--hypertune-metric=loss",
            ]
        },
        "studySpec.metrics.0.metricId",
        "trials report 'loss' (--hypertune-metric loss",
    ),
    (
        "no-goal",
        TUNING,
        {"studySpec.metrics.0.goal": DELETE},
        "studySpec.metrics.0.goal",
        "allowed: MAXIMIZE",
    ),
    (
        "param-not-a-flag",
        TUNING,
        {f"{PARAM}.0.parameterId": "hidden-units"},
        f"{PARAM}.0.parameterId",
        "the trainer has no flag --hidden-units",
    ),
    (
        "param-two-specs",
        TUNING,
        {f"{PARAM}.0.doubleValueSpec": {"minValue": 1, "maxValue": 2}},
        f"{PARAM}.0",
        "sets both integerValueSpec and doubleValueSpec",
    ),
    ("param-no-spec", TUNING, {f"{PARAM}.0.integerValueSpec": DELETE}, f"{PARAM}.0", "has 0 value specs"),
    (
        "param-wrong-type",
        TUNING,
        {f"{PARAM}.2": {"parameterId": "num-layers", "doubleValueSpec": {"minValue": 1.5, "maxValue": 3.5}}},
        f"{PARAM}.2.doubleValueSpec",
        "trials would run the trainer with --num-layers=1.5, which it rejects",
    ),
    (
        # Vertex AI passes DISCRETE values as doubles: 1 arrives as --num-layers=1.0, rejected by an int flag.
        "discrete-on-int-flag",
        TUNING,
        {f"{PARAM}.2": {"parameterId": "num-layers", "discreteValueSpec": {"values": [1, 2, 3]}}},
        f"{PARAM}.2.discreteValueSpec",
        "--num-layers=1.0, which it rejects",
    ),
    (
        "categorical-not-a-number",
        TUNING,
        {f"{PARAM}.2": {"parameterId": "num-layers", "categoricalValueSpec": {"values": ["2", "many"]}}},
        f"{PARAM}.2.categoricalValueSpec",
        "--num-layers=many, which it rejects",
    ),
    (
        "conditional-child-not-a-flag",
        TUNING,
        {f"{PARAM}.2": _conditional("hidden-units", 1, 4)},
        f"{PARAM}.2.conditionalParameterSpecs.0.parameterSpec.parameterId",
        "the trainer has no flag --hidden-units",
    ),
    (
        "conditional-child-range",
        TUNING,
        {f"{PARAM}.2": _conditional("num-layers", 4, 1)},
        f"{PARAM}.2.conditionalParameterSpecs.0.parameterSpec.integerValueSpec.minValue",
        "minValue 4 >= maxValue 1",
    ),
    # Each model owns its flags, metrics and goals (the rows run with the test-only model "tiny" registered).
    (
        "param-of-another-model",
        TUNING,
        {f"{PARAM}.0.parameterId": "tiny-units"},
        f"{PARAM}.0.parameterId",
        "the trainer has no flag --tiny-units for --model wide_deep (a flag of --model tiny)",
    ),
    (
        "param-of-the-default-model-with-model-arg",
        TUNING,
        {f"{TRIAL_POOL}.pythonPackageSpec.args": ["--model=tiny", "--train-files=a", "--eval-files=b"]},
        f"{PARAM}.0.parameterId",
        "the trainer has no flag --first-layer-size for --model tiny (a flag of --model wide_deep)",
    ),
    (
        "conditional-child-of-another-model",
        TUNING,
        {PARAM: [_conditional("num-layers", 1, 4, model="tiny")]},
        f"{PARAM}.0.conditionalParameterSpecs.0.parameterSpec.parameterId",
        "the trainer has no flag --num-layers for --model tiny (a flag of --model wide_deep)",
    ),
    (
        "metric-of-another-model",
        TUNING,
        {"studySpec.metrics.0": {"metricId": "mae", "goal": "MINIMIZE"}},
        "studySpec.metrics.0.metricId",
        "the trainer cannot report 'mae' for --model wide_deep (--model tiny can); allowed: "
        "accuracy",
    ),
    (
        "goal-opposite",
        TUNING,
        {"studySpec.metrics.0.goal": "MINIMIZE"},
        "studySpec.metrics.0.goal",
        "MINIMIZE 'accuracy', which is better higher: the study would look for the worst trials; "
        "allowed: goal: MAXIMIZE",
    ),
    (
        "maximize-loss",
        TUNING,
        {
            "studySpec.metrics.0": {"metricId": "train_loss", "goal": "MAXIMIZE"},
            f"{TRIAL_POOL}.pythonPackageSpec.args": [
                "--train-files=a",
                "--eval-files=b",
                "--hypertune-metric=train_loss",
            ],
        },
        "studySpec.metrics.0.goal",
        "MAXIMIZE 'train_loss', which is better lower",
    ),
    (
        "tuned-range-the-trainer-refuses",
        TUNING,
        {f"{PARAM}.2": {"parameterId": "scale-factor", "doubleValueSpec": {"minValue": -1, "maxValue": 0.5}}},
        f"{PARAM}.2.doubleValueSpec",
        "--scale-factor=-1.0, which it rejects (argument --scale-factor: must be in (0, 1], got -1.0)",
    ),
    (
        "arg-out-of-range",
        TUNING,
        {f"{TRIAL_POOL}.pythonPackageSpec.args": ["--train-files=a", "--eval-files=b", "--num-layers=0"]},
        f"{TRIAL_POOL}.pythonPackageSpec.args",
        "--num-layers: must be a positive integer, got 0",
    ),
    (
        "worker-on-another-image",
        CUSTOM,
        {
            "jobSpec.workerPoolSpecs.1": {
                "machineSpec": {"machineType": "n1-standard-4"},
                "replicaCount": 2,
                "pythonPackageSpec": {
                    "executorImageUri": PREBUILT_CPU.replace("2-17", "2-18"),
                    "pythonModule": "trainer.task",
                    "args": [
                        "--train-files=${infra.data_bucket}/a.csv",
                        "--eval-files=${infra.data_bucket}/b.csv",
                    ],
                },
            }
        },
        "jobSpec.workerPoolSpecs.1.pythonPackageSpec.executorImageUri",
        "worker pool 1 runs another program than the chief",
    ),
    # Capacity (jobs/definition/validate_scheduling.py)
    (
        "unknown-strategy",
        CUSTOM,
        {f"{SCHEDULING}.strategy": "CHEAP"},
        f"{SCHEDULING}.strategy",
        "invalid value 'CHEAP' for Strategy",
    ),
    (
        "deprecated-strategy",
        CUSTOM,
        {f"{SCHEDULING}.strategy": "LOW_COST"},
        f"{SCHEDULING}.strategy",
        "LOW_COST is deprecated; allowed: SPOT; STANDARD, SPOT, FLEX_START (STANDARD when left out)",
    ),
    (
        "spot-on-a-tpu-pod",
        CUSTOM,
        {**_on(TPU_V3, "tpu", workers=1), **SPOT, f"{SCHEDULING}.restartJobOnWorkerRestart": True},
        f"{SCHEDULING}.strategy",
        "SPOT is not available on TPU pods (this job has 2 TPU VMs); allowed: STANDARD, or SPOT with a",
    ),
    (
        "spot-workers-without-restart",
        CUSTOM,
        {**_on({"machineType": "n1-standard-4"}, "cpu", workers=2), **SPOT},
        f"{SCHEDULING}.restartJobOnWorkerRestart",
        "a SPOT job of 3 replicas restarts a preempted replica alone",
    ),
    (
        "restart-disabled-by-disable-retries",
        CUSTOM,
        {f"{SCHEDULING}.restartJobOnWorkerRestart": True, f"{SCHEDULING}.disableRetries": True},
        f"{SCHEDULING}.disableRetries",
        "true overrides restartJobOnWorkerRestart: true to false",
    ),
    (
        "flex-start-without-max-wait",
        CUSTOM,
        {**_on(L4, "gpu"), f"{SCHEDULING}.strategy": "FLEX_START"},
        f"{SCHEDULING}.maxWaitDuration",
        "missing: FLEX_START queues for its GPUs for at most this long; allowed: a duration such as 7200s",
    ),
    (
        "flex-start-negative-wait",
        CUSTOM,
        {**_on(L4, "gpu"), **FLEX, f"{SCHEDULING}.maxWaitDuration": "-60s"},
        f"{SCHEDULING}.maxWaitDuration",
        "'-60s' is not a duration of 0s or more",
    ),
    (
        "flex-start-wait-not-a-duration",
        CUSTOM,
        {**_on(L4, "gpu"), **FLEX, f"{SCHEDULING}.maxWaitDuration": "2h"},
        f"{SCHEDULING}.maxWaitDuration",
        "not a duration: '2h'",
    ),
    (
        "flex-start-on-a-t4",
        CUSTOM,
        {**_on({"machineType": "n1-standard-8", "acceleratorType": "NVIDIA_TESLA_T4", "acceleratorCount": 1},
               "gpu"), **FLEX},
        f"{MACHINE}.acceleratorType",
        "FLEX_START does not provision NVIDIA_TESLA_T4; allowed: NVIDIA_L4, NVIDIA_TESLA_A100",
    ),
    (
        "flex-start-on-cpu",
        CUSTOM,
        FLEX,
        f"{MACHINE}.acceleratorType",
        "FLEX_START does not provision a machine without GPUs",
    ),
    (
        "flex-start-mixed-machines",
        CUSTOM,
        {**_on(L4, "gpu", workers=1), **FLEX,
         "jobSpec.workerPoolSpecs.1.machineSpec": {**L4, "machineType": "g2-standard-12"}},
        "jobSpec.workerPoolSpecs.1.machineSpec",
        "FLEX_START needs the same machine in every worker pool",
    ),
    (
        "flex-start-over-7-days",
        CUSTOM,
        {**_on(L4, "gpu"), **FLEX, f"{SCHEDULING}.timeout": "700000s"},
        f"{SCHEDULING}.timeout",
        "'700000s' is longer than FLEX_START runs a job; allowed: at most 604800s (7 days)",
    ),
    (
        "flex-start-trials",
        TUNING,
        {"trialJobSpec.scheduling": {"strategy": "FLEX_START"}},
        "trialJobSpec.scheduling.maxWaitDuration",
        "missing: FLEX_START",
    ),
]


@pytest.mark.parametrize(
    "base, mutations, path, words", [v[1:] for v in INVALID], ids=[v[0] for v in INVALID]
)
def test_invalid_definitions_name_the_field(base, mutations, path, words, tiny_task):
    with pytest.raises(JobError) as caught:
        check(base, mutations)
    error = caught.value
    assert error.file == "job.yaml"
    assert error.path == path, str(error)
    assert words in re.sub(r" \(line \d+\)", "", str(error)), str(error)
    assert "\n" not in str(error)


def test_errors_carry_the_source_line():
    with pytest.raises(JobError) as caught:
        check(CUSTOM, {f"{MACHINE}.machineType": "n1-standard-3"})
    assert "(line 6)" in str(caught.value)  # the machineSpec line of the pool in CUSTOM


def _field_paths(node, prefix=""):
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        path = f"{prefix}.{key}" if prefix else str(key)
        yield path
        yield from _field_paths(value, path)


# Every (field, value) the fuzz below finds accepted, reviewed: each is a valid definition (an optional field
# removed, any string where Vertex takes any string). A bad value that validation starts to let through shows
# up here as a new entry and fails the test. Regenerate after an intended change and review the diff:
# UPDATE_GOLDEN=1 pytest tests/jobs/test_validate.py
FUZZ_GOLDEN = Path(__file__).parent / "golden" / "fuzz_accepted.json"
FUZZED = ["census_tuning", "census_tuning_grid", "census_multiworker", "census_tpu"]


def _fuzz(name: str) -> list[list]:
    """Break each field of a shipped definition in turn: every outcome must be one JobError line or an
    acceptance; the acceptances are returned as [path, value]."""
    from jobs.definition.loader import load_file
    from tests.jobs.helpers import JOBS_DIR

    text = (JOBS_DIR / f"{name}.yaml").read_text()
    data = load_file(JOBS_DIR / f"{name}.yaml").data
    accepted = []
    for path in _field_paths(data):
        for value in (DELETE, None, -1, [], "x"):
            try:
                set_path(copy.deepcopy(data), path, value)
            except (IndexError, KeyError, TypeError):
                continue  # not applicable here (e.g. DELETE inside a list)
            try:
                check(text, {path: value})
            except JobError as exc:
                assert "\n" not in str(exc)
                continue
            accepted.append([path, "<deleted>" if value is DELETE else value])
    return accepted


def test_any_single_broken_field_is_a_job_error_or_a_reviewed_valid_change():
    found = {name: _fuzz(name) for name in FUZZED}
    if os.environ.get("UPDATE_GOLDEN") == "1":
        FUZZ_GOLDEN.write_text(json.dumps(found, indent=1) + "\n", encoding="utf-8")
    expected = json.loads(FUZZ_GOLDEN.read_text(encoding="utf-8"))
    for name in FUZZED:
        silently_accepted = [entry for entry in found[name] if entry not in expected[name]]
        assert not silently_accepted, f"{name}: accepted without a JobError: {silently_accepted}"
        assert found[name] == expected[name], f"{name}: the golden lists changes no longer accepted"
