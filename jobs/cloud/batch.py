"""A BatchPredictionJob on Vertex AI: created from its request (jobs.definition.batch_prediction), then
followed like a training job, its state lines until it ends, then where its output went."""

from __future__ import annotations

from typing import Any, TextIO

from jobs.cloud.client import Clients
from jobs.cloud.plan import follow
from jobs.definition.kinds import BATCH_PREDICTION_JOB, RESOURCE_KINDS


def console_url(name: str) -> str:
    """The Cloud console page of a batch prediction job."""
    parts = name.split("/")
    return (
        f"https://console.cloud.google.com/vertex-ai/locations/{parts[3]}/batch-predictions/{parts[-1]}"
        f"?project={parts[1]}"
    )


def submit_batch(clients: Clients, request: dict[str, Any], out: TextIO, *, wait: bool) -> dict[str, Any]:
    """Create the job; with ``wait``, follow it to its end and say where its predictions are."""
    body = request[RESOURCE_KINDS[BATCH_PREDICTION_JOB].request_field]
    remote = clients.jobs.create(BATCH_PREDICTION_JOB, request["parent"], body)
    print(f"created {remote['name']}\n  console: {console_url(remote['name'])}", file=out, flush=True)
    if not wait:
        return remote
    remote = follow(clients.jobs, BATCH_PREDICTION_JOB, remote, out)
    stats = remote.get("completionStats") or {}
    folder = (remote.get("outputInfo") or {}).get("gcsOutputDirectory", "(none)")
    print(
        f"output: {folder} ({stats.get('successfulCount', 0)} predictions, {stats.get('failedCount', 0)} "
        "errors)",
        file=out,
    )
    return remote
