"""Everything checked before any money is spent: the real message schema, then what the API would only reject
after submission (or never): machine/accelerator combinations, pool shapes, study parameter ranges, trial
counts, and what this repo's trainer accepts (its flags and the metrics it reports).

``validate(job, trainer)`` is pure: it reads the compiled job and the trainer's spec and raises a JobError
whose path is the field as written in the definition file.

This module runs the checks in order; they live by area: ``validate_text`` (control characters, gs:// URIs),
``validate_job`` (name, labels, KMS key, service account, network, TensorBoard, outputs), ``validate_pools``
(pool shapes, machines, env, images, replicas), ``validate_scheduling`` (the capacity: Spot, FLEX_START)
and ``validate_trainer`` (the study and the trainer's spec).
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from jobs.definition.compile import CompiledJob
from jobs.definition.errors import JobError
from jobs.definition.kinds import runs_study, spec_field
from jobs.definition.trainer_spec import TrainerSpec
from jobs.definition.validate_job import check_job_spec, check_registered_output, check_top
from jobs.definition.validate_pools import (
    check_image,
    check_replicas_run_the_chiefs_program,
    runs_repo_trainer,
)
from jobs.definition.validate_scheduling import check_scheduling
from jobs.definition.validate_text import check_text
from jobs.definition.validate_trainer import check_registry_metric, check_study, check_trainer_spec


def validate(
    job: CompiledJob,
    trainer: TrainerSpec | Callable[[], TrainerSpec] | None = None,
    trainer_image: str = "",
    *,
    accounts: Collection[str],
) -> None:
    """Raise JobError for the first problem; ``trainer`` may be a loader, called only if the trainer runs.

    ``accounts``: the service accounts a job may run as (the environment's runtime account first, then those
    its config lists in ``job_service_accounts``).
    """
    from jobs.definition.schema import SchemaError, check_message
    from jobs.definition.vertex_types import job_message_class

    try:
        check_message(job.body, job_message_class(job.kind))
    except SchemaError as exc:
        raise job.error(exc.path, exc.problem, exc.allowed) from None

    check_text(job)
    check_top(job)
    check_job_spec(job, spec_field(job.kind), accounts)
    check_scheduling(job)
    study = check_study(job) if runs_study(job.kind) else None
    if job.registry is not None:
        check_registered_output(job)
    trainer_pools = [pool for pool in job.pools() if runs_repo_trainer(pool, trainer_image)]
    for pool in trainer_pools:
        check_image(job, pool, trainer_image)
    check_replicas_run_the_chiefs_program(job, trainer_pools)
    if trainer_pools and trainer is not None:
        try:
            spec = trainer if isinstance(trainer, TrainerSpec) else trainer()
        except Exception as exc:  # noqa: BLE001 - a broken trainer/config.py is bad input, not a crash
            raise JobError(
                "trainer/config.py",
                "build_parser",
                f"cannot read the trainer's flags ({type(exc).__name__}: {exc})",
                "an importable trainer.config that does not import TensorFlow",
            ) from None
        check_trainer_spec(job, spec, trainer_pools, study)
        if job.registry is not None and study is None:
            check_registry_metric(job, spec, trainer_pools[0])
