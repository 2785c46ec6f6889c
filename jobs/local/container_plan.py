"""What ``run_job.py --local --container`` runs, as data: a job's replicas (and ``serve --container``'s
server) as containers of the trainer image built from this checkout, planned without an engine.

Each replica is one container run as Vertex AI runs it: the image's own entrypoint (``python -m
trainer.task``) with the pool's args, or ``containerSpec.command`` in its place; the runtime contract of
``environment.py`` (AIP_* folders, CLUSTER_SPEC/TF_CONFIG, the trial's variables, the pool's env); and the
outputs, logs and report where ``--local`` puts them, so the two runs compare file for file. Deliberate
choices, each because of what a container is:

- The local root is mounted at its own absolute path, so every gs:// URI mapped by ``environment.to_local``
  means the same file inside the container as outside: the args, env and AIP_* folders are --local's own.
- A multi-replica job gets a network of its own; each replica is reached by its name (``workerpool1-0``) on
  port 2222, as in Vertex AI's CLUSTER_SPEC, instead of free ports of 127.0.0.1.
- The container runs as the user who runs the command (``--user UID:GID``; rootless podman maps it with
  ``--userns keep-id``), not the image's uid 10001: what it writes under the local root is that user's, as
  after --local, and no folder's permissions change. HOME is /tmp, which any uid may write.
- ``--init``: a small init is PID 1 and passes the stop signal on; the trainer (or server) as PID 1 would
  ignore SIGTERM until it installs its own handler.
- Values are passed by name (``-e NAME``, the value in the engine client's environment), never on its
  command line: env values may hold newlines, and other users can read command lines.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from jobs.definition import body as job_body
from jobs.definition.body import image_name, split_image
from jobs.definition.errors import short
from jobs.definition.image import VARIANTS
from jobs.local import environment
from jobs.local.spec import JobSpec, LocalRunError
from trainer.contract import (
    HP_METRIC_FILE,
    SERVE_MODULE,
    SERVING_DEFAULTS,
    STORAGE_URI,
    TRAINER_MODULE,
    WORKER_POOLS,
)
from trainer.contract import HTTP_PORT as HTTP_PORT_VAR

CPU, GPU, TPU = VARIANTS

# The port every replica's CLUSTER_SPEC address has on Vertex AI (each replica is a machine of its own).
CLUSTER_PORT = 2222
# The label every container and network of one run carries (its run id): what is stopped and removed at the
# end, and what the tests list to find orphans.
RUN_LABEL = "jobs.local.run"
# Which command started it (host:pid): a later run removes what a command killed outright (SIGKILL) left.
OWNER_LABEL = "jobs.local.owner"
HOME = "/tmp"
# The port the server listens on inside its container (Vertex AI's containerSpec.ports default).
SERVING_PORT = int(SERVING_DEFAULTS[HTTP_PORT_VAR])
# What a bind mount given as -v SOURCE:TARGET cannot carry in a path.
_MOUNT_UNSAFE = (":", ",", "\n")


@dataclass(frozen=True)
class Identity:
    """Who the container runs as: ``uid:gid`` and, for rootless podman, the user namespace that maps it."""

    user: str
    userns: str = ""


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    read_only: bool = False


@dataclass(frozen=True)
class Container:
    """One ``run`` of an engine (docker or podman take the same flags for all of these)."""

    name: str
    image: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    mounts: tuple[Mount, ...]
    labels: tuple[tuple[str, str], ...]
    identity: Identity
    entrypoint: tuple[str, ...] = ()  # () runs the image's own ENTRYPOINT
    network: str = ""
    hostname: str = ""
    ports: tuple[tuple[str, int, int], ...] = ()  # (host address, host port, container port)

    def run_args(self, engine_flags: tuple[str, ...] = (), remove: bool = True) -> list[str]:
        """The arguments of ``ENGINE run`` (without the engine's own binary and global flags); ``remove``:
        the engine removes the container when it exits (``--rm``)."""
        argv = ["run", *(["--rm"] if remove else []), "--init", "--name", self.name]
        argv += ["--user", self.identity.user]
        if self.identity.userns:
            argv += ["--userns", self.identity.userns]
        for key, value in self.labels:
            argv += ["--label", f"{key}={value}"]
        if self.network:
            argv += ["--network", self.network, "--network-alias", self.hostname]
        if self.hostname:
            argv += ["--hostname", self.hostname]
        for mount in self.mounts:
            argv += ["--volume", f"{mount.source}:{mount.target}" + (":ro" if mount.read_only else "")]
        for name, _ in self.env:
            argv += ["--env", name]
        for address, host_port, port in self.ports:
            argv += ["--publish", f"{address}:{host_port}:{port}"]
        argv += list(engine_flags)
        if self.entrypoint:
            argv += ["--entrypoint", self.entrypoint[0]]
        return [*argv, self.image, *self.entrypoint[1:], *self.args]

    def client_env(self) -> dict[str, str]:
        """The values of ``--env NAME``: the engine client's environment carries them."""
        return dict(self.env)


@dataclass(frozen=True)
class Replica:
    name: str  # workerpool0-0: its log file's name and its CLUSTER_SPEC task
    log_path: Path
    container: Container


@dataclass(frozen=True)
class JobPlan:
    """A job's (or a trial's) containers, the network they share ("" for one replica), and every folder the
    run makes and path it writes before the first container starts."""

    replicas: tuple[Replica, ...]
    network: str
    folders: tuple[Path, ...]
    writes: tuple[Path, ...] = field(default=())


def pool_images(job: JobSpec, spec_path: str, trainer_image: str, image_tag: str) -> dict[int, str]:
    """Each pool's image, when it is one ``--container`` can build here: the trainer image's cpu variant of
    this checkout (``cpu-<image_tag>``). Refused, naming the field: a python package (it runs on Vertex AI's
    prebuilt image, which cannot be pulled here), another image, another checkout's tag, and the gpu and tpu
    variants (built for accelerators this machine's engine does not pass through; --local runs them on
    CPU)."""
    wanted = f"{CPU}-{image_tag}"
    ours = f"{trainer_image or '${infra.trainer_image}'}:{wanted}"
    images = {}
    for pool in job_body.pools(job.raw, spec_path):
        if not pool.raw:
            continue
        if pool.is_package:
            raise LocalRunError(
                pool.field(pool.program_field, "executorImageUri"),
                f"{short(pool.image)} is Vertex AI's prebuilt image, which cannot be pulled here",
                f"delivery: container (the trainer image built from this checkout, {ours}); --local runs "
                "this job as it is",
            )
        name, tag = split_image(pool.image)
        where = pool.field(pool.program_field, "imageUri")
        if not trainer_image or name != image_name(trainer_image):
            raise LocalRunError(where, f"{short(pool.image)} cannot be built here",
                                f"the trainer image built from this checkout, {ours}")
        variant = tag.split("-", 1)[0]
        if variant in (GPU, TPU):
            raise LocalRunError(
                where,
                f"the {variant} image is skipped: it is built for {variant.upper()}s, which containers on "
                f"this machine cannot use (--container builds the {CPU} target only)",
                f"a {CPU} image ({ours}); --local runs this job on CPU",
            )
        if tag != wanted:
            raise LocalRunError(where, f"{short(tag)} is not this checkout's image",
                                f"{wanted}, the image --container builds")
        images[pool.index] = pool.image
    return images


def run_name(run_id: str, trial_id: str | None) -> str:
    """The prefix of a job's (or a trial's) containers, and its network's name."""
    return f"{run_id}-t{trial_id}" if trial_id else run_id


def plan_job(
    job: JobSpec,
    *,
    images: Mapping[int, str],
    run_id: str,
    identity: Identity,
    run_dir: Path,
    base_local: Path | None,
    local_root: Path,
    trial_id: str | None = None,
    extra_env: Mapping[str, str] | None = None,
    extra_args: tuple[str, ...] = (),
    threads: int = 1,
    cpu_only: bool = True,
    owner: str = "",
) -> JobPlan:
    """One container per replica of each pool (``images``: each pool index's image), as
    ``launcher.start_job`` starts one process per replica; pure: nothing is checked on disk or started."""
    extra_env = dict(extra_env or {})
    _mountable(local_root, "--local-root")
    prefix = run_name(run_id, trial_id)
    multi = job.replica_total > 1
    names = [f"{WORKER_POOLS[p.index]}-{i}" for p in job.pools for i in range(p.replica_count)]
    clusters = environment.cluster_envs(
        job, trial_id, [f"{name}:{CLUSTER_PORT}" for name in names] if multi else None
    )
    dirs = environment.output_dirs(base_local, trial_id)
    folders = [run_dir, *(Path(d) for d in dirs.values())]
    writes = list(folders)
    if HP_METRIC_FILE in extra_env:
        metric = Path(extra_env[HP_METRIC_FILE])
        writes += [metric.parent, metric]
    mounts = (Mount(str(local_root), str(local_root)),)
    labels = ((RUN_LABEL, run_id),) + (((OWNER_LABEL, owner),) if owner else ())
    replicas = []
    for pool in job.pools:
        module, args = pool.python_argv[1], pool.python_argv[2:]
        # The image's ENTRYPOINT is `python -m trainer.task`; another module replaces it, as a command does.
        entrypoint = () if module == TRAINER_MODULE else ("python", "-m", module)
        args = tuple(environment.to_local(a, local_root, pool.args_path) for a in args)
        args += tuple(environment.to_local(a, local_root, "studySpec.parameters") for a in extra_args)
        for i in range(pool.replica_count):
            name = f"{WORKER_POOLS[pool.index]}-{i}"
            env = environment.replica_env(
                pool,
                base_env={},
                local_root=local_root,
                repo_root=local_root,
                dirs=dirs,
                cluster=clusters.get((pool.index, i), {}),
                extra=extra_env,
                threads=threads,
                cpu_only=cpu_only,
            )
            env.pop("PYTHONPATH")  # the image sets its own (/app), where its trainer is
            env["HOME"] = HOME
            container = Container(
                name=f"{prefix}-{name}",
                image=images[pool.index],
                args=args,
                env=tuple(sorted(env.items())),
                mounts=mounts,
                labels=labels,
                identity=identity,
                entrypoint=entrypoint,
                network=prefix if multi else "",
                hostname=name,
            )
            log_path = run_dir / f"{name}.log"
            writes.append(log_path)
            replicas.append(Replica(name, log_path, container))
    return JobPlan(tuple(replicas), prefix if multi else "", tuple(folders), tuple(writes))


def plan_server(
    model_dir: Path,
    *,
    image: str,
    name: str,
    identity: Identity,
    address: str,
    host_port: int,
    labels: Mapping[str, str],
) -> Container:
    """The serving container as a Model Registry entry runs it on Vertex AI: ``python -m serving`` on the
    cpu image, AIP_STORAGE_URI the model (mounted read-only at its own path), AIP_HTTP_PORT 8080 and the
    routes; port 8080 published on ``address``:``host_port``."""
    model = str(model_dir)
    _mountable(model_dir, "MODEL_DIR")
    env = {**SERVING_DEFAULTS, STORAGE_URI: model, HTTP_PORT_VAR: str(SERVING_PORT), "HOME": HOME}
    return Container(
        name=name,
        image=image,
        args=(),
        env=tuple(sorted(env.items())),
        mounts=(Mount(model, model, read_only=True),),
        labels=tuple(sorted(labels.items())),
        identity=identity,
        entrypoint=("python", "-m", SERVE_MODULE),
        ports=((address, host_port, SERVING_PORT),),
    )


def _mountable(path: Path, field: str) -> None:
    if any(c in str(path) for c in _MOUNT_UNSAFE):
        raise LocalRunError(
            field,
            f"{short(str(path))} holds ':', ',' or a newline, which a container's bind mount cannot carry",
        )
