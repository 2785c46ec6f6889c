"""The submission label of a BatchPredictionJob, the rule both its writers follow, written once:
`run_job.py batch-predict` (jobs/definition/batch_prediction.py labels the request, jobs/cloud/batch.py
reuses a live job carrying it) and a schedule's workflow (infra/schedules.py computes it for each run's own
request in Cloud Workflows). Pure stdlib.

The value is a digest of the request body without its display name (it holds the submission time) and
without this label: the same model reference, inputs, output, machines and parameters give the same value,
so a retried submit finds the job the first one created. The digest is SHA-256 as Base64 (what Workflows'
``hash.compute_checksum`` and ``base64.encode`` give), lowercased with each other character than [a-z0-9] as
"0", its first 16 characters: a valid label value (lowercase, at most 63 characters) Workflows can compute.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

# The label key run_job.py reuses live jobs by, training jobs and batch predictions alike. Underscore, not
# hyphen: the key is used in a list filter (labels.<key>="<value>"), where a hyphen could be read as the
# filter language's minus; label keys allow both.
SUBMISSION_LABEL = "submission_hash"
DIGEST_CHARS = 16
# Whatever is not a label value's character in the lowercased Base64 ("+", "/", "=").
_NOT_LABEL = "[^a-z0-9]"


def canonical_text(body: Mapping[str, Any]) -> str:
    """The text the digest is of: the body without displayName and this label, as canonical ASCII JSON."""
    material = {key: value for key, value in body.items() if key != "displayName"}
    labels = {key: value for key, value in (body.get("labels") or {}).items() if key != SUBMISSION_LABEL}
    if labels:
        material["labels"] = labels
    else:
        material.pop("labels", None)
    return json.dumps(material, sort_keys=True, separators=(",", ":"))


def digest(text: str) -> str:
    """The label value of a canonical text (see the module's docstring)."""
    encoded = base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")
    return re.sub(_NOT_LABEL, "0", encoded.lower())[:DIGEST_CHARS]


def submission_label(body: Mapping[str, Any]) -> str:
    """The submission label value of a BatchPredictionJob body."""
    return digest(canonical_text(body))


def workflows_digest(text: str) -> str:
    """`digest` as a Workflows expression (without ``${}``) of ``text``, an expression giving the canonical
    text."""
    checksum = f'hash.compute_checksum(text.encode({text}, "UTF-8"), "SHA256")'
    return (f'text.substring(text.replace_all_regex(text.to_lower(base64.encode({checksum})), '
            f'"{_NOT_LABEL}", "0"), 0, {DIGEST_CHARS})')
