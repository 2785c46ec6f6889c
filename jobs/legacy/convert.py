"""A legacy AI Platform training job -> a job definition of this repo: the pure mapping.

``convert(legacy, contract, options)`` returns the definition (our header + the Vertex AI resource) and two
lists a person reviews: the decisions (each legacy value and what it became, and why) and what could not be
carried over. It reads no file and touches no cloud; every refusal is a JobError that names the legacy file,
field and line (``LegacyJob.error``).

The converted job always runs this repo's trainer (``python -m trainer.task --model M``): a legacy job's own
package ran TensorFlow 1.x or a retired runtime that Vertex AI no longer offers, and its tutorial flags are
the ones this trainer keeps (``--train-files``, ``--eval-files``, ``--first-layer-size``, ...).

This module puts the job together from its steps: ``convert_cluster`` (machines -> worker pools),
``convert_program`` (args -> the trainer's program), ``convert_study`` (hyperparameters -> the study),
``convert_paths`` (gs:// paths and jobDir -> the environment's buckets) and ``convert_settings`` (the rest),
each reading legacy fields through ``convert_fields`` and writing into the ``Conversion`` of
``convert_types``.
"""

from __future__ import annotations

from typing import Any

from jobs.definition.kinds import CUSTOM_JOB, TUNING_JOB, spec_field
from jobs.definition.trainer_spec import TrainerSpec
from jobs.legacy import tables
from jobs.legacy.convert_cluster import worker_pools
from jobs.legacy.convert_fields import check_fields
from jobs.legacy.convert_paths import Buckets, output_dir
from jobs.legacy.convert_program import check_trainer_args, program_spec, trainer_args
from jobs.legacy.convert_settings import (
    add_network,
    add_scheduling,
    encryption_key,
    job_labels,
    note_runtime,
    note_unmapped,
    service_account,
)
from jobs.legacy.convert_study import study_fields
from jobs.legacy.convert_types import Conversion, Options
from jobs.legacy.source import TRAINING_INPUT as T
from jobs.legacy.source import LegacyJob
from trainer.contract import METRIC_FLAG


def convert(legacy: LegacyJob, contract: TrainerSpec, options: Options) -> Conversion:
    training = legacy.training
    check_fields(legacy, T, training, tables.TRAINING_INPUT_FIELDS)
    tuning = training.get("hyperparameters") is not None
    out = Conversion(TUNING_JOB if tuning else CUSTOM_JOB, {})
    if legacy.config_note:
        out.decisions.append(legacy.config_note)
    pools = worker_pools(legacy, out)
    variant = (
        "tpu" if pools[0].machine_type == tables.TPU_MACHINE else "gpu" if pools[0].accelerator else "cpu"
    )
    buckets = Buckets(options.outputs, out, options.bucket_map)
    args, model = trainer_args(legacy, contract, options, out, buckets, tuning, variant)
    study = study_fields(legacy, contract, model, args, out) if tuning else None
    if study is not None:
        metric = study["studySpec"]["metrics"][0]["metricId"]
        if not any(a.startswith(METRIC_FLAG + "=") or a == METRIC_FLAG for a in args):
            args.append(f"{METRIC_FLAG}={metric}")
    check_trainer_args(legacy, contract, args)
    ((program_field, program),) = program_spec(legacy, options, out, variant, args).items()
    spec: dict[str, Any] = {"workerPoolSpecs": []}
    for index, pool in enumerate(pools):
        machine: dict[str, Any] = {"machineType": pool.machine_type}
        if pool.accelerator:
            machine.update(acceleratorType=pool.accelerator, acceleratorCount=pool.count)
        entry: dict[str, Any] = {"machineSpec": machine, "replicaCount": pool.replicas}
        if pool.disk:
            entry["diskSpec"] = pool.disk
        entry[program_field] = program  # one object in every pool: written once, as a YAML anchor
        spec["workerPoolSpecs"].append(entry)
        pool_path = f"{spec_field(out.kind)}.workerPoolSpecs.{index}"
        out.blame.append((f"{pool_path}.machineSpec", pool.legacy_path))
        out.blame.append((f"{pool_path}.{program_field}.args", f"{T}.args"))
    spec["baseOutputDirectory"] = {"outputUriPrefix": output_dir(legacy, out, buckets, tuning)}
    spec["serviceAccount"] = service_account(legacy, options, out)
    spec["tensorboard"] = "${infra.tensorboard}"
    add_scheduling(legacy, out, spec)
    add_network(legacy, out, spec)
    # A value the job validation refuses is named by the legacy field it came from, not by the output's.
    for field_name, legacy_key in (
        ("baseOutputDirectory", "jobDir"),
        ("serviceAccount", "serviceAccount"),
        ("network", "network"),
    ):
        if legacy_key in legacy.training:
            out.blame.append((f"{spec_field(out.kind)}.{field_name}", f"{T}.{legacy_key}"))
    note_runtime(legacy, out, options, variant)
    note_unmapped(legacy, out)

    definition: dict[str, Any] = {
        "kind": out.kind,
        "trainer": {"delivery": options.delivery},
        "displayName": "${job.id}",
        "labels": job_labels(legacy, out, model),
    }
    if study is not None:
        definition.update(study)
    definition[spec_field(out.kind)] = spec
    encryption = encryption_key(legacy, out)
    if encryption:
        definition["encryptionSpec"] = {"kmsKeyName": encryption}
        out.blame.append(("encryptionSpec", f"{T}.encryptionConfig.kmsKeyName"))
    out.definition = definition
    # In the order the legacy file says them, so --strict names the first one a reader meets.
    out.lost.sort(key=lambda item: legacy.where(item[0]).line or 1 << 30)
    return out
