"""Vertex AI's BatchPredictionJob service, faked for tests/jobs/fake_vertex.py's REST server: a create is
parsed as the real aiplatform_v1.BatchPredictionJob (400 for what it would not take), its model version
(``models/<id>@<alias or version id>``) must exist in the fake Model Registry (404 otherwise, as Vertex AI
answers), and each GET of the job plays the next scripted state; a SUCCEEDED job reports the folder its
output went to and its completion counts. A list filters by one label (``labels.<key>="<value>"``, the only
filter run_job.py sends) and returns the jobs as they stand, without playing a state."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

COLLECTION = "batchPredictionJobs"


@dataclass
class FakeBatch:
    states: list[str] = field(
        default_factory=lambda: ["JOB_STATE_PENDING", "JOB_STATE_RUNNING", "JOB_STATE_SUCCEEDED"]
    )
    error_message: str = "the serving container exited"
    jobs: dict[str, dict] = field(default_factory=dict)
    polls: dict[str, int] = field(default_factory=dict)
    next_id: int = 7000

    def owns(self, path: str) -> bool:
        return f"/{COLLECTION}" in path

    def handle(self, method: str, path: str, query: dict, body: dict | None, models: dict[str, list[dict]]):
        if method == "POST" and path.endswith(f"/{COLLECTION}"):
            return self._create(path, body or {}, models)
        if method == "GET" and path.endswith(f"/{COLLECTION}"):
            wanted = re.fullmatch(r'labels\.([\w-]+)="([^"]*)"', query.get("filter", [""])[0])
            if wanted is None:
                message = "unsupported filter"
                return 400, {"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}
            found = [job for name, job in self.jobs.items() if name.startswith(path + "/")
                     and job.get("labels", {}).get(wanted.group(1)) == wanted.group(2)]
            return 200, {COLLECTION: found}
        if method == "GET" and path in self.jobs:
            self.polls[path] += 1
            job = self.jobs[path]
            job["state"] = self.states[min(self.polls[path], len(self.states) - 1)]
            if job["state"] == "JOB_STATE_SUCCEEDED":
                prefix = job["outputConfig"]["gcsDestination"]["outputUriPrefix"].rstrip("/")
                model = job["model"].rsplit("/", 1)[-1].split("@")[0]
                job["outputInfo"] = {"gcsOutputDirectory": f"{prefix}/prediction-{model}-{job['createTime']}"}
                job["completionStats"] = {"successfulCount": "610", "failedCount": "0"}
            elif job["state"] == "JOB_STATE_FAILED":
                job["error"] = {"code": 13, "message": self.error_message}
            return 200, job
        return 404, {"error": {"code": 404, "message": f"no such resource {path}", "status": "NOT_FOUND"}}

    def _create(self, path: str, body: dict, models: dict[str, list[dict]]):
        from google.cloud.aiplatform_v1 import BatchPredictionJob
        from google.protobuf import json_format

        try:
            json_format.ParseDict(body, BatchPredictionJob()._pb)
        except json_format.ParseError as exc:
            return 400, {"error": {"code": 400, "message": str(exc), "status": "INVALID_ARGUMENT"}}
        model, _, which = str(body.get("model", "")).partition("@")
        versions = models.get(model, [])
        if not any(which in (v["versionId"], *v.get("versionAliases", [])) for v in versions):
            message = f"Model {json.dumps(body.get('model'))} not found."
            return 404, {"error": {"code": 404, "message": message, "status": "NOT_FOUND"}}
        name = f"{path}/{self.next_id}"
        self.next_id += 1
        # Each a second later than the one before: "the newest" is well defined.
        created = f"2026-01-02T03:04:{5 + len(self.jobs):02d}Z"
        job = {**body, "name": name, "state": self.states[0], "createTime": created}
        self.jobs[name] = job
        self.polls[name] = 0
        return 200, job
