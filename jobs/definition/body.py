"""The one reader of a compiled Vertex AI job body (the camelCase REST form that --dry-run prints).

What a CustomJob or HyperparameterTuningJob body is made of is written here once (the kinds, and the field
that holds each one's CustomJobSpec, are ``kinds``'): the worker pools with their
positions and body paths, the program each pool runs (``pythonPackageSpec`` or ``containerSpec``), how an
image reference splits into name and tag, and how a ``gs://`` URI splits into bucket and object. Compile,
validate, the submission plan and the local executor all read bodies through it, so a field has one spelling
in every error: the dotted path ``jobSpec.workerPoolSpecs.0.replicaCount``.

Pure and cheap to import: no I/O, no SDK, nothing from the rest of ``jobs`` but the kinds' table (and
Cloud Storage's names from common.gcs).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from common.gcs import GS
from jobs.definition.kinds import spec_field

STUDY_FIELD = "studySpec"
POOLS_FIELD = "workerPoolSpecs"
PYTHON_PACKAGE_SPEC = "pythonPackageSpec"
CONTAINER_SPEC = "containerSpec"
PROGRAMS = (PYTHON_PACKAGE_SPEC, CONTAINER_SPEC)
# Where each program names the image it runs in.
IMAGE_FIELD = {PYTHON_PACKAGE_SPEC: "executorImageUri", CONTAINER_SPEC: "imageUri"}
# StudySpec ParameterSpec type -> the field holding its values.
VALUE_SPECS = {
    "DOUBLE": "doubleValueSpec",
    "INTEGER": "integerValueSpec",
    "DISCRETE": "discreteValueSpec",
    "CATEGORICAL": "categoricalValueSpec",
}
GOALS = ("MAXIMIZE", "MINIMIZE")

# A google.protobuf.Duration as JSON writes it: seconds, up to nine fractional digits, an 's' ("3600s").
DURATION = re.compile(r"(-?\d+(?:\.\d{1,9})?)s")


def duration_seconds(value: Any) -> float | None:
    """The seconds of a Duration string ("3600s" -> 3600.0); None for anything that is not one."""
    found = DURATION.fullmatch(value) if isinstance(value, str) else None
    return float(found.group(1)) if found else None


def join(path: str, *keys: object) -> str:
    """A field's dotted body path: ``join("jobSpec", "workerPoolSpecs", 0)`` is jobSpec.workerPoolSpecs.0."""
    for key in keys:
        path = f"{path}.{key}" if path else str(key)
    return path


def job_spec(body: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """The CustomJobSpec the replicas of a ``kind`` body run, or None when the body has none."""
    spec = body.get(spec_field(kind))
    return spec if isinstance(spec, dict) else None


@dataclass(frozen=True)
class Pool:
    """One entry of workerPoolSpecs: its position (the workerpoolN name and TF role), body path and fields."""

    index: int
    path: str  # jobSpec.workerPoolSpecs.<index>
    raw: dict[str, Any]  # the WorkerPoolSpec as given ({} for an empty placeholder pool)

    def field(self, *keys: object) -> str:
        """The body path of a field of this pool, e.g. ``pool.field("replicaCount")``."""
        return join(self.path, *keys)

    @property
    def programs(self) -> tuple[str, ...]:
        """Which of pythonPackageSpec/containerSpec the pool has (a valid pool has exactly one)."""
        return tuple(k for k in PROGRAMS if k in self.raw)

    @property
    def program_field(self) -> str:
        """pythonPackageSpec or containerSpec ("" for neither); a package wins where a pool has both."""
        return next(iter(self.programs), "")

    @property
    def program(self) -> dict[str, Any]:
        return (self.raw.get(self.program_field) or {}) if self.program_field else {}

    @property
    def is_package(self) -> bool:
        return self.program_field == PYTHON_PACKAGE_SPEC

    @property
    def is_container(self) -> bool:
        return self.program_field == CONTAINER_SPEC

    @property
    def module(self) -> str:
        """The python package's pythonModule ("" for a container)."""
        return str(self.program.get("pythonModule") or "") if self.is_package else ""

    @property
    def command(self) -> list[Any]:
        """The container's command, overriding its entrypoint ([] for a python package)."""
        return list(self.program.get("command") or []) if self.is_container else []

    @property
    def args(self) -> list[Any]:
        return list(self.program.get("args") or [])

    @property
    def args_field(self) -> str:
        """The args' path relative to the pool."""
        return join(self.program_field, "args")

    @property
    def env(self) -> list[Any]:
        return list(self.program.get("env") or [])

    @property
    def image(self) -> str:
        """The image the program runs in: executorImageUri (python package) or imageUri (container)."""
        return str(self.program.get(IMAGE_FIELD.get(self.program_field, ""), "") or "")

    @property
    def image_field(self) -> str:
        """The image's path relative to the pool."""
        return join(self.program_field, IMAGE_FIELD.get(self.program_field, ""))

    @property
    def machine(self) -> dict[str, Any]:
        return self.raw.get("machineSpec") or {}


def pools(spec: Any, spec_path: str) -> list[Pool]:
    """The worker pools of a CustomJobSpec at ``spec_path``, each at its position (null entries are empty)."""
    raw = spec.get(POOLS_FIELD) if isinstance(spec, dict) else None
    return [
        Pool(i, join(spec_path, POOLS_FIELD, i), pool or {})
        for i, pool in enumerate(raw if isinstance(raw, list) else [])
        if pool is None or isinstance(pool, dict)
    ]


def job_pools(body: dict[str, Any], kind: str) -> list[Pool]:
    """The worker pools the replicas of a ``kind`` body run in, whichever kind of job it is."""
    return pools(body.get(spec_field(kind)), spec_field(kind))


def split_image(uri: str) -> tuple[str, str]:
    """(name, tag) of an image reference; tag "" when it has none (a digest counts as none)."""
    name = uri.split("@", 1)[0]
    head, _, tag = name.rpartition(":")
    return (head, tag) if head and "/" not in tag else (name, "")


def image_name(uri: str) -> str:
    """The image reference without its tag or digest."""
    return split_image(uri)[0]


def is_gs(uri: Any) -> bool:
    return str(uri).startswith(GS)


def split_gs(uri: str) -> tuple[str, str]:
    """(bucket, object name) of ``gs://bucket/object``; ValueError for anything else."""
    if not is_gs(uri) or "/" not in uri[len(GS) :]:
        raise ValueError(f"not a gs://bucket/object URI: {uri!r}")
    bucket, _, name = uri[len(GS) :].partition("/")
    return bucket, name


def gs_bucket(uri: str) -> str:
    """The bucket of ``gs://bucket[/...]``, or of a bucket named without the scheme."""
    return uri.removeprefix(GS).strip("/").split("/", 1)[0]


# A gs:// URI inside a value runs up to a comma, whitespace or the next gs://; ':' and ';' belong to it (a
# path that goes on after them is still the URI's, for gcsfuse and --local alike).
_GS_URI = re.compile(rf"{GS}((?:(?!{GS})[^,\s])*)")


def gs_uris(value: str) -> Iterator[tuple[str, str, str]]:
    """(uri, bucket, object name) of each gs:// URI inside ``value`` (a path, a glob, a comma list, a
    ``--flag=uri``): the one reading of where a URI starts and ends, for validation and ``--local``."""
    for match in _GS_URI.finditer(value):
        bucket, _, name = match.group(1).partition("/")
        yield match.group(0), bucket, name


def rebase_gs(value: str, root: str) -> str:
    """Each gs:// URI in ``value`` (a path, a glob, a comma list, a ``--flag=uri``) moved under ``root``."""
    return value.replace(GS, root.rstrip("/") + "/")


# google.protobuf's JSON for the non-finite doubles a trial's measurement can hold.
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def final_metric(trial: dict[str, Any], metric_id: str) -> float | None:
    """The trial's ``metric_id`` in its finalMeasurement (NaN and infinities included), or None."""
    for m in (trial.get("finalMeasurement") or {}).get("metrics") or []:
        if isinstance(m, dict) and m.get("metricId") == metric_id:
            return measured_number(m.get("value"))
    return None


def measured_number(value: Any) -> float | None:
    """A double as protobuf's JSON writes it (a number, or "NaN", "Infinity", "-Infinity"), or None."""
    if isinstance(value, str):
        return _NON_FINITE.get(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)
