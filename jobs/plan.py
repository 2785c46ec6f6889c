"""Submission as a plan: a list of steps built up front, then either printed (--dry-run) or executed.

Steps: build and upload the trainer sdist unless the staging bucket has it -> look for a live job with this
submission's hash (a retry must not create a duplicate) -> create the job -> print links -> follow it.
Each step reads and writes one ``Execution``; nothing here decides *whether* to touch the cloud.
"""

from __future__ import annotations

import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TextIO

from jobs import cloud
from jobs.compile import SUBMISSION_LABEL, TUNING_JOB, CompiledJob
from jobs.package import build_sdist

# Seconds between state polls while following; tests set it to 0.
POLL_SECONDS = 15.0
_sleep = time.sleep  # replaced in tests (e.g. to deliver Ctrl-C while following)


@dataclass
class Execution:
    job: CompiledJob
    clients: cloud.Clients
    out: TextIO
    repo_root: Path
    workdir: Path
    package_path: Path | None = None
    remote: dict[str, Any] | None = None  # the job as the API returned it


class Step(Protocol):
    def describe(self, job: CompiledJob) -> str: ...

    def run(self, ex: Execution) -> None: ...


class StagePackage:
    def describe(self, job: CompiledJob) -> str:
        return (
            f"build the trainer sdist (python -m build --sdist --no-isolation) and upload it to "
            f"{job.package_uri}, unless that object exists (same code, same hash)"
        )

    def run(self, ex: Execution) -> None:
        uri = ex.job.package_uri
        if ex.clients.storage.exists(uri):
            print(f"trainer package: {uri} (unchanged code, already uploaded)", file=ex.out)
            return
        ex.package_path = build_sdist(ex.repo_root, ex.workdir / "dist")
        ex.clients.storage.upload(ex.package_path, uri)
        print(f"trainer package: uploaded {uri}", file=ex.out)


class FindLiveJob:
    def describe(self, job: CompiledJob) -> str:
        return f"reuse a live {job.kind} labelled {SUBMISSION_LABEL}={job.submission_hash}, if one exists"

    def run(self, ex: Execution) -> None:
        ex.remote = ex.clients.jobs.find_live(
            ex.job.kind, ex.job.parent, SUBMISSION_LABEL, ex.job.submission_hash
        )
        if ex.remote is not None:
            print(
                f"reusing {ex.remote['name']}: same submission ({SUBMISSION_LABEL}={ex.job.submission_hash}) "
                f"is already {ex.remote.get('state', 'JOB_STATE_UNSPECIFIED')}",
                file=ex.out,
            )


class CreateJob:
    def describe(self, job: CompiledJob) -> str:
        return f"otherwise create {job.kind} {job.body.get('displayName')} in {job.parent}"

    def run(self, ex: Execution) -> None:
        if ex.remote is None:
            ex.remote = ex.clients.jobs.create(ex.job.kind, ex.job.parent, ex.job.body)
            print(f"created {ex.remote['name']}", file=ex.out)


class ShowLinks:
    def describe(self, job: CompiledJob) -> str:
        return "print the console and TensorBoard links"

    def run(self, ex: Execution) -> None:
        name = ex.remote["name"]
        print(f"console:     {cloud.console_url(name)}", file=ex.out)
        spec = ex.job.body.get("jobSpec") or ex.job.body.get("trialJobSpec") or {}
        if spec.get("tensorboard"):
            print(f"tensorboard: {cloud.tensorboard_url(spec['tensorboard'], name)}", file=ex.out)


class FollowInterrupted(Exception):
    """Following stopped (Ctrl-C, or ``cause``: a poll failed); the job itself keeps running."""

    def __init__(self, name: str, cause: Exception | None = None) -> None:
        super().__init__(name)
        self.name = name
        self.cause = cause


class FollowJob:
    def describe(self, job: CompiledJob) -> str:
        return "follow its state until it ends (Ctrl-C stops following, not the job)"

    def run(self, ex: Execution) -> None:
        try:
            ex.remote = follow(ex.clients.jobs, ex.job.kind, ex.remote, ex.out)
        except KeyboardInterrupt:
            raise FollowInterrupted(ex.remote["name"]) from None
        except Exception as exc:  # noqa: BLE001 - network or expired credentials: the job is fine, say its name
            raise FollowInterrupted(ex.remote["name"], exc) from exc


@dataclass
class Plan:
    job: CompiledJob
    steps: list[Step] = field(default_factory=list)

    def describe(self) -> list[str]:
        return [f"{i}. {step.describe(self.job)}" for i, step in enumerate(self.steps, start=1)]

    def execute(self, clients: cloud.Clients, repo_root: Path, out: TextIO = sys.stdout) -> Execution:
        with tempfile.TemporaryDirectory(prefix="run-job-") as tmp:
            ex = Execution(self.job, clients, out, repo_root, Path(tmp))
            for step in self.steps:
                step.run(ex)
            return ex


def build_plan(job: CompiledJob, *, wait: bool = True) -> Plan:
    steps: list[Step] = []
    if job.installs_repo_trainer():
        steps.append(StagePackage())
    steps += [FindLiveJob(), CreateJob(), ShowLinks()]
    if wait:
        steps.append(FollowJob())
    return Plan(job, steps)


def progress_line(kind: str, remote: dict[str, Any], elapsed: float) -> str:
    minutes, seconds = divmod(int(elapsed), 60)
    state = remote.get("state", "JOB_STATE_UNSPECIFIED")
    line = f"[{minutes // 60:02d}:{minutes % 60:02d}:{seconds:02d}] {state}"
    if kind == TUNING_JOB:
        trials = remote.get("trials") or []
        states = [t.get("state", "") for t in trials]
        done = states.count("SUCCEEDED")
        line += (
            f"  trials: {done} succeeded, {states.count('INFEASIBLE')} failed, "
            f"{len(trials) - done - states.count('INFEASIBLE')} active of {remote.get('maxTrialCount', '?')}"
        )
        best = _best_trial(remote)
        if best:
            line += f"; best {best[1]}={best[2]:g} (trial {best[0]})"
    return line


def _best_trial(remote: dict[str, Any]) -> tuple[str, str, float] | None:
    metrics = (remote.get("studySpec") or {}).get("metrics") or []
    if not metrics:
        return None
    metric, sign = metrics[0].get("metricId"), (1 if metrics[0].get("goal") != "MINIMIZE" else -1)
    scored = []
    for trial in remote.get("trials") or []:
        for m in (trial.get("finalMeasurement") or {}).get("metrics") or []:
            if m.get("metricId") == metric and "value" in m:
                scored.append((sign * float(m["value"]), trial.get("id", "?"), float(m["value"])))
    if not scored:
        return None
    _, trial_id, value = max(scored)
    return trial_id, metric, value


def follow(jobs: cloud.VertexJobs, kind: str, remote: dict[str, Any], out: TextIO) -> dict[str, Any]:
    """Poll until the job reaches a terminal state, printing a line whenever its progress changes."""
    start = time.monotonic()
    last = None
    while True:
        line = progress_line(kind, remote, time.monotonic() - start)
        summary = line.split("] ", 1)[1]
        if summary != last:
            print(line, file=out, flush=True)
            last = summary
        if remote.get("state") in cloud.TERMINAL_STATES:
            return remote
        _sleep(POLL_SECONDS)
        remote = jobs.get(kind, remote["name"])
