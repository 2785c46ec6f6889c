"""Legacy AI Platform Training's vocabulary -> Vertex AI, as data: machines, tiers, accelerators, runtimes.

Sources: the AI Platform Training v1 REST reference (TrainingInput, ReplicaConfig, HyperparameterSpec,
ParameterSpec) and its "Specifying machine types or scale tiers" guide; the Vertex AI AcceleratorType enum,
which marks NVIDIA_TESLA_K80 "reached end of support" (Compute Engine's K80 end-of-life notice points to T4
and L4); the Vertex AI custom-training machine list, which is what ``jobs.definition.machines`` encodes.
"""

from __future__ import annotations

from dataclasses import dataclass

# Vertex AI's words are jobs.definition's; this table only maps legacy ones onto them.
from jobs.definition import machines
from jobs.definition.body import VALUE_SPECS
from jobs.definition.study import LINEAR, LOG_SCALES


@dataclass(frozen=True)
class Machine:
    """A Vertex AI machine spec: the type, and the GPUs the legacy name came with (if any)."""

    machine_type: str
    accelerator: str = ""
    count: int = 0
    why: str = ""  # set when the Vertex machine is not the legacy one's exact equivalent


# Legacy CPU names, by the vCPU/memory shape AI Platform gave them. n1-highcpu-8 (complex_model_s) is not a
# Vertex AI training type: the nearest offered one with at least its CPUs is n1-highcpu-16.
_SMALL = (
    "complex_model_s was an n1-highcpu-8, not a Vertex AI training machine; n1-highcpu-16 is the smallest"
)
LEGACY_CPU: dict[str, Machine] = {
    "standard": Machine("n1-standard-4"),
    "large_model": Machine("n1-highmem-8"),
    "complex_model_s": Machine("n1-highcpu-16", why=_SMALL),
    "complex_model_m": Machine("n1-highcpu-16"),
    "complex_model_l": Machine("n1-highcpu-32"),
}

# "<cpu name>_<gpu>": the CPU machine of the same name plus its GPUs (the v1 reference: "a machine equivalent
# to complex_model_m that also includes four GPUs").
LEGACY_GPU: dict[str, tuple[str, str, int]] = {
    "standard_gpu": ("standard", "NVIDIA_TESLA_K80", 1),
    "complex_model_m_gpu": ("complex_model_m", "NVIDIA_TESLA_K80", 4),
    "complex_model_l_gpu": ("complex_model_l", "NVIDIA_TESLA_K80", 8),
    "standard_p100": ("standard", "NVIDIA_TESLA_P100", 1),
    "complex_model_m_p100": ("complex_model_m", "NVIDIA_TESLA_P100", 4),
    "standard_v100": ("standard", "NVIDIA_TESLA_V100", 1),
    "large_model_v100": ("large_model", "NVIDIA_TESLA_V100", 1),
    "complex_model_m_v100": ("complex_model_m", "NVIDIA_TESLA_V100", 4),
    "complex_model_l_v100": ("complex_model_l", "NVIDIA_TESLA_V100", 8),
}

# A legacy `cloud_tpu` worker was a TPU v2-8 (or v3-8 with acceleratorConfig) beside a master VM; Vertex AI
# runs TPU training on a TPU VM: one pool of machine type cloud-tpu with 8 cores.
CLOUD_TPU = "cloud_tpu"
TPU_MACHINE = machines.CLOUD_TPU.name
(TPU_CORES,) = machines.CLOUD_TPU.counts
TPU_TYPES = machines.CLOUD_TPU.accelerators

# Retired accelerators -> (successor, the most an N1 VM takes of it, why).
RETIRED_GPUS: dict[str, tuple[str, int, str]] = {
    "NVIDIA_TESLA_K80": (
        "NVIDIA_TESLA_T4",
        4,
        "K80 reached end of support (Vertex AI AcceleratorType); T4 is its documented successor on N1 VMs",
    ),
}
LEGACY_ACCELERATORS = (
    "NVIDIA_TESLA_K80",
    "NVIDIA_TESLA_P4",
    "NVIDIA_TESLA_P100",
    "NVIDIA_TESLA_T4",
    "NVIDIA_TESLA_V100",
    "NVIDIA_TESLA_A100",
    *TPU_TYPES,
)


@dataclass(frozen=True)
class Tier:
    """A predefined scale tier: the legacy machine names and replica counts it stood for."""

    master: str
    workers: int = 0
    worker: str = ""
    parameter_servers: int = 0
    parameter_server: str = ""
    tpu: bool = False


SCALE_TIERS: dict[str, Tier] = {
    "BASIC": Tier("standard"),
    "BASIC_GPU": Tier("standard_gpu"),
    "BASIC_TPU": Tier("standard", tpu=True),
    "STANDARD_1": Tier("complex_model_s", 4, "complex_model_s", 3, "standard"),
    "PREMIUM_1": Tier("complex_model_l", 19, "complex_model_l", 11, "large_model"),
}
CUSTOM = "CUSTOM"
ALL_TIERS = (*SCALE_TIERS, CUSTOM)

# Legacy runtime versions: 1.0-1.15 ran TensorFlow 1.x (graph mode, tf.estimator, tf.contrib), 2.1-2.11 TF 2.
TF1_RUNTIME_MAJOR = 1

# TrainingInput, ReplicaConfig, HyperparameterSpec, ParameterSpec and Job fields (AI Platform v1 REST).
TRAINING_INPUT_FIELDS = (
    "scaleTier",
    "masterType",
    "masterConfig",
    "workerType",
    "workerConfig",
    "parameterServerType",
    "parameterServerConfig",
    "evaluatorType",
    "evaluatorConfig",
    "workerCount",
    "parameterServerCount",
    "evaluatorCount",
    "packageUris",
    "pythonModule",
    "args",
    "hyperparameters",
    "region",
    "jobDir",
    "runtimeVersion",
    "pythonVersion",
    "encryptionConfig",
    "scheduling",
    "network",
    "serviceAccount",
    "useChiefInTfConfig",
    "enableWebAccess",
)
REPLICA_CONFIG_FIELDS = (
    "acceleratorConfig",
    "imageUri",
    "tpuTfVersion",
    "containerCommand",
    "containerArgs",
    "diskConfig",
)
HYPERPARAMETER_FIELDS = (
    "goal",
    "params",
    "maxTrials",
    "maxParallelTrials",
    "maxFailedTrials",
    "hyperparameterMetricTag",
    "resumePreviousJobId",
    "enableTrialEarlyStopping",
    "algorithm",
)
PARAMETER_FIELDS = (
    "parameterName",
    "type",
    "minValue",
    "maxValue",
    "categoricalValues",
    "discreteValues",
    "scaleType",
)
# A projects.jobs resource as `gcloud ai-platform jobs describe --format=json` prints it: the output-only
# fields are read past; a prediction job is not a training job.
JOB_FIELDS = ("jobId", "trainingInput", "labels", "etag")
JOB_OUTPUT_FIELDS = (
    "createTime",
    "startTime",
    "endTime",
    "state",
    "errorMessage",
    "trainingOutput",
    "jobPosition",
)
# Legacy's parameter types are the StudySpec's (VALUE_SPECS), listed as legacy's reference lists them,
# INTEGER first (and so these messages do); its scale types are the StudySpec's after NONE (no scale).
PARAMETER_TYPES = ("INTEGER", *(kind for kind in VALUE_SPECS if kind != "INTEGER"))
SCALE_TYPES = ("NONE", LINEAR, *LOG_SCALES)
# Legacy's default metric tag when hyperparameterMetricTag was unset.
LEGACY_DEFAULT_METRIC = "training/hptuning/metric"
# Keras' names for a metric, as legacy trainers reported them: the TensorBoard callback's `epoch_` tags
# (written for the training and the validation data alike), History's `val_` keys, and TF < 2.2's `acc`.
KERAS_TAG_PREFIXES = ("epoch_", "val_")
KERAS_METRIC_NAMES = {"acc": "accuracy"}
# The Google samples' trainers' flags -> this trainer's flag for the same thing (used only where the model has
# the latter and not the former): tf-keras census and the structured samples tuned --batch-size.
FLAG_ALIASES = {"batch-size": "train-batch-size", "epochs": "num-epochs"}
