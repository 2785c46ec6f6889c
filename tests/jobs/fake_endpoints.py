"""A fake Vertex AI EndpointService and PredictionService.predict at the REST boundary, served by
tests/jobs/fake_vertex.py's server (paths under ``.../endpoints``) for the real generated clients.

It keeps what Vertex AI documents: DeployModel is a long-running operation, done on its first poll, that adds
a DeployedModel (a new numeric id; ``model`` without its ``@alias``, ``modelVersionId`` the version the alias
or id named) and, only then, overwrites the endpoint's trafficSplit with the request's, ``"0"`` replaced by
the new id (a split that does not sum to 100 or names a model not deployed is refused, 400); a scripted
failure ends the operation with an error and changes nothing. UndeployModel removes a model, taking the
request's split, or refusing (400) one that would keep traffic on it; the last model leaves the split empty.
Predict answers from the deployed models in turn by their shares (a deterministic round over 100 requests, the
newest model's share first), each prediction echoing its instance.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

DEPLOY_RESPONSE = "type.googleapis.com/google.cloud.aiplatform.v1.DeployModelResponse"
UNDEPLOY_RESPONSE = "type.googleapis.com/google.cloud.aiplatform.v1.UndeployModelResponse"
ENDPOINT_PATH = re.compile(r"(projects/[^/]+/locations/[^/]+/endpoints/[^/:]+)(?::(\w+))?")


def _error(status: int, code: str, message: str) -> tuple[int, dict]:
    return status, {"error": {"code": status, "message": message, "status": code}}


@dataclass
class FakeEndpoints:
    endpoints: dict[str, dict] = field(default_factory=dict)
    operations: dict[str, dict] = field(default_factory=dict)
    # Messages the next deploys' operations fail with, one per deploy: nothing deployed, traffic unchanged.
    deploy_errors: list[str] = field(default_factory=list)
    # Messages the next predictions are refused with (HTTP 500), one per prediction.
    predict_errors: list[str] = field(default_factory=list)
    predictions: int = 0
    next_id: int = 5000

    def add_endpoint(self, name: str) -> dict:
        self.endpoints[name] = {"name": name, "displayName": name.rsplit("/", 1)[-1], "deployedModels": [],
                                "trafficSplit": {}}
        return self.endpoints[name]

    def add_deployed(self, endpoint: str, model: str, version_id: str, share: int, display_name: str = "") \
            -> str:
        """A model deployed before the test (by hand or an earlier run), taking ``share`` of the traffic; the
        others keep theirs (the test makes the shares sum to 100)."""
        deployed_id = str(self.next_id)
        self.next_id += 1
        state = self.endpoints[endpoint]
        state["deployedModels"].append({
            "id": deployed_id, "model": model, "modelVersionId": version_id,
            "displayName": display_name or deployed_id,
            "createTime": f"2026-01-02T03:07:{len(state['deployedModels']):02d}Z",
        })
        state["trafficSplit"][deployed_id] = share
        return deployed_id

    def split(self, endpoint: str) -> dict[str, int]:
        return dict(self.endpoints[endpoint]["trafficSplit"])

    def handle(self, method: str, path: str, body: dict, models: dict[str, list[dict]]) -> tuple[int, dict]:
        if "/operations/" in path:
            if path not in self.operations:
                return _error(404, "NOT_FOUND", f"no such operation {path}")
            return 200, self._finish(self.operations[path], models)
        found = ENDPOINT_PATH.fullmatch(path)
        if not found or found[1] not in self.endpoints:
            return _error(404, "NOT_FOUND", f"no such endpoint {path}")
        endpoint, verb = found.groups()
        if method == "GET" and verb is None:
            return 200, self.endpoints[endpoint]
        if verb in ("deployModel", "undeployModel"):
            name = f"{endpoint}/operations/{len(self.operations) + 1}"
            # The endpoint is the URL's; the body carries the rest of the request.
            self.operations[name] = {"name": name, "done": False, verb: {**body, "endpoint": endpoint}}
            return 200, {"name": name, "done": False}
        if verb == "predict":
            return self._predict(endpoint, body)
        return _error(400, "INVALID_ARGUMENT", f"unsupported {method} {path}")

    def _finish(self, operation: dict, models: dict[str, list[dict]]) -> dict:
        if operation["done"]:
            return operation
        operation["done"] = True
        if "deployModel" in operation:
            request = operation.pop("deployModel")
            failed = self.deploy_errors.pop(0) if self.deploy_errors else self._deploy(request, models)
            if isinstance(failed, str):
                operation["error"] = {"code": 9, "message": failed}
            else:
                operation["response"] = {"@type": DEPLOY_RESPONSE, "deployedModel": failed}
        else:
            request = operation.pop("undeployModel")
            failed = self._undeploy(request)
            if failed:
                operation["error"] = {"code": 9, "message": failed}
            else:
                operation["response"] = {"@type": UNDEPLOY_RESPONSE}
        return operation

    def _deploy(self, request: dict, models: dict[str, list[dict]]) -> dict | str:
        state = self.endpoints[request["endpoint"]]
        asked = request["deployedModel"]
        model, _, which = asked["model"].partition("@")
        versions = models.get(model, [])
        which = which or "default"
        version = next((v for v in versions if which in (v["versionId"], *v["versionAliases"])), None)
        if version is None:
            return f"model {asked['model']} does not exist"
        deployed_id = str(self.next_id)
        split = {(deployed_id if k == "0" else k): int(v) for k, v in request.get("trafficSplit", {}).items()}
        known = {d["id"] for d in state["deployedModels"]} | {deployed_id}
        if split and (sum(split.values()) != 100 or set(split) - known):
            return f"invalid traffic split {request.get('trafficSplit')}"
        self.next_id += 1
        deployed = {**asked, "id": deployed_id, "model": model, "modelVersionId": version["versionId"],
                    "createTime": f"2026-01-02T03:08:{len(state['deployedModels']):02d}Z"}
        state["deployedModels"].append(deployed)
        state["trafficSplit"] = split or state["trafficSplit"]
        return deployed

    def _undeploy(self, request: dict) -> str:
        state = self.endpoints[request["endpoint"]]
        gone = request["deployedModelId"]
        if gone not in {d["id"] for d in state["deployedModels"]}:
            return f"deployed model {gone} does not exist"
        rest = [d for d in state["deployedModels"] if d["id"] != gone]
        split = {k: int(v) for k, v in (request.get("trafficSplit") or state["trafficSplit"]).items()}
        if rest and (split.get(gone) or sum(split.values()) != 100 or set(split) - {d["id"] for d in rest}):
            return f"traffic split {split} keeps traffic on {gone} or does not sum to 100 over the rest"
        state["deployedModels"] = rest
        state["trafficSplit"] = split if rest else {}
        return ""

    def _predict(self, endpoint: str, body: dict) -> tuple[int, dict]:
        if self.predict_errors:
            return _error(500, "INTERNAL", self.predict_errors.pop(0))
        state = self.endpoints[endpoint]
        turn, self.predictions = self.predictions % 100, self.predictions + 1
        for deployed_id, share in sorted(state["trafficSplit"].items(), key=lambda kv: -int(kv[0])):
            if turn < share:
                return 200, {"predictions": [{"echo": i} for i in body.get("instances", [])],
                             "deployedModelId": deployed_id}
            turn -= share
        return _error(400, "FAILED_PRECONDITION", f"endpoint {endpoint} has no model deployed")
