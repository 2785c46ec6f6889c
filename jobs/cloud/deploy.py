"""Deploying, undeploying and rolling back a registered version on a Vertex AI endpoint (the rules are
jobs.definition.deployment's), through ``Clients.models`` and ``Clients.endpoints``.

Deploy: the version ``MODEL@ALIAS`` names is looked up (its version id); a DeployedModel of that model and
version on the endpoint already is this deploy's, done by an earlier run: it is not deployed twice, only
smoke-tested. Otherwise one DeployModelRequest carries the machines, the new traffic split and the record of
the previous one; Vertex AI applies the split only once the model serves, so a deploy that fails (or is lost
with its connection) leaves traffic where it was, and running the same command again finishes it. Then a
smoke prediction with the model's example instance, through the endpoint.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, TextIO

from jobs.cloud import client as cloud
from jobs.definition.body import is_gs
from jobs.definition.deployment import (
    NEW,
    DeployError,
    DeploySpec,
    Serving,
    VersionRef,
    deploy_request,
    deploy_split,
    recorded_split,
    rollback_split,
    serving,
    traffic,
    without,
)
from jobs.definition.errors import short
from serving.requests import MAX_BODY_BYTES  # Vertex AI's payload limit: a larger example cannot be sent
from trainer.contract import EXAMPLE_FILE

# Predictions sent at most, through the endpoint's split, to reach the new model once (a 10% canary is
# reached within 20 tries 88% of the time; the rest say which model answered).
SMOKE_TRIES = 20


class DeployFailed(RuntimeError):
    """A definition's deploy block failed after its model was registered; the message says how to finish."""


class SmokeFailed(Exception):
    """The smoke prediction was refused or failed: the version is deployed, with the traffic it was given."""


@dataclass(frozen=True)
class Target:
    """Where a deploy goes: the environment's parent and the endpoint's name and resource name."""

    parent: str  # projects/<p>/locations/<r>
    name: str  # the environment's name for it (--endpoint)
    resource: str  # projects/<p>/locations/<r>/endpoints/<id>


def endpoint_state(endpoints: cloud.VertexEndpoints, target: Target) -> dict[str, Any]:
    state = endpoints.get(target.resource)
    if state is None:
        raise DeployError(
            "--endpoint",
            f"{target.name} ({target.resource}) does not exist on Vertex AI",
            "an endpoint the environment's stack created: deploy it first (cdktn deploy <env>)",
        )
    return state


def version_of(models: cloud.VertexModels, ref: VersionRef, parent: str) -> dict[str, Any]:
    version = models.get(ref.version_name(parent))
    if version is None:
        raise DeployError(
            "MODEL@ALIAS",
            f"the Model Registry has no version {ref} in {parent}",
            "a registered model and one of its aliases or version ids",
        )
    return version


def find_deployed(state: dict[str, Any], model: str, version_id: str) -> Serving | None:
    return next((s for s in serving(state) if s.model == model and s.version == version_id), None)


def deploy(
    clients: cloud.Clients, ref: VersionRef, spec: DeploySpec, target: Target, instance: Any, out: TextIO
) -> str:
    """Deploy ``ref`` to ``target`` as ``spec`` says (once), then smoke-test it: the deployed model's id."""
    version = version_of(clients.models, ref, target.parent)
    version_id = str(version.get("versionId", ""))
    state = endpoint_state(clients.endpoints, target)
    model = ref.model_name(target.parent)
    found = find_deployed(state, model, version_id)
    if found is not None:
        print(
            f"deploy: version {version_id} of {model} is deployed on {target.name} already (deployed model "
            f"{found.id}, {traffic(state).get(found.id, 0)}% of traffic); not deployed again",
            file=out,
        )
        deployed_id = found.id
    else:
        current = traffic(state)
        split = deploy_split(spec, current, [s.id for s in serving(state)])
        request = deploy_request(spec, ref, target.parent, target.resource, split, current)
        print(f"deploy: deploying {ref} (version {version_id}) to {target.name}: {spec.describe()}",
              file=out, flush=True)
        deployed = clients.endpoints.deploy(request)
        deployed_id = str(deployed.get("id", ""))
        now = traffic(endpoint_state(clients.endpoints, target))
        print(f"deploy: deployed model {deployed_id}; traffic now {_shares(now)}", file=out)
    if instance is None:
        instance, why = example_of(clients.storage, version)
        if instance is None:
            print(f"deploy: no smoke prediction: {why}; give one instance with --instance", file=out)
            return deployed_id
    smoke(clients.endpoints, target, deployed_id, instance, out)
    return deployed_id


def example_of(storage: cloud.Storage, version: dict[str, Any]) -> tuple[Any, str]:
    """The first instance of the example request the trainer's export wrote beside the version's SavedModel
    (trainer.contract.EXAMPLE_FILE), or (None, why there is none)."""
    artifact = str(version.get("artifactUri", "")).rstrip("/")
    if not is_gs(artifact):
        return None, f"the version has no gs:// artifactUri ({artifact or 'none'})"
    uri = f"{artifact}/{EXAMPLE_FILE}"
    data = storage.read_bytes(uri, MAX_BODY_BYTES)
    if data is None:
        return None, f"{uri} does not exist (the trainer writes it with the export)"
    try:
        instances = json.loads(data[:MAX_BODY_BYTES].decode("utf-8"))["instances"]
        return instances[0], ""
    except (UnicodeDecodeError, ValueError, KeyError, IndexError, TypeError):
        return None, f"{uri} is not a request with instances"


def smoke(endpoints: cloud.VertexEndpoints, target: Target, deployed_id: str, instance: Any,
          out: TextIO) -> None:
    """Predict ``instance`` through the endpoint until the new model answers (at most SMOKE_TRIES)."""
    answered = []
    for _ in range(SMOKE_TRIES):
        try:
            response = endpoints.predict(target.resource, [instance])
        except Exception as exc:  # noqa: BLE001 - any refusal is the smoke test failing
            raise SmokeFailed(" ".join(str(exc).split()) or type(exc).__name__) from exc
        by = str(response.get("deployedModelId", ""))
        if not response.get("predictions"):
            raise SmokeFailed(f"deployed model {by or '?'} answered without predictions")
        if by == deployed_id:
            prediction = short(json.dumps(response["predictions"][0]), 200, quote=False)
            print(f"deploy: smoke prediction answered by deployed model {by}: {prediction}", file=out)
            return
        answered.append(by)
    print(
        f"deploy: {SMOKE_TRIES} smoke predictions were answered by {', '.join(sorted(set(answered)))}, "
        f"not by the new deployed model {deployed_id} (it has a small share of traffic)",
        file=out,
    )


def undeploy(clients: cloud.Clients, ref: VersionRef, target: Target, out: TextIO, *,
             dry_run: bool = False) -> list[str]:
    """Undeploy every deployed model of ``ref``'s version from ``target``; its traffic goes to the others in
    proportion. Nothing deployed is no error (a retried undeploy). ``dry_run``: read the endpoint, print the
    UndeployModelRequests, send none."""
    version_id = str(version_of(clients.models, ref, target.parent).get("versionId", ""))
    state = endpoint_state(clients.endpoints, target)
    model = ref.model_name(target.parent)
    gone = [s.id for s in serving(state) if s.model == model and s.version == version_id]
    if not gone:
        print(f"undeploy: version {version_id} of {model} is not deployed on {target.name}; nothing to do",
              file=out)
        return []
    split = traffic(state)
    for deployed_id in gone:
        split = without(split, deployed_id)
        _undeploy(clients.endpoints, target, deployed_id, split, out, dry_run)
    return gone


def rollback(clients: cloud.Clients, target: Target, out: TextIO, *, dry_run: bool = False) -> str:
    """Undeploy the newest deployed model that recorded the split before it, putting that split back.
    ``dry_run``: read the endpoint, print the UndeployModelRequest, send it not."""
    state = endpoint_state(clients.endpoints, target)
    deployed = serving(state)
    newest = next((s for s in reversed(deployed) if recorded_split(s.display_name) is not None), None)
    if newest is None:
        raise DeployError(
            "--endpoint",
            f"no model on {target.name} was deployed by run_job.py deploy (none records the traffic before "
            "it)",
            "an endpoint a deploy went to; undeploy MODEL@ALIAS takes any version off",
        )
    remaining = [s.id for s in deployed if s.id != newest.id]
    split = rollback_split(recorded_split(newest.display_name), remaining)
    _undeploy(clients.endpoints, target, newest.id, split, out, dry_run)
    return newest.id


def _undeploy(endpoints: cloud.VertexEndpoints, target: Target, deployed_id: str, split: dict[str, int],
              out: TextIO, dry_run: bool = False) -> None:
    # One call: the split is applied as the model goes, so no traffic is ever sent to a model being removed.
    request: dict[str, Any] = {"endpoint": target.resource, "deployedModelId": deployed_id}
    if split:
        request["trafficSplit"] = split
    if dry_run:  # the request as it would be sent; what the endpoint serves now decided it
        print(json.dumps(request, indent=2), file=out)
        return
    print(f"undeploy: removing deployed model {deployed_id} from {target.name}; traffic then "
          f"{_shares(split)}", file=out, flush=True)
    endpoints.undeploy(request)


def _shares(split: dict[str, int]) -> str:
    shown = {("the new version" if k == NEW else k): v for k, v in split.items()}
    return ", ".join(f"{k} {v}%" for k, v in sorted(shown.items())) or "none (nothing deployed)"


def preview_request(ref: VersionRef, spec: DeploySpec, target: Target) -> dict[str, Any]:
    """The DeployModelRequest --dry-run prints, read from nothing: where the split depends on what the
    endpoint serves then (a canary's other shares, the record of the split before), placeholders say so."""
    if spec.split is not None:
        split = dict(spec.split)
    elif spec.traffic == 100:
        split = {NEW: 100}
    else:
        split = {"<each deployed model>": f"<its share of {100 - spec.traffic}, as now>", NEW: spec.traffic}
    request = deploy_request(spec, ref, target.parent, target.resource, split, {})
    request["deployedModel"]["displayName"] = f"{ref}; previous traffic <the endpoint's split now>"
    return request


class DeployRegistered:
    """The plan's step after RegisterModel when the definition has a deploy block: the gated alias deployed
    (once: a version there already is not deployed again), then smoke-tested."""

    def describe(self, job) -> str:
        plan = job.deploy
        return (f"then deploy {plan.ref} to endpoint {plan.spec.endpoint} ({plan.spec.describe()}; deploy "
                "request below), unless that version is deployed there already")

    def run(self, ex) -> None:
        if ex.remote.get("state") != cloud.SUCCESS_STATE:
            return  # nothing was registered: RegisterModel said why
        plan = ex.job.deploy
        try:
            deploy(ex.clients, plan.ref, plan.spec, target_of(ex.job), plan.instance, ex.out)
        except SmokeFailed as failed:
            raise DeployFailed(
                f"{plan.ref} is deployed to endpoint {plan.spec.endpoint}, but the smoke prediction failed "
                f"({failed}); put the traffic back with: python scripts/run_job.py rollback --endpoint "
                f"{plan.spec.endpoint}"
            ) from failed
        except Exception as exc:  # noqa: BLE001 - any failure: say it, and how a rerun finishes it
            cause = " ".join(str(exc).split()) or type(exc).__name__
            raise DeployFailed(
                f"the model is registered, but deploying {plan.ref} to endpoint {plan.spec.endpoint} failed "
                f"({type(exc).__name__}: {cause}); the endpoint's traffic is where it was. The same command "
                f"with --follow {ex.remote.get('name')} finishes it (the version is found, not uploaded "
                "again; a version deployed already is not deployed twice)"
            ) from exc


def target_of(job) -> Target:
    return Target(job.parent, job.deploy.spec.endpoint, job.deploy.resource)
