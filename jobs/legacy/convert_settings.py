"""The rest of a legacy job: its service account, scheduling, network, encryption key and labels, the runtime
it ran on, and the settings no Vertex AI job of this trainer has (reported, never dropped silently)."""

from __future__ import annotations

import re
from typing import Any

from jobs.definition.compile import CONTAINER
from jobs.definition.errors import short
from jobs.definition.kinds import spec_field
from jobs.legacy import tables
from jobs.legacy.convert_cluster import ROLES
from jobs.legacy.convert_fields import check_fields, read_text
from jobs.legacy.convert_program import PREBUILT
from jobs.legacy.convert_types import Conversion, Options
from jobs.legacy.source import TRAINING_INPUT as T
from jobs.legacy.source import LegacyJob
from trainer.contract import TRAINER_MODULE


def service_account(legacy: LegacyJob, options: Options, out: Conversion) -> str:
    reference = "${infra.runtime_service_account}"
    account = legacy.training.get("serviceAccount")
    runtime = str(options.outputs.get("runtime_service_account", ""))
    if account is None:
        out.decisions.append(
            f"no serviceAccount (legacy ran as AI Platform's service agent) -> {reference}, the "
            "environment's least-privilege runtime account"
        )
        return reference
    account = read_text(legacy, f"{T}.serviceAccount", account, "a service account email")
    if account == runtime:
        return reference
    if account in options.accounts:
        out.decisions.append(
            f"serviceAccount {account}: kept (listed in the environment's job_service_accounts)"
        )
        return account
    out.lost.append(
        (
            f"{T}.serviceAccount",
            f"{short(account, quote=False)} is not an account jobs of environment {options.env} may run as; "
            f"the job runs as {reference}. To keep it, add it to job_service_accounts in "
            f"infra/environments/{options.env}.yaml",
        )
    )
    return reference


def add_scheduling(legacy: LegacyJob, out: Conversion, spec: dict[str, Any]) -> None:
    path = f"{T}.scheduling"
    raw = legacy.training.get("scheduling")
    if raw is None:
        return
    check_fields(legacy, path, raw, ("maxRunningTime", "maxWaitTime", "priority"))
    scheduling: dict[str, Any] = {}
    for legacy_key, key in (("maxRunningTime", "timeout"), ("maxWaitTime", "maxWaitDuration")):
        if legacy_key in raw:
            value = read_text(legacy, f"{path}.{legacy_key}", raw[legacy_key], "a duration such as 7200s")
            if not re.fullmatch(r"\d+(\.\d+)?s", value):
                raise legacy.error(
                    f"{path}.{legacy_key}", f"{short(value)} is not a duration", "seconds, e.g. 7200s"
                )
            scheduling[key] = value
            out.decisions.append(f"scheduling.{legacy_key} {value} -> scheduling.{key}")
            out.blame.append((f"{spec_field(out.kind)}.scheduling.{key}", f"{path}.{legacy_key}"))
    if "priority" in raw:
        out.lost.append((f"{path}.priority", "Vertex AI custom jobs have no queue priority"))
    if scheduling:
        spec["scheduling"] = scheduling


def add_network(legacy: LegacyJob, out: Conversion, spec: dict[str, Any]) -> None:
    training = legacy.training
    if training.get("network"):
        spec["network"] = read_text(
            legacy, f"{T}.network", training["network"], "projects/<number>/global/networks/<name>"
        )
        out.decisions.append(
            f"network {spec['network']}: kept; the VPC must be peered with Vertex AI (private services "
            "access)"
        )
    if training.get("enableWebAccess"):
        spec["enableWebAccess"] = True
        out.decisions.append("enableWebAccess: kept (interactive shell into the training containers)")


def encryption_key(legacy: LegacyJob, out: Conversion) -> str:
    path = f"{T}.encryptionConfig"
    raw = legacy.training.get("encryptionConfig")
    if raw is None:
        return ""
    check_fields(legacy, path, raw, ("kmsKeyName", "kmsKeyring", "kmsLocation", "kmsProject"))
    key = read_text(
        legacy, f"{path}.kmsKeyName", raw.get("kmsKeyName"), "projects/<p>/locations/<r>/keyRings/..."
    )
    if not key.startswith("projects/"):
        parts = [raw.get("kmsProject"), raw.get("kmsLocation"), raw.get("kmsKeyring")]
        if not all(parts):
            raise legacy.error(
                f"{path}.kmsKeyName",
                f"{short(key)} is not a full key name",
                "projects/<p>/locations/<r>/keyRings/<k>/cryptoKeys/<key>",
            )
        key = f"projects/{parts[0]}/locations/{parts[1]}/keyRings/{parts[2]}/cryptoKeys/{key}"
    out.decisions.append(
        f"encryptionConfig -> encryptionSpec.kmsKeyName {key}: the key must be in the job's region and the "
        "Vertex AI service agent must hold roles/cloudkms.cryptoKeyEncrypterDecrypter on it"
    )
    return key


def note_runtime(legacy: LegacyJob, out: Conversion, options: Options, variant: str) -> None:
    training = legacy.training
    image = (
        f"this repo's trainer image (${{infra.trainer_image}}:{variant}-..., TensorFlow 2.21, Keras 3, "
        "Python 3.11)"
        if options.delivery == CONTAINER
        else f"{PREBUILT.get(variant, '')} with the trainer sdist (TensorFlow 2.17, Keras 3, Python 3.10)"
    )
    version = training.get("runtimeVersion")
    if version is not None:
        text = str(version)
        found = re.fullmatch(r"(\d+)\.(\d+)", text)
        if not found:
            raise legacy.error(
                f"{T}.runtimeVersion", f"{short(text)} is not a runtime version", "such as 1.15 or 2.11"
            )
        if int(found.group(1)) == tables.TF1_RUNTIME_MAJOR:
            out.lost.append(
                (
                    f"{T}.runtimeVersion",
                    f"runtime {short(text, quote=False)} ran TensorFlow 1.x: graph-mode sessions, "
                    "tf.estimator and tf.contrib code does not run on TensorFlow 2; the job runs this repo's "
                    "Keras 3 trainer instead",
                )
            )
    out.decisions.append(f"runtimeVersion {version or '(unset)'} -> {image}")
    python = training.get("pythonVersion")
    if python is not None and str(python).startswith("2"):
        out.lost.append(
            (f"{T}.pythonVersion", f"Python {short(python, quote=False)}: no Vertex AI image runs Python 2")
        )
    elif python is not None:
        out.decisions.append(f"pythonVersion {python} -> the Python of {image.split(' (')[0]}")
    module = training.get("pythonModule")
    packages = training.get("packageUris")
    if module is not None and module != TRAINER_MODULE:
        out.lost.append(
            (
                f"{T}.pythonModule",
                f"{short(module, quote=False)}: the job runs this repo's trainer (python -m "
                f"{TRAINER_MODULE}), not the legacy package",
            )
        )
    if packages:
        shown = packages if isinstance(packages, str) else ", ".join(map(str, packages))
        out.decisions.append(
            f"packageUris {shown} -> this repo's trainer"
            + (" (the image)" if options.delivery == CONTAINER else " (${job.package_uri}, its sdist)")
        )
    region = training.get("region")
    own = str(options.outputs.get("region", ""))
    if region and region != own:
        out.decisions.append(
            f"region {region} -> the environment's region {own}; `run_job.py --region {region}` keeps it "
            "(with a TensorBoard in that region)"
        )


def job_labels(legacy: LegacyJob, out: Conversion, model: str) -> dict[str, str]:
    raw = legacy.job.get("labels") or {}
    if not isinstance(raw, dict):
        raise legacy.error("labels", "must be a mapping", "key: value pairs")
    labels = {str(k): str(v) for k, v in raw.items()}
    labels.setdefault("app", model.replace("_", "-"))
    labels.setdefault("migrated-from", "ai-platform")
    for key in labels:
        out.blame.append((f"labels.{key}", f"labels.{key}"))
    return labels


def note_unmapped(legacy: LegacyJob, out: Conversion) -> None:
    """Legacy settings with no Vertex AI counterpart for this trainer: reported, never dropped silently."""
    training = legacy.training
    for _, prefix, _ in ROLES:
        config = training.get(f"{prefix}Config") or {}
        base = f"{T}.{prefix}Config"
        if config.get("imageUri"):
            registry = (
                " (Container Registry, gcr.io, is shut down)" if "gcr.io/" in config["imageUri"] else ""
            )
            out.lost.append(
                (
                    f"{base}.imageUri",
                    f"{short(config['imageUri'], quote=False)}{registry}: the job runs this repo's trainer "
                    "image",
                )
            )
        for key in ("containerCommand", "containerArgs"):
            if config.get(key):
                out.lost.append((f"{base}.{key}", "belonged to the custom container the job no longer runs"))
        if config.get("tpuTfVersion"):
            out.lost.append(
                (
                    f"{base}.tpuTfVersion",
                    "a TPU VM runs the trainer image's TensorFlow; there is no TPU runtime to pick",
                )
            )
    if "useChiefInTfConfig" in training:
        out.lost.append(
            (
                f"{T}.useChiefInTfConfig",
                "no Vertex AI setting: Vertex AI always names pool 0 `chief` in TF_CONFIG (this repo's "
                "trainer reads `chief` and `master` alike)",
            )
        )
    for flag in legacy.ignored_flags:
        out.decisions.append(f"{flag}: not part of the job")
