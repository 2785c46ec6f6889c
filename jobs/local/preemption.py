"""``run_job.py SPOT_JOB --local --preempt-after SECONDS``: a Spot VM's preemption rehearsed on this machine.

Compute Engine preempts a Spot VM with SIGTERM and stops it 30 s later; Vertex AI then restarts the replica
(with ``restartJobOnWorkerRestart``, every replica of the job) with the same environment, and the trainer
resumes from the BackupAndRestore backup in its ``AIP_CHECKPOINT_DIR``. Here, SECONDS after the replicas
started, each gets SIGTERM, SIGKILL if it is still running after the grace period, and is started again with
the same argv and environment (``launcher.JobRun.preempt``); then the run's output says what the preemption
cost: the epochs each replica had completed, those its backup holds, so the epochs the restart trains again.
Once per run: a second preemption would teach nothing the first did not.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from jobs.definition.body import join
from jobs.definition.kinds import CUSTOM_JOB, spec_field
from jobs.definition.validate_scheduling import SPOT, strategy_of
from jobs.local.launcher import SPOT_GRACE_S, JobRun, Stopped
from jobs.local.spec import LocalRunError
from trainer.contract import BACKUP_METADATA, CHECKPOINT_DIR, EPOCH_LINE, WORKER_POOL_ROLES

FLAG = "--preempt-after"


@dataclass(frozen=True)
class Preemption:
    """When to preempt a local run's replicas, and their grace period.

    ``after_s``: seconds after the replicas started. ``ready``, when given, must hold too: a test times the
    preemption by the trainer's progress (its first backup written) rather than by a clock that a loaded
    machine stretches."""

    after_s: float
    grace_s: float = SPOT_GRACE_S
    ready: Callable[[], bool] | None = None

    def due(self, run: JobRun) -> bool:
        return time.monotonic() - run.started >= self.after_s and (self.ready is None or self.ready())


def check(kind: str, spec: dict) -> None:
    """LocalRunError (at the field to change) unless the job is a CustomJob on Spot capacity: only a Spot VM
    is preempted."""
    if kind != CUSTOM_JOB:
        raise LocalRunError("kind", f"{FLAG} preempts a CustomJob's replicas, not a {kind}'s trials")
    strategy = strategy_of(spec)
    if strategy != SPOT:
        raise LocalRunError(
            join(spec_field(kind), "scheduling", "strategy"),
            f"{FLAG} preempts a Spot VM; {strategy} capacity is never preempted",
            "SPOT (e.g. jobs/image_gpu_spot.yaml)",
        )


def preempt(run: JobRun, preemption: Preemption, name: str, stream) -> None:
    """Preempt every replica of ``run``, restart them, and print what it cost."""
    elapsed = time.monotonic() - run.started
    print(
        f"job '{name}': preempting its replicas after {elapsed:.1f}s, as Compute Engine preempts a Spot VM "
        f"(SIGTERM, SIGKILL after {preemption.grace_s:.0f}s), then restarting them with the same environment",
        file=stream,
        flush=True,
    )
    before = {rep.name: (rep.log_path, rep.log_offset, rep.env.get(CHECKPOINT_DIR)) for rep in run.replicas}
    stopped = run.preempt(preemption.grace_s)
    for ended in stopped:
        log_path, offset, checkpoints = before[ended.name]
        print(f"  {ended.name}: {_cost(ended, log_path, offset, checkpoints)}", file=stream, flush=True)


def _cost(ended: Stopped, log_path: Path, offset: int, checkpoints: str | None) -> str:
    how = (
        f"killed after {ended.seconds:.1f}s" if ended.killed
        else f"stopped in {ended.seconds:.1f}s (exit status {ended.returncode})"
    )
    completed = completed_epochs(log_path, offset)
    backed_up = backup_epoch(checkpoints, ended.name) if checkpoints else None
    if backed_up is None:
        return f"{how}; {completed} epoch(s) completed and no backup: the restart trains from the start"
    return (
        f"{how}; {completed} epoch(s) completed, {backed_up} in its backup: the restart resumes at epoch "
        f"{backed_up + 1}, redoing {max(completed - backed_up, 0)} completed epoch(s) and the part of epoch "
        f"{completed + 1} it had trained"
    )


def completed_epochs(log_path: Path, offset: int = 0) -> int:
    """The last epoch the trainer logged as completed in ``log_path`` from byte ``offset`` on (0: none)."""
    try:
        with open(log_path, "rb") as log:
            log.seek(offset)
            text = log.read().decode(errors="replace")
    except OSError:
        return 0
    return max((int(found.group(1)) for found in re.finditer(EPOCH_LINE, text)), default=0)


def backup_epoch(checkpoints: str, replica: str) -> int | None:
    """The epochs in a replica's BackupAndRestore backup (None when it has none): the trainer's backup is
    AIP_CHECKPOINT_DIR itself, a multi-worker replica's the folder of its TF task in it (``chief_0``,
    ``worker_1``: trainer.env.Cluster.name)."""
    pool, _, index = replica.rpartition("-")
    for folder in (Path(checkpoints), Path(checkpoints) / f"{WORKER_POOL_ROLES.get(pool, pool)}_{index}"):
        try:
            return int(json.loads((folder / BACKUP_METADATA).read_text())["epoch"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return None
