"""Schedules of an environment, compiled: `schedules:` in infra/environments/<env>.yaml -> infra.schedules
ScheduledRun, the data the platform stack turns into a Cloud Scheduler job and a Cloud Workflows workflow.

Each schedule's job file goes through the very compile and validation `run_job.py JOB --dry-run --env ENV
--set ...` uses, with the environment's planned outputs (synthesis runs before any deploy; the one value only
a deploy knows, the TensorBoard's id, the stack hands the workflow as a reference). The only difference from
the dry-run request is the job id, a placeholder each run replaces with its own (see infra/schedules.py).
A definition's `registry:` block becomes the run's `registration`: the workflow registers each successful
run's model as the definition asks (run_job.py does the same after a job it submitted). A schedule's
`batch_predict:` becomes the run's `batch`: the request `run_job.py batch-predict <model>@<first alias>`
builds from the same flags (jobs.api.batch_request), with `${infra.*}` resolved, `${job.id}` the run id
placeholder and the display name's time a placeholder too, both filled in by each run. Its `deploy:`
becomes the run's `deploy`: what `run_job.py deploy <model>@<first alias> --endpoint NAME` sends that does
not depend on the endpoint's state, with the rule's constants the workflow computes the rest by.

    from infra.config import load_environment
    from jobs.schedule import compile_schedules
    compile_schedules(load_environment("dev"))

scripts/synth.py (the CDK app) passes this function to infra.main, which never imports jobs/ itself.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from pathlib import Path

from common.submission import SUBMISSION_LABEL
from infra.config import ConfigError, EnvironmentConfig, ScheduleConfig
from infra.outputs import planned_outputs
from infra.schedules import (
    BATCH_STAMP_PLACEHOLDER,
    VERTEX_DEFAULT_TIMEOUT_S,
    ScheduledBatch,
    ScheduledDeploy,
    ScheduledRegistration,
    ScheduledRun,
)
from jobs.api import REPO_ROOT
from jobs.definition.body import duration_seconds
from jobs.definition.compile import CONTAINER, job_name
from jobs.definition.errors import JobError, short
from jobs.definition.kinds import CUSTOM_JOB, spec_field

# Ids look like <name>-<yyyymmdd>-<hhmmss>-<6 chars>; the placeholder has that shape, spelled out.
PLACEHOLDER_SUFFIX = "yyyymmdd-hhmmss-xxxxxx"
# Only the job id depends on the clock, and a schedule's id is the placeholder: any fixed time will do.
_NO_CLOCK = datetime(1970, 1, 1, tzinfo=timezone.utc)


def compile_schedules(cfg: EnvironmentConfig, repo_root: Path = REPO_ROOT) -> tuple[ScheduledRun, ...]:
    """Every schedule of `cfg`; bad input is a ConfigError naming the job file (or the config) and field."""
    outputs = planned_outputs(cfg)
    return tuple(_compile(cfg, schedule, outputs, repo_root) for schedule in cfg.schedules)


def _compile(cfg: EnvironmentConfig, schedule: ScheduleConfig, outputs, repo_root: Path) -> ScheduledRun:
    from jobs.api import compile_file

    field = f"schedules.{schedule.name}.job"
    placeholder = f"{job_name(schedule.job)}-{PLACEHOLDER_SUFFIX}"
    # From the repository, wherever the app runs; errors name the file as the config does.
    path = str(repo_root / schedule.job)
    try:
        job = compile_file(
            path,
            env=cfg.name,
            overrides=schedule.overrides,
            outputs=outputs,
            repo_root=repo_root,
            now=_NO_CLOCK,
            job_id=placeholder,
        )
    except JobError as exc:
        # The job file's own error (it is what needs fixing), saying which schedule compiled it.
        raise ConfigError(
            schedule.job if exc.file == path else exc.file,
            exc.path,
            f"{exc.problem} (scheduled by {cfg.source} {field})"
            + (f"; allowed: {exc.allowed}" if exc.allowed else ""),
        ) from None
    if job.kind != CUSTOM_JOB:
        raise ConfigError(
            cfg.source, field, f"{schedule.job} is a {job.kind}; allowed: a CustomJob definition"
        )
    if job.delivery != CONTAINER:
        # A package job installs the sdist of the code hash at synthesis from the staging bucket, whose
        # objects expire: the schedule would break once that upload is gone.
        raise ConfigError(
            cfg.source,
            field,
            f"{schedule.job} installs the trainer sdist (trainer.delivery: python-package); "
            "allowed: a job on a container image (trainer.delivery: container), e.g. the trainer image",
        )
    if job.deploy is not None:
        # A scheduled run deploys by its schedule's deploy: only (a canary, when the gate moved the alias); a
        # block it ignored would mislead.
        raise ConfigError(
            schedule.job,
            "deploy",
            f"a scheduled run does not run a definition's deploy block (scheduled by {cfg.source} "
            f"{field}); allowed: no deploy block in a scheduled definition, and the schedule's own "
            f"schedules.{schedule.name}.deploy for a canary (infra/README.md)",
        )
    # Each run must name its own job and write its own output directory: both carry ${job.id}.
    spec = job.body.get(spec_field(job.kind), {})
    per_run = {
        "displayName": job.body.get("displayName"),
        "jobSpec.baseOutputDirectory.outputUriPrefix": (spec.get("baseOutputDirectory") or {}).get(
            "outputUriPrefix"
        ),
    }
    for body_path, value in per_run.items():
        if not (isinstance(value, str) and placeholder in value):
            raise ConfigError(
                schedule.job,
                job.file_path(body_path),
                f"{short(value)} would be the same for every scheduled run, which would overwrite each other "
                f"(scheduled by {cfg.source} {field}); allowed: a value with ${{job.id}}",
            )
    _check_cost(cfg, schedule, job, repo_root)
    timeout = (spec.get("scheduling") or {}).get("timeout")
    seconds = duration_seconds(timeout)
    return ScheduledRun(
        name=schedule.name,
        env=cfg.name,
        job_file=schedule.job,
        cron=schedule.cron,
        time_zone=schedule.time_zone,
        paused=schedule.paused,
        parent=job.parent,
        region=job.region,
        body=json.dumps(job.body, sort_keys=True),
        job_name=job_name(schedule.job),
        run_id_placeholder=placeholder,
        submission_hash=job.submission_hash,
        label=SUBMISSION_LABEL,
        timeout_s=math.ceil(seconds) if seconds is not None and seconds >= 0 else VERTEX_DEFAULT_TIMEOUT_S,
        registration=registration_of(job.registry),
        batch=_batch(cfg, schedule, job, outputs, placeholder),
        deploy=_canary(cfg, schedule, job),
    )


def _check_cost(cfg: EnvironmentConfig, schedule: ScheduleConfig, job, repo_root: Path) -> None:
    """Each run of a schedule is a submit: its ceiling must be within the environment's max_job_cost."""
    from jobs.api import check_cap, priced

    cost, cap = priced(job, cfg, repo_root)
    try:
        check_cap(cost, cap, schedule.job, flag=False)  # no --max-cost here: the `set:` or the cap changes
    except JobError as exc:
        raise ConfigError(
            schedule.job, "cost",
            f"{exc.problem} (scheduled by {cfg.source} schedules.{schedule.name}); allowed: {exc.allowed}",
        ) from None


def _gated_alias(cfg: EnvironmentConfig, schedule: ScheduleConfig, job, key: str, what: str) -> str:
    """`<model>@<first alias>` of the job file's registry block, which `key` of the schedule acts on."""
    if job.registry is None or not job.registry.aliases:
        raise ConfigError(cfg.source, f"schedules.{schedule.name}.{key}",
                          f"{schedule.job} moves no alias in the Model Registry; allowed: a job file whose "
                          f"registry: block has aliases ({what} the first)")
    return f"{job.registry.model_id}@{job.registry.aliases[0]}"


def _canary(cfg: EnvironmentConfig, schedule: ScheduleConfig, job) -> ScheduledDeploy | None:
    """`schedules.<name>.deploy` -> ScheduledDeploy, by run_job.py deploy's rules; a setting they refuse is
    refused here, naming the config's key."""
    from infra.outputs import endpoint_resource_names
    from jobs import api
    from jobs.definition import deployment as rule

    canary = schedule.deploy
    if canary is None:
        return None
    field = f"schedules.{schedule.name}.deploy"
    model = _gated_alias(cfg, schedule, job, "deploy", "the canary deploys")
    keys = {"endpoint": "endpoint", "traffic": "traffic", "machineType": "machine_type",
            "acceleratorType": "accelerator_type", "acceleratorCount": "accelerator_count",
            "minReplicaCount": "min_replicas", "maxReplicaCount": "max_replicas",
            "cpuUtilizationTarget": "cpu_target"}
    settings = {name: getattr(canary, key) for name, key in keys.items() if getattr(canary, key) is not None}
    try:
        names = {name: f"{field}.{key}" for name, key in keys.items()}
        ref, spec = api.deploy_settings(model, settings, names)
    except JobError as exc:
        raise ConfigError(cfg.source, exc.path, f"{exc.problem}; allowed: {exc.allowed}") from None
    endpoints = endpoint_resource_names(cfg)
    if canary.endpoint not in endpoints:
        known = ", ".join(endpoints) or "none: add it to endpoints:"
        raise ConfigError(cfg.source, f"{field}.endpoint",
                          f"{canary.endpoint!r} is not an endpoint of this environment; allowed: {known}")
    request = rule.deploy_request(spec, ref, job.parent, endpoints[canary.endpoint], {}, {})
    deployed_model = {k: v for k, v in request["deployedModel"].items() if k != "displayName"}
    return ScheduledDeploy(
        endpoint=endpoints[canary.endpoint], endpoint_name=canary.endpoint, model=model,
        deployed_model=json.dumps(deployed_model, sort_keys=True), traffic=spec.traffic, new_key=rule.NEW,
        record_prefix=f"{ref}{rule.RECORD}", record_none=rule.RECORD_NONE,
        max_display_name=rule.MAX_DISPLAY_NAME)


def _batch(cfg: EnvironmentConfig, schedule: ScheduleConfig, job, outputs, placeholder: str):
    """`schedules.<name>.batch_predict` -> ScheduledBatch, through batch-predict's own request builder; a
    flag the verb refuses is refused here, naming the config's key for it."""
    from jobs import api
    from jobs.definition.references import resolve

    batch = schedule.batch_predict
    if batch is None:
        return None
    field = f"schedules.{schedule.name}.batch_predict"
    model = _gated_alias(cfg, schedule, job, "batch_predict", "the batch runs on")
    namespaces = {"infra": outputs, "job": {"id": placeholder}}
    try:
        inputs = [resolve(uri, namespaces, cfg.source, f"{field}.input") for uri in batch.input]
        output = resolve(batch.output, namespaces, cfg.source, f"{field}.output")
        request = api.batch_request(
            model, inputs, output, outputs=outputs, now=_NO_CLOCK, stamp=BATCH_STAMP_PLACEHOLDER,
            machine_type=batch.machine_type or api.DEFAULT_MACHINE,
            starting_replicas=batch.starting_replica_count, max_replicas=batch.max_replica_count,
            batch_size=batch.batch_size or api.DEFAULT_BATCH_SIZE, signature=batch.signature,
        )
    except JobError as exc:
        # The verb names its flag (--machine-type); the config's key is the flag's name with "_".
        key = exc.path if exc.path.startswith(field) else f"{field}.{exc.path.lstrip('-').replace('-', '_')}"
        raise ConfigError(cfg.source, key, f"{exc.problem}" + (f"; allowed: {exc.allowed}" if exc.allowed
                                                                else "")) from None
    return ScheduledBatch(body=json.dumps(request["batchPredictionJob"], sort_keys=True), model=model)


def registration_of(registry) -> ScheduledRegistration | None:
    """A compiled definition's registry block (model_registry.RegistrySpec), or None, as the plain
    frozen data the platform stack takes (infra/ never imports jobs/)."""
    if registry is None:
        return None
    return ScheduledRegistration(
        model_id=registry.model_id,
        display_name=registry.display_name,
        aliases=tuple(registry.aliases),
        labels=tuple(sorted(registry.labels.items())),
        metric=registry.metric,
        goal=registry.goal,
        container_spec=json.dumps(registry.container_spec, sort_keys=True),
    )
