"""What capacity a job asks for (``scheduling``): Vertex AI's rules for Spot and Dynamic Workload Scheduler,
checked before submission, where Vertex AI would refuse the job after it was created (or run it on terms the
file did not mean).

- ``strategy``: STANDARD (the default), SPOT (preemptible capacity at a discount: a preempted replica is
  restarted and the trainer resumes from its BackupAndRestore backup) or FLEX_START (Dynamic Workload
  Scheduler: the job queues until all its GPUs are free at once). The deprecated ON_DEMAND and LOW_COST are
  refused with the name that replaced them.
- SPOT is not available on TPU pods (more than one TPU VM); a SPOT job of several replicas needs
  ``restartJobOnWorkerRestart: true``: a replica of MultiWorkerMirroredStrategy restarted alone cannot rejoin
  the others' collectives, so every replica must restart from the backup together.
- FLEX_START needs ``maxWaitDuration`` (how long it may queue; ``0s`` waits indefinitely), GPUs Dynamic
  Workload Scheduler provisions (L4, A100, H100, H200, B200) on every pool, the same machine on every pool,
  and a ``timeout`` of at most 7 days.
- ``disableRetries: true`` overrides ``restartJobOnWorkerRestart`` to false: both true is refused.

Sources: the Vertex AI guides "Use Spot VMs with training" and "Schedule training jobs based on resource
availability", and ``aiplatform_v1.Scheduling``.
"""

from __future__ import annotations

from typing import Any

from jobs.definition.body import duration_seconds, join, pools
from jobs.definition.compile import CompiledJob
from jobs.definition.errors import short
from jobs.definition.kinds import spec_field
from jobs.definition.machines import is_tpu

SPOT = "SPOT"
FLEX_START = "FLEX_START"
STRATEGIES = ("STANDARD", SPOT, FLEX_START)
DEPRECATED = {"ON_DEMAND": "STANDARD", "LOW_COST": SPOT}
# The GPUs Dynamic Workload Scheduler queues for (Vertex AI's AcceleratorType names).
FLEX_START_GPUS = (
    "NVIDIA_L4",
    "NVIDIA_TESLA_A100",
    "NVIDIA_A100_80GB",
    "NVIDIA_H100_80GB",
    "NVIDIA_H100_MEGA_80GB",
    "NVIDIA_H200_141GB",
    "NVIDIA_B200",
)
FLEX_START_MAX_TIMEOUT_S = 7 * 24 * 3600


def strategy_of(spec: Any) -> str:
    """The scheduling strategy a CustomJobSpec asks for, "STANDARD" when it names none."""
    scheduling = (spec.get("scheduling") if isinstance(spec, dict) else None) or {}
    strategy = scheduling.get("strategy") if isinstance(scheduling, dict) else None
    return "STANDARD" if strategy in (None, "", "STRATEGY_UNSPECIFIED") else str(strategy)


def check_scheduling(job: CompiledJob) -> None:
    spec_path = spec_field(job.kind)
    spec = job.body.get(spec_path) or {}
    scheduling = spec.get("scheduling") or {}
    path = join(spec_path, "scheduling")
    strategy = strategy_of(spec)
    allowed = f"{', '.join(STRATEGIES)} (STANDARD when left out)"
    if strategy in DEPRECATED:
        raise job.error(
            join(path, "strategy"), f"{strategy} is deprecated", f"{DEPRECATED[strategy]}; {allowed}"
        )
    if strategy not in STRATEGIES:
        raise job.error(join(path, "strategy"), f"unknown strategy {short(strategy)}", allowed)
    restart = scheduling.get("restartJobOnWorkerRestart") is True
    if restart and scheduling.get("disableRetries") is True:
        raise job.error(
            join(path, "disableRetries"),
            "true overrides restartJobOnWorkerRestart: true to false",
            "false, or drop restartJobOnWorkerRestart",
        )
    job_pools = [p for p in pools(spec, spec_path) if p.raw]
    if strategy == SPOT:
        _check_spot(job, path, job_pools, restart)
    if strategy == FLEX_START:
        _check_flex_start(job, path, scheduling, job_pools)


def _replicas(pool) -> int:
    try:
        return int(pool.raw.get("replicaCount", 1))
    except (TypeError, ValueError):  # the schema check refused it already
        return 1


def _check_spot(job: CompiledJob, path: str, job_pools, restart: bool) -> None:
    tpu_vms = sum(
        _replicas(p)
        for p in job_pools
        if is_tpu(str(p.machine.get("machineType", "")), str(p.machine.get("acceleratorType", "")))
    )
    if tpu_vms > 1:
        raise job.error(
            join(path, "strategy"),
            f"SPOT is not available on TPU pods (this job has {tpu_vms} TPU VMs)",
            "STANDARD, or SPOT with a single TPU VM",
        )
    replicas = sum(_replicas(p) for p in job_pools)
    if replicas > 1 and not restart:
        raise job.error(
            join(path, "restartJobOnWorkerRestart"),
            f"a SPOT job of {replicas} replicas restarts a preempted replica alone, and a replica of "
            "MultiWorkerMirroredStrategy cannot rejoin the others' collectives",
            "true (every replica restarts from the backup together)",
        )


def _check_flex_start(job: CompiledJob, path: str, scheduling: dict, job_pools) -> None:
    wait = scheduling.get("maxWaitDuration")
    seconds = duration_seconds(wait)
    if wait is None or seconds is None or seconds < 0:
        problem = "missing" if wait is None else f"{short(wait)} is not a duration of 0s or more"
        raise job.error(
            join(path, "maxWaitDuration"),
            f"{problem}: FLEX_START queues for its GPUs for at most this long",
            "a duration such as 7200s (0s waits indefinitely)",
        )
    for pool in job_pools:
        accelerator = str(pool.machine.get("acceleratorType", ""))
        if accelerator not in FLEX_START_GPUS:
            raise job.error(
                pool.field("machineSpec", "acceleratorType"),
                "FLEX_START does not provision "
                + short(accelerator or "a machine without GPUs", quote=False),
                ", ".join(FLEX_START_GPUS),
            )
    first = job_pools[0] if job_pools else None
    for pool in job_pools[1:]:
        if pool.machine != first.machine:
            raise job.error(
                pool.field("machineSpec"),
                "FLEX_START needs the same machine in every worker pool",
                f"the chief's: {short(first.machine, quote=False)}",
            )
    timeout = duration_seconds(scheduling.get("timeout"))
    if timeout is not None and timeout > FLEX_START_MAX_TIMEOUT_S:
        raise job.error(
            join(path, "timeout"),
            f"{short(scheduling['timeout'])} is longer than FLEX_START runs a job",
            f"at most {FLEX_START_MAX_TIMEOUT_S}s (7 days)",
        )
