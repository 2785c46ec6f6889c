"""Vertex AI's runtime contract with this trainer, written once: the names both sides must agree on.

The trainer reads these variables (``trainer.env``, ``trainer.config``); the job tooling sets them when it
runs a job on this machine (``jobs.local``) and checks definitions against them (``jobs.definition.validate``,
``jobs.definition.trainer_spec``). ``trainer/`` never imports ``jobs/``, so the names live here, on the
trainer's side, as plain data: this module imports nothing, TensorFlow least of all.

Reference: https://cloud.google.com/vertex-ai/docs/training/code-requirements and the distributed-training
page (CLUSTER_SPEC, TF_CONFIG).
"""

from __future__ import annotations

# The module a job runs (`python -m trainer.task`): the prebuilt images' pythonModule, the trainer image's
# entrypoint, and the parser's program name.
TRAINER_MODULE = "trainer.task"
# The flag naming the metric a tuning trial reports (a StudySpec metricId must match it).
METRIC_FLAG = "--hypertune-metric"

# Where to write, set per replica from the job's baseOutputDirectory (<base>/<trial id>/... for a trial).
MODEL_DIR = "AIP_MODEL_DIR"
CHECKPOINT_DIR = "AIP_CHECKPOINT_DIR"
TENSORBOARD_LOG_DIR = "AIP_TENSORBOARD_LOG_DIR"
# Output folder (as under --job-dir when Vertex AI sets none) -> the variable that overrides it.
OUTPUT_DIRS: dict[str, str] = {"model": MODEL_DIR, "checkpoints": CHECKPOINT_DIR, "logs": TENSORBOARD_LOG_DIR}

# Written by the chief into the model directory beside the SavedModel: the eval metrics, history and phases
# (trainer.train), read back by `run_job.py report` for a CustomJob.
METRICS_FILE = "metrics.json"

# Written by the chief beside the SavedModel: the trainer's resolved flags (TrainerConfig.to_json), which
# `run_job.py` records as a run's parameters in Vertex AI Experiments (jobs.definition.experiments).
CONFIG_FILE = "trainer_config.json"
# Keras's BackupAndRestore record in a replica's backup folder (AIP_CHECKPOINT_DIR; a multi-worker replica's
# <AIP_CHECKPOINT_DIR>/<its name>): {"epoch": <epochs completed>, ...}, gone once training completes. The
# trainer resumes from it; `run_job.py --local --preempt-after` reads it to say what a preemption cost.
BACKUP_METADATA = "training_metadata.json"
# The trainer's log line at the end of each epoch ("epoch 3/8 accuracy=0.8512 ... (1.2 s)").
EPOCH_LINE = r"epoch (\d+)/(\d+) "
# The trainer's progress as machine-readable log lines, which the chief writes beside its human ones
# (trainer.progress): the message is PROGRESS_TAG and one JSON object on one line, {"event": <a key of
# PROGRESS_EVENTS>, <that event's fields>}. jobs/console.py renders them: `run_job.py --local` from the
# chief's log, a followed Vertex AI job from its Cloud Logging stream.
PROGRESS_TAG = "trainer-progress "
PROGRESS_EVENTS: dict[str, tuple[str, ...]] = {
    "start": ("model", "epochs"),  # the trainer has imported TensorFlow and starts on the data
    "stage": ("what", "detail", "seconds"),  # a step before training done (seconds null: a slow one starts)
    "note": ("text",),  # one line the user should read (e.g. a backbone trained from random weights)
    "epoch": ("epoch", "epochs", "seconds", "train", "val"),  # {metric: value} on the training / eval data
    "result": ("model_dir", "eval", "baselines"),  # final eval {metric: value}, baselines {name: {metric: v}}
}
# A log line longer than this is not read as progress (a console never parses an unbounded line).
PROGRESS_MAX_CHARS = 16 * 1024

# The cluster of a multi-replica job: Vertex AI's own description (worker pools) and TensorFlow's (roles).
CLUSTER_SPEC = "CLUSTER_SPEC"
TF_CONFIG = "TF_CONFIG"
# Tuning trials: the trial's number, and the file cloudml-hypertune appends the reported metric to.
TRIAL_ID = "CLOUD_ML_TRIAL_ID"
HP_METRIC_FILE = "CLOUD_ML_HP_METRIC_FILE"
JOB_ID = "CLOUD_ML_JOB_ID"
# Written by the chief beside the SavedModel in AIP_MODEL_DIR: {"eval": {<metric>: <value>, ...}, ...}. The
# Model Registry's evaluation gate (jobs.definition.model_registry) compares versions by its eval metrics.
METRICS_FILE = "metrics.json"

# workerPoolSpecs positions, as CLUSTER_SPEC names them, and the TF_CONFIG task type each one plays.
TF_TASK_TYPES: tuple[str, ...] = ("chief", "worker", "ps", "evaluator")
WORKER_POOLS: tuple[str, ...] = tuple(f"workerpool{i}" for i in range(len(TF_TASK_TYPES)))
WORKER_POOL_ROLES: dict[str, str] = dict(zip(WORKER_POOLS, TF_TASK_TYPES, strict=True))

# Set to "1" by `run_job.py --local` when this machine lacks the accelerators the job asks for: an explicit
# --distribution tpu or mirrored then trains with the default (CPU) strategy instead of failing (mirrored
# trains over logical CPUs where TRAINER_CPU_REPLICAS asks for several). Vertex AI never sets it, so there a
# TPU job without a TPU still fails at once instead of training on the host's CPU.
CPU_FALLBACK_ENV = "TRAINER_CPU_FALLBACK"
# Set to N by `run_job.py --local` for a pool of N > 1 GPUs on a machine without GPUs: the trainer splits the
# host CPU into N logical devices and MirroredStrategy mirrors over them, so the rehearsal runs the job's
# per-replica batches and gradient all-reduce instead of one replica. Ignored where GPUs are visible.
CPU_REPLICAS_ENV = "TRAINER_CPU_REPLICAS"
MAX_CPU_REPLICAS = 16  # the most GPUs one Vertex AI machine has (a2-megagpu-16g)

# Every variable above that the runtime sets for one replica (a stale one from a shell must not leak in).
REPLICA_VARIABLES: tuple[str, ...] = (*OUTPUT_DIRS.values(), CLUSTER_SPEC, TF_CONFIG, TRIAL_ID,
                                      HP_METRIC_FILE, CPU_FALLBACK_ENV, CPU_REPLICAS_ENV)

# Serving: the Model Registry entry's container runs `python -m serving` on the trainer's cpu image, and
# Vertex AI tells it where the model is and what to listen on through these variables (custom-container
# requirements for prediction: https://cloud.google.com/vertex-ai/docs/predictions/custom-container-requirements).
# `run_job.py serve MODEL_DIR` sets the same ones on this machine.
SERVE_MODULE = "serving"
HTTP_PORT = "AIP_HTTP_PORT"  # the Model's containerSpec.ports[0].containerPort
HEALTH_ROUTE = "AIP_HEALTH_ROUTE"  # containerSpec.healthRoute: GET, 200 only once the model can predict
PREDICT_ROUTE = "AIP_PREDICT_ROUTE"  # containerSpec.predictRoute: POST {"instances": [...], "parameters"}
STORAGE_URI = "AIP_STORAGE_URI"  # Vertex AI's gs:// copy of the Model's artifactUri (the SavedModel folder)
SERVING_DEFAULTS: dict[str, str] = {HTTP_PORT: "8080", HEALTH_ROUTE: "/health", PREDICT_ROUTE: "/predict"}

# The example request the export writes beside the SavedModel (trainer.export.write_example_request): one
# instance every input of serving_default accepts, the one the server warms up with (serving.model), which
# `run_job.py deploy` sends through the endpoint as its smoke prediction.
EXAMPLE_FILE = "example_request.json"
# Inputs and outputs that are raw bytes whatever their content (TF Serving's and Vertex AI's convention).
BYTES_SUFFIX = "_bytes"
# A valid 1x1 grayscale PNG, base64: the example value of a *_bytes input, so that an image signature runs
# its whole graph (a text input gets "" instead).
TINY_PNG_B64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAAAAAA6fptVAAAACklEQVR4nGNgAAAAAgABSK+kcQAAAABJRU5ErkJggg=="


def signature_inputs(fn) -> tuple[tuple[str, str, tuple[int | None, ...]], ...]:
    """(name, dtype name, shape) of each input of a loaded SavedModel signature, sorted by name; an input of
    unknown rank takes one value per instance. Reads the function's attributes only (no import)."""
    specs = fn.structured_input_signature[1]
    return tuple(
        (key, spec.dtype.name, tuple(spec.shape.as_list()) if spec.shape.rank is not None else (None,))
        for key, spec in sorted(specs.items())
    )


def example_instance(inputs) -> dict:
    """An instance every one of ``inputs`` ((name, dtype, shape), the first dimension the batch) accepts: ""
    for text, a 1x1 PNG for a *_bytes input, 1 for integers (a count such as top_k's k), 0.0, false; a list
    of 1 along dimensions of any length."""
    def leaf(name: str, dtype: str):
        if dtype == "string":
            return {"b64": TINY_PNG_B64} if name.endswith(BYTES_SUFFIX) else ""
        return {"bool": False}.get(dtype, 0.0 if dtype.startswith(("float", "bfloat")) else 1)

    def nest(name: str, dtype: str, shape: tuple, axis: int):
        if axis == len(shape):
            return leaf(name, dtype)
        return [nest(name, dtype, shape, axis + 1)] * (shape[axis] or 1)

    return {name: nest(name, dtype, tuple(shape), 1) for name, dtype, shape in inputs}
