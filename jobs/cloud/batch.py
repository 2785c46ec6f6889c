"""A BatchPredictionJob on Vertex AI: created from its request (jobs.definition.batch_prediction) unless a
live one of the same submission exists (a retry must not predict and bill twice), then followed like a
training job, its state lines until it ends, then where its output went."""

from __future__ import annotations

from typing import Any, TextIO

from common.submission import SUBMISSION_LABEL
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


def reuse_line(body: dict[str, Any]) -> str:
    """The plan's line for finding a live job of the same submission (--dry-run prints it)."""
    value = body["labels"][SUBMISSION_LABEL]
    return f"reuse the newest live BatchPredictionJob labelled {SUBMISSION_LABEL}={value}, if one exists"


def submit_batch(clients: Clients, request: dict[str, Any], out: TextIO, *, wait: bool) -> dict[str, Any]:
    """Create the job, or take the newest live one of the same submission; with ``wait``, follow it to its
    end and say where its predictions are."""
    body = request[RESOURCE_KINDS[BATCH_PREDICTION_JOB].request_field]
    value = body["labels"][SUBMISSION_LABEL]
    remote = clients.jobs.find_live(BATCH_PREDICTION_JOB, request["parent"], SUBMISSION_LABEL, value)
    if remote is not None:
        state = remote.get("state", "JOB_STATE_UNSPECIFIED")
        print(f"reusing {remote['name']}: same submission ({SUBMISSION_LABEL}={value}) is already {state}",
              file=out, flush=True)
    else:
        remote = clients.jobs.create(BATCH_PREDICTION_JOB, request["parent"], body)
        print(f"created {remote['name']}", file=out, flush=True)
    print(f"  console: {console_url(remote['name'])}", file=out, flush=True)
    return follow_batch(clients, remote, out) if wait else remote


def follow_batch(clients: Clients, remote: dict[str, Any], out: TextIO) -> dict[str, Any]:
    """Follow the job (as last read) to its end and say where its predictions are; returns it as last read."""
    remote = follow(clients.jobs, BATCH_PREDICTION_JOB, remote, out)
    stats = remote.get("completionStats") or {}
    folder = (remote.get("outputInfo") or {}).get("gcsOutputDirectory", "(none)")
    print(
        f"output: {folder} ({stats.get('successfulCount', 0)} predictions, {stats.get('failedCount', 0)} "
        "errors)",
        file=out,
    )
    return remote
