"""The cloud boundary: every Vertex AI, Cloud Build, Artifact Registry, Cloud Storage and Cloud Logging call
goes through the objects made here.

``default_factory`` is the one place that builds SDK clients; tests pass their own factory (the generated
clients pointed at a fake REST server with anonymous credentials, and a local directory standing in for
gs://). Jobs and builds cross this boundary as REST JSON (camelCase dicts), the same form --dry-run prints.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

from common.model_registry import LABEL_FILTER
from jobs.definition.body import split_gs
from jobs.definition.kinds import RESOURCE_KINDS

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
# Cloud Build statuses (Build.Status) after which a build changes no more.
BUILD_TERMINAL = frozenset({"SUCCESS", "FAILURE", "INTERNAL_ERROR", "TIMEOUT", "CANCELLED", "EXPIRED"})
BUILD_LIVE = ("PENDING", "QUEUED", "WORKING")


class Storage(Protocol):
    def exists(self, uri: str) -> bool: ...

    def upload(self, path: Path, uri: str) -> None: ...

    def read_bytes(self, uri: str, limit: int) -> bytes | None:
        """The object's bytes; None when it does not exist; at most ``limit`` + 1 bytes are read, so a caller
        sees an object over its limit without downloading all of it."""

    def hold(self, prefix: str) -> int:
        """A temporary hold on every object under the folder ``prefix`` (gs://bucket/folder): lifecycle rules
        delete no held object. How many objects under it are held now (one held already is left as it is);
        0: the folder has none."""

    def identify(self, pattern: str, limit: int) -> list[tuple[str, dict[str, Any]]]:
        """(uri, identity) of each object ``pattern`` names (a gs:// URI, maybe with * ? [ in its last
        segment), at most ``limit``: its size and crc32c (+ generation on Cloud Storage)."""


# The objects GcsStorage.identify lists at most for one glob: a folder of a million shards is not paged
# through to identify the first hundred that match.
IDENTIFY_LISTED = 10_000


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

    def read_bytes(self, uri: str, limit: int) -> bytes | None:
        bucket, name = split_gs(uri)
        blob = self._client.bucket(bucket).get_blob(name)  # its metadata, or None
        if blob is None:
            return None
        # The blob carries the generation just read, so the download asks for that very object (a rewrite in
        # between cannot hand back other bytes); over the limit, only its first limit + 1 bytes.
        if blob.size is not None and blob.size > limit:
            return blob.download_as_bytes(start=0, end=limit)
        return blob.download_as_bytes()

    def hold(self, prefix: str) -> int:
        bucket, name = split_gs(prefix)
        held = 0
        # The trailing slash keeps <trial>/model from also matching a sibling such as <trial>/model_old.
        for blob in self._client.list_blobs(bucket, prefix=name.rstrip("/") + "/"):
            if not blob.temporary_hold:  # one held already (an earlier report) needs no second write
                blob.temporary_hold = True
                blob.patch()  # metadata only: storage.objects.update, the submitters' model_holders role
            held += 1
        return held


    def identify(self, pattern: str, limit: int) -> list[tuple[str, dict[str, Any]]]:
        import fnmatch

        bucket, name = split_gs(pattern)
        folder, _, leaf = name.rpartition("/")
        if not any(c in leaf for c in "*?["):
            blob = self._client.bucket(bucket).get_blob(name)
            return [] if blob is None else [(pattern, _blob_identity(blob))]
        prefix = f"{folder}/" if folder else ""
        found = []
        # Listed by the literal start of the pattern, matched by the whole of it within that folder: only that
        # folder's own objects (delimiter: not every object of its subfolders), and at most IDENTIFY_LISTED.
        listed = self._client.list_blobs(bucket, prefix=prefix + re.split(r"[*?[]", leaf)[0], delimiter="/",
                                         max_results=IDENTIFY_LISTED)
        for blob in listed:
            if "/" not in blob.name[len(prefix):] and fnmatch.fnmatchcase(blob.name[len(prefix):], leaf):
                found.append((f"gs://{bucket}/{blob.name}", _blob_identity(blob)))
                if len(found) >= limit:
                    break
        return found


def _blob_identity(blob: Any) -> dict[str, Any]:
    return {"size": int(blob.size or 0), "crc32c": blob.crc32c or "",
            "generation": str(blob.generation or "")}


class LocalDirStorage:
    """``gs://bucket/name`` as ``<root>/bucket/name``: the stand-in for Cloud Storage in tests."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.held: list[str] = []  # the gs:// uris held, in the order held (a directory has no holds)

    def path(self, uri: str) -> Path:
        bucket, name = split_gs(uri)
        return self.root / bucket / name

    def exists(self, uri: str) -> bool:
        return self.path(uri).is_file()

    def upload(self, path: Path, uri: str) -> None:
        target = self.path(uri)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)

    def read_bytes(self, uri: str, limit: int) -> bytes | None:
        target = self.path(uri)
        if not target.is_file():
            return None
        with open(target, "rb") as file:
            return file.read(limit + 1)

    def hold(self, prefix: str) -> int:
        bucket, _ = split_gs(prefix)
        folder = self.path(prefix)
        found = sorted(p for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else []
        uris = [f"gs://{bucket}/{p.relative_to(self.root / bucket).as_posix()}" for p in found]
        self.held.extend(u for u in uris if u not in self.held)
        return len(uris)

    def identify(self, pattern: str, limit: int) -> list[tuple[str, dict[str, Any]]]:
        from jobs.definition.experiments import file_identity, matching_files

        bucket, _ = split_gs(pattern)
        found = matching_files(self.path(pattern), limit)
        return [(f"gs://{bucket}/{p.relative_to(self.root / bucket).as_posix()}", file_identity(p))
                for p in found]


class VertexJobs:
    """Create, find and read jobs through the generated JobServiceClient, in REST JSON form."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def _message(self, kind: str, body: dict[str, Any]) -> Any:
        from google.cloud import aiplatform_v1

        return getattr(aiplatform_v1, kind).from_json(json.dumps(body))  # the message is named as the kind

    @staticmethod
    def _to_json(message: Any) -> dict[str, Any]:
        return _message_json(message)

    def create(self, kind: str, parent: str, body: dict[str, Any]) -> dict[str, Any]:
        row = RESOURCE_KINDS[kind]
        job = getattr(self.client, row.sdk_methods[0])(parent=parent, **{row.sdk: self._message(kind, body)})
        return self._to_json(job)

    def get(self, kind: str, name: str) -> dict[str, Any]:
        job = getattr(self.client, RESOURCE_KINDS[kind].sdk_methods[1])(name=name)
        return self._to_json(job)

    def find_live(self, kind: str, parent: str, label: str, value: str) -> dict[str, Any] | None:
        """The newest job carrying ``label=value`` that has not ended, if any."""
        pager = getattr(self.client, RESOURCE_KINDS[kind].sdk_methods[2])(
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


def _message_json(message: Any) -> dict[str, Any]:
    from google.protobuf import json_format

    return json_format.MessageToDict(type(message).pb(message))


def tag_resource_name(image: str) -> str:
    """``<region>-docker.pkg.dev/<project>/<repo>/<image>:<tag>`` -> the Artifact Registry tag resource."""
    host, _, path = image.partition("/")
    name, _, tag = path.rpartition(":")
    parts = name.split("/")
    if not host.endswith("-docker.pkg.dev") or len(parts) < 3 or not tag or "@" in path:
        raise ValueError(f"not an Artifact Registry image with a tag: {image!r}")
    location = host.removesuffix("-docker.pkg.dev")
    package = quote("/".join(parts[2:]), safe="")  # nested image paths are one package, %2F-encoded
    return f"projects/{parts[0]}/locations/{location}/repositories/{parts[1]}/packages/{package}/tags/{tag}"


class ImageRegistry:
    """Which image tags exist, through the generated ArtifactRegistryClient."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def has_tag(self, image: str) -> bool:
        from google.api_core.exceptions import NotFound

        try:
            self.client.get_tag(name=tag_resource_name(image))
        except NotFound:
            return False
        return True


class CloudBuilds:
    """Create, find and read Cloud Build builds through the generated CloudBuildClient, in REST JSON form."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def create(self, request: dict[str, Any]) -> dict[str, Any]:
        from google.cloud.devtools import cloudbuild_v1

        message = cloudbuild_v1.CreateBuildRequest.from_json(json.dumps(request))
        operation = self.client.create_build(request=message)
        # The long-running operation carries the queued build in its metadata; the build is then followed
        # by id (get_build), like `gcloud builds submit` does.
        return _message_json(operation.metadata.build)

    def get(self, name: str) -> dict[str, Any]:
        return _message_json(self.client.get_build(name=name))

    def find_live(self, parent: str, tag: str) -> dict[str, Any] | None:
        """The newest live build tagged ``tag``: a retried submit follows it instead of starting another."""
        status = " OR ".join(f'status="{s}"' for s in BUILD_LIVE)
        pager = self.client.list_builds(request={"parent": parent, "filter": f'tags="{tag}" AND ({status})'})
        live = [_message_json(b) for b in pager]
        live = [b for b in live if tag in b.get("tags", []) and b.get("status") in BUILD_LIVE]
        return max(live, key=lambda b: b.get("createTime", ""), default=None)


LOGGING_ENDPOINT = "https://logging.googleapis.com"
LOGGING_READ_SCOPE = "https://www.googleapis.com/auth/logging.read"


class LogReadError(RuntimeError):
    """entries.list failed: ``status`` is the API's (PERMISSION_DENIED, ...), HTTP's, or the connection's;
    ``transient`` whether the same read may succeed later (quota, server errors, a dropped connection, a
    timeout); ``retry_after`` the seconds the server asked to wait, where it said; ``denied`` whether the
    credentials may not read logs at all (401, 403)."""

    def __init__(
        self,
        status: str,
        message: str,
        *,
        transient: bool = False,
        retry_after: float | None = None,
        denied: bool = False,
    ) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.transient = transient
        self.retry_after = retry_after
        self.denied = denied


# Answers worth asking again: request timeout, quota (RESOURCE_EXHAUSTED) and every server error. Any other
# 4xx (a bad filter, no such project, no permission) answers the same however often it is asked.
_RETRYABLE_HTTP = frozenset({408, 429})
_RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"
_DURATION = re.compile(r"(\d+(?:\.\d+)?)s")


def log_read_error(code: int, reason: str, payload: Any, headers: Mapping[str, str]) -> LogReadError:
    """entries.list's error answer as a LogReadError: the status and message of Google's JSON error body, and
    the wait the server asked for, from a Retry-After header (seconds or an HTTP date) or the body's
    google.rpc.RetryInfo (Google's APIs send the latter with RESOURCE_EXHAUSTED)."""
    error = payload.get("error") if isinstance(payload, dict) else None
    error = error if isinstance(error, dict) else {}
    retry_after = _retry_after_header(headers.get("Retry-After"))
    for detail in error.get("details") or []:
        found = isinstance(detail, dict) and detail.get("@type") == _RETRY_INFO
        delay = _DURATION.fullmatch(str(detail.get("retryDelay", ""))) if found else None
        if delay and retry_after is None:
            retry_after = float(delay.group(1))
    return LogReadError(
        str(error.get("status") or f"HTTP {code}"),
        str(error.get("message") or reason or "no message"),
        transient=code in _RETRYABLE_HTTP or code >= 500,
        retry_after=retry_after,
        denied=code in (401, 403),
    )


def _retry_after_header(value: str | None) -> float | None:
    if not value:
        return None
    if value.strip().isdigit():
        return float(value.strip())
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None  # unreadable: the reader's own backoff applies
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - time.time())


class CloudLogs:
    """Read log entries through Cloud Logging's REST method entries.list, in its JSON form.

    google-cloud-logging is not among the dependencies, and one POST is all a reader needs: google-auth's
    AuthorizedSession carries the credentials. ``session`` makes it on first use, so a follow that streams
    no logs (--no-logs) never looks for logging credentials. Every failure is a LogReadError that says
    whether asking again may help.
    """

    def __init__(self, session: Callable[[], Any], endpoint: str = LOGGING_ENDPOINT, timeout: float = 30.0):
        self._make_session = session
        self._session: Any = None
        self.endpoint = endpoint.rstrip("/")
        self.timeout = timeout  # a silent server must not hang the follow

    def list(self, project: str, filter_: str, page_token: str = "") -> tuple[list[dict[str, Any]], str]:
        """One page of the project's entries matching ``filter_``, oldest first, and the next page's token."""
        import google.auth.exceptions
        import requests

        request = {
            "resourceNames": [f"projects/{project}"],
            "filter": filter_,
            "orderBy": "timestamp asc",
            "pageSize": 1000,  # the API's maximum
        }
        if page_token:
            request["pageToken"] = page_token
        try:
            if self._session is None:
                self._session = self._make_session()
            response = self._session.post(
                f"{self.endpoint}/v2/entries:list", json=request, timeout=self.timeout
            )
            if response.status_code != 200:
                try:
                    payload = response.json()
                except ValueError:
                    payload = None
                raise log_read_error(response.status_code, response.reason, payload, response.headers)
            page = response.json()
        except google.auth.exceptions.TransportError as exc:  # a token refresh that could not connect
            raise LogReadError(type(exc).__name__, str(exc), transient=True) from exc
        except google.auth.exceptions.GoogleAuthError as exc:  # no or refused credentials (a ValueError too)
            raise LogReadError(type(exc).__name__, str(exc), denied=True) from exc
        except (requests.RequestException, ValueError) as exc:  # no answer (reset, timeout), a cut-off body
            raise LogReadError(type(exc).__name__, str(exc), transient=True) from exc
        return list(page.get("entries") or []), str(page.get("nextPageToken") or "")


def logging_session() -> Any:
    """An AuthorizedSession with Application Default Credentials, scoped to reading logs."""
    import google.auth
    from google.auth.transport.requests import AuthorizedSession

    credentials, _ = google.auth.default(scopes=[LOGGING_READ_SCOPE])
    return AuthorizedSession(credentials)


class _MadeOnFirstUse:
    """A generated client made by ``make_client`` the first time it is used."""

    def __init__(self, make_client: Callable[[], Any]) -> None:
        self._make_client = make_client
        self._client = None

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self._make_client()
        return self._client


class VertexModels(_MadeOnFirstUse):
    """The Model Registry through the generated ModelServiceClient, in REST JSON form.

    The client is made on first use: following a job never pays for the ModelService import. Every call has
    a deadline (a REST call without one can hang on a silent server); an upload waits for its long-running
    operation, whose failure raises.
    """

    CALL_TIMEOUT = 60.0
    UPLOAD_TIMEOUT = 1800.0

    def get(self, name: str) -> dict[str, Any] | None:
        """A model (its default version), or with ``@<alias|version>`` that version; None when absent."""
        from google.api_core.exceptions import NotFound

        try:
            return _message_json(self.client.get_model(name=name, timeout=self.CALL_TIMEOUT))
        except NotFound:
            return None

    def find_version(self, model: str, label: str, value: str) -> dict[str, Any] | None:
        """The newest version of ``model`` labelled ``label=value``; None when there is none (or no model)."""
        from google.api_core.exceptions import NotFound

        request = {"name": model, "filter": LABEL_FILTER.format(key=label, value=value)}
        try:
            pager = self.client.list_model_versions(request=request, timeout=self.CALL_TIMEOUT)
            versions = [_message_json(m) for m in pager]
        except NotFound:
            return None
        # The filter is applied again here: correctness must not hinge on how the server parses it.
        versions = [v for v in versions if v.get("labels", {}).get(label) == value]
        return max(versions, key=lambda v: int(v.get("versionId") or 0), default=None)

    def upload(self, request: dict[str, Any]) -> str:
        """Upload a model (UploadModelRequest, JSON form) and wait for it: the new version's name,
        ``projects/<p>/locations/<r>/models/<id>@<version id>``."""
        from google.cloud.aiplatform_v1 import UploadModelRequest

        message = UploadModelRequest.from_json(json.dumps(request))
        operation = self.client.upload_model(request=message, timeout=self.CALL_TIMEOUT)
        response = operation.result(timeout=self.UPLOAD_TIMEOUT)
        return version_name(response.model, response.model_version_id)

    def merge_aliases(self, version: str, aliases: list[str]) -> dict[str, Any]:
        """Give ``version`` (a name with ``@<version id>``) these aliases; Vertex AI takes each one off the
        version that held it."""
        merged = self.client.merge_version_aliases(
            name=version, version_aliases=aliases, timeout=self.CALL_TIMEOUT
        )
        return _message_json(merged)


def version_name(model: str, version_id: str) -> str:
    """``<model name>@<version id>`` (a name that names a version already keeps its own)."""
    return model if "@" in model else f"{model}@{version_id}"


class VertexEndpoints:
    """Endpoints through the generated EndpointServiceClient, predictions through PredictionServiceClient, in
    REST JSON form. Made on first use, every call with a deadline; a deploy or undeploy waits for its
    long-running operation, whose failure raises (Vertex AI then leaves the endpoint's traffic as it was)."""

    CALL_TIMEOUT = 60.0
    DEPLOY_TIMEOUT = 3600.0  # a deploy provisions machines and waits for the container's health route

    def __init__(self, make_client: Callable[[], Any], make_predictor: Callable[[], Any]) -> None:
        self._make = {"endpoints": make_client, "predictions": make_predictor}
        self._made: dict[str, Any] = {}

    def _client(self, which: str) -> Any:
        if which not in self._made:
            self._made[which] = self._make[which]()
        return self._made[which]

    def get(self, name: str) -> dict[str, Any] | None:
        """The endpoint, its deployedModels and trafficSplit; None when Vertex AI has no such endpoint."""
        from google.api_core.exceptions import NotFound

        try:
            return _message_json(self._client("endpoints").get_endpoint(name=name, timeout=self.CALL_TIMEOUT))
        except NotFound:
            return None

    def deploy(self, request: dict[str, Any]) -> dict[str, Any]:
        """Send a DeployModelRequest (JSON form) and wait: the DeployedModel it created."""
        from google.cloud.aiplatform_v1 import DeployModelRequest

        message = DeployModelRequest.from_json(json.dumps(request))
        operation = self._client("endpoints").deploy_model(request=message, timeout=self.CALL_TIMEOUT)
        return _message_json(operation.result(timeout=self.DEPLOY_TIMEOUT).deployed_model)

    def undeploy(self, request: dict[str, Any]) -> None:
        """Send an UndeployModelRequest (JSON form) and wait for it."""
        from google.cloud.aiplatform_v1 import UndeployModelRequest

        message = UndeployModelRequest.from_json(json.dumps(request))
        operation = self._client("endpoints").undeploy_model(request=message, timeout=self.CALL_TIMEOUT)
        operation.result(timeout=self.DEPLOY_TIMEOUT)

    def predict(self, endpoint: str, instances: list[Any]) -> dict[str, Any]:
        """One online prediction through the endpoint's traffic split: predictions and deployedModelId."""
        from google.cloud.aiplatform_v1 import PredictRequest

        message = PredictRequest.from_json(json.dumps({"endpoint": endpoint, "instances": instances}))
        return _message_json(self._client("predictions").predict(request=message, timeout=self.CALL_TIMEOUT))


class VertexMetadata(_MadeOnFirstUse):
    """Vertex AI Experiments' store, the MetadataService, through its generated client in REST JSON form.

    Made on first use; every call has a deadline. ``call`` sends one request (``method`` of
    MetadataServiceClient, its request as aiplatform_v1 JSON, checked against the request message): a create
    whose resource exists returns None instead of raising, so a retried recording goes on.
    """

    CALL_TIMEOUT = 60.0
    STORE_TIMEOUT = 300.0

    def call(self, method: str, request: dict[str, Any]) -> dict[str, Any] | None:
        from google.api_core.exceptions import Aborted, Conflict
        from google.cloud import aiplatform_v1

        message_type = "".join(part.title() for part in method.split("_")) + "Request"
        message = getattr(aiplatform_v1, message_type).from_json(json.dumps(request))
        try:
            answer = getattr(self.client, method)(request=message, timeout=self.CALL_TIMEOUT)
        except Conflict as exc:  # over REST, ALREADY_EXISTS is HTTP 409: Conflict (AlreadyExists over gRPC)
            if isinstance(exc, Aborted):  # 409 too, but a concurrent change: not "it exists"
                raise
            return None
        return _message_json(answer) if hasattr(type(answer), "pb") else {}

    def get(self, method: str, name: str) -> dict[str, Any] | None:
        """A store, context or execution by name (``get_context``, ...); None when absent."""
        from google.api_core.exceptions import NotFound

        try:
            return _message_json(getattr(self.client, method)(name=name, timeout=self.CALL_TIMEOUT))
        except NotFound:
            return None

    def ensure_store(self, parent: str, store_id: str) -> None:
        """The region's metadata store, created (and waited for) where it does not exist yet, as the SDK's
        ``ensure_default_metadata_store_exists`` does."""
        if self.get("get_metadata_store", f"{parent}/metadataStores/{store_id}") is not None:
            return
        from google.api_core.exceptions import Aborted, Conflict

        try:
            operation = self.client.create_metadata_store(
                parent=parent, metadata_store={}, metadata_store_id=store_id, timeout=self.CALL_TIMEOUT
            )
            operation.result(timeout=self.STORE_TIMEOUT)
        except Conflict as exc:  # made by someone else meanwhile (ALREADY_EXISTS)
            if isinstance(exc, Aborted):
                raise

    def list_contexts(self, store: str, filter_: str) -> list[dict[str, Any]]:
        """The store's contexts matching ``filter_``, every page; [] where the store does not exist."""
        from google.api_core.exceptions import NotFound

        try:
            pager = self.client.list_contexts(request={"parent": store, "filter": filter_},
                                              timeout=self.CALL_TIMEOUT)
            return [_message_json(c) for c in pager]
        except NotFound:
            return []


@dataclass
class Clients:
    jobs: VertexJobs
    storage: Storage
    images: ImageRegistry | None = None
    builds: CloudBuilds | None = None
    logs: CloudLogs | None = None  # None: nothing to stream a job's log entries from
    models: VertexModels | None = None
    endpoints: VertexEndpoints | None = None
    metadata: VertexMetadata | None = None  # Vertex AI Experiments; None: runs are not recorded


ClientFactory = Callable[[str, str], Clients]


def default_factory(project: str, region: str) -> Clients:
    """Real clients with Application Default Credentials, on the region's Vertex AI endpoint."""
    from google.cloud.aiplatform_v1.services.job_service import JobServiceClient
    from google.cloud.artifactregistry_v1 import ArtifactRegistryClient
    from google.cloud.devtools.cloudbuild_v1 import CloudBuildClient

    options = {"api_endpoint": f"{region}-aiplatform.googleapis.com"}

    def model_service():
        from google.cloud.aiplatform_v1.services.model_service import ModelServiceClient

        return ModelServiceClient(client_options=options)

    def endpoint_service():
        from google.cloud.aiplatform_v1.services.endpoint_service import EndpointServiceClient

        return EndpointServiceClient(client_options=options)

    def prediction_service():
        from google.cloud.aiplatform_v1.services.prediction_service import PredictionServiceClient

        return PredictionServiceClient(client_options=options)

    def metadata_service():
        from google.cloud.aiplatform_v1.services.metadata_service import MetadataServiceClient

        return MetadataServiceClient(client_options=options)

    return Clients(
        jobs=VertexJobs(JobServiceClient(client_options=options)),
        storage=GcsStorage(project),
        images=ImageRegistry(ArtifactRegistryClient()),
        builds=CloudBuilds(CloudBuildClient()),
        logs=CloudLogs(logging_session),
        models=VertexModels(model_service),
        endpoints=VertexEndpoints(endpoint_service, prediction_service),
        metadata=VertexMetadata(metadata_service),
    )


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


def build_console_url(build: dict[str, Any]) -> str:
    """The build's log page: the URL Cloud Build reports, else the console page built from its name."""
    if build.get("logUrl"):
        return str(build["logUrl"])
    parts = str(build.get("name", "")).split("/")
    if len(parts) == 6:
        return (
            f"https://console.cloud.google.com/cloud-build/builds;region={parts[3]}/{parts[5]}"
            f"?project={parts[1]}"
        )
    return "https://console.cloud.google.com/cloud-build/builds"


def tensorboard_url(tensorboard: str, resource_name: str) -> str:
    """The TensorBoard experiment Vertex AI creates for a job (named after the job id)."""
    region = tensorboard.split("/")[3]
    experiment = f"{tensorboard}/experiments/{job_id_of(resource_name)}".replace("/", "+")
    return f"https://{region}.tensorboard.googleusercontent.com/experiment/{experiment}"
