"""Submission as a plan: a list of steps built up front, then either printed (--dry-run) or executed.

Steps: look up the job's trainer images in Artifact Registry, and build the missing ones with Cloud Build
(context tarball to the staging bucket, build, follow) -> build and upload the trainer sdist unless the
staging bucket has it -> look for a live job with this submission's hash (a retry must not create a duplicate)
-> create the job -> print links -> follow it, streaming its log entries (jobs.cloud.logs) between its state
lines -> for a tuning job, write the study report once it ends (``report.py``: study.json, study.png, the
table of trials) -> register its model in the Model Registry when the definition asks (jobs.cloud.register) ->
deploy the gated alias to an endpoint when it has a deploy block (jobs.cloud.deploy). Each step reads and
writes one ``Execution``; nothing here decides *whether* to touch the cloud. Every image is resolved before
anything is built, uploaded or submitted.
"""

from __future__ import annotations

import math
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TextIO

from common.submission import SUBMISSION_LABEL
from jobs.cloud import client as cloud
from jobs.cloud import report
from jobs.cloud.builds import ImageBuild
from jobs.cloud.deploy import DeployRegistered, target_of
from jobs.cloud.deploy import preview_request as deploy_preview
from jobs.cloud.experiments import RecordRun
from jobs.cloud.experiments import preview_requests as experiment_preview
from jobs.cloud.logs import GRACE_SECONDS, LogStream
from jobs.cloud.register import RegisterModel, RegistrationFailed, preview_request
from jobs.definition import body
from jobs.definition.compile import CompiledJob
from jobs.definition.cost import Cap, Estimate, cap_name, check_cap
from jobs.definition.errors import JobError
from jobs.definition.image import write_context
from jobs.definition.kinds import runs_study
from jobs.definition.model_registry import best_trial
from jobs.definition.package import build_sdist

# Seconds between state polls while following; tests set it to 0.
POLL_SECONDS = 15.0
_sleep = time.sleep  # replaced in tests (e.g. to deliver Ctrl-C while following)


@dataclass
class Execution:
    job: CompiledJob | None  # None when the plan only builds images (scripts/build_image.py)
    clients: cloud.Clients
    out: TextIO
    repo_root: Path
    workdir: Path
    package_path: Path | None = None
    remote: dict[str, Any] | None = None  # the job as the API returned it
    missing_images: set[str] = field(default_factory=set)  # images ResolveImages found absent
    registered: str | None = None  # the Model Registry version RegisterModel uploaded or found


class BuildFailed(RuntimeError):
    """A Cloud Build build ended in another state than SUCCESS; the message carries its log link."""


class Step(Protocol):
    def describe(self, job: CompiledJob) -> str: ...

    def run(self, ex: Execution) -> None: ...


class ResolveImages:
    """Every image the plan runs either exists or can be built from this checkout; else nothing happens."""

    def __init__(self, builds: list[ImageBuild]) -> None:
        self.builds = builds

    def describe(self, job: CompiledJob | None) -> str:
        images = ", ".join(b.image for b in self.builds)
        return f"look up {images} in Artifact Registry"

    def run(self, ex: Execution) -> None:
        for build in self.builds:
            if ex.clients.images.has_tag(build.image):
                print(f"trainer image: {build.image} (unchanged code, already built)", file=ex.out)
            elif build.current:
                ex.missing_images.add(build.image)
            else:
                raise build.error(
                    f"{build.image} is not in Artifact Registry, and this checkout builds tag "
                    f"{build.variant}-<hash of its build context>, not {build.variant}-{build.image_hash}",
                    f"${{infra.trainer_image}}:{build.variant}-${{job.image_tag}} (built from this "
                    "checkout), or a tag that exists",
                )


class BuildImage:
    def __init__(self, build: ImageBuild) -> None:
        self.build = build

    def describe(self, job: CompiledJob | None) -> str:
        b = self.build
        return (
            f"if {b.image} is missing: upload the build context to {b.context_uri} (unless present) and "
            f"build the {b.variant} target with Cloud Build (request below), following it to its end"
        )

    def run(self, ex: Execution) -> None:
        b = self.build
        if b.image not in ex.missing_images:
            return
        if ex.clients.storage.exists(b.context_uri):
            print(f"build context: {b.context_uri} (already uploaded)", file=ex.out)
        else:
            tarball = ex.workdir / f"context-{b.image_hash}.tar.gz"
            files, size, digest = write_context(ex.repo_root, tarball)
            if digest != b.image_hash:
                # Uploaded under the tag's hash, it would be built and pushed under a tag it does not match.
                raise BuildFailed(
                    f"the build context changed since the plan was made (hash {digest}, tag "
                    f"{b.variant}-{b.image_hash}); run the command again"
                )
            ex.clients.storage.upload(tarball, b.context_uri)
            print(
                f"build context: uploaded {b.context_uri} ({files} files, {size / 1024:.0f} KiB)", file=ex.out
            )
        build = ex.clients.builds.find_live(b.parent, b.build_tag)
        if build is not None:
            print(f"reusing build {build.get('id')} of {b.image} (still {build.get('status')})", file=ex.out)
        else:
            build = ex.clients.builds.create(b.request)
            print(
                f"building {b.image}: build {build.get('id')}, logs {cloud.build_console_url(build)}",
                file=ex.out,
            )
        build = follow_build(ex.clients.builds, build, ex.out)
        if build.get("status") != "SUCCESS":
            detail = build.get("statusDetail") or build.get("failureInfo", {}).get("detail") or "no detail"
            log = cloud.build_console_url(build)
            raise BuildFailed(f"building {b.image} ended {build.get('status')}: {detail}; log: {log}")
        ex.missing_images.discard(b.image)
        print(f"trainer image: built {b.image}", file=ex.out)


def follow_build(builds: cloud.CloudBuilds, build: dict[str, Any], out: TextIO) -> dict[str, Any]:
    """Poll a build until it ends, printing a line whenever its status changes."""
    start = time.monotonic()
    last = None
    while True:
        status = build.get("status", "STATUS_UNKNOWN")
        if status != last:
            minutes, seconds = divmod(int(time.monotonic() - start), 60)
            print(
                f"[{minutes // 60:02d}:{minutes % 60:02d}:{seconds:02d}] build {status}", file=out, flush=True
            )
            last = status
        if status in cloud.BUILD_TERMINAL:
            return build
        _sleep(POLL_SECONDS)
        build = builds.get(build["name"])


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


class AttachJob:
    """``run_job.py JOB_FILE --follow NAME``: the job is one submitted from this very definition (same file,
    flags and checkout), so what registers it is the registry block it was submitted with."""

    def __init__(self, name: str) -> None:
        self.name = name

    def describe(self, job: CompiledJob) -> str:
        return f"read {self.name}: it must carry this submission's {SUBMISSION_LABEL}={job.submission_hash}"

    def run(self, ex: Execution) -> None:
        remote = ex.clients.jobs.get(ex.job.kind, self.name)
        found = (remote.get("labels") or {}).get(SUBMISSION_LABEL) or "(none)"
        if found != ex.job.submission_hash:
            raise JobError(
                ex.job.file,
                "--follow",
                f"{self.name} is not a submission of this definition ({SUBMISSION_LABEL} {found}; "
                f"{ex.job.file} with these flags and this checkout gives {ex.job.submission_hash})",
                "the JOB_FILE, --env, --set flags and checkout it was submitted with, or --follow "
                "RESOURCE_NAME alone (follows it, registers nothing)",
            )
        ex.remote = remote


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
        spec = body.job_spec(ex.job.body, ex.job.kind) or {}
        if spec.get("tensorboard"):
            print(f"tensorboard: {cloud.tensorboard_url(spec['tensorboard'], name)}", file=ex.out)


class FollowInterrupted(Exception):
    """Following stopped (Ctrl-C, or ``cause``: a poll failed); the job itself keeps running."""

    def __init__(self, name: str, cause: Exception | None = None) -> None:
        super().__init__(name)
        self.name = name
        self.cause = cause


class FollowJob:
    def __init__(self, logs: bool = True) -> None:
        self.logs = logs

    def describe(self, job: CompiledJob) -> str:
        if self.logs:
            return (
                "follow its state until it ends, printing its log entries from Cloud Logging as they arrive "
                "(Ctrl-C stops following, not the job)"
            )
        return "follow its state until it ends (Ctrl-C stops following, not the job)"

    def run(self, ex: Execution) -> None:
        stream = job_logs(ex.clients, ex.job.project, ex.job.kind, ex.remote, ex.out) if self.logs else None
        try:
            ex.remote = follow(ex.clients.jobs, ex.job.kind, ex.remote, ex.out, stream)
        except KeyboardInterrupt:
            raise FollowInterrupted(ex.remote["name"]) from None
        except Exception as exc:  # noqa: BLE001 - network or expired credentials: the job is fine, say its name
            raise FollowInterrupted(ex.remote["name"], exc) from exc


class ReportStudy:
    """After following a tuning job to its end, whatever end: the report --local writes for its studies."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder  # None: .local/reports/<job id> under the checkout

    def describe(self, job: CompiledJob) -> str:
        where = self.folder if self.folder is not None else report.REPORTS / "<job id>"
        return (
            f"write the study report (every trial, the best one, parameter importance) to {where}/study.json "
            "and study.png, and print it"
        )

    def run(self, ex: Execution) -> None:
        folder = report.report_folder(ex.repo_root, ex.remote["name"], self.folder)
        report.write_study_report(ex.remote, folder, ex.clients.storage, ex.out)


@dataclass
class Plan:
    job: CompiledJob | None
    steps: list[Step] = field(default_factory=list)
    builds: list[ImageBuild] = field(default_factory=list)
    # (Estimate, Cap or None) of a plan that submits (jobs.definition.cost); None for one that does not.
    cost: tuple[Estimate, Cap | None] | None = None

    def describe(self) -> list[str]:
        return [f"{i}. {step.describe(self.job)}" for i, step in enumerate(self.steps, start=1)]

    def cost_lines(self) -> list[str]:
        """What the job may cost (printed by --dry-run and before a submit), and whether its cap allows it."""
        if self.cost is None:
            return []
        estimate, cap = self.cost
        lines = estimate.lines()
        if cap is not None and math.isinf(cap.usd):
            lines.append(f"  cap: {cap_name(cap)} off: no cap for this run")
        elif cap is not None:
            try:
                check_cap(estimate, cap, self.job.file)
                lines.append(f"  cap: {cap_name(cap)} ${cap.usd:.2f}: the ceiling is within it")
            except JobError as refused:
                lines.append(f"  cap: a submit is refused: {refused.problem}; allowed: {refused.allowed}")
        return lines

    def build_requests(self) -> list[dict[str, Any]]:
        """The CreateBuildRequest of each image the plan may build (what --dry-run prints beside the job)."""
        return [b.request for b in self.builds]

    def upload_request(self) -> dict[str, Any] | None:
        """The UploadModelRequest the plan sends if the job succeeds (placeholders for what only the finished
        job knows), or None when the plan registers nothing."""
        if not any(isinstance(step, RegisterModel) for step in self.steps):
            return None
        return preview_request(self.job)

    def experiment_requests(self) -> list[tuple[str, dict[str, Any]]]:
        """The Vertex AI Experiments calls recording the run sends once the job has ended (placeholders for
        what only then is known); [] when the plan records nothing."""
        step = next((s for s in self.steps if isinstance(s, RecordRun)), None)
        return [] if step is None else experiment_preview(self.job, step.tensorboard)

    def deploy_request(self) -> dict[str, Any] | None:
        """The DeployModelRequest the plan sends once the model is registered (placeholders for what only
        the endpoint knows then), or None when the plan deploys nothing."""
        if not any(isinstance(step, DeployRegistered) for step in self.steps):
            return None
        return deploy_preview(self.job.deploy.ref, self.job.deploy.spec, target_of(self.job))

    def execute(self, clients: cloud.Clients, repo_root: Path, out: TextIO = sys.stdout) -> Execution:
        with tempfile.TemporaryDirectory(prefix="run-job-") as tmp:
            ex = Execution(self.job, clients, out, repo_root, Path(tmp))
            for i, step in enumerate(self.steps):
                try:
                    step.run(ex)
                except RegistrationFailed as failed:
                    # The job has ended all the same: record it as a run (without a version; the --follow
                    # that finishes the registration updates it). Not after a Ctrl-C (no cause).
                    if failed.cause is not None:
                        for later in self.steps[i + 1:]:
                            if isinstance(later, RecordRun):
                                later.run(ex)
                    raise
            return ex


def build_plan(
    job: CompiledJob,
    *,
    wait: bool = True,
    builds: list[ImageBuild] = (),
    follow: str | None = None,
    logs: bool = True,
    report_dir: Path | None = None,
    cost: tuple[Estimate, Cap | None] | None = None,
    tensorboard: str = "",
) -> Plan:
    """Submit ``job`` (or, with ``follow``, pick up that job submitted from it), follow it unless told not
    to wait, write a tuning job's study report (to ``report_dir``, default .local/reports/<job id>), then
    register its model when the definition has a registry block, and record it as a run of its experiment
    (``tensorboard``: the environment's, the experiment's backing TensorBoard)."""
    steps: list[Step] = image_steps(list(builds))
    if follow is not None:
        steps += [AttachJob(follow), ShowLinks()]
    else:
        if job.installs_repo_trainer():
            steps.append(StagePackage())
        steps += [FindLiveJob(), CreateJob(), ShowLinks()]
    if wait or follow is not None:
        steps.append(FollowJob(logs))
        if runs_study(job.kind):
            steps.append(ReportStudy(report_dir))
        if job.registry is not None:
            steps.append(RegisterModel())
        # Recorded once the registry version is known, before a deploy whose smoke test may fail.
        steps.append(RecordRun(tensorboard))
        if job.deploy is not None:
            steps.append(DeployRegistered())
    return Plan(job, steps, list(builds), cost if follow is None else None)


def image_steps(builds: list[ImageBuild]) -> list[Step]:
    if not builds:
        return []
    return [ResolveImages(builds), *(BuildImage(b) for b in builds)]


def build_only_plan(builds: list[ImageBuild]) -> Plan:
    """Build the given trainer images unless present (the deploy workflow's step after the apply)."""
    return Plan(None, image_steps(builds), builds)


def progress_line(kind: str, remote: dict[str, Any], elapsed: float) -> str:
    minutes, seconds = divmod(int(elapsed), 60)
    state = remote.get("state", "JOB_STATE_UNSPECIFIED")
    line = f"[{minutes // 60:02d}:{minutes % 60:02d}:{seconds:02d}] {state}"
    if runs_study(kind):
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
    metric = metrics[0].get("metricId")
    # Any trial with a final measurement, as the study sees it so far (registering takes SUCCEEDED ones only).
    best = best_trial(remote.get("trials"), metric, metrics[0].get("goal"), succeeded_only=False)
    return None if best is None else (best[0], metric, best[1])


def job_logs(
    clients: cloud.Clients, project: str, kind: str, remote: dict[str, Any], out: TextIO
) -> LogStream | None:
    """The stream of a job's log entries, from its creation on; None where the clients read no logs."""
    if clients.logs is None:
        return None
    return LogStream(
        clients.logs,
        project,
        remote["name"],
        study=runs_study(kind),
        out=out,
        since=remote.get("createTime", ""),
    )


def follow(
    jobs: cloud.VertexJobs, kind: str, remote: dict[str, Any], out: TextIO, logs: LogStream | None = None
) -> dict[str, Any]:
    """Poll until the job reaches a terminal state, printing a line whenever its progress changes and, with
    ``logs``, the log entries that arrived since the last poll."""
    start = time.monotonic()
    last = None
    waited = False
    while True:
        line = progress_line(kind, remote, time.monotonic() - start)
        summary = line.split("] ", 1)[1]
        ended = remote.get("state") in cloud.TERMINAL_STATES
        if ended and logs is not None:
            # The entries first, the final state line last. The replicas' last lines (a traceback, the OOM
            # kill) reach Cloud Logging after the job has ended, so a job seen running gets one more read
            # after a grace (never longer than a poll).
            logs.poll()
            if waited and logs.active:
                _sleep(min(GRACE_SECONDS, POLL_SECONDS))
                logs.poll()
            logs.finish(_sleep)  # a read still failing gets its last retries
        if summary != last:
            print(line, file=out, flush=True)
            last = summary
        if ended:
            return remote
        if logs is not None:
            logs.poll()
        _sleep(POLL_SECONDS)
        waited = True
        remote = jobs.get(kind, remote["name"])
