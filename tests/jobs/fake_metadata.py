"""A fake Vertex AI MetadataService (the store behind Vertex AI Experiments) at the REST boundary, served by
tests/jobs/fake_vertex.py's server (paths under ``.../metadataStores``) for the real generated client.

It keeps what Vertex AI documents: a store must exist before anything goes in it (CreateMetadataStore is a
long-running operation, here done at once); a context, artifact or execution id is unique in its store
(a second create is 409 ALREADY_EXISTS); UpdateContext (PATCH) replaces the fields it is sent;
AddContextChildren makes the parent one of the child's ``parentContexts``; ListContexts takes the filter the
SDK writes (``schema_title="..." AND parent_contexts:"..."``); events and attributions are kept as sent, and
one already held (an event between the same execution and artifact, an attribution, a child) is skipped, as
AddExecutionEvents, AddContextArtifactsAndExecutions and AddContextChildren document.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

STORE_RESPONSE = "type.googleapis.com/google.cloud.aiplatform.v1.MetadataStore"
# A store, maybe /<collection>, maybe /<id>, maybe :<verb> (addContextChildren, ...).
STORE_PATH = re.compile(
    r"(projects/[^/]+/locations/[^/]+/metadataStores/[^/:]+)(?:/(\w+)(?:/([^/:]+))?)?(?::(\w+))?"
)
COLLECTIONS = {"contexts": "contextId", "artifacts": "artifactId", "executions": "executionId"}


def _error(status: int, code: str, message: str) -> tuple[int, dict]:
    return status, {"error": {"code": status, "message": message, "status": code}}


@dataclass
class FakeMetadata:
    stores: dict[str, dict] = field(default_factory=dict)
    # (collection, name) -> the resource as stored.
    resources: dict[tuple[str, str], dict] = field(default_factory=dict)
    events: dict[str, list[dict]] = field(default_factory=dict)  # execution name -> its events
    attributions: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # context -> artifacts, ...
    failing: set[str] = field(default_factory=set)  # collections whose creates fail (500 INTERNAL): an outage

    @staticmethod
    def owns(path: str) -> bool:
        return "/metadataStores" in path

    def contexts(self) -> dict[str, dict]:
        return {name: r for (kind, name), r in self.resources.items() if kind == "contexts"}

    def handle(self, method: str, path: str, query: dict, body: dict) -> tuple[int, dict]:
        if method == "POST" and path.endswith("/metadataStores"):
            name = f"{path}/{query.get('metadataStoreId', ['default'])[0]}"
            self.stores[name] = {"name": name}
            return 200, {"name": f"{name}/operations/1", "done": True,
                         "response": {"@type": STORE_RESPONSE, "name": name}}
        found = STORE_PATH.fullmatch(path)
        if not found:
            return _error(404, "NOT_FOUND", f"no such resource {path}")
        store, collection, rid, verb = found.groups()
        if collection is None:
            return (200, self.stores[store]) if store in self.stores else _error(404, "NOT_FOUND", store)
        if store not in self.stores:
            return _error(404, "NOT_FOUND", f"no metadata store {store}")
        if collection not in COLLECTIONS:
            return _error(404, "NOT_FOUND", path)
        if rid is None:
            return self._collection(method, store, collection, query, body)
        name = f"{store}/{collection}/{rid}"
        if (collection, name) not in self.resources:
            return _error(404, "NOT_FOUND", f"no such resource {name}")
        resource = self.resources[(collection, name)]
        if verb == "addExecutionEvents":  # an event between the same two it holds already is skipped
            held = self.events.setdefault(name, [])
            held += [e for e in body.get("events", []) if e["artifact"] not in {h["artifact"] for h in held}]
            return 200, {}
        if verb == "addContextArtifactsAndExecutions":
            added = self.attributions.setdefault(name, {"artifacts": [], "executions": []})
            for key in ("artifacts", "executions"):
                added[key] += [r for r in body.get(key, []) if r not in added[key]]
            return 200, {}
        if verb == "addContextChildren":
            for child in body.get("childContexts", []):
                parents = self.resources[("contexts", child)].setdefault("parentContexts", [])
                if name not in parents:
                    parents.append(name)
            return 200, {}
        if method == "PATCH":
            resource.update({k: v for k, v in body.items() if k != "name"})
        return 200, resource

    def _collection(self, method: str, store: str, collection: str, query: dict, body: dict) \
            -> tuple[int, dict]:
        if method == "GET":
            listed = [r for (kind, _), r in self.resources.items() if kind == collection]
            wanted = query.get("filter", [""])[0]
            schema = re.search(r'schema_title="([^"]+)"', wanted)
            parent = re.search(r'parent_contexts:"([^"]+)"', wanted)
            listed = [
                r for r in listed
                if (not schema or r.get("schemaTitle") == schema[1])
                and (not parent or parent[1] in r.get("parentContexts", []))
            ]
            return 200, {collection: listed}
        if collection in self.failing:
            return _error(500, "INTERNAL", f"creating {collection} failed")
        rid = query.get(COLLECTIONS[collection], [""])[0]
        name = f"{store}/{collection}/{rid}"
        if (collection, name) in self.resources:
            return _error(409, "ALREADY_EXISTS", f"{name} already exists")
        resource = {**body, "name": name, "createTime": f"2026-01-02T03:08:{len(self.resources):02d}Z"}
        self.resources[(collection, name)] = resource
        return 200, resource
