"""The runtime contract a Vertex AI replica sees, rebuilt on this machine.

Per replica Vertex AI sets (https://cloud.google.com/vertex-ai/docs/reference/rest/v1/CustomJobSpec and the
distributed-training page): ``AIP_MODEL_DIR``/``AIP_CHECKPOINT_DIR``/``AIP_TENSORBOARD_LOG_DIR`` under
``baseOutputDirectory`` (``<base>/<trial_id>/...`` for a tuning trial), ``CLUSTER_SPEC`` (pools named
``workerpool0..3``) and ``TF_CONFIG`` (chief/worker/ps/evaluator), ``CLOUD_ML_TRIAL_ID`` and
``CLOUD_ML_HP_METRIC_FILE`` for trials, plus the pool's own ``env``.

Deliberate differences, all because this is one machine:
- ``gs://bucket/path`` anywhere in args, env and output dirs becomes ``<local_root>/gs/bucket/path``. That
  mapping (:func:`to_local`) is the one gate from gs:// to this machine's disk: a URI with an empty bucket or
  a ``.``/``..`` segment, or one whose folder resolves (through symlinks) outside the local root, is refused.
  Every folder and file a run writes (:func:`inside` via :func:`run_paths`) is checked against the root too.
- A CustomJob gets ``CLOUD_ML_HP_METRIC_FILE`` under its own folder (``<base>/hypertune/output.metrics``) as a
  trial does (``<base>/<trial_id>/hypertune/output.metrics``): never cloudml-hypertune's shared default
  ``/tmp/hypertune/output.metrics``.
- ``CLUSTER_SPEC``/``TF_CONFIG`` are set only for multi-replica jobs (hosts are 127.0.0.1 with free ports);
  a single replica gets neither, so the trainer picks its single-machine strategy without binding a port.
- The evaluator (pool 3) is listed in ``CLUSTER_SPEC`` but not in ``TF_CONFIG['cluster']``: TensorFlow's
  multi-worker strategies reject an evaluator inside the cluster.
- ``CLOUD_ML_JOB_ID`` is a local id (``local-<name>``); the AIP_TENSORBOARD_* API variables are not set
  (no TensorBoard service here; the logs are plain files for ``tensorboard --logdir``).
- Thread pools: trials that run side by side would each size TensorFlow's pools to every core and thrash, so
  each replica gets ``TF_NUM_INTRAOP_THREADS``/``TF_NUM_INTEROP_THREADS``/``OMP_NUM_THREADS`` = its share of
  the cores, unless the job's own env sets them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
from pathlib import Path

from common.gcs import GS
from jobs.definition.body import gs_bucket, gs_uris, rebase_gs
from jobs.definition.errors import short
from jobs.definition.machines import is_tpu
from jobs.local.spec import JobSpec, LocalRunError, PoolSpec
from trainer.contract import (
    CLUSTER_SPEC,
    CPU_FALLBACK_ENV,
    CPU_REPLICAS_ENV,
    MAX_CPU_REPLICAS,
    OUTPUT_DIRS,
    REPLICA_VARIABLES,
    TF_CONFIG,
    TF_TASK_TYPES,
    WORKER_POOLS,
)

# Pool 3's TF_CONFIG role: TensorFlow's multi-worker strategies reject an evaluator inside the cluster.
_EVALUATOR = TF_TASK_TYPES[3]


# Where files a run writes live, relative to its folder (a CustomJob's base, or a trial's <base>/<trial_id>).
REPLICA_LOGS = "replica-logs"
METRIC_FILE = ("hypertune", "output.metrics")


def inside(path: Path | str, local_root: Path, field: str) -> Path:
    """``path`` itself, when it resolves (symlinks followed, missing parts as written) under local_root.

    Else a LocalRunError naming ``field``: nothing a local run derives may land outside its root, whether by
    ``..`` or through a symlink inside the root that points elsewhere.
    """
    root = Path(os.path.realpath(local_root))
    real = Path(os.path.realpath(path))
    if real != root and not real.is_relative_to(root):
        shown = f"{path} (resolves to {real})" if str(real) != str(path) else str(path)
        raise LocalRunError(field, f"{shown} is outside the local root {root}; --local writes only under it")
    return Path(path)


def to_local(value: str, local_root: Path, field: str = "gs:// URI") -> str:
    """Map every gs:// URI inside ``value`` (a path, a glob, a comma list, a ``--flag=uri``) to local_root.

    The one place gs:// becomes a local path, so the one place it is checked: each URI needs a bucket, has no
    ``.`` or ``..`` segment (GCS keeps them as literal names; a filesystem would climb out of the bucket's
    folder) and must resolve under local_root. Raises LocalRunError naming ``field`` otherwise.
    """
    gs_root = local_root / "gs"
    for uri, bucket, name in gs_uris(value):
        if bucket in ("", ".", ".."):
            raise LocalRunError(field, f"{short(uri)} has no bucket name; use gs://BUCKET/OBJECT")
        if any(part in (".", "..") for part in name.split("/")):
            raise LocalRunError(
                field, f"{short(uri)} has a '.' or '..' segment, which --local cannot map inside {gs_root}"
            )
        inside(gs_root / bucket / name, local_root, field)
    return rebase_gs(value, str(gs_root))


def local_bucket(uri: str, local_root: Path, field: str = "data_bucket") -> Path:
    """The folder that stands in for the bucket of ``uri`` (gs://bucket/... or a bare bucket name)."""
    return Path(to_local(f"{GS}{gs_bucket(uri)}", local_root, field))


def metric_file(run_folder: Path) -> Path:
    """The cloudml-hypertune file of one run (a CustomJob's base folder or a trial's folder)."""
    return run_folder.joinpath(*METRIC_FILE)


def run_paths(base: Path, trial_id: str | None, has_base: bool) -> list[Path]:
    """Every folder and file a CustomJob (trial_id None) or one trial writes under base, to check."""
    folder = base / trial_id if trial_id else base
    paths = [folder, folder / REPLICA_LOGS, metric_file(folder).parent, metric_file(folder)]
    if has_base:
        paths += [Path(d) for d in output_dirs(base, trial_id).values()]
    return paths


def stage_data(repo_root: Path, local_root: Path, data_bucket: str) -> int:
    """Mirror the shipped ``data/`` tree into the local data bucket: copies missing files, never overwrites.

    Returns the number of files copied.
    """
    source = repo_root / "data"
    if not data_bucket or not source.is_dir():
        return 0
    target = local_bucket(data_bucket, local_root)
    # Every destination is checked before the first copy: a symlink planted under the bucket's folder must
    # not receive a file, nor leave the folder half staged.
    todo = []
    for path in sorted(source.rglob("*")):
        if path.is_file():
            dest = target / path.relative_to(source)
            tmp = dest.with_name(dest.name + ".staging")
            for where in (dest, tmp):
                inside(where, local_root, "data_bucket")
            todo.append((path, dest, tmp))
    copied = 0
    for path, dest, tmp in todo:
        if not dest.exists():
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, tmp)
            os.replace(tmp, dest)  # a half-copied file never looks staged
            copied += 1
    return copied


def local_gpu_count() -> int:
    """NVIDIA GPUs visible to this machine, without importing TensorFlow."""
    gpus = Path("/proc/driver/nvidia/gpus")
    return len(list(gpus.iterdir())) if gpus.is_dir() else 0


def has_local_tpu() -> bool:
    return any(Path("/dev").glob("accel*")) or any(Path("/dev").glob("vfio/[0-9]*"))


def _is_tpu(pool: PoolSpec) -> bool:
    # The machines table decides, as it does for the image variant: no guessing by name.
    return is_tpu(pool.machine_type, pool.accelerator_type)


def missing_accelerators(job: JobSpec) -> list[str]:
    """Human descriptions of requested accelerators this machine lacks, one per worker pool."""
    missing = []
    gpus = local_gpu_count()
    for pool in job.pools:
        where = f"{WORKER_POOLS[pool.index]} ({pool.machine_type or 'unspecified machine'})"
        is_tpu = _is_tpu(pool)
        if is_tpu and not has_local_tpu():
            topo = f" topology {pool.tpu_topology}" if pool.tpu_topology else ""
            what = pool.accelerator_type or "TPU"
            missing.append(f"{what} x{pool.accelerator_count or 1}{topo} for {where}")
        elif pool.accelerator_type and not is_tpu and pool.accelerator_count > gpus:
            count = pool.accelerator_count
            stand_in = f", {min(count, MAX_CPU_REPLICAS)} logical CPU devices stand in" if count > 1 else ""
            missing.append(f"{pool.accelerator_type} x{count} for {where} ({gpus} GPU(s) here{stand_in})")
    return missing


def free_ports(n: int) -> list[int]:
    """n distinct free TCP ports on 127.0.0.1 (held open together so they differ)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def output_dirs(base_local: Path | None, trial_id: str | None) -> dict[str, str]:
    """The AIP_* dirs Vertex AI derives from baseOutputDirectory (with the trailing slash Vertex writes)."""
    if base_local is None:
        return {}
    root = base_local / trial_id if trial_id else base_local
    return {variable: f"{root / folder}/" for folder, variable in OUTPUT_DIRS.items()}


def cluster_envs(
    job: JobSpec, trial_id: str | None, addresses: list[str] | None = None
) -> dict[tuple[int, int], dict[str, str]]:
    """CLUSTER_SPEC and TF_CONFIG for each (pool index, replica index) of a multi-replica job.

    ``addresses``: each replica's host:port in pool order (``--container``: the containers' hostnames on
    their network); free ports of 127.0.0.1 by default."""
    if job.replica_total < 2:
        return {}
    if addresses is None:
        addresses = [f"127.0.0.1:{port}" for port in free_ports(job.replica_total)]
    hosts = iter(addresses)
    cluster = {WORKER_POOLS[p.index]: [next(hosts) for _ in range(p.replica_count)] for p in job.pools}
    tf_cluster = {
        TF_TASK_TYPES[p.index]: cluster[WORKER_POOLS[p.index]]
        for p in job.pools
        if TF_TASK_TYPES[p.index] != _EVALUATOR
    }
    envs = {}
    for pool in job.pools:
        for i in range(pool.replica_count):
            task: dict[str, object] = {"type": WORKER_POOLS[pool.index], "index": i}
            tf_task: dict[str, object] = {"type": TF_TASK_TYPES[pool.index], "index": i}
            if trial_id:
                task["trial"] = tf_task["trial"] = trial_id
            envs[(pool.index, i)] = {
                CLUSTER_SPEC: json.dumps(
                    {"cluster": cluster, "environment": "cloud", "task": task, "job": job.raw}
                ),
                TF_CONFIG: json.dumps(
                    {"cluster": tf_cluster, "environment": "cloud", "task": tf_task, "job": job.raw}
                ),
            }
    return envs


_THREAD_VARS = ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS")


def replica_env(
    pool: PoolSpec,
    *,
    base_env: dict[str, str],
    local_root: Path,
    repo_root: Path,
    dirs: dict[str, str],
    cluster: dict[str, str],
    extra: dict[str, str],
    threads: int,
    cpu_only: bool,
) -> dict[str, str]:
    env = dict(base_env)
    # Stale contract variables from the caller's shell must not leak into a replica.
    for key in REPLICA_VARIABLES:
        env.pop(key, None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(repo_root), base_env.get("PYTHONPATH", "")) if p)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONUNBUFFERED"] = "1"
    if cpu_only:
        env["CUDA_VISIBLE_DEVICES"] = ""
        if pool.accelerator_type or _is_tpu(pool):
            # The pool's accelerators are emulated on CPU: the trainer's explicit --distribution tpu|mirrored
            # falls back to the default strategy instead of failing (mirrored over logical CPUs for several
            # GPUs, below).
            env[CPU_FALLBACK_ENV] = "1"
        if pool.accelerator_type and not _is_tpu(pool) and pool.accelerator_count > 1:
            # As many logical CPU devices as the pool has GPUs: MirroredStrategy then splits each global
            # batch and all-reduces the gradients across replicas here as it will across the GPUs.
            env[CPU_REPLICAS_ENV] = str(min(pool.accelerator_count, MAX_CPU_REPLICAS))
    own = {k: to_local(v, local_root, pool.env_path) for k, v in pool.env}
    for var in _THREAD_VARS:
        if var not in own:
            env[var] = str(threads)
    env.update(dirs)
    env.update(cluster)
    env.update(own)
    # The runner's own variables last: the job id, the trial id and the metric file the runner reads (a pool's
    # env must not send the metric to another file, e.g. the shared /tmp/hypertune default).
    env.update(extra)
    return env


def check_module_root(argv: tuple[str, ...], repo_root: Path, path: str) -> None:
    """Fail early, with the field, when the module to run is not importable from the repo."""
    if len(argv) < 2 or argv[0] != "-m":
        return
    top = argv[1].split(".", 1)[0]
    if not ((repo_root / top).is_dir() or (repo_root / f"{top}.py").is_file()):
        import importlib.util

        if importlib.util.find_spec(top) is None:
            raise LocalRunError(
                path, f"module {short(argv[1])} is not in this repo ({repo_root}) nor installed"
            )


def slug(name: str) -> str:
    """A display name as a folder and study name: letters, digits, _ . - only, at most 100 characters."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-")[:100] or "study"


def local_job_id(name: str) -> str:
    """The job id (CLOUD_ML_JOB_ID) of a local run (Vertex AI sets the job's numeric id)."""
    return f"local-{slug(name)}"
