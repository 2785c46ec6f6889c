"""A batch prediction as data: what ``run_job.py batch-predict`` is given -> the BatchPredictionJob request.

Pure and table-tested: the flags' rules (input and output URIs, the machine, replica counts, batch size,
the signature) and the request body, which is checked against the real aiplatform_v1.BatchPredictionJob
message before anything is sent. The model is a registry version (``MODEL@ALIAS``); Vertex AI runs it in
that version's own serving container (its ``containerSpec``: for a model registered by run_job.py, the
trainer image's ``python -m serving``), so the request names no image.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from common.gcs import GS, is_bucket_name
from common.submission import SUBMISSION_LABEL, submission_label
from jobs.definition.errors import FieldError, short
from jobs.definition.machines import allowed_types, carries_tpu, family_of
from jobs.definition.model_registry import parse_model_ref
from serving.requests import MAX_INSTANCES

INPUT_FORMAT = "jsonl"
OUTPUT_FORMAT = "jsonl"
DEFAULT_MACHINE = "n1-standard-4"
DEFAULT_BATCH_SIZE = 64  # Vertex AI's default manualBatchTuningParameters.batchSize
# A gs:// object path: plain segments (no "." or ".." or empty one), the last may hold * wildcards, as
# gcsSource.uris takes them. A local run maps it onto a folder, where ".." would climb out of the bucket.
_SEGMENT = r"(?!\.{1,2}/)[^/\s*]+"
INPUT_URI = re.compile(rf"{GS}([^/]+)/((?:{_SEGMENT}/)*[^/\s]*\.jsonl)")
OUTPUT_URI = re.compile(rf"{GS}([^/]+)((?:/{_SEGMENT})*)/?")
INPUT_RULE = "gs://<bucket>/<path>.jsonl, * wildcards in the file name (e.g. gs://b/users/*.jsonl)"
OUTPUT_RULE = "a gs://<bucket>/<folder>/ (each job writes a prediction-<model>-<time>/ folder in it)"
MAX_INPUTS = 100  # gcsSource.uris a request takes here: a list, not a data set (wildcards name the files)


class BatchError(FieldError):
    """A batch prediction's flag refused: ``path`` names the flag."""


@dataclass(frozen=True)
class BatchSpec:
    """A batch prediction of a registry version, checked."""

    model: str  # the registry model id
    alias: str  # an alias or a version id
    inputs: tuple[str, ...]
    output: str
    machine_type: str = DEFAULT_MACHINE
    starting_replicas: int = 1
    max_replicas: int = 1
    batch_size: int = DEFAULT_BATCH_SIZE
    signature: str = ""  # "" leaves modelParameters out: the server's serving_default

    def model_name(self, parent: str) -> str:
        return f"{parent}/models/{self.model}@{self.alias}"

    def parameters(self) -> dict[str, Any] | None:
        """What every request to the server carries as ``parameters`` (Vertex AI's modelParameters)."""
        return {"signature": self.signature} if self.signature else None


def batch_spec(
    model_ref: str,
    inputs: list[str],
    output: str,
    *,
    machine_type: str = DEFAULT_MACHINE,
    starting_replicas: int = 1,
    max_replicas: int | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    signature: str = "",
) -> BatchSpec:
    """The flags -> a BatchSpec; BatchError names the flag and what it allows."""
    try:
        model, alias = parse_model_ref(model_ref)
    except FieldError as exc:
        raise BatchError(exc.path, exc.problem, exc.allowed) from None
    return BatchSpec(
        model=model,
        alias=alias,
        inputs=check_inputs(inputs),
        output=check_output(output),
        machine_type=check_machine(machine_type),
        **check_replicas(starting_replicas, max_replicas),
        batch_size=check_batch_size(batch_size),
        signature=check_signature(signature),
    )


def check_inputs(inputs: list[str]) -> tuple[str, ...]:
    if not inputs:
        raise BatchError("--input", "missing", INPUT_RULE)
    if len(inputs) > MAX_INPUTS:
        raise BatchError("--input", f"{len(inputs)} given", f"at most {MAX_INPUTS}; a * wildcard names many")
    for uri in inputs:
        found = INPUT_URI.fullmatch(uri)
        if not found or not is_bucket_name(found[1]):
            raise BatchError("--input", f"{short(uri)} is not a JSONL file in Cloud Storage", INPUT_RULE)
    return tuple(dict.fromkeys(inputs))


def check_output(output: str) -> str:
    found = OUTPUT_URI.fullmatch(output)
    if not found or not is_bucket_name(found[1]):
        raise BatchError("--output", f"{short(output)} is not a Cloud Storage folder", OUTPUT_RULE)
    return output.rstrip("/") + "/"


def check_machine(machine_type: str) -> str:
    family = family_of(machine_type)
    if family is None:
        raise BatchError("--machine-type", f"unknown machine type {short(machine_type)}",
                         allowed_types(machine_type))
    if carries_tpu(family):
        # The serving container is the trainer's cpu image: a TPU host would only run it on its CPUs.
        raise BatchError(
            "--machine-type", f"{machine_type} is a TPU machine", f"a CPU machine, e.g. {DEFAULT_MACHINE}"
        )
    return machine_type


def check_replicas(starting: int, maximum: int | None) -> dict[str, int]:
    if starting < 1:
        raise BatchError("--starting-replica-count", f"{starting}", "an integer >= 1")
    maximum = starting if maximum is None else maximum
    if maximum < starting:
        raise BatchError(
            "--max-replica-count", f"{maximum} is below --starting-replica-count {starting}",
            f"an integer >= {starting}",
        )
    return {"starting_replicas": starting, "max_replicas": maximum}


def check_batch_size(size: int) -> int:
    if not 1 <= size <= MAX_INSTANCES:
        raise BatchError("--batch-size", f"{size}", f"1..{MAX_INSTANCES} (instances in one server request)")
    return size


def check_signature(name: str) -> str:
    if name and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", name):
        raise BatchError("--signature", f"{short(name)} is not a signature name",
                         "a SavedModel signature, e.g. top_k (default: serving_default)")
    return name


def batch_request(
    spec: BatchSpec, *, parent: str, display_name: str, service_account: str, labels: dict[str, str]
) -> dict[str, Any]:
    """CreateBatchPredictionJobRequest in its JSON form: what --dry-run prints and the client sends, labelled
    with its submission label."""
    body: dict[str, Any] = {
        "displayName": display_name,
        "model": spec.model_name(parent),
        "inputConfig": {"instancesFormat": INPUT_FORMAT, "gcsSource": {"uris": list(spec.inputs)}},
        "outputConfig": {
            "predictionsFormat": OUTPUT_FORMAT,
            "gcsDestination": {"outputUriPrefix": spec.output},
        },
        # A custom container serves on dedicated machines only (no automatic resources).
        "dedicatedResources": {
            "machineSpec": {"machineType": spec.machine_type},
            "startingReplicaCount": spec.starting_replicas,
            "maxReplicaCount": spec.max_replicas,
        },
        "manualBatchTuningParameters": {"batchSize": spec.batch_size},
        "serviceAccount": service_account,
        "labels": dict(labels),
    }
    if spec.parameters() is not None:
        body["modelParameters"] = spec.parameters()
    # What a retried submit finds its job by (common.submission: the body but its time-stamped name).
    body["labels"][SUBMISSION_LABEL] = submission_label(body)
    from jobs.definition.kinds import BATCH_PREDICTION_JOB
    from jobs.definition.schema import check_message
    from jobs.definition.vertex_types import resource_message_class

    # A field the API would not take is refused here, not there.
    check_message(body, resource_message_class(BATCH_PREDICTION_JOB))
    return {"parent": parent, "batchPredictionJob": body}
