"""Recording a job that ended on Vertex AI as a run of its definition's experiment in Vertex AI Experiments:
the plan's last step after following it (and registering its model), done here, from the client, not from
inside the trainer: the run's facts (the model folder's trainer_config.json and metrics.json, the data
objects' checksums, the registered version) are known only once the job has ended.

The requests are ``jobs.definition.experiments.metadata_requests``; before them the region's ``default``
metadata store is made where missing. A create that finds its resource already there (a ``--follow`` of the
same job again) goes on: the experiment keeps its backing TensorBoard (set when it has none), the run's
context is updated with this record, and the lineage events are sent again (Vertex AI skips an event
between an execution and an artifact that it holds already: none is added twice).

A failure here is one line on the output: the job and its model are fine and the exit status stays; running
the same command with ``--follow <job>`` records the run again.
"""

from __future__ import annotations

from typing import Any, TextIO

from jobs.cloud import client as cloud
from jobs.definition import experiments as ex
from jobs.definition.body import is_gs, job_spec
from jobs.definition.kinds import JOB_KINDS, runs_study
from jobs.definition.model_registry import best_trial, model_dir, output_prefix
from trainer.contract import CONFIG_FILE, METRICS_FILE

MAX_JSON_BYTES = 1 << 20
# The permission each MetadataService call here needs (the REST reference's "IAM Permissions" of each method):
# all in the aiplatform.metadataStores/contexts/artifacts/executions families that roles/aiplatform.user
# grants, the role job submitters and the CI deployer hold already (tests/jobs/test_experiments.py).
PERMISSIONS = {
    "get_metadata_store": "aiplatform.metadataStores.get",
    "create_metadata_store": "aiplatform.metadataStores.create",
    "create_context": "aiplatform.contexts.create",
    "get_context": "aiplatform.contexts.get",
    "update_context": "aiplatform.contexts.update",
    "list_contexts": "aiplatform.contexts.list",  # run_job.py runs --env
    "add_context_children": "aiplatform.contexts.addContextChildren",
    "add_context_artifacts_and_executions": "aiplatform.contexts.addContextArtifactsAndExecutions",
    "create_artifact": "aiplatform.artifacts.create",
    "create_execution": "aiplatform.executions.create",
    "add_execution_events": "aiplatform.executions.addExecutionEvents",
}


def _json(storage: cloud.Storage, uri: str) -> Any:
    """A small JSON object the trainer wrote; None when it is missing, too large or not JSON."""
    import json

    data = storage.read_bytes(uri, MAX_JSON_BYTES)
    if data is None or len(data) > MAX_JSON_BYTES:
        return None
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None


def cloud_run(
    job: Any, remote: dict[str, Any], storage: cloud.Storage, registered: str | None, tensorboard: str
) -> ex.RunRecord:
    """The record of ``remote``, a job of ``job`` (a CompiledJob) that has ended."""
    name = str(remote.get("name", ""))
    state = ex.JOB_STATES.get(str(remote.get("state")), ex.FAILED)
    prefix = output_prefix(remote, job.kind) or output_prefix(job.body, job.kind)
    trial = ""
    if runs_study(job.kind):
        metric, goal = ex.study_metric(job.body)
        best = best_trial(remote.get("trials"), metric, goal)
        trial = best[0] if best is not None else ""
    model = model_dir(prefix, trial or None) if is_gs(prefix) else ""
    config = _json(storage, f"{model}/{CONFIG_FILE}") if model else None
    params = ex.flat_params(config if isinstance(config, dict) else {})
    data = []
    for key in ("train_files", "eval_files"):
        for pattern in str(params.get(key) or "").split(","):
            left = ex.MAX_RUN_DATA_FILES - len(data)
            if is_gs(pattern) and left > 0:
                found = storage.identify(pattern, min(ex.MAX_DATA_FILES, left))
                data += [ex.DataFile(uri, identity) for uri, identity in found]
    metrics = _json(storage, f"{model}/{METRICS_FILE}") if model else None
    board = (job_spec(remote, job.kind) or job_spec(job.body, job.kind) or {}).get("tensorboard") or ""
    lineage = ex.Lineage(
        code=ex.code_of(remote, job.kind) or ex.code_of(job.body, job.kind),
        data=tuple(data),
        job=name,
        model=model if config is not None or metrics is not None else "",  # a folder the job wrote
        registry_version=registered or "",
        trial=trial,
        tensorboard=f"{board}/experiments/{cloud.job_id_of(name)}" if board else "",
    )
    return ex.run_record(
        file=job.file,
        run_name=cloud.job_id_of(name),
        display_name=str(remote.get("displayName") or name),
        state=state,
        params=params,
        metrics=ex.eval_metrics(metrics),
        lineage=lineage,
        tensorboard=tensorboard,
        console_uri=cloud.console_url(name) if name else "",
    )


def send(metadata: cloud.VertexMetadata, parent: str, record: ex.RunRecord) -> None:
    """Write ``record`` to Vertex AI Experiments (see the module's docstring for a retried run)."""
    metadata.ensure_store(parent, ex.METADATA_STORE)
    store = ex.store_name(parent)
    for method, request in ex.metadata_requests(record, parent):
        # The add_* calls are sent again too: Vertex AI skips an event, attribution or child it has already,
        # so a recording cut short after its execution was made still gets the execution's events.
        if metadata.call(method, request) is not None:
            continue
        # The resource existed.
        if method == "create_context" and request["contextId"] == record.experiment_id:
            _keep_tensorboard(metadata, f"{store}/contexts/{record.experiment_id}", record.experiment)
        elif method == "create_context":
            context = {**request["context"], "name": f"{store}/contexts/{record.run_id}"}
            metadata.call("update_context", {"context": context})


def _keep_tensorboard(metadata: cloud.VertexMetadata, name: str, wanted: dict[str, Any]) -> None:
    """An existing experiment keeps its backing TensorBoard (the SDK refuses to change it); one without gets
    this environment's."""
    board = wanted["metadata"].get(ex.BACKING_TENSORBOARD)
    found = metadata.get("get_context", name) or {}
    if found.get("schemaTitle") not in (None, ex.EXPERIMENT_SCHEMA):
        raise ValueError(f"{name} exists and is a {found.get('schemaTitle')} context, not an experiment")
    current = (found.get("metadata") or {})
    if board and not current.get(ex.BACKING_TENSORBOARD):
        context = {**wanted, "name": name, "metadata": {**current, ex.BACKING_TENSORBOARD: board}}
        metadata.call("update_context", {"context": context})


def list_runs(metadata: cloud.VertexMetadata, parent: str, experiment: str) -> list[ex.Run]:
    """The runs of ``experiment`` in ``parent``'s store (ListContexts, every page)."""
    store = ex.store_name(parent)
    contexts = metadata.list_contexts(store, ex.runs_filter(f"{store}/contexts/{experiment}"))
    runs = []
    for context in contexts:
        try:
            runs.append(ex.run_of(context, str(context.get("name", "")).rsplit("/", 1)[-1]))
        except ex.RunError:
            continue  # a child of another kind (a pipeline run): not a run of this definition
    return runs


JOB_ID = "<job id>"
ID_MARK = "jobidmark"  # a run name that stays whole in the ids it makes, swapped for JOB_ID when shown


def preview_requests(job: Any, tensorboard: str) -> list[tuple[str, dict[str, Any]]]:
    """The calls --dry-run prints: what recording sends once the job has ended, with what only then is known
    as placeholders (and a CustomJob's one data file as an example: each file the flags name is one)."""
    import json

    prefix = output_prefix(job.body, job.kind) or "<baseOutputDirectory>"
    trial = "<best trial id>/" if runs_study(job.kind) else ""
    board = (job_spec(job.body, job.kind) or {}).get("tensorboard") or ""
    data = ex.DataFile("<each object that --train-files and --eval-files name>",
                       {"size": "<size>", "crc32c": "<crc32c>"})
    record = ex.run_record(
        file=job.file,
        run_name=ID_MARK,
        display_name=str(job.body.get("displayName") or job.job_id),
        state=ex.COMPLETE,
        params={"<flag>": "<its value in trainer_config.json>"},
        metrics={"<metric>": "<its eval value in metrics.json>"},
        lineage=ex.Lineage(
            code=ex.code_of(job.body, job.kind),
            data=(data,),
            job=f"{job.parent}/{JOB_KINDS[job.kind].collection}/{JOB_ID}",
            model=f"{prefix}/{trial}model",
            registry_version="<the version registered, if any>" if job.registry is not None else "",
            tensorboard=f"{board}/experiments/{JOB_ID}" if board else "",
        ),
        tensorboard=tensorboard,
        console_uri="<the job's console page>",
    )
    swaps = {
        ID_MARK: JOB_ID,  # in the run's id and in its name
        ex.data_artifact_id(data.uri, data.identity): "data-<sha256 of its uri and identity>",
    }
    text = json.dumps(ex.metadata_requests(record, job.parent))
    for placeholder, shown in swaps.items():
        text = text.replace(json.dumps(placeholder)[1:-1], shown)
    return json.loads(text)


class RecordRun:
    """The plan's step after following (and registering): the job as a run of its definition's experiment."""

    def __init__(self, tensorboard: str) -> None:
        self.tensorboard = tensorboard  # the environment's TensorBoard: the experiment's backing one

    def describe(self, job: Any) -> str:
        experiment = ex.experiment_id(job.file)
        return (
            f"record it as run {experiment}-<job id> of experiment {experiment} in Vertex AI Experiments "
            f"(parameters, eval metrics, lineage; backing TensorBoard {self.tensorboard or 'none'})"
        )

    def run(self, ex_: Any) -> None:
        self.record(ex_.clients, ex_.job, ex_.remote, ex_.registered, ex_.out)

    def record(self, clients: cloud.Clients, job: Any, remote: dict[str, Any], registered: str | None,
               out: TextIO) -> None:
        if clients.metadata is None:
            return
        try:
            record = cloud_run(job, remote, clients.storage, registered, self.tensorboard)
            send(clients.metadata, job.parent, record)
        except Exception as exc:  # noqa: BLE001 - the job is done: say why the run is not recorded
            cause = " ".join(str(exc).split()) or type(exc).__name__
            print(
                f"experiments: recording {remote.get('name')} failed ({type(exc).__name__}: {cause}); "
                "the job is unaffected; the same command with --follow records it",
                file=out,
            )
            return
        print(f"experiments: recorded run {record.run_id} of experiment {record.experiment_id}", file=out)
