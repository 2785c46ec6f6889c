"""Each worker pool: its shape (replicas, one program of the header's delivery), machine and accelerators,
environment variables, the image it runs the trainer in, and the chief, workers and parameter servers running
one program with the same args."""

from __future__ import annotations

import re
from typing import Any

from jobs.definition import image, machines
from jobs.definition.body import CONTAINER_SPEC, PROGRAMS, PYTHON_PACKAGE_SPEC, Pool, is_gs, join, split_image
from jobs.definition.compile import CONTAINER, PYTHON_PACKAGE, CompiledJob
from jobs.definition.errors import one_of, short
from trainer.contract import REPLICA_VARIABLES, TRAINER_MODULE

# Vertex AI's EnvVar.name: "a valid C identifier".
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Set by Vertex AI (and by --local) for each replica: a job's own value would fight the runtime contract.
RESERVED_ENV_PREFIXES = ("AIP_", "CLOUD_ML_")


def check_env(job: CompiledJob, pool: Pool) -> None:
    seen: dict[str, int] = {}
    for i, variable in enumerate(pool.env):
        where = pool.field(pool.program_field, "env", i)
        name = variable.get("name") if isinstance(variable, dict) else None
        if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
            raise job.error(
                join(where, "name"),
                f"{short(name)} is not an environment variable name",
                "a C identifier: [A-Za-z_][A-Za-z0-9_]*",
            )
        if name in REPLICA_VARIABLES or name.startswith(RESERVED_ENV_PREFIXES):
            raise job.error(
                join(where, "name"),
                f"{name} is set by Vertex AI for each replica",
                f"a name outside {', '.join(p + '*' for p in RESERVED_ENV_PREFIXES)} "
                f"and {one_of(REPLICA_VARIABLES)}",
            )
        if name in seen:
            raise job.error(
                join(where, "name"),
                f"{name} is set twice (first at env.{seen[name]})",
                "each name once per pool",
            )
        seen[name] = i


def check_pool(job: CompiledJob, pool: Pool) -> None:
    path, index = pool.path, pool.index
    if not pool.raw:
        if index == 0:
            raise job.error(
                path,
                "the first pool (the chief) cannot be empty",
                "machineSpec, replicaCount, and pythonPackageSpec or containerSpec",
            )
        return  # an empty placeholder pool keeps later pools at their positions (e.g. no parameter servers)
    replicas = int(pool.raw.get("replicaCount", 0) or 0)
    if replicas < 1:
        raise job.error(join(path, "replicaCount"), f"replicaCount is {replicas}", "an integer >= 1")
    if index == 0 and replicas != 1:
        raise job.error(
            join(path, "replicaCount"),
            f"the first pool is the chief and has {replicas} replicas",
            "1; put further replicas in pool 1 (workers)",
        )
    programs = pool.programs
    if len(programs) != 1:
        raise job.error(
            path,
            f"has {' and '.join(programs) or 'neither'} of {'/'.join(PROGRAMS)}",
            f"exactly one of {', '.join(PROGRAMS)}",
        )
    wanted = PYTHON_PACKAGE_SPEC if job.delivery == PYTHON_PACKAGE else CONTAINER_SPEC
    if programs[0] != wanted:
        raise job.error(
            join(path, programs[0]),
            f"the header says trainer.delivery: {job.delivery}",
            f"{wanted} in every pool, or trainer.delivery: "
            f"{CONTAINER if job.delivery == PYTHON_PACKAGE else PYTHON_PACKAGE}",
        )
    if pool.is_package:
        package = pool.program
        for key in ("executorImageUri", "pythonModule"):
            if not package.get(key):
                raise job.error(
                    join(path, f"pythonPackageSpec.{key}"),
                    "missing",
                    "a prebuilt training image URI" if key == "executorImageUri" else TRAINER_MODULE,
                )
        for i, uri in enumerate(package.get("packageUris") or []):
            if not is_gs(uri):
                raise job.error(
                    join(path, f"pythonPackageSpec.packageUris.{i}"),
                    f"{short(uri)} is not a gs:// URI",
                    "${job.package_uri} (the trainer sdist run_job.py uploads)",
                )
    elif not pool.image:
        allowed = "${infra.trainer_image}:<variant>-${job.image_tag}"
        raise job.error(pool.field(pool.image_field), "missing", allowed)
    machine = pool.raw.get("machineSpec")
    if not machine:
        raise job.error(join(path, "machineSpec"), "missing", "machineSpec: {machineType: n1-standard-4}")
    _check_machine(job, join(path, "machineSpec"), machine)


def _check_machine(job: CompiledJob, path: str, machine: dict[str, Any]) -> None:
    machine_type = machine.get("machineType", "")
    family = machines.family_of(machine_type)
    if family is None:
        raise job.error(
            join(path, "machineType"),
            f"unknown machine type {short(machine_type)}",
            machines.allowed_types(machine_type),
        )
    accelerator = machine.get("acceleratorType", "ACCELERATOR_TYPE_UNSPECIFIED")
    count = int(machine.get("acceleratorCount", 0) or 0)
    has_accelerator = accelerator != "ACCELERATOR_TYPE_UNSPECIFIED"
    if has_accelerator and count == 0:
        raise job.error(
            join(path, "acceleratorCount"),
            f"acceleratorType {accelerator} without a count",
            one_of(family.allowed_counts(machine_type, accelerator)) or "an acceleratorCount",
        )
    if count and not has_accelerator:
        raise job.error(
            join(path, "acceleratorType"),
            f"acceleratorCount {count} without a type",
            one_of(family.accelerators) or f"no accelerators on {machine_type}",
        )
    if has_accelerator and accelerator not in family.accelerators:
        raise job.error(
            join(path, "acceleratorType"),
            f"{machine_type} does not take {accelerator}",
            one_of(family.accelerators) if family.accelerators else f"none: {family.name} is CPU-only",
        )
    if not has_accelerator and family.accelerator_required:
        raise job.error(
            join(path, "acceleratorType"),
            f"{machine_type} comes with accelerators; none given",
            one_of(family.accelerators),
        )
    if has_accelerator and count not in family.allowed_counts(machine_type, accelerator):
        raise job.error(
            join(path, "acceleratorCount"),
            f"{count} x {accelerator} on {machine_type}",
            one_of(family.allowed_counts(machine_type, accelerator)),
        )
    topology = machine.get("tpuTopology")
    allowed_topologies = family.allowed_topologies(machine_type)
    if topology and not allowed_topologies:
        raise job.error(
            join(path, "tpuTopology"),
            f"{machine_type} takes no tpuTopology",
            "ct5lp-hightpu-* (TPU v5e) machine types only",
        )
    if allowed_topologies and topology not in allowed_topologies:
        raise job.error(
            join(path, "tpuTopology"),
            f"topology {short(topology)} on {machine_type}",
            one_of(allowed_topologies),
        )


def check_image(job: CompiledJob, pool: Pool, trainer_image: str) -> None:
    """The image a pool runs the trainer in must be one the trainer runs on, built for the pool's machine."""
    wanted = image.variant_for_machine(pool.machine)
    machine = pool.machine.get("acceleratorType") or "no accelerator"
    where, uri = pool.field(pool.image_field), pool.image
    if pool.is_package:
        prebuilt = image.parse_prebuilt(uri)
        runnable = (
            f"{one_of(image.RUNNABLE_PREBUILT)} (TensorFlow >= "
            f"{'.'.join(map(str, image.PREBUILT_TF_FLOOR))} with Keras 3), or trainer.delivery: container "
            "with ${infra.trainer_image}"
        )
        if prebuilt is None or prebuilt.framework != "tf":
            raise job.error(where, f"{short(uri)} is not a prebuilt TensorFlow training image", runnable)
        if prebuilt.version < image.PREBUILT_TF_FLOOR:
            keras = " (Keras 2)" if prebuilt.version < (2, 16) else ""
            raise job.error(
                where,
                f"the trainer cannot run on TensorFlow {prebuilt.version[0]}.{prebuilt.version[1]}{keras}",
                runnable,
            )
        if prebuilt.variant != wanted:
            fitting = [u for u in image.RUNNABLE_PREBUILT if f"/tf-{wanted}." in u]
            raise job.error(
                where,
                f"a tf-{prebuilt.variant} image on a machine with {machine}",
                one_of(fitting)
                if fitting
                else f"${{infra.trainer_image}}:{wanted}-${{job.image_tag}} "
                f"(no prebuilt {wanted} image runs the trainer)",
            )
        return
    name, tag = split_image(uri)
    if name != trainer_image:
        return  # a `python -m trainer...` command in another image: that image is the user's business
    found = image.TAG.fullmatch(tag)
    if not found:
        raise job.error(
            where,
            f"the trainer image tag {short(tag or '(none)')} cannot be resolved to a build",
            f"${{infra.trainer_image}}:{wanted}-${{job.image_tag}} (built from this checkout), or "
            f"{wanted}-<hash> of an earlier build",
        )
    if found.group(1) != wanted:
        raise job.error(
            where,
            f"the {found.group(1)} trainer image on a machine with {machine}",
            f"the {wanted} image: ${{infra.trainer_image}}:{wanted}-${{job.image_tag}}",
        )


def runs_repo_trainer(pool: Pool, trainer_image: str) -> bool:
    if pool.is_package:
        return pool.module == TRAINER_MODULE
    command = " ".join(pool.command)
    return bool(trainer_image and split_image(pool.image)[0] == trainer_image) or TRAINER_MODULE in command


def check_replicas_run_the_chiefs_program(job: CompiledJob, trainer_pools: list[Pool]) -> None:
    """Chief, workers and parameter servers of a trainer job run one image and module: a pool on another
    image (a --set on one pool, an edited anchor) joins no cluster, and the others wait for it forever."""
    if not any(pool.index in (0, 1, 2) for pool in trainer_pools):
        return
    replicas = [pool for pool in job.pools() if pool.raw and pool.index in (0, 1, 2)]
    chief = replicas[0]
    for pool in replicas[1:]:
        if (pool.program_field, pool.image, pool.module) != (chief.program_field, chief.image, chief.module):
            raise job.error(
                pool.field(pool.image_field),
                f"worker pool {pool.index} runs another program than the chief (pool 0)",
                f"the chief's image {short(chief.image)}: pools 0-2 are replicas of one multi-worker program",
            )


def check_replicas_agree(job: CompiledJob, trainer_pools: list[Pool]) -> None:
    """Chief, workers and parameter servers are replicas of one distributed program: with different args (say
    a --set that changed the chief's epochs only) the cluster waits forever in its first collective op."""
    chief = next((pool for pool in trainer_pools if pool.index == 0), None)
    if chief is None:
        return
    chief_args = chief.args
    for pool in trainer_pools:
        index, path, args_path, args = pool.index, pool.path, pool.args_field, pool.args
        if index in (1, 2) and args != chief_args:
            differs = next(
                (i for i, (a, b) in enumerate(zip(args, chief_args, strict=False)) if a != b),
                min(len(args), len(chief_args)),
            )
            raise job.error(
                join(path, f"{args_path}.{differs}") if differs < len(args) else join(path, args_path),
                f"worker pool {index} runs the trainer with other args than the chief (pool 0)",
                "the same args in pools 0-2: they are replicas of one multi-worker program",
            )
