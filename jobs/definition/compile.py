"""Definition -> Vertex AI request: the pure heart of the jobs layer.

``compile_job(document, context)`` normalizes either form of definition (ours, with a thin header, or a plain
gcloud config file), resolves references, names the job and labels it with its submission hash, and returns
the exact REST body that gets POSTed together with its parent. No I/O, no clock, no SDK: the run-time values
(time, code hash, infra outputs) come in through ``Context`` so the same inputs always give the same request.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from common.submission import SUBMISSION_LABEL
from infra.outputs import as_planned
from jobs.definition import body as job_body
from jobs.definition.body import GOALS
from jobs.definition.deployment import DEPLOY_FIELD, DeployError, DeployPlan, parse_block
from jobs.definition.errors import FieldError, JobError, one_of, short
from jobs.definition.gcloud_flags import FlagOverride, JobFlags, apply_flags
from jobs.definition.kinds import CUSTOM_JOB, JOB_KINDS, KINDS, TUNING_JOB, runs_study, spec_field
from jobs.definition.loader import Document
from jobs.definition.model_registry import (
    REGISTRY_FIELD,
    TRAINER_SERVING_IMAGE,
    RegistryError,
    RegistrySpec,
    parse_registry,
)
from jobs.definition.references import resolve

PYTHON_PACKAGE = "python-package"
CONTAINER = "container"
DELIVERIES = (PYTHON_PACKAGE, CONTAINER)


@dataclass(frozen=True)
class Context:
    """Everything outside the file that shapes the request."""

    env: str
    outputs: Mapping[str, str]
    code_hash: str
    now: datetime
    sdist_name: str = "trainer-0.1.0.tar.gz"
    # Content hash of the trainer image's build context (jobs.definition.image): the tag in ${job.image_tag}.
    image_hash: str = ""
    flags: JobFlags = field(default_factory=JobFlags)
    overrides: tuple[str, ...] = ()
    # Given, the job id instead of <name>-<now>-<hash>: a scheduled run's placeholder (jobs.schedule).
    job_id: str = ""


@dataclass(frozen=True)
class CompiledJob:
    file: str
    kind: str
    delivery: str
    project: str
    region: str
    body: dict[str, Any]
    job_id: str
    submission_hash: str
    package_uri: str
    document: Document
    image_hash: str = ""  # this checkout's trainer image hash (Context.image_hash)
    # The Model Registry block (model_registry.py): what run_job.py and the scheduled workflow register
    # after the job succeeds; None when the definition has none.
    registry: RegistrySpec | None = None
    # The deploy block (deployment.py): the gated alias deployed once registered; None without one.
    deploy: DeployPlan | None = None
    # The body path of a field minus this prefix is its path in the file (gcloud CustomJobSpec files have no
    # jobSpec level of their own).
    prefix: str = ""
    # {body path: gcloud flag} of the fields a flag set (jobs.definition.gcloud_flags): their errors name it.
    flagged: Mapping[str, str] = field(default_factory=dict)
    # The file's values a flag changed (gcloud's precedence), each reported on stderr by run_job.py.
    flag_overrides: tuple[FlagOverride, ...] = ()

    @property
    def parent(self) -> str:
        return f"projects/{self.project}/locations/{self.region}"

    @property
    def request_field(self) -> str:
        return JOB_KINDS[self.kind].request_field

    def request(self) -> dict[str, Any]:
        """The Create*JobRequest in its JSON form: what --dry-run prints and what the client sends."""
        return {"parent": self.parent, self.request_field: self.body}

    def file_path(self, body_path: str) -> str:
        if self.prefix and body_path.startswith(self.prefix):
            return body_path[len(self.prefix) :]
        return body_path

    def flag_of(self, body_path: str) -> str | None:
        """The flag that set the field at ``body_path`` (or a field above it), if a flag did."""
        found = [p for p in self.flagged if body_path == p or body_path.startswith(p + ".")]
        return self.flagged[max(found, key=len)] if found else None

    def error(self, body_path: str, problem: str, allowed: str = "") -> JobError:
        path = self.file_path(body_path)
        flag = self.flag_of(body_path)
        if flag:  # the value came from the command line: name the flag, then the field it set
            return JobError(self.file, f"{flag} ({path})", problem, allowed)
        line = self.document.line_of(path)
        return JobError(self.file, path, f"{problem} (line {line})" if line else problem, allowed)

    def pools(self) -> list[job_body.Pool]:
        """Each worker pool, whichever kind of job this is (read by jobs.definition.body)."""
        return job_body.job_pools(self.body, self.kind)

    def worker_pools(self) -> list[tuple[str, dict[str, Any]]]:
        """(body path, pool) for each worker pool: the plain-dict view of :meth:`pools`."""
        return [(pool.path, pool.raw) for pool in self.pools()]

    def installs_repo_trainer(self) -> bool:
        """Whether a pool installs this checkout's trainer sdist, so it must be built and uploaded."""
        return any(
            pool.is_package and self.package_uri in (pool.program.get("packageUris") or [])
            for pool in self.pools()
        )


def job_name(file: str) -> str:
    """census_tuning.yaml -> census-tuning: the stem, lowercased, safe for ids, labels and paths."""
    stem = re.split(r"[\\/]", file)[-1].rsplit(".", 1)[0]
    return re.sub(r"[^a-z0-9]+", "-", stem.lower()).strip("-")[:40] or "job"


def submission_hash(body: Mapping[str, Any], context: Context, parent: str, registry: Any = None) -> str:
    """Same definition + same code + same overrides -> same hash, so a retried submit finds its job."""
    # The image hash counts only where the body (or the registry's serving container) names the image it
    # tags: a prebuilt-image job stays the same submission when only the Dockerfile changed.
    names_image = "${job.image_tag}" in json.dumps(body, default=str) or registry is not None
    material = {
        "body": body,
        "code": context.code_hash,
        "image": context.image_hash if names_image else "",
        "overrides": list(context.overrides),
        "parent": parent,
    }
    if registry is not None:  # only then: definitions without a block keep their hashes (and job ids)
        material["registry"] = registry
    canonical = json.dumps(material, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _planned(value: Any, swaps: Mapping[str, str]) -> Any:
    """``value`` with each deploy-only output value in its planned form (infra.outputs.as_planned)."""
    if not swaps:
        return value
    if isinstance(value, str):
        for deployed, planned in swaps.items():
            value = value.replace(deployed, planned)
        return value
    if isinstance(value, Mapping):
        return {k: _planned(v, swaps) for k, v in value.items()}
    if isinstance(value, list):
        return [_planned(v, swaps) for v in value]
    return value


def compile_job(document: Document, context: Context) -> CompiledJob:
    file = document.file
    outputs = {k: str(v) for k, v in context.outputs.items()}
    data = resolve(document.data, {"infra": outputs}, file, final=False)
    # A header block beside registry (a gcloud config has no header: there it stays an unknown field).
    deploy_block = data.pop(DEPLOY_FIELD, None) if "kind" in data else None
    kind, delivery, body, prefix, registry_block = _normalize(data, file)
    project = outputs.get("project", "")
    placed = apply_flags(body, kind, context.flags, document, prefix, project)
    _defaults(body, kind)

    region = context.flags.region or outputs.get("region", "")
    for key, value in (("project", project), ("region", region)):
        if not value:
            raise JobError(
                file,
                f"${{infra.{key}}}",
                "no value in the environment's outputs",
                "an environment whose infra config defines it",
            )
    parent = f"projects/{project}/locations/{region}"
    # Content-addressed folder, original file name: pip checks an sdist's file name against its metadata.
    package_uri = f"{outputs.get('staging_bucket', '')}/packages/{context.code_hash}/{context.sdist_name}"
    if delivery == PYTHON_PACKAGE:
        _default_package_uris(body, kind)

    digest = submission_hash(_planned(body, as_planned(outputs)), context, parent, registry_block)
    name = job_name(file)
    job_id = context.job_id or f"{name}-{context.now:%Y%m%d-%H%M%S}-{digest[:6]}"
    job_values = {
        "id": job_id,
        "name": name,
        "env": context.env,
        "submission_hash": digest,
        "code_hash": context.code_hash,
        "package_uri": package_uri,
        "region": region,
    }
    if context.image_hash:
        job_values["image_tag"] = context.image_hash

    def to_file_path(p: str) -> str:
        return p[len(prefix) :] if prefix and p.startswith(prefix) else p

    body = resolve(body, {"infra": outputs, "job": job_values}, file, to_file_path=to_file_path)
    labels = body.setdefault("labels", {})
    if not isinstance(labels, dict):
        raise JobError(file, to_file_path("labels"), "labels must be a mapping", "key: value pairs")
    labels[SUBMISSION_LABEL] = digest
    registry = None
    if registry_block is not None:
        namespaces = {"infra": outputs, "job": job_values}
        registry = _registry(document, registry_block, namespaces, kind, body)
    deploy = None
    if deploy_block is not None:
        deploy = _deploy(document, deploy_block, {"infra": outputs, "job": job_values}, registry)
    return CompiledJob(
        file=file,
        kind=kind,
        delivery=delivery,
        project=project,
        region=region,
        body=body,
        job_id=job_id,
        submission_hash=digest,
        package_uri=package_uri,
        document=document,
        image_hash=context.image_hash,
        prefix=prefix,
        flagged=placed.flagged,
        flag_overrides=placed.overrides,
        registry=registry,
        deploy=deploy,
    )


def _deploy(document: Document, block: Any, namespaces, registry: RegistrySpec | None) -> DeployPlan:
    """The deploy block, references resolved, as a DeployPlan; errors carry the block's line."""
    file = document.file
    if registry is None:
        raise JobError(file, DEPLOY_FIELD, "deploys the registered model, and there is no registry block",
                       "a registry block with the alias to deploy")
    try:
        block = resolve(block, namespaces, file, DEPLOY_FIELD)
        return parse_block(block, registry.model_id, registry.aliases)
    except DeployError as exc:
        raise _at_line(document, exc) from None


def _at_line(document: Document, exc: FieldError) -> JobError:
    """A block's refusal in the file, with the line its field was written on."""
    line = document.line_of(exc.path)
    problem = f"{exc.problem} (line {line})" if line else exc.problem
    return JobError(document.file, exc.path, problem, exc.allowed)


def _registry(document: Document, block: Any, namespaces, kind: str, body: dict[str, Any]) -> RegistrySpec:
    """The registry block, references resolved, as a RegistrySpec; errors carry the block's line."""
    file = document.file
    block = resolve(block, namespaces, file, REGISTRY_FIELD)
    serving_image = resolve(TRAINER_SERVING_IMAGE, namespaces, file, f"{REGISTRY_FIELD}.serving")
    metrics = (body.get(job_body.STUDY_FIELD) or {}).get("metrics") if runs_study(kind) else None
    first = metrics[0] if isinstance(metrics, list) and len(metrics) == 1 else None
    study_metric = None
    if isinstance(first, dict) and isinstance(first.get("metricId"), str) and first.get("goal") in GOALS:
        study_metric = (first["metricId"], first["goal"])  # else validation reports the studySpec itself
    try:
        return parse_registry(
            block, study_metric=study_metric, runs_study=runs_study(kind), serving_image=serving_image
        )
    except RegistryError as exc:
        raise _at_line(document, exc) from None


def _normalize(data: dict[str, Any], file: str) -> tuple[str, str, dict[str, Any], str, Any]:
    """(kind, delivery, body, prefix, registry block or None) from either form of definition."""
    data = copy.deepcopy(data)
    if REGISTRY_FIELD in data and "kind" not in data:
        raise JobError(
            file,
            REGISTRY_FIELD,
            "a registry block belongs to the headered form of a definition (a gcloud config file has no "
            "place for it)",
            "a 'kind: CustomJob|HyperparameterTuningJob' header beside it",
        )
    if "kind" in data:
        kind = data.pop("kind")
        if kind not in KINDS:
            raise JobError(file, "kind", f"unknown kind {short(kind)}", one_of(KINDS))
        trainer = data.pop("trainer", {"delivery": PYTHON_PACKAGE})
        if not isinstance(trainer, dict) or set(trainer) - {"delivery"}:
            raise JobError(
                file,
                "trainer",
                "must be a mapping with only 'delivery'",
                f"trainer: {{delivery: {'|'.join(DELIVERIES)}}}",
            )
        delivery = trainer.get("delivery", PYTHON_PACKAGE)
        if delivery not in DELIVERIES:
            raise JobError(
                file, "trainer.delivery", f"unknown delivery {short(delivery)}", one_of(DELIVERIES)
            )
        registry = data.pop(REGISTRY_FIELD, None)
        return kind, delivery, data, "", registry
    if "trainer" in data:
        raise JobError(file, "trainer", "a 'trainer' header needs a 'kind'", "kind: " + "|".join(KINDS))
    if job_body.POOLS_FIELD in data:
        # gcloud ai custom-jobs create --config: the file is a CustomJobSpec.
        spec_name = spec_field(CUSTOM_JOB)
        return CUSTOM_JOB, _delivery_of(data, ""), {spec_name: data}, spec_name + ".", None
    if job_body.STUDY_FIELD in data or spec_field(TUNING_JOB) in data:
        return TUNING_JOB, _delivery_of(job_body.job_spec(data, TUNING_JOB), ""), data, "", None
    raise JobError(
        file,
        "(top level)",
        "cannot tell what kind of job this is",
        "a 'kind: CustomJob|HyperparameterTuningJob' header, or a gcloud config "
        "(workerPoolSpecs at the top, or studySpec + trialJobSpec)",
    )


def _delivery_of(spec: Any, spec_path: str) -> str:
    uses_container = any(job_body.CONTAINER_SPEC in pool.raw for pool in job_body.pools(spec, spec_path))
    return CONTAINER if uses_container else PYTHON_PACKAGE


def _defaults(body: dict[str, Any], kind: str) -> None:
    """What gcloud fills in when neither the file nor a flag gives it."""
    body.setdefault("displayName", "${job.id}")
    if runs_study(kind):
        body.setdefault("maxTrialCount", 1)
        body.setdefault("parallelTrialCount", 1)


def _default_package_uris(body: dict[str, Any], kind: str) -> None:
    for pool in job_body.job_pools(body, kind):
        package = pool.raw.get(job_body.PYTHON_PACKAGE_SPEC)
        if isinstance(package, dict) and not package.get("packageUris"):
            package["packageUris"] = ["${job.package_uri}"]
