"""Registering a finished job's model in the Vertex AI Model Registry: the plan's step after following it.

The rules are jobs.definition.model_registry's; this module applies them through ``Clients.models`` (the
ModelService) and ``Clients.storage`` (metrics.json), in this order:

1. only a job that SUCCEEDED registers; a study registers its best SUCCEEDED trial by the study's metric;
2. a version of the registry model labelled ``vertex_job=<job id>`` is this job's, and is reused: a retried
   run never uploads a second one, nor does a ``--follow`` of a run the scheduled workflow registered;
3. otherwise the model folder (``<baseOutputDirectory>/model``, a trial's ``<prefix>/<trial id>/model``) is
   uploaded as a new version (the model is created by the first upload), and its operation waited for;
4. each alias goes through the evaluation gate (common.model_registry.GATE, the workflow's too): the new
   version's metrics.json against that of the version holding the alias now; MergeVersionAliases moves it
   (the first alias takes ``default`` along), or the output says why it stays.

An upload never carries an alias, so a failure anywhere (the upload's operation failing, a lost connection,
Ctrl-C between the upload and the gate) leaves no version holding an alias it did not earn: it is
RegistrationFailed, and running the command again with ``--follow`` finishes the job from step 2.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TextIO

from common.model_registry import (
    DEFAULT_ALIAS,
    JOB_LABEL,
    aliases_to_merge,
    job_label_value,
    metric_label_value,
    version_description,
)
from jobs.cloud import client as cloud
from jobs.definition.body import is_gs
from jobs.definition.compile import CompiledJob
from jobs.definition.kinds import JOB_KINDS, runs_study
from jobs.definition.model_registry import (
    JOB_ID_PLACEHOLDER,
    MAX_METRICS_BYTES,
    TRIAL_PLACEHOLDER,
    VALUE_PLACEHOLDER,
    Reading,
    RegistrySpec,
    best_trial,
    gate,
    metrics_uri,
    model_dir,
    output_prefix,
    read_metric,
    upload_request,
    version_labels,
)


class RegistrationFailed(Exception):
    """Registering stopped (``cause``: what failed; None: Ctrl-C). The job and its model folder are fine."""

    def __init__(self, model: str, job_name: str, cause: BaseException | None = None) -> None:
        super().__init__(model)
        self.model, self.job_name, self.cause = model, job_name, cause


@dataclass(frozen=True)
class Source:
    """Where a version comes from: the job (and trial) and the model folder it wrote."""

    job_name: str  # the job's resource name
    job_id: str  # its vertex_job label value
    display_name: str
    artifact_uri: str
    trial_id: str | None = None


def source_of(job: CompiledJob, remote: dict[str, Any]) -> Source | str:
    """The model a finished job registers, or why it registers none."""
    name, state = remote.get("name", "?"), remote.get("state", "JOB_STATE_UNSPECIFIED")
    if state != cloud.SUCCESS_STATE:
        return f"{name} ended {state}"
    prefix = output_prefix(remote, job.kind)
    trial_id = None
    if runs_study(job.kind):
        spec = job.registry
        best = best_trial(remote.get("trials"), spec.metric, spec.goal)
        if best is None:
            return f"no trial of {name} succeeded with a final {spec.metric}"
        trial_id = best[0]
    return Source(
        job_name=name,
        job_id=job_label_value(name),
        display_name=str(remote.get("displayName", "")),
        artifact_uri=model_dir(prefix, trial_id),
        trial_id=trial_id,
    )


def preview_request(job: CompiledJob) -> dict[str, Any]:
    """The UploadModelRequest --dry-run prints: what a first upload sends, with the values only the finished
    job knows (its id, the best trial, the metric) as placeholders."""
    spec = job.registry
    trial = TRIAL_PLACEHOLDER if runs_study(job.kind) else None
    name = f"{job.parent}/{JOB_KINDS[job.kind].collection}/{JOB_ID_PLACEHOLDER}"
    return upload_request(
        spec,
        job.parent,
        artifact_uri=model_dir(output_prefix(job.body, job.kind), trial),
        labels=version_labels(spec, JOB_ID_PLACEHOLDER, trial_id=trial, metric_value=VALUE_PLACEHOLDER),
        description=version_description(name, str(job.body.get("displayName", "")), trial),
        model_exists=False,
        encryption=job.body.get("encryptionSpec"),
    )


def read_reading(storage: cloud.Storage, artifact_uri: str, metric: str) -> Reading:
    """A version's metric from the metrics.json in its artifact folder (bounded read)."""
    if not is_gs(artifact_uri):
        return Reading(None, f"the version has no gs:// artifactUri ({artifact_uri or 'none'})")
    uri = metrics_uri(artifact_uri)
    return read_metric(storage.read_bytes(uri, MAX_METRICS_BYTES), uri, metric)


def register(
    models: cloud.VertexModels, storage: cloud.Storage, job: CompiledJob, remote: dict[str, Any], out: TextIO
) -> str | None:
    """Register ``remote``'s model per ``job.registry``: the version's name, or None if nothing registers."""
    spec = job.registry
    source = source_of(job, remote)
    if isinstance(source, str):
        print(f"registry: {source}; nothing registered in model {spec.model_id}", file=out)
        return None
    model = spec.model_name(job.parent)
    found = models.find_version(model, JOB_LABEL, source.job_id)
    if found is not None:
        version = cloud.version_name(model, str(found.get("versionId", "")))
        reading = read_reading(storage, str(found.get("artifactUri", "")), spec.metric)
        print(
            f"registry: {version} is already this job's version ({JOB_LABEL}={source.job_id}); not uploaded "
            "again",
            file=out,
        )
    else:
        reading = read_reading(storage, source.artifact_uri, spec.metric)
        version = _upload(models, job, source, reading, out)
    for alias in spec.aliases:
        _gate_alias(models, storage, spec, model, version, reading, alias, out)
    return version


def _upload(
    models: cloud.VertexModels, job: CompiledJob, source: Source, reading: Reading, out: TextIO
) -> str:
    spec, parent = job.registry, job.parent
    model = spec.model_name(parent)
    exists = models.get(model) is not None
    value = None if reading.value is None else metric_label_value(reading.value)
    request = upload_request(
        spec,
        parent,
        artifact_uri=source.artifact_uri,
        labels=version_labels(spec, source.job_id, trial_id=source.trial_id, metric_value=value),
        description=version_description(source.job_name, source.display_name, source.trial_id),
        model_exists=exists,
        encryption=job.body.get("encryptionSpec"),
    )
    what = f"a new version of {model}" if exists else f"the first version of a new model {model}"
    print(f"registry: uploading {source.artifact_uri} as {what}", file=out, flush=True)
    version = models.upload(request)
    print(f"registry: registered {version}", file=out)
    return version


def _gate_alias(
    models: cloud.VertexModels,
    storage: cloud.Storage,
    spec: RegistrySpec,
    model: str,
    version: str,
    reading: Reading,
    alias: str,
    out: TextIO,
) -> None:
    version_id = version.rsplit("@", 1)[-1]
    holder = models.get(f"{model}@{alias}")
    holder_id = None if holder is None else str(holder.get("versionId"))

    def held() -> Reading:
        return read_reading(storage, str(holder.get("artifactUri", "")), spec.metric)

    decision = gate(spec.metric, spec.goal, version_id, reading, holder_id, held)
    if decision.rule == "already_held":
        print(f"registry: alias {alias} is on version {version_id} already", file=out)
        return
    if decision.move:
        merged = aliases_to_merge(alias, spec.aliases)
        models.merge_aliases(version, merged)
        default = f"; it is the {DEFAULT_ALIAS} version now" if DEFAULT_ALIAS in merged else ""
        print(f"registry: alias {alias} moved to version {version_id} ({decision.why}){default}", file=out)
        return
    where = "not given" if holder is None else f"stays on version {holder_id}"
    print(
        f"registry: alias {alias} {where}: {decision.why}; version {version_id} is kept without it", file=out
    )


class RegisterModel:
    """The plan's step after FollowJob when the definition has a registry block."""

    def describe(self, job: CompiledJob) -> str:
        spec = job.registry
        what = "its best trial's model" if runs_study(job.kind) else "its model"
        return (
            f"if it succeeds: register model {spec.model_id} ({what} as a new version, upload request below; "
            f"a version labelled {JOB_LABEL}=<job id> is reused); {spec.describe()}"
        )

    def run(self, ex) -> None:
        name = ex.remote["name"]
        try:
            ex.registered = register(ex.clients.models, ex.clients.storage, ex.job, ex.remote, ex.out)
        except KeyboardInterrupt:
            raise RegistrationFailed(ex.job.registry.model_id, name) from None
        except Exception as exc:  # noqa: BLE001 - any cloud failure: say it, and how a rerun finishes it
            raise RegistrationFailed(ex.job.registry.model_id, name, exc) from exc
