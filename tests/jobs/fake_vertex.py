"""A fake Google Cloud REST endpoint on 127.0.0.1: Vertex AI's JobService, ModelService (the Model
Registry) and MetadataService (Vertex AI Experiments, tests/jobs/fake_metadata.py), Cloud Build's builds,
Artifact Registry's tags and Cloud Logging's entries.list (tests/jobs/fake_logging.py), for the real
generated clients (REST transport, anonymous credentials) and the logs reader to talk to. It records every
request and plays scripted sequences of job and build states (a created tuning job reports the scripted
``trials``) and log entries; a successful build creates its image tags the way Cloud Build's push does; an
upload is a long-running operation that completes on its first poll (or fails, when told to). ``add_job``
stores a job as an earlier run left it, for `run_job.py report` and `--follow`."""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlparse

from jobs.cloud.client import (
    Clients,
    CloudBuilds,
    CloudLogs,
    ImageRegistry,
    LocalDirStorage,
    VertexEndpoints,
    VertexJobs,
    VertexMetadata,
    VertexModels,
    tag_resource_name,
)
from jobs.definition.image import VARIANTS
from tests.jobs.fake_batch import FakeBatch
from tests.jobs.fake_endpoints import FakeEndpoints
from tests.jobs.fake_logging import RESET, FakeLogging
from tests.jobs.fake_metadata import FakeMetadata
from tests.jobs.helpers import IMAGE_HASH, OUTPUTS

COLLECTIONS = ("customJobs", "hyperparameterTuningJobs")
BUILD_OPERATION = "type.googleapis.com/google.devtools.cloudbuild.v1.BuildOperationMetadata"
UPLOAD_RESPONSE = "type.googleapis.com/google.cloud.aiplatform.v1.UploadModelResponse"
# A model name, maybe @<alias or version id>, then maybe :<method> (listVersions, mergeVersionAliases).
MODEL_PATH = re.compile(r"(projects/[^/]+/locations/[^/]+/models/[^/@:]+)(?:@([^/:]+))?(?::(\w+))?")


@dataclass
class Request:
    method: str
    path: str
    query: dict
    body: dict | None


@dataclass
class FakeVertex:
    # States a job reports on successive GETs after creation; the last one sticks.
    states: list[str] = field(
        default_factory=lambda: ["JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_SUCCEEDED"]
    )
    error_message: str = ""
    # Trials (aiplatform_v1.Trial as REST JSON) a created HyperparameterTuningJob reports on each GET.
    trials: list[dict] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    jobs: dict[str, dict] = field(default_factory=dict)
    polls: dict[str, int] = field(default_factory=dict)
    next_id: int = 1000
    # Artifact Registry tag resource names that exist: by default the trainer images of the tests' fixed image
    # hash, so a job on them submits without a build (tests of builds start from an empty registry).
    tags: set[str] = field(
        default_factory=lambda: {
            tag_resource_name(f"{OUTPUTS['trainer_image']}:{v}-{IMAGE_HASH}") for v in VARIANTS
        }
    )
    # Statuses a build reports on successive GETs after creation; the last one sticks.
    build_states: list[str] = field(default_factory=lambda: ["QUEUED", "WORKING", "SUCCESS"])
    build_detail: str = ""
    builds: dict[str, dict] = field(default_factory=dict)
    # The Model Registry: model name -> its versions (Model JSON, versionId "1", "2", ...), oldest first.
    models: dict[str, list[dict]] = field(default_factory=dict)
    operations: dict[str, dict] = field(default_factory=dict)
    # Messages the next uploads' operations fail with (one per upload, in order): the operation ends with an
    # error and no version is created, as when Vertex AI cannot read the artifacts.
    upload_errors: list[str] = field(default_factory=list)
    # Messages the next MergeVersionAliases calls are refused with (HTTP 503), one per call.
    merge_errors: list[str] = field(default_factory=list)
    logging: FakeLogging = field(default_factory=FakeLogging)
    endpoints: FakeEndpoints = field(default_factory=FakeEndpoints)  # EndpointService and predict
    fixed: set[str] = field(default_factory=set)  # jobs from add_job: returned as stored, state included
    batch: FakeBatch = field(default_factory=FakeBatch)  # BatchPredictionJobs (tests/jobs/fake_batch.py)
    metadata: FakeMetadata = field(default_factory=FakeMetadata)  # Experiments (tests/jobs/fake_metadata.py)

    def add_job(self, name: str, job: dict) -> None:
        """A job that exists already, e.g. one that ended last week; GETs return it unchanged."""
        self.jobs[name] = {**job, "name": name}
        self.polls[name] = 0
        self.fixed.add(name)

    def created(self) -> list[Request]:
        """The job creations (POSTs to a job collection)."""
        return [r for r in self.requests if r.method == "POST" and r.path.rsplit("/", 1)[-1] in COLLECTIONS]

    def uploads(self) -> list[Request]:
        return [r for r in self.requests if r.method == "POST" and r.path.endswith("/models:upload")]

    def merges(self) -> list[Request]:
        return [r for r in self.requests if r.path.endswith(":mergeVersionAliases")]

    def holder(self, model: str, alias: str) -> str | None:
        """The version id holding ``alias`` of ``model`` (a full model name), or None."""
        found = [v for v in self.models.get(model, []) if alias in v.get("versionAliases", [])]
        return found[0]["versionId"] if found else None

    def add_version(self, model: str, artifact_uri: str, labels: dict | None = None) -> dict:
        """A version uploaded before the test (by another run, or by hand), as UploadModel would add it."""
        versions = self.models.setdefault(model, [])
        version = {
            "name": model,
            "versionId": str(len(versions) + 1),
            "displayName": model.rsplit("/", 1)[-1],
            "artifactUri": artifact_uri,
            "labels": dict(labels or {}),
            "versionAliases": [] if versions else ["default"],  # Vertex AI's: the first version is default
            "versionCreateTime": f"2026-01-02T03:06:{len(versions):02d}Z",
        }
        versions.append(version)
        return version

    def created_builds(self) -> list[Request]:
        return [r for r in self.requests if r.method == "POST" and r.path.endswith("/builds")]

    def add_image(self, image: str) -> None:
        self.tags.add(tag_resource_name(image))

    def handle(self, method: str, path: str, query: dict, body: dict | None) -> tuple | str:
        if method == "POST" and path == "/v2/entries:list":  # Cloud Logging keeps its own record
            return self.logging.list_entries(body or {}, sum(self.polls[name] for name in self.jobs))
        self.requests.append(Request(method, path, query, body))
        # The generated operations client polls under /ui/ (the first of its URI bindings), the rest /v1/.
        path = unquote(path).removeprefix("/v1/").removeprefix("/ui/")
        if "/tags/" in path or path.endswith("/builds") or "/builds/" in path:
            return self._registry_or_build(method, path, query, body)
        if self.metadata.owns(path):
            return self.metadata.handle(method, path, query, body or {})
        if self.batch.owns(path):
            return self.batch.handle(method, path, query, body, self.models)
        if "/endpoints/" in path:
            return self.endpoints.handle(method, path, body or {}, self.models)
        if "/models" in path:
            return self._model_service(method, path, query, body or {})
        collection = next((c for c in COLLECTIONS if path.endswith("/" + c)), None)
        if method == "POST" and collection:
            name = f"{path}/{self.next_id}"
            self.next_id += 1
            job = {
                **body,
                "name": name,
                "state": self.states[0],
                "createTime": f"2026-01-02T03:04:{len(self.jobs):02d}Z",
            }
            self.jobs[name] = job
            self.polls[name] = 0
            return 200, job
        if method == "GET" and collection:
            wanted = re.fullmatch(r'labels\.([\w-]+)="?([^"]*)"?', query.get("filter", [""])[0])
            found = [
                j
                for n, j in self.jobs.items()
                if n.startswith(path + "/")
                and (not wanted or j.get("labels", {}).get(wanted.group(1)) == wanted.group(2))
            ]
            return 200, {collection: found}
        if method == "GET" and path in self.jobs:
            self.polls[path] += 1
            job = self.jobs[path]
            if path in self.fixed:
                return 200, job
            if "/hyperparameterTuningJobs/" in path and self.trials:
                job["trials"] = self.trials
            job["state"] = self.states[min(self.polls[path], len(self.states) - 1)]
            if job["state"] == "JOB_STATE_FAILED":
                job["error"] = {"code": 3, "message": self.error_message}
            return 200, job
        return _not_found(path)

    def _registry_or_build(self, method: str, path: str, query: dict, body: dict | None) -> tuple[int, dict]:
        if "/tags/" in path:
            return (200, {"name": path}) if method == "GET" and path in self.tags else _not_found(path)
        if method == "POST":
            build_id = f"build-{len(self.builds) + 1}"
            name = f"{path}/{build_id}"
            project = path.split("/")[1]
            build = {
                **body,
                "id": build_id,
                "name": name,
                "projectId": project,
                "status": self.build_states[0],
                "createTime": f"2026-01-02T03:05:{len(self.builds):02d}Z",
                "logUrl": f"https://console.cloud.google.com/cloud-build/builds/{build_id}?project={project}",
            }
            self.builds[name] = build
            self.polls[name] = 0
            return 200, {
                "name": f"operations/build/{project}/{build_id}",
                "metadata": {"@type": BUILD_OPERATION, "build": build},
            }
        if path.endswith("/builds"):
            wanted = re.search(r'tags="([^"]+)"', query.get("filter", [""])[0])
            found = [
                b
                for n, b in self.builds.items()
                if n.startswith(path + "/")
                and (not wanted or wanted.group(1) in b.get("tags", []))
                and b["status"] in ("PENDING", "QUEUED", "WORKING")
            ]
            return 200, {"builds": found}
        if path not in self.builds:
            return _not_found(path)
        self.polls[path] += 1
        build = self.builds[path]
        build["status"] = self.build_states[min(self.polls[path], len(self.build_states) - 1)]
        if build["status"] == "SUCCESS":
            for image in build.get("images", []):
                self.add_image(image)
        elif build["status"] == "FAILURE":
            build["statusDetail"] = self.build_detail
        return 200, build

    def _model_service(self, method: str, path: str, query: dict, body: dict) -> tuple[int, dict]:
        if path.endswith("/models:upload"):
            return self._upload(path.removesuffix("/models:upload"), body)
        if "/operations/" in path:
            return (200, self._finish(self.operations[path])) if path in self.operations else _not_found(path)
        found = MODEL_PATH.fullmatch(path)
        if not found or found.group(1) not in self.models:
            return _not_found(path)
        model, which, verb = found.groups()
        versions = self.models[model]
        if verb == "listVersions":
            wanted = re.fullmatch(r'labels\.([\w-]+)="?([^"]*)"?', query.get("filter", [""])[0])
            listed = [v for v in versions if not wanted or v["labels"].get(wanted[1]) == wanted[2]]
            return 200, {"models": listed}
        version = next(
            (v for v in versions if which in (v["versionId"], *v["versionAliases"])),
            None if which else next(v for v in versions if "default" in v["versionAliases"]),
        )
        if version is None:
            return _not_found(path)
        if verb == "mergeVersionAliases":
            if self.merge_errors:
                message = self.merge_errors.pop(0)
                return 503, {"error": {"code": 503, "message": message, "status": "UNAVAILABLE"}}
            for alias in body.get("versionAliases", []):
                for other in versions:
                    if alias.lstrip("-") in other["versionAliases"]:
                        other["versionAliases"].remove(alias.lstrip("-"))
                if not alias.startswith("-"):
                    version["versionAliases"].append(alias)
        return 200, version

    def _upload(self, parent: str, body: dict) -> tuple[int, dict]:
        if body.get("parentModel"):
            model = body["parentModel"]
            if model not in self.models:
                return _not_found(model)
        else:
            model = f"{parent}/models/{body['modelId']}"
            if model in self.models:
                return 409, {"error": {"code": 409, "message": f"{model} exists", "status": "ALREADY_EXISTS"}}
        name = f"{model}/operations/{len(self.operations) + 1}"
        self.operations[name] = {"name": name, "done": False, "upload": (model, body["model"])}
        return 200, {"name": name, "done": False}

    def _finish(self, operation: dict) -> dict:
        """An upload's operation, done on its first poll: the version added, or the scripted error."""
        if "upload" in operation:
            model, fields = operation.pop("upload")
            operation["done"] = True
            if self.upload_errors:
                operation["error"] = {"code": 13, "message": self.upload_errors.pop(0)}
            else:
                version = self.add_version(model, fields["artifactUri"], fields.get("labels"))
                version.update({k: v for k, v in fields.items() if k != "versionAliases"})
                operation["response"] = {
                    "@type": UPLOAD_RESPONSE,
                    "model": model,
                    "modelVersionId": version["versionId"],
                }
        return operation


def _not_found(path: str) -> tuple[int, dict]:
    return 404, {"error": {"code": 404, "message": f"no such resource {path}", "status": "NOT_FOUND"}}


def send_json(
    handler: BaseHTTPRequestHandler, status: int, payload: dict, headers: dict | None = None
) -> None:
    """Answer an HTTP request with a JSON body, as Google's JSON APIs do."""
    data = json.dumps(payload).encode()
    handler.send_response(status)
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


class _Handler(BaseHTTPRequestHandler):
    fake: FakeVertex

    def _reply(self, method: str) -> None:
        url = urlparse(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        answer = self.server.fake.handle(method, url.path, parse_qs(url.query), body)
        if answer == RESET:  # no answer: the client sees the connection closed
            self.close_connection = True
            return
        send_json(self, *answer)

    def do_GET(self):  # noqa: N802 - http.server naming
        self._reply("GET")

    def do_POST(self):  # noqa: N802
        self._reply("POST")

    def do_PATCH(self):  # noqa: N802
        self._reply("PATCH")

    def log_message(self, *args):  # keep test output quiet
        pass


class FakeVertexServer:
    def __init__(self, fake: FakeVertex | None = None) -> None:
        self.fake = fake or FakeVertex()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.fake = self.fake
        # A short poll interval: shutdown() waits for the serving loop's next poll (0.5 s by default) at the
        # end of every test that uses the server.
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> FakeVertexServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def factory(self, storage_root):
        """A client factory for run_job.py: the real JobServiceClient on this endpoint, gs:// in a dir."""
        calls = []
        made: list[Clients] = []  # each call's clients: a LocalDirStorage's holds live as long as it does

        def make(project: str, region: str) -> Clients:
            from google.auth.credentials import AnonymousCredentials
            from google.auth.transport.requests import AuthorizedSession
            from google.cloud.aiplatform_v1.services.endpoint_service import EndpointServiceClient
            from google.cloud.aiplatform_v1.services.job_service import JobServiceClient
            from google.cloud.aiplatform_v1.services.metadata_service import MetadataServiceClient
            from google.cloud.aiplatform_v1.services.model_service import ModelServiceClient
            from google.cloud.aiplatform_v1.services.prediction_service import PredictionServiceClient
            from google.cloud.artifactregistry_v1 import ArtifactRegistryClient
            from google.cloud.devtools.cloudbuild_v1 import CloudBuildClient

            calls.append((project, region))
            options = {
                "credentials": AnonymousCredentials(),
                "transport": "rest",
                "client_options": {"api_endpoint": self.endpoint},
            }
            made.append(Clients(
                jobs=VertexJobs(JobServiceClient(**options)),
                storage=LocalDirStorage(storage_root),
                images=ImageRegistry(ArtifactRegistryClient(**options)),
                builds=CloudBuilds(CloudBuildClient(**options)),
                logs=CloudLogs(lambda: AuthorizedSession(AnonymousCredentials()), endpoint=self.endpoint),
                models=VertexModels(lambda: ModelServiceClient(**options)),
                endpoints=VertexEndpoints(lambda: EndpointServiceClient(**options),
                                          lambda: PredictionServiceClient(**options)),
                metadata=VertexMetadata(lambda: MetadataServiceClient(**options)),
            ))
            return made[-1]

        make.calls = calls
        make.made = made
        return make
