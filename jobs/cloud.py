"""The cloud boundary: every Vertex AI and Cloud Storage call goes through the objects made here.

``default_factory`` is the one place that builds SDK clients; tests pass their own factory (a JobServiceClient
pointed at a fake REST server with anonymous credentials, and a local directory standing in for gs://).
Jobs cross this boundary as the REST JSON (camelCase dicts), the same form --dry-run prints.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from jobs.compile import CUSTOM_JOB, TUNING_JOB

TERMINAL_STATES = frozenset(
    {
        "JOB_STATE_SUCCEEDED",
        "JOB_STATE_FAILED",
        "JOB_STATE_CANCELLED",
        "JOB_STATE_EXPIRED",
        "JOB_STATE_PARTIALLY_SUCCEEDED",
    }
)
SUCCESS_STATE = "JOB_STATE_SUCCEEDED"


def split_gs(uri: str) -> tuple[str, str]:
    if not uri.startswith("gs://") or "/" not in uri[5:]:
        raise ValueError(f"not a gs://bucket/object URI: {uri!r}")
    bucket, _, name = uri[5:].partition("/")
    return bucket, name


class Storage(Protocol):
    def exists(self, uri: str) -> bool: ...

    def upload(self, path: Path, uri: str) -> None: ...


class GcsStorage:
    def __init__(self, project: str, client: Any = None) -> None:
        if client is None:
            from google.cloud import storage

            client = storage.Client(project=project)
        self._client = client

    def exists(self, uri: str) -> bool:
        bucket, name = split_gs(uri)
        return self._client.bucket(bucket).blob(name).exists()

    def upload(self, path: Path, uri: str) -> None:
        from google.api_core.exceptions import PreconditionFailed

        bucket, name = split_gs(uri)
        try:
            # generation 0: only if absent, so two concurrent submits cannot clobber each other's object.
            self._client.bucket(bucket).blob(name).upload_from_filename(str(path), if_generation_match=0)
        except PreconditionFailed:
            pass  # same name means same content: someone else uploaded it first


class LocalDirStorage:
    """``gs://bucket/name`` as ``<root>/bucket/name``: the stand-in for Cloud Storage in tests."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, uri: str) -> Path:
        bucket, name = split_gs(uri)
        return self.root / bucket / name

    def exists(self, uri: str) -> bool:
        return self.path(uri).is_file()

    def upload(self, path: Path, uri: str) -> None:
        target = self.path(uri)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)


class VertexJobs:
    """Create, find and read jobs through the generated JobServiceClient, in REST JSON form."""

    _METHODS = {
        CUSTOM_JOB: ("custom_job", "create_custom_job", "get_custom_job", "list_custom_jobs"),
        TUNING_JOB: (
            "hyperparameter_tuning_job",
            "create_hyperparameter_tuning_job",
            "get_hyperparameter_tuning_job",
            "list_hyperparameter_tuning_jobs",
        ),
    }

    def __init__(self, client: Any) -> None:
        self.client = client

    def _message(self, kind: str, body: dict[str, Any]) -> Any:
        from google.cloud import aiplatform_v1

        cls = aiplatform_v1.CustomJob if kind == CUSTOM_JOB else aiplatform_v1.HyperparameterTuningJob
        return cls.from_json(json.dumps(body))

    @staticmethod
    def _to_json(message: Any) -> dict[str, Any]:
        from google.protobuf import json_format

        return json_format.MessageToDict(type(message).pb(message))

    def create(self, kind: str, parent: str, body: dict[str, Any]) -> dict[str, Any]:
        field, create, _, _ = self._METHODS[kind]
        job = getattr(self.client, create)(parent=parent, **{field: self._message(kind, body)})
        return self._to_json(job)

    def get(self, kind: str, name: str) -> dict[str, Any]:
        job = getattr(self.client, self._METHODS[kind][2])(name=name)
        return self._to_json(job)

    def find_live(self, kind: str, parent: str, label: str, value: str) -> dict[str, Any] | None:
        """The newest job carrying ``label=value`` that has not ended, if any."""
        pager = getattr(self.client, self._METHODS[kind][3])(
            request={"parent": parent, "filter": f'labels.{label}="{value}"'}
        )
        live = [self._to_json(job) for job in pager]
        # The filter is applied again here: correctness must not hinge on how the server parses it.
        live = [
            j
            for j in live
            if j.get("labels", {}).get(label) == value
            and j.get("state", "JOB_STATE_UNSPECIFIED") not in TERMINAL_STATES
        ]
        return max(live, key=lambda j: j.get("createTime", ""), default=None)


@dataclass
class Clients:
    jobs: VertexJobs
    storage: Storage


ClientFactory = Callable[[str, str], Clients]


def default_factory(project: str, region: str) -> Clients:
    """Real clients with Application Default Credentials, on the region's Vertex AI endpoint."""
    from google.cloud.aiplatform_v1.services.job_service import JobServiceClient

    client = JobServiceClient(client_options={"api_endpoint": f"{region}-aiplatform.googleapis.com"})
    return Clients(jobs=VertexJobs(client), storage=GcsStorage(project))


def job_id_of(resource_name: str) -> str:
    return resource_name.rstrip("/").rsplit("/", 1)[-1]


def console_url(resource_name: str) -> str:
    """The Cloud console page of a job (the path google-cloud-aiplatform itself logs)."""
    parts = resource_name.split("/")
    project, region = parts[1], parts[3]
    return (
        f"https://console.cloud.google.com/agent-platform/locations/{region}/training/{parts[-1]}"
        f"?project={project}"
    )


def tensorboard_url(tensorboard: str, resource_name: str) -> str:
    """The TensorBoard experiment Vertex AI creates for a job (named after the job id)."""
    region = tensorboard.split("/")[3]
    experiment = f"{tensorboard}/experiments/{job_id_of(resource_name)}".replace("/", "+")
    return f"https://{region}.tensorboard.googleusercontent.com/experiment/{experiment}"
