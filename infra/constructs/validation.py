"""Checks of construct props, run first in each construct's `__init__`, before anything joins the tree.

The environment config is validated when it is loaded (`infra.config`, `ConfigError`), but constructs are also
built from values the stack derives (names, grants, roles): a mistake there would otherwise surface as a jsii
traceback at synthesis or an API error in the middle of an apply. A `PropsError` is one line naming the
construct, its id and the field, in the same shape as `ConfigError`.

Values may be unresolved references (`${TfToken[...]}`, e.g. a service account's email in a member): only
fields that are always literals are checked in full; members are checked up to their `type:` prefix.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from infra.config import KMS_KEY, LABEL_KEY, LABEL_VALUE, MEMBER, PROJECT_ID, REGION
from infra.constructs import Grant

# Service account ids: 6-30 chars (the email's local part).
ACCOUNT_ID = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
ROLE = re.compile(r"^roles/[A-Za-z0-9_.]+$")
# What a resource-level grant gives: a predefined role, or a custom one of a project (the bootstrap stack
# defines them: infra.naming.custom_role).
GRANTED_ROLE = re.compile(
    r"^(?:roles/[A-Za-z0-9_.]+|projects/[a-z][a-z0-9-]{4,28}[a-z0-9]/roles/[A-Za-z0-9_.]{3,64})$")
# Construct ids end up in Terraform logical ids and paths; "/" would nest them.
KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
SERVICE = re.compile(r"^[a-z][a-z0-9-]*\.googleapis\.com$")
# Artifact Registry repository ids; workload identity pool and provider ids (4-32, no "gcp-" prefix).
REPOSITORY_ID = re.compile(r"^[a-z](?:[a-z0-9-]{0,61}[a-z0-9])?$")
WIF_ID = re.compile(r"^(?!gcp-)[a-z0-9-]{4,32}$")
GITHUB_REPOSITORY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}/[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
MAX_LABELS = 64


class PropsError(ValueError):
    """Props a construct cannot be built from; str() is one line: construct, id, field, what is allowed."""

    def __init__(self, where: str, field_name: str, problem: str) -> None:
        self.where = where
        self.field = field_name
        self.problem = problem
        super().__init__(f"{where}: field '{field_name}': {problem}")


def where(construct: type, id_: str) -> str:
    """How errors name a construct: its class and its id (`TrainingBucket 'data-bucket'`)."""
    return f"{construct.__name__} {id_!r}"


def check(where_: str, name: str, value: Any, ok: bool, allowed: str) -> None:
    if not ok:
        raise PropsError(where_, name, f"got {value!r}; allowed: {allowed}")


def matches(pattern: re.Pattern[str], value: Any) -> bool:
    return isinstance(value, str) and pattern.fullmatch(value) is not None  # whole: no trailing newline


def check_key(where_: str, name: str, value: Any) -> None:
    check_str(where_, name, value, KEY, "a non-empty construct id of letters, digits, '_', '.', '-'")


def check_id(where_: str, id_: Any) -> None:
    check_key(where_, "<id>", id_)


def check_bool(where_: str, name: str, value: Any) -> None:
    check(where_, name, value, isinstance(value, bool), "True or False")


def check_once(where_: str, name: str, items: tuple, i: int, what: str) -> None:
    """items[i] is its first occurrence."""
    first = items.index(items[i])
    check(where_, f"{name}[{i}]", items[i], first == i, f"each {what} once (repeats {name}[{first}])")


def check_str(where_: str, name: str, value: Any, pattern: re.Pattern[str], allowed: str) -> None:
    check(where_, name, value, matches(pattern, value), allowed)


def check_text(where_: str, name: str, value: Any, max_len: int) -> None:
    ok = isinstance(value, str) and bool(value.strip()) and len(value) <= max_len and "\n" not in value
    check(where_, name, value, ok, f"non-empty text on one line, at most {max_len} characters")


def check_project(where_: str, value: Any, name: str = "project") -> None:
    check_str(where_, name, value, PROJECT_ID,
              "a project id: 6-30 lowercase letters, digits or hyphens, starting with a letter")


def check_region(where_: str, name: str, value: Any) -> None:
    check_str(where_, name, value, REGION, "a lowercase Google Cloud region such as us-central1")


def check_positive(where_: str, name: str, value: Any, limit: int) -> None:
    ok = isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= limit
    check(where_, name, value, ok, f"a whole number from 1 to {limit}")


def check_labels(where_: str, labels: Any) -> None:
    check(where_, "labels", labels, isinstance(labels, Mapping) and len(labels) <= MAX_LABELS,
          f"a mapping of at most {MAX_LABELS} labels")
    for key, value in labels.items():
        check_str(where_, f"labels.{key}", key, LABEL_KEY,
                  "a label key: lowercase letters, digits, '_' or '-', starting with a letter, <= 63 chars")
        check_str(where_, f"labels.{key}", value, LABEL_VALUE,
                  "a label value: lowercase letters, digits, '_' or '-', <= 63 chars")


def check_kms_key(where_: str, value: Any, location: str | None) -> None:
    """None, or a full key name; with `location`, the key must be in it (CMEK keys are regional)."""
    if value is None:
        return
    check_str(where_, "kms_key", value, KMS_KEY, "None or projects/P/locations/L/keyRings/R/cryptoKeys/K")
    if location is not None:
        key_location = KMS_KEY.fullmatch(value)["location"]
        check(where_, "kms_key", value, key_location == location.lower(),
              f"a key in the resource's location {location!r} (the key is in {key_location!r})")


def check_roles(where_: str, name: str, roles: Any, unique: bool = True) -> None:
    """Roles that are granted must be unique (one grant construct each); a set of allowed roles need not."""
    check(where_, name, roles, isinstance(roles, tuple), "a tuple of roles")
    for i, role in enumerate(roles):
        check_str(where_, f"{name}[{i}]", role, ROLE, "a predefined role such as roles/logging.logWriter")
        if unique:
            check_once(where_, name, roles, i, "role")


def check_member(where_: str, name: str, member: Any) -> None:
    check_str(where_, name, member, MEMBER,
              "an IAM member such as group:ml@example.com or serviceAccount:<email>")


def check_grants(where_: str, grants: Any, reserved: Iterable[str] = (), name: str = "grants") -> None:
    """Grants become sibling constructs named by key: keys unique (not a sibling's id), each binding once."""
    check(where_, name, grants, isinstance(grants, tuple) and all(isinstance(g, Grant) for g in grants),
          "a tuple of Grant")
    taken = {key: "another child of this construct" for key in reserved}
    bindings: dict[tuple[str, str], int] = {}
    for i, grant in enumerate(grants):
        field_name = f"{name}[{i}]"
        check_key(where_, f"{field_name}.key", grant.key)
        check(where_, f"{field_name}.key", grant.key, grant.key not in taken,
              f"a key used once (already {taken.get(grant.key)})")
        taken[grant.key] = f"{name}[{i}]"
        check_str(where_, f"{field_name}.role", grant.role, GRANTED_ROLE,
                  "a predefined role such as roles/storage.objectViewer, or projects/P/roles/ID")
        check_member(where_, f"{field_name}.member", grant.member)
        first = bindings.setdefault((grant.role, grant.member), i)
        # Two resources for one binding: destroying either removes the binding both stand for.
        check(where_, field_name, grant, first == i, f"each (role, member) once (repeats {name}[{first}])")


def validate_props(construct: type, id_: Any, props: Any) -> None:
    """What each construct's `__init__` calls first: its id, then `props.validate`; nothing exists yet."""
    where_ = where(construct, id_)
    check_id(where_, id_)
    props.validate(where_)
