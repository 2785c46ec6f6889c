"""Trainer image builds as data: which images a compiled job runs, and the Cloud Build request for each.

Pure like ``jobs.definition.compile``: the image hash and the infra outputs come in as arguments, so
``--dry-run`` prints exactly the request that a submission sends when Artifact Registry lacks the tag. The
build runs ``docker build --target <variant>`` on the context tarball ``jobs.definition.image.write_context``
makes (uploaded to the staging bucket under its hash), pushes the image through Cloud Build's ``images`` field
(which also records the digest), and runs as the stack's builder service account with Cloud Logging only, the
setting a user-specified build service account requires when no logs bucket is given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jobs.definition.body import gs_bucket, image_name, split_image
from jobs.definition.errors import JobError, short
from jobs.definition.image import DOCKERFILE, TAG

# Cloud Build's own docker builder (Google keeps it current; cached on the build workers).
DOCKER_BUILDER = "gcr.io/cloud-builders/docker"
# The GPU variant installs the CUDA wheels (several GB): a larger disk and machine keep it inside the timeout.
BUILD_OPTIONS = {"machineType": "E2_HIGHCPU_8", "diskSizeGb": "100", "logging": "CLOUD_LOGGING_ONLY"}
BUILD_TIMEOUT = "3600s"
CONTEXT_FOLDER = "builds"


@dataclass(frozen=True)
class ImageBuild:
    """One trainer image a job runs: where it comes from and how to build it if the tag is missing."""

    image: str  # <trainer_image>:<variant>-<hash>
    variant: str
    image_hash: str  # the hash in the tag
    current: bool  # whether this checkout's context has that hash (only then can it be built from here)
    context_uri: str  # gs://<staging>/builds/<hash>.tar.gz
    parent: str  # projects/<p>/locations/<region>
    request: dict[str, Any]  # CreateBuildRequest, JSON form
    file: str = ""  # the definition, field and line that name the image, for errors
    field: str = ""
    line: int | None = None

    def error(self, problem: str, allowed: str) -> JobError:
        where = f" (line {self.line})" if self.line else ""
        return JobError(self.file, self.field, problem + where, allowed)

    @property
    def build_tag(self) -> str:
        """Cloud Build tag that finds a build of this image still running (a retried submit reuses it)."""
        return f"trainer-{self.variant}-{self.image_hash}"


def image_build(
    image: str,
    outputs: Mapping[str, str],
    image_hash: str,
    *,
    file: str = "",
    field: str = "",
    line: int | None = None,
) -> ImageBuild:
    """The build of ``image`` (``<trainer_image>:<variant>-<hash>``), a tag jobs.definition.validate
    accepted."""
    _, tag = split_image(image)
    found = TAG.fullmatch(tag)
    if not found:
        raise JobError(
            file or "--variant",
            field or "imageUri",
            f"{short(image)} has no build tag",
            "<variant>-<hash>, e.g. ${infra.trainer_image}:cpu-${job.image_tag}",
        )
    variant, tag_hash = found.groups()
    project, region = outputs.get("project", ""), outputs.get("region", "")
    staging = outputs.get("staging_bucket", "")
    builder = outputs.get("builder_service_account", "")
    if not builder:
        raise JobError(
            file or "--env",
            "${infra.builder_service_account}",
            "no value in the environment's outputs: the stack predates image builds",
            "redeploy the stack (cdktn deploy <env> --outputs-file .infra-outputs/<env>.json)",
        )
    bucket = gs_bucket(staging)
    obj = f"{CONTEXT_FOLDER}/{tag_hash}.tar.gz"
    parent = f"projects/{project}/locations/{region}"
    build_tag = f"trainer-{variant}-{tag_hash}"
    # `parent` alone, no `projectId`: with both set, the REST binding of the global endpoint matches first and
    # the build would run outside the region.
    request = {
        "parent": parent,
        "build": {
            "source": {"storageSource": {"bucket": bucket, "object": obj}},
            "steps": [
                {
                    "name": DOCKER_BUILDER,
                    "args": ["build", "--target", variant, "--file", DOCKERFILE, "--tag", image, "."],
                }
            ],
            "images": [image],
            "serviceAccount": f"projects/{project}/serviceAccounts/{builder}",
            "options": dict(BUILD_OPTIONS),
            "timeout": BUILD_TIMEOUT,
            "tags": ["trainer", variant, build_tag],
        },
    }
    return ImageBuild(
        image=image,
        variant=variant,
        image_hash=tag_hash,
        current=tag_hash == image_hash,
        context_uri=f"gs://{bucket}/{obj}",
        parent=parent,
        request=request,
        file=file,
        field=field,
        line=line,
    )


def job_builds(job, outputs: Mapping[str, str], image_hash: str) -> list[ImageBuild]:
    """Each distinct trainer image the job's pools run, in pool order (a job may mix variants)."""
    trainer_image = str(outputs.get("trainer_image", ""))
    builds: dict[str, ImageBuild] = {}
    for pool in job.pools():
        # Only a container names the trainer image; a python package runs in a prebuilt image.
        image = pool.image if pool.is_container else ""
        if not trainer_image or image_name(image) != trainer_image or image in builds:
            continue
        field = job.file_path(pool.field(pool.image_field))
        builds[image] = image_build(
            image, outputs, image_hash, file=job.file, field=field, line=job.document.line_of(field)
        )
    return list(builds.values())


def serving_builds(job, outputs: Mapping[str, str], image_hash: str) -> list[ImageBuild]:
    """The trainer image a registered version is served from (the cpu variant), which must exist before the
    upload names it, whatever the job itself runs on (a gpu or tpu image, or the sdist on a prebuilt one)."""
    spec = job.registry
    if spec is None or not spec.serving_image:
        return []
    field = "registry.serving"  # its line, or the block's where serving is left to its default
    line = job.document.line_of(field)
    return [image_build(spec.serving_image, outputs, image_hash, file=job.file, field=field, line=line)]


def variant_image(outputs: Mapping[str, str], variant: str, image_hash: str) -> str:
    return f"{outputs.get('trainer_image', '')}:{variant}-{image_hash}"
