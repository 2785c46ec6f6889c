"""A run of a definition as a Vertex AI Experiments run: the ids, the MetadataService bodies and the table.

Pure and offline. Both writers use it: ``jobs.cloud.experiments`` sends these bodies to Vertex AI's
MetadataService once a job has ended; ``jobs.local.experiments`` writes the same bodies, one JSON file per
run, under the local root. ``run_job.py runs`` reads either back into ``Run`` and orders and compares
them here.

The shapes are what the ``google.cloud.aiplatform`` SDK writes (its ``metadata/constants.py`` and
``experiment_run_resource.py``), so the console and ``aiplatform.ExperimentRun`` read these runs too:

- the experiment: a Context of schema ``system.Experiment``, id the experiment's name, metadata
  ``{"experiment_deleted": false, "backing_tensorboard_resource": <TensorBoard>}`` (the SDK's
  ``Experiment.create`` then ``assign_backing_tensorboard``);
- a run: a Context of schema ``system.ExperimentRun``, id ``<experiment>-<run name>`` (the SDK's
  ``_format_experiment_run_resource_id``, at most 121 characters so that its ``-tb-run`` artifact fits in
  128) and display name the run name (the SDK finds a run by ``<experiment>-<display name>``, and
  ``get_experiment_df`` makes a TensorBoard run of that name in the backing TensorBoard: an id too),
  metadata ``{"_params": {...}, "_metrics": {...}, "_state": "COMPLETE"}`` and, as the SDK's ``CustomJob``
  adds, ``_custom_jobs``; the run is made a child of the experiment (AddContextChildren) at once, as the
  SDK does;
- lineage: an Execution (``system.CustomJobExecution``) with the data files as INPUT artifacts
  (``system.Dataset``, one per file and identity, shared by the runs that read the same bytes) and the model
  folder as OUTPUT (``system.Model``), all attributed to the run's context; the same facts are kept in the
  run's metadata under ``lineage`` so one read of the run lists them.

Ids follow Vertex AI's rule for context, artifact and execution ids: 4-128 characters of ``[a-z0-9-]``.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from jobs.definition.compile import job_name
from jobs.definition.errors import printable, short

EXPERIMENT_SCHEMA = "system.Experiment"
RUN_SCHEMA = "system.ExperimentRun"
EXECUTION_SCHEMA = "system.CustomJobExecution"
DATASET_SCHEMA = "system.Dataset"
MODEL_SCHEMA = "system.Model"
SCHEMA_VERSION = "0.0.1"  # the SDK's SCHEMA_VERSIONS for every system.* schema
# The SDK's metadata keys (google.cloud.aiplatform.metadata.constants).
PARAMS = "_params"
METRICS = "_metrics"
STATE = "_state"
CUSTOM_JOBS = "_custom_jobs"
BACKING_TENSORBOARD = "backing_tensorboard_resource"
LINEAGE = "lineage"
METADATA_STORE = "default"  # the store the SDK and the console use
# Vertex AI's id rule for contexts, artifacts and executions, and the SDK's bound on a run's id.
ID_PATTERN = re.compile(r"[a-z0-9][a-z0-9-]{3,127}")
MAX_RUN_ID = 128 - len("-tb-run")
# Execution.State names: what a run's _state holds.
COMPLETE, FAILED, CANCELLED = "COMPLETE", "FAILED", "CANCELLED"
JOB_STATES = {"JOB_STATE_SUCCEEDED": COMPLETE, "JOB_STATE_CANCELLED": CANCELLED}


def experiment_id(file: str) -> str:
    """The experiment of a definition: its file's stem as job ids have it (census_cpu.yaml -> census-cpu),
    padded to Vertex AI's 4 characters."""
    name = job_name(file)
    return name if len(name) >= 4 else f"{name}-runs"


def run_id(experiment: str, run_name: str) -> str:
    """``<experiment>-<run name>`` as the SDK names a run's context, made a valid id: lowercase, other
    characters as ``-``, at most MAX_RUN_ID characters (the run name's start is kept, its end cut)."""
    name = re.sub(r"[^a-z0-9]+", "-", run_name.lower()).strip("-")
    if name.startswith(experiment + "-"):  # a job id (census-cpu-20261128-...) names its experiment already
        name = name[len(experiment) + 1 :]
    return f"{experiment}-{name or 'run'}"[:MAX_RUN_ID].rstrip("-")


def run_name_of(experiment: str, rid: str) -> str:
    """The SDK's name of run ``rid``: its id without ``<experiment>-`` (ExperimentRun(name, experiment))."""
    return rid.removeprefix(f"{experiment}-")


# The files of one glob that are identified (a run over thousands of shards lists the first ones).
MAX_DATA_FILES = 100
# A run's data files in all, both flags and every item of their comma lists: each is about 150 bytes of the
# run context's metadata, which Vertex AI caps at 200 KB (a longer list would fail the whole recording).
MAX_RUN_DATA_FILES = 200
CHUNK = 1 << 20


def file_identity(path: Any) -> dict[str, Any]:
    """Size and CRC32C (base64, as Cloud Storage's object ``crc32c``) of a file here; {} when it cannot be
    read. The same bytes on Cloud Storage have the same two, so local and cloud runs compare."""
    import base64

    import google_crc32c

    checksum = google_crc32c.Checksum()
    size = 0
    try:
        with open(path, "rb") as file:
            while chunk := file.read(CHUNK):
                checksum.update(chunk)
                size += len(chunk)
    except OSError:
        return {}
    return {"size": size, "crc32c": base64.b64encode(checksum.digest()).decode()}


def matching_files(path: Any, limit: int) -> list[Any]:
    """The files a path names (``*``, ``?`` or ``[`` in its last part: a glob), sorted, at most ``limit``;
    none where the path cannot be read (too long a name, a folder it may not list)."""
    from pathlib import Path

    path = Path(path)
    try:
        matches = sorted(path.parent.glob(path.name)) if any(c in path.name for c in "*?[") else [path]
        return [p for p in matches if p.is_file()][:limit]
    except OSError:
        return []


def data_artifact_id(uri: str, identity: Mapping[str, Any]) -> str:
    """One artifact per file and content: the runs that read the same bytes share it."""
    digest = hashlib.sha256(json.dumps([uri, dict(identity)], sort_keys=True).encode()).hexdigest()
    return f"data-{digest[:32]}"


def param_value(value: Any) -> Any:
    """A resolved flag as a run parameter: the SDK takes numbers and strings (a list becomes its items joined
    with commas, a bool stays one); None (a flag left unset) is left out."""
    if isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return ",".join(str(v) for v in value)
    return None if value is None else json.dumps(value, sort_keys=True)


def flat_params(config: Mapping[str, Any]) -> dict[str, Any]:
    """The trainer's resolved flags (trainer_config.json: the generic ones and the task's under ``task``) as
    one flat mapping; task flags never repeat generic ones (trainer.config checks it)."""
    merged = {k: v for k, v in config.items() if k != "task"}
    task = config.get("task")
    if isinstance(task, Mapping):
        merged.update(task)
    values = {k: param_value(v) for k, v in merged.items()}
    return {k: v for k, v in sorted(values.items()) if v is not None}


def eval_metrics(document: Any) -> dict[str, float]:
    """metrics.json's ``eval`` figures, the finite numbers only."""
    evaluation = document.get("eval") if isinstance(document, Mapping) else None
    if not isinstance(evaluation, Mapping):
        return {}
    return {
        str(k): float(v)
        for k, v in sorted(evaluation.items())
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    }


@dataclass(frozen=True)
class DataFile:
    uri: str  # gs://bucket/object as the definition names it
    identity: Mapping[str, Any]  # {"size": n, "crc32c": base64} (+ "generation" on Cloud Storage); {} unknown


@dataclass(frozen=True)
class Lineage:
    """Where a run came from and what it left."""

    code: Mapping[str, str]  # {"image": <trainer image with its tag>} and/or {"package": <sdist uri>}
    data: tuple[DataFile, ...] = ()
    job: str = ""  # the Vertex AI job's resource name ("" for a local run)
    model: str = ""  # the model folder (gs:// URI; a local run's as its gs:// URI)
    registry_version: str = ""  # projects/.../models/<id>@<version>, when the run registered one
    trial: str = ""  # a study's best trial, whose parameters, metrics and model the run carries
    tensorboard: str = ""  # the TensorBoard experiment the job wrote to, where it had one

    def as_metadata(self) -> dict[str, Any]:
        found = {
            "code": dict(self.code),
            "data": [{"uri": d.uri, **dict(d.identity)} for d in self.data],
            "job": self.job,
            "model": self.model,
            "registry_version": self.registry_version,
            "trial": self.trial,
            "tensorboard": self.tensorboard,
        }
        return {k: v for k, v in found.items() if v}


@dataclass(frozen=True)
class RunRecord:
    """Everything one run writes: the bodies of the MetadataService requests (aiplatform_v1 JSON), by id."""

    experiment_id: str
    run_id: str
    experiment: dict[str, Any]  # Context
    run: dict[str, Any]  # Context
    execution: dict[str, Any]  # Execution, id run_id
    artifacts: dict[str, dict[str, Any]]  # artifact id -> Artifact
    events: tuple[tuple[str, str], ...]  # (artifact id, INPUT|OUTPUT)

    def document(self) -> dict[str, Any]:
        """The local store's file: the same bodies, with their ids."""
        return {
            "experimentId": self.experiment_id,
            "runId": self.run_id,
            "experiment": self.experiment,
            "run": self.run,
            "execution": self.execution,
            "artifacts": self.artifacts,
            "events": [{"artifact": a, "type": t} for a, t in self.events],
        }


def file_name(file: str) -> str:
    return re.split(r"[\\/]", file)[-1]


def experiment_context(experiment: str, tensorboard: str, file: str) -> dict[str, Any]:
    metadata: dict[str, Any] = {"experiment_deleted": False}
    if tensorboard:
        metadata[BACKING_TENSORBOARD] = tensorboard
    return {
        "displayName": experiment,
        "schemaTitle": EXPERIMENT_SCHEMA,
        "schemaVersion": SCHEMA_VERSION,
        "description": f"runs of {file_name(file)} (run_job.py)",
        "metadata": metadata,
    }


def run_record(
    *,
    file: str,
    run_name: str,
    display_name: str,
    state: str,
    params: Mapping[str, Any],
    metrics: Mapping[str, float],
    lineage: Lineage,
    tensorboard: str = "",
    console_uri: str = "",
) -> RunRecord:
    """The experiment, the run and its lineage of one ended run of the definition ``file``."""
    experiment = experiment_id(file)
    rid = run_id(experiment, run_name)
    metadata: dict[str, Any] = {
        PARAMS: dict(params),
        METRICS: dict(metrics),
        STATE: state,
        LINEAGE: lineage.as_metadata(),
    }
    if lineage.job:  # as the SDK's CustomJob records the jobs of a run
        metadata[CUSTOM_JOBS] = [
            {"custom_job_resource_name": lineage.job, "custom_job_console_uri": console_uri}
        ]
    artifacts: dict[str, dict[str, Any]] = {}
    events: list[tuple[str, str]] = []
    for data in lineage.data:
        aid = data_artifact_id(data.uri, data.identity)
        artifacts[aid] = {
            "displayName": data.uri.rsplit("/", 1)[-1][:128] or data.uri,
            "uri": data.uri,
            "schemaTitle": DATASET_SCHEMA,
            "schemaVersion": SCHEMA_VERSION,
            "state": "LIVE",
            "metadata": dict(data.identity),
        }
        events.append((aid, "INPUT"))
    if lineage.model:
        model_metadata = {"registry_version": lineage.registry_version} if lineage.registry_version else {}
        artifacts[rid] = {
            "displayName": f"{display_name} model"[:128],
            "uri": lineage.model,
            "schemaTitle": MODEL_SCHEMA,
            "schemaVersion": SCHEMA_VERSION,
            "state": "LIVE",
            "metadata": model_metadata,
        }
        events.append((rid, "OUTPUT"))
    execution_metadata = {k: v for k, v in (("job", lineage.job), *lineage.code.items()) if v}
    return RunRecord(
        experiment_id=experiment,
        run_id=rid,
        experiment=experiment_context(experiment, tensorboard, file),
        run={
            "displayName": run_name_of(experiment, rid),
            "schemaTitle": RUN_SCHEMA,
            "schemaVersion": SCHEMA_VERSION,
            "metadata": metadata,
        },
        execution={
            "displayName": display_name[:128],
            "schemaTitle": EXECUTION_SCHEMA,
            "schemaVersion": SCHEMA_VERSION,
            "state": state,
            "metadata": execution_metadata,
        },
        artifacts=artifacts,
        events=tuple(events),
    )


def runs_filter(experiment_name: str) -> str:
    """The ListContexts filter of an experiment's runs (the SDK's ``ExperimentRun.list``)."""
    return f'schema_title="{RUN_SCHEMA}" AND parent_contexts:"{experiment_name}"'


# --- reading runs back ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """A run as ``runs`` shows it, from a run Context (Vertex AI's, or the local store's)."""

    id: str
    display_name: str
    state: str
    created: str
    params: Mapping[str, Any] = field(default_factory=dict)
    metrics: Mapping[str, float] = field(default_factory=dict)
    lineage: Mapping[str, Any] = field(default_factory=dict)


class RunError(ValueError):
    """A run context that is not one (a hand-edited store, a foreign context)."""


def run_of(context: Any, rid: str, created: str = "") -> Run:
    """A run Context (JSON) -> Run; RunError for anything else."""
    if not isinstance(context, Mapping) or context.get("schemaTitle") != RUN_SCHEMA:
        raise RunError(f"not a {RUN_SCHEMA} context")
    metadata = context.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    params, metrics = metadata.get(PARAMS) or {}, metadata.get(METRICS) or {}
    lineage = metadata.get(LINEAGE) or {}
    if not all(isinstance(m, Mapping) for m in (params, metrics, lineage)):
        raise RunError(f"{PARAMS}, {METRICS} and {LINEAGE} must be mappings")
    numbers = {
        str(k): float(v) for k, v in metrics.items() if isinstance(v, int | float) and not isinstance(v, bool)
    }
    return Run(
        id=rid,
        display_name=str(context.get("displayName") or rid),
        state=str(metadata.get(STATE) or "STATE_UNSPECIFIED"),
        created=str(context.get("createTime") or created),
        params={str(k): v for k, v in params.items()},
        metrics=numbers,
        lineage=dict(lineage),
    )


def ordered(runs: Sequence[Run], metric: str, goal: str) -> list[Run]:
    """Best first by ``metric`` and its goal; runs without the metric last; ties newest first."""
    sign = 1.0 if goal == "MINIMIZE" else -1.0

    def key(run: Run) -> tuple:
        value = run.metrics.get(metric)
        known = value is not None and math.isfinite(value)
        return (not known, sign * value if known else 0.0, _desc(run.created), run.id)

    return sorted(runs, key=key)


def _desc(text: str) -> tuple[int, ...]:
    return tuple(-ord(c) for c in text)


def show(value: Any, digits: int = 4) -> str:
    """A parameter, metric or lineage value as a cell: a whole float as an integer (Struct numbers are
    doubles: a flag of 8 comes back 8.0), others to ``digits`` significant places."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:.{digits}g}"
    if isinstance(value, Mapping | list):
        return json.dumps(value, sort_keys=True)
    return str(value)


# A cell of `runs` at most: a parameter of 100 KB (a hand-edited store, a foreign context) still makes a line.
MAX_CELL = 120


def cell(text: str) -> str:
    """A cell as printed: control characters escaped (a store file or a context may hold any), a long one
    cut to its start and its length."""
    return short(printable(text), MAX_CELL, quote=False)


def runs_table(runs: Sequence[Run], metric: str, goal: str) -> list[str]:
    """The lines ``runs`` prints: one row per run, best first; the metric of the definition first, then the
    other metrics, then the parameters that are not the same in every run."""
    rows = ordered(runs, metric, goal)
    metric_names = [metric, *sorted({m for r in rows for m in r.metrics} - {metric})]
    param_names = sorted({p for r in rows for p in r.params})
    varying = [p for p in param_names if len({show(r.params.get(p)) for r in rows}) > 1]
    header = [cell(c) for c in ["run", "state", "created", *metric_names, *varying]]
    body = [
        [cell(c) for c in [r.id, r.state, r.created[:19], *(show(r.metrics.get(m)) for m in metric_names),
                           *(show(r.params.get(p)) for p in varying)]]
        for r in rows
    ]
    widths = [max(len(str(row[i])) for row in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
             for row in [header, *body]]
    same = [p for p in param_names if p not in varying]
    lines.append(
        f"{len(rows)} run(s), best first by {metric} ({goal}); {len(varying)} parameter(s) differ, "
        f"{len(same)} are the same in every run (run_job.py runs FILE --compare RUN RUN shows two in full)"
    )
    return lines


def differences(a: Run, b: Run) -> list[tuple[str, str, str, str]]:
    """(section, key, a's value, b's value) of everything that differs between two runs."""
    found = []
    sections = (
        ("param", a.params, b.params),
        ("metric", a.metrics, b.metrics),
        ("lineage", _flat(a.lineage), _flat(b.lineage)),
        ("state", {"state": a.state}, {"state": b.state}),
    )
    for section, left, right in sections:
        for key in sorted(set(left) | set(right)):
            # Figures to 8 places: two runs a table shows alike may still differ.
            x, y = show(left.get(key), 8), show(right.get(key), 8)
            if x != y:
                found.append((section, key, x, y))
    return found


def _flat(lineage: Mapping[str, Any]) -> dict[str, Any]:
    """Lineage as key -> value: the code's entries by name, each data file by its URI (its identity)."""
    flat: dict[str, Any] = {}
    for key, value in lineage.items():
        if key == "code" and isinstance(value, Mapping):
            flat.update({f"code.{k}": v for k, v in value.items()})
        elif key == "data" and isinstance(value, list):
            for item in value:
                if isinstance(item, Mapping):
                    identity = {k: v for k, v in item.items() if k != "uri"}
                    flat[f"data {item.get('uri')}"] = identity or "unknown"
        else:
            flat[key] = value
    return flat


def runs_comparison(a: Run, b: Run) -> list[str]:
    """The lines ``runs --compare A B`` prints."""
    rows = [tuple(cell(c) for c in row) for row in differences(a, b)]
    if not rows:
        return [f"{cell(a.id)} and {cell(b.id)} do not differ in parameters, metrics, lineage or state"]
    header = ("", "", cell(a.id), cell(b.id))
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(3)]
    return [
        f"{r[0].ljust(widths[0])}  {r[1].ljust(widths[1])}  {r[2].ljust(widths[2])}  {r[3]}".rstrip()
        for r in [header, *rows]
    ]


def study_metric(body: Mapping[str, Any]) -> tuple[str, str]:
    """(metricId, goal) of a HyperparameterTuningJob body's study."""
    metrics = (body.get("studySpec") or {}).get("metrics") or [{}]
    return str(metrics[0].get("metricId", "")), str(metrics[0].get("goal", "MAXIMIZE"))


def definition_metric(job: Any, trainer_spec: Any) -> tuple[str, str]:
    """(metric, goal) a definition's runs are ordered by: a study's own metric; else the registry block's,
    which the definition names for its evaluation gate; else the primary metric of the model its chief
    trains (the one its trials report without --hypertune-metric), with the goal that improves it."""
    from jobs.definition.kinds import runs_study

    if runs_study(job.kind):
        return study_metric(job.body)
    if job.registry is not None:
        return job.registry.metric, job.registry.goal
    pools = job.pools()
    spec = trainer_spec()
    model = spec.model(spec.model_of([str(a) for a in pools[0].args] if pools else []))
    if model is None:
        return "loss", "MINIMIZE"
    return model.default_metric, model.metric_goals.get(model.default_metric, "MAXIMIZE")


def code_of(body: Mapping[str, Any], kind: str) -> dict[str, str]:
    """The code a job's body runs: its chief's trainer image (the tag is the hash of the build context) or,
    on a prebuilt image, the trainer sdist (its folder is the code hash) and that image."""
    from jobs.definition.body import job_pools

    pools = job_pools(dict(body), kind)
    if not pools:
        return {}
    chief = pools[0]
    if chief.is_package:
        packages = ",".join(str(p) for p in chief.program.get("packageUris") or [])
        return {k: v for k, v in (("package", packages), ("image", chief.image)) if v}
    return {"image": chief.image} if chief.image else {}


def store_name(parent: str) -> str:
    """The metadata store of ``projects/<p>/locations/<r>``."""
    return f"{parent}/metadataStores/{METADATA_STORE}"


def metadata_requests(record: RunRecord, parent: str) -> list[tuple[str, dict[str, Any]]]:
    """The MetadataService calls that record ``record`` in ``parent``'s store, in order: (method of
    MetadataServiceClient, its request as aiplatform_v1 JSON). The writer goes on past a create that finds
    its resource there already (jobs.cloud.experiments): a retried run updates its context instead."""
    store = store_name(parent)
    experiment = f"{store}/contexts/{record.experiment_id}"
    run = f"{store}/contexts/{record.run_id}"
    execution = f"{store}/executions/{record.run_id}"
    artifacts = {aid: f"{store}/artifacts/{aid}" for aid in record.artifacts}
    calls: list[tuple[str, dict[str, Any]]] = [
        ("create_context",
         {"parent": store, "contextId": record.experiment_id, "context": record.experiment}),
        ("create_context", {"parent": store, "contextId": record.run_id, "context": record.run}),
        # At once, as the SDK's ExperimentRun.create: a recording cut short later still lists the run.
        ("add_context_children", {"context": experiment, "childContexts": [run]}),
        *(
            ("create_artifact", {"parent": store, "artifactId": aid, "artifact": body})
            for aid, body in record.artifacts.items()
        ),
        ("create_execution", {"parent": store, "executionId": record.run_id, "execution": record.execution}),
    ]
    if record.events:
        events = [{"artifact": artifacts[aid], "type": kind} for aid, kind in record.events]
        calls.append(("add_execution_events", {"execution": execution, "events": events}))
    calls.append(("add_context_artifacts_and_executions",
                  {"context": run, "artifacts": list(artifacts.values()), "executions": [execution]}))
    return calls
