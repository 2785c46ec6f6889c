"""How many replica processes ``--local`` runs at once here, and the check that keeps a job within it.

Every replica is a Python process with its own TensorFlow runtime (a few hundred MB each) and its share of
the cores (environment.py splits the thread pools). A job may ask for more replicas, or a study for more
parallel trials, than one machine can hold: parallelTrialCount x (replicas per trial) processes run at once.
The cap is ``max(MIN_PROCESSES, PROCESSES_PER_CPU x usable CPUs)``: two processes per CPU keeps an
oversubscribed but working machine (TensorFlow replicas wait on each other and on input as much as they
compute), and the floor of 4 lets the shipped definitions run on a 1- or 2-CPU machine (census_multiworker:
3 replicas; census_tuning_grid: 3 trials at once; census_tuning: 2). A job over the cap fails at once (one
line, exit status 2, nothing written) instead of thrashing the machine or running out of descriptors.
"""

from __future__ import annotations

import os

from jobs.local.spec import JobSpec, LocalRunError

PROCESSES_PER_CPU = 2
MIN_PROCESSES = 4


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask, e.g. a container's cpuset). Tests monkeypatch this."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # no sched_getaffinity (macOS)
        return os.cpu_count() or 1


def max_processes() -> int:
    """The most replica processes --local runs at once here."""
    return max(MIN_PROCESSES, PROCESSES_PER_CPU * usable_cpus())


def _why() -> str:
    return (
        f"--local runs at most {max_processes()} processes at once on this machine "
        f"({PROCESSES_PER_CPU} per usable CPU, {usable_cpus()} CPU(s), at least {MIN_PROCESSES})"
    )


def check(job: JobSpec, parallel_trials: int = 1) -> None:
    """LocalRunError when one run of ``job``, or parallel_trials runs at once, exceed max_processes()."""
    cap = max_processes()
    total = job.replica_total
    if total > cap:
        pool = max(job.pools, key=lambda p: p.replica_count)
        allowed = cap - (total - pool.replica_count)
        fix = f"use at most {allowed}" if allowed >= 1 else f"use at most {cap} replicas across the pools"
        raise LocalRunError(
            f"{pool.path}.replicaCount",
            f"{pool.replica_count} replicas make {total} processes with the other pools; {_why()}: {fix}",
        )
    if parallel_trials * total > cap:
        raise LocalRunError(
            "parallelTrialCount",
            f"{parallel_trials} trials of {total} replica(s) each are {parallel_trials * total} processes at "
            f"once; {_why()}: use parallelTrialCount <= {cap // total}",
        )


def threads_per_replica(processes: int) -> int:
    """A replica's share of the cores (TF_NUM_INTRAOP_THREADS and the like) when ``processes`` run at once."""
    return max(1, usable_cpus() // processes)
