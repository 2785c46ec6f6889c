"""Vertex AI's runtime contract: output directories, the cluster, the chief, the trial, the strategy.

Vertex AI tells a training container where to write through environment variables
(``AIP_MODEL_DIR``, ``AIP_CHECKPOINT_DIR``, ``AIP_TENSORBOARD_LOG_DIR``), describes a multi-replica job in
``CLUSTER_SPEC`` (worker pools ``workerpool0..3``) and, for TensorFlow, also in ``TF_CONFIG`` (``chief``,
``worker``, ``ps``, ``evaluator``), and numbers tuning trials in ``CLOUD_ML_TRIAL_ID``. Everything here except
:func:`make_strategy` is pure and takes the environment as a mapping, so it is table-testable.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from trainer.config import ConfigError
from trainer.contract import (
    CLUSTER_SPEC,
    CPU_FALLBACK_ENV,
    CPU_REPLICAS_ENV,
    MAX_CPU_REPLICAS,
    MODEL_DIR,
    OUTPUT_DIRS,
    TF_CONFIG,
    TRAINER_MODULE,
    TRIAL_ID,
    WORKER_POOL_ROLES,
)


@dataclass(frozen=True)
class OutputDirs:
    model: str
    checkpoints: str
    logs: str


@dataclass(frozen=True)
class Cluster:
    """The replica this process is, within the job's cluster (TF_CONFIG vocabulary)."""

    task_type: str = "chief"
    task_index: int = 0
    spec: dict[str, list[str]] = field(default_factory=dict)  # task type -> addresses; empty: one process
    source: str = ""  # TF_CONFIG, CLUSTER_SPEC (the variable it came from) or "" (single process)

    @property
    def num_workers(self) -> int:
        """Replicas that train (chief + workers); parameter servers and evaluators do not."""
        return len(self.spec.get("chief", [])) + len(self.spec.get("worker", [])) or 1

    @property
    def is_multi_worker(self) -> bool:
        return self.num_workers > 1

    @property
    def is_chief(self) -> bool:
        """The chief writes the model; without a chief task, worker 0 plays the chief (TF convention)."""
        if self.task_type in ("chief", "master"):
            return True
        return self.task_type == "worker" and self.task_index == 0 and "chief" not in self.spec

    @property
    def name(self) -> str:
        return f"{self.task_type}_{self.task_index}"

    def tf_config(self) -> str:
        return json.dumps({"cluster": self.spec, "task": {"type": self.task_type, "index": self.task_index}})


def output_dirs(job_dir: str | None, environ: Mapping[str, str] = os.environ) -> OutputDirs:
    """AIP_* directories when Vertex AI sets them, else ``<job-dir>/model|checkpoints|logs``."""
    values = {}
    for key, env in OUTPUT_DIRS.items():
        value = environ.get(env, "").strip()
        if not value:
            if not job_dir:
                raise ConfigError(f"{TRAINER_MODULE}: error: argument --job-dir: required unless {env} is "
                                  "set")
            value = job_dir.rstrip("/") + "/" + key
        values[key] = value.rstrip("/") or value
    return OutputDirs(**values)


def _parse_json(environ: Mapping[str, str], name: str) -> dict | None:
    text = environ.get(name, "").strip()
    if not text:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"environment variable {name}: not valid JSON ({exc.msg})") from None
    if not isinstance(value, dict):
        raise ConfigError(f"environment variable {name}: must be a JSON object")
    return value


def _task(raw: dict, name: str, roles: Mapping[str, str] | None = None) -> tuple[str, int]:
    task = raw.get("task") or {}
    task_type = str(task.get("type", ""))
    if roles is not None:
        if task_type not in roles:
            raise ConfigError(f"environment variable {name}: task.type must be one of {', '.join(roles)}, "
                              f"got {task_type!r}")
        task_type = roles[task_type]
    try:
        index = int(task.get("index", 0))
    except (TypeError, ValueError):
        raise ConfigError(f"environment variable {name}: task.index must be an integer") from None
    return task_type, index


def cluster_from_env(environ: Mapping[str, str] = os.environ) -> Cluster:
    """Read TF_CONFIG (preferred: TensorFlow's own vocabulary) or else Vertex AI's CLUSTER_SPEC."""
    raw = _parse_json(environ, TF_CONFIG)
    if raw and raw.get("cluster"):
        spec = {k: list(v) for k, v in raw["cluster"].items() if v}
        task_type, index = _task(raw, TF_CONFIG)
        if task_type not in spec or index >= len(spec[task_type]):
            raise ConfigError(f"environment variable {TF_CONFIG}: task {task_type}:{index} "
                              "is not in the cluster")
        return Cluster(task_type, index, spec, TF_CONFIG)
    raw = _parse_json(environ, CLUSTER_SPEC)
    if raw and raw.get("cluster"):
        pools = raw["cluster"]
        unknown = sorted(set(pools) - set(WORKER_POOL_ROLES))
        if unknown:
            raise ConfigError(f"environment variable {CLUSTER_SPEC}: unknown worker pools {unknown}; "
                              f"allowed: {', '.join(WORKER_POOL_ROLES)}")
        spec = {WORKER_POOL_ROLES[p]: list(v) for p, v in pools.items() if v}
        task_type, index = _task(raw, CLUSTER_SPEC, WORKER_POOL_ROLES)
        return Cluster(task_type, index, spec, CLUSTER_SPEC)
    return Cluster()


def trial_id(environ: Mapping[str, str] = os.environ) -> str | None:
    """The tuning trial this run is (Vertex AI sets CLOUD_ML_TRIAL_ID), or None outside a study."""
    return environ.get(TRIAL_ID) or None


# The folder of cached pre-training results. On Cloud Storage it is one top-level prefix of the bucket
# (infra's models bucket expires it by that prefix: infra/constructs/buckets.py), elsewhere one beside the
# model's.
DATA_SCANS = "data-scans"


def data_cache_dir(dirs: OutputDirs, environ: Mapping[str, str] = os.environ) -> str:
    """Where the trainer caches what it learnt from its input (trainer.result_cache: e.g. trainer.csv_scan's
    scans) for the job's other trials and for a restart, keyed by ``<base>``, the job's baseOutputDirectory
    (Vertex AI writes a trial's outputs to ``<base>/<trial id>/model``) or the ``--job-dir``: on Cloud Storage
    ``gs://BUCKET/data-scans/<path>`` for ``<base>`` ``gs://BUCKET/<path>`` (a lifecycle rule deletes it there
    after some days: a deleted entry is only computed again), elsewhere ``<base>/data-scans``."""
    base = dirs.model.rstrip("/").rsplit("/", 1)[0]
    if trial_id(environ) and environ.get(MODEL_DIR, "").strip():
        base = base.rsplit("/", 1)[0]
    scheme, sep, rest = base.partition("://")
    if sep and "/" in rest:
        bucket, path = rest.split("/", 1)
        return f"{scheme}://{bucket}/{DATA_SCANS}/{path}"
    return f"{base}/{DATA_SCANS}"


def _has_tpu(environ: Mapping[str, str]) -> bool:
    # Cloud TPU VMs expose /dev/accel* or /dev/vfio and set TPU_* variables; avoid probing otherwise,
    # since TPUClusterResolver blocks on a metadata lookup where there is none.
    return any(k in environ for k in ("TPU_NAME", "TPU_ACCELERATOR_TYPE", "TPU_WORKER_ID")) or os.path.exists(
        "/dev/accel0")


def cpu_replicas(environ: Mapping[str, str] = os.environ) -> int:
    """How many logical CPU devices MirroredStrategy mirrors over where there is no GPU (1: no split)."""
    raw = environ.get(CPU_REPLICAS_ENV, "").strip()
    if not raw:
        return 1
    if not re.fullmatch(r"[0-9]{1,3}", raw) or not 1 <= int(raw) <= MAX_CPU_REPLICAS:
        raise ConfigError(
            f"{CPU_REPLICAS_ENV}={raw[:40]!r}: expected a whole number from 1 to {MAX_CPU_REPLICAS}")
    return int(raw)


def choose_distribution(requested: str, cluster: Cluster, num_gpus: int,
                        environ: Mapping[str, str] = os.environ) -> str:
    """The strategy kind to use: "multi_worker", "tpu", "mirrored" or "default" (pure; see make_strategy)."""
    # With no GPU, TRAINER_CPU_REPLICAS logical CPUs stand in for the job's GPUs (see trainer.contract).
    devices = num_gpus or cpu_replicas(environ)
    if requested in ("tpu", "mirrored") and environ.get(CPU_FALLBACK_ENV) == "1":
        return "mirrored" if requested == "mirrored" and devices > 1 else "default"
    if requested != "auto":
        return requested
    if cluster.is_multi_worker:
        return "multi_worker"
    if _has_tpu(environ):
        return "tpu"
    if devices > 1:
        return "mirrored"
    return "default"


def make_strategy(requested: str, cluster: Cluster, environ: Mapping[str, str] = os.environ):
    """Create the tf.distribute strategy; must run before any other TensorFlow work in the process."""
    import tensorflow as tf

    if cluster.source == CLUSTER_SPEC and TF_CONFIG not in os.environ:
        # MultiWorkerMirroredStrategy reads TF_CONFIG; derive it from Vertex AI's CLUSTER_SPEC.
        os.environ[TF_CONFIG] = cluster.tf_config()
    num_gpus = len(tf.config.list_physical_devices("GPU"))
    kind = choose_distribution(requested, cluster, num_gpus, environ)
    if kind != requested and requested != "auto":
        logging.getLogger("trainer").warning(
            "--distribution %s: %s=1 (this machine lacks the accelerators), training with the %s strategy",
            requested, CPU_FALLBACK_ENV, kind)
    if kind == "multi_worker":
        return tf.distribute.MultiWorkerMirroredStrategy(), kind
    if kind == "tpu":
        # Vertex AI runs TPU jobs on TPU VMs, where the TPU is attached to this host.
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="local")
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver), kind
    if kind == "mirrored":
        replicas = cpu_replicas(environ)
        if num_gpus or replicas == 1:
            return tf.distribute.MirroredStrategy(), kind
        # Logical devices can only be configured before TensorFlow initialises its runtime, as here.
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)
        logging.getLogger("trainer").info("%s=%d: mirroring over %d logical CPU devices",
                                          CPU_REPLICAS_ENV, replicas, replicas)
        return tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(replicas)]), kind
    return tf.distribute.get_strategy(), kind
