"""Cloud Storage's naming rules, written once: for infra (the buckets it creates, the state bucket it is
given) and for jobs/ (gs:// URIs in definitions, legacy paths, ``convert --map-bucket``). Pure: ``re`` only.

Source: Cloud Storage "Bucket naming rules": lowercase letters, digits, '-', '_' and '.', starting and ending
with a letter or digit; 3-63 characters, or up to 222 when the name has dots, each dot-separated component
at most 63.
"""

from __future__ import annotations

import re

GS = "gs://"
# A bucket name Cloud Storage accepts (the component lengths are checked in is_bucket_name).
_BUCKET = re.compile(r"[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]")
MAX_COMPONENT = 63
# gs:// and the bucket after it, as far as bucket-name characters go: finds the buckets inside a text.
BUCKET_URI = re.compile(rf"{GS}[a-z0-9][a-z0-9._-]*")
# The buckets infra names: no dots. A dotted name makes Cloud Storage require proof of domain ownership, so
# the buckets derived from name_prefix never have one. The config's state_bucket is held to it too, as its
# message ("3-63 lowercase letters, digits, '-' or '_'") has always said.
UNDOTTED_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{1,61}[a-z0-9]$")


def is_bucket_name(name: str) -> bool:
    """Whether Cloud Storage accepts ``name`` as a bucket name (dots allowed, as in existing buckets)."""
    if not _BUCKET.fullmatch(name):
        return False
    parts = name.split(".")
    return len(name) <= MAX_COMPONENT if len(parts) == 1 else all(0 < len(p) <= MAX_COMPONENT for p in parts)
