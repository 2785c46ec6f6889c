"""The flags of `gcloud ai custom-jobs create` and `gcloud ai hp-tuning-jobs create` that map onto fields of a
definition, written once: this table builds run_job.py's flags, parses their values and places them in the
body, where they are validated exactly like the same fields written in the file.

gcloud's precedence: a flag overrides the file's value (gcloud builds the job from the config file, then sets
each given flag's field on it; `--args` and `--command` replace every pool's). The override is never silent:
each field a flag changes is reported (``FlagOverride``: the field with its line, the file's value and the
flag's), and run_job.py prints one line on stderr for it; a flag that repeats the file's value changes and
reports nothing. Flags apply to both forms of definition alike: a plain gcloud config file, and one with the
`kind:` header. Values are literal, as gcloud takes them: `${...}` in a flag is not a reference.

Left out, because they map onto no field of a config-file job: `--config` (JOB_FILE is the config),
`--worker-pool-spec` (an alternative to the file's pools, not a value of them) and `--python-package-uris`
(gcloud applies it only to pools built from `--worker-pool-spec`; with `--config` it is ignored).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from jobs.definition.body import job_pools
from jobs.definition.errors import JobError, short
from jobs.definition.kinds import CUSTOM_JOB, KINDS, TUNING_JOB, spec_field
from jobs.definition.loader import Document

KMS_KEY = "projects/<p>/locations/<r>/keyRings/<ring>/cryptoKeys/<key>"
# gcloud's list and dict flags split on commas; `^:^a,b:c` picks another delimiter (`gcloud topic escaping`).
_DELIMITER = re.compile(r"\^([^^]+)\^")
# The references of jobs.definition.references: a flag's `${...}` gets a second `$`, so it stays literal.
_REFERENCE_DOLLAR = re.compile(r"\$(?=\{[^}]*\})")
# An override repeats two values, the file's and the flag's: each is shown shorter than a value alone.
BOTH = 60


@dataclass(frozen=True)
class JobFlags:
    """What ``gcloud ai ... create`` takes as flags rather than from the config file (parsed, typed)."""

    display_name: str | None = None
    max_trial_count: int | None = None
    parallel_trial_count: int | None = None
    region: str | None = None
    algorithm: str | None = None
    service_account: str | None = None
    network: str | None = None
    enable_web_access: bool = False
    enable_dashboard_access: bool = False
    persistent_resource_id: str | None = None
    kms_key: str | None = None
    kms_keyring: str | None = None
    kms_location: str | None = None
    kms_project: str | None = None
    labels: tuple[tuple[str, str], ...] = ()
    args: tuple[str, ...] = ()
    command: tuple[str, ...] = ()


@dataclass(frozen=True)
class GcloudFlag:
    flag: str  # as gcloud spells it
    field: str  # the body path it sets; {spec} is jobSpec or trialJobSpec; "" for a flag that is no field
    kinds: tuple[str, ...]  # the kinds whose gcloud command has it
    help: str
    metavar: str | None = None
    switch: bool = False  # takes no value
    repeatable: bool = False  # a list or mapping: repeat the flag (or separate with commas) to add items
    type: Callable[[str], Any] | None = None

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")


CUSTOM = (CUSTOM_JOB,)
STUDY = (TUNING_JOB,)
FLAGS: tuple[GcloudFlag, ...] = (
    GcloudFlag("--display-name", "displayName", KINDS, "job display name (default: the job id)"),
    GcloudFlag("--max-trial-count", "maxTrialCount", STUDY, "tuning: total trials (default 1)", type=int),
    GcloudFlag(
        "--parallel-trial-count", "parallelTrialCount", STUDY, "tuning: trials at once (default 1)", type=int
    ),
    GcloudFlag(
        "--algorithm",
        "studySpec.algorithm",
        STUDY,
        "tuning: algorithm-unspecified (Bayesian), grid-search or random-search",
    ),
    GcloudFlag(
        "--service-account",
        "{spec}.serviceAccount",
        KINDS,
        "the account the job runs as: the environment's runtime account or one of its job_service_accounts",
        metavar="EMAIL",
    ),
    GcloudFlag(
        "--network", "{spec}.network", KINDS, "VPC to peer with: projects/<number>/global/networks/<name>"
    ),
    GcloudFlag("--enable-web-access", "{spec}.enableWebAccess", KINDS, "interactive shell", switch=True),
    GcloudFlag(
        "--enable-dashboard-access", "{spec}.enableDashboardAccess", KINDS, "dashboard access", switch=True
    ),
    GcloudFlag(
        "--persistent-resource-id", "{spec}.persistentResourceId", CUSTOM, "run on this persistent resource"
    ),
    GcloudFlag("--kms-key", "encryptionSpec.kmsKeyName", KINDS, f"CMEK key: {KMS_KEY}, or its id"),
    GcloudFlag("--kms-keyring", "", KINDS, "with a --kms-key id: its key ring"),
    GcloudFlag("--kms-location", "", KINDS, "with a --kms-key id: its location"),
    GcloudFlag("--kms-project", "", KINDS, "with a --kms-key id: its project (default: the job's)"),
    GcloudFlag(
        "--labels", "labels", KINDS, "labels to add: KEY=VALUE,... (repeatable)", "KEY=VALUE", repeatable=True
    ),
    GcloudFlag(
        "--args",
        "{pool}.args",
        CUSTOM,
        "every pool's program args, replacing the file's: comma-separated (repeatable); `^:^` picks another "
        "delimiter",
        "ARG",
        repeatable=True,
    ),
    GcloudFlag(
        "--command",
        "{container}.command",
        CUSTOM,
        "every container pool's command, replacing the file's (repeatable)",
        "COMMAND",
        repeatable=True,
    ),
)
BY_DEST = {f.dest: f for f in FLAGS}


def split_list(text: str) -> list[str]:
    """gcloud's ArgList: comma-separated, or separated by DELIM after a leading ``^DELIM^``."""
    found = _DELIMITER.match(text)
    delimiter, text = (found.group(1), text[found.end() :]) if found else (",", text)
    return text.split(delimiter) if text else []


def job_flags(values: Mapping[str, Any], file: str) -> JobFlags:
    """Parse run_job.py's flag values (argparse's dests: strings, ints, switches, lists of repeats)."""
    for name in ("max_trial_count", "parallel_trial_count"):
        value = values.get(name)
        if value is not None and value < 1:
            raise JobError(file, BY_DEST[name].flag, short(value), "an integer >= 1")
    parsed = {name: values.get(name) for name in JobFlags.__dataclass_fields__ if name in values}
    for name in ("enable_web_access", "enable_dashboard_access"):
        parsed[name] = bool(values.get(name))
    parsed["labels"] = _labels(values.get("labels") or [], file)
    for name in ("args", "command"):
        parsed[name] = tuple(item for text in values.get(name) or [] for item in split_list(text))
    if values.get("algorithm") is not None:
        # gcloud's choices are the enum's names in lowercase with hyphens; the file's own spelling works too.
        parsed["algorithm"] = str(values["algorithm"]).upper().replace("-", "_")
    return JobFlags(**parsed)


def _labels(texts: list[str], file: str) -> tuple[tuple[str, str], ...]:
    labels: dict[str, str] = {}
    for text in texts:
        for item in split_list(text):
            key, equals, value = item.partition("=")
            if not equals or not key:
                raise JobError(
                    file, "--labels", f"{short(item)} is not KEY=VALUE", "--labels=KEY=VALUE[,KEY=VALUE...]"
                )
            if labels.get(key, value) != value:
                raise JobError(
                    file,
                    "--labels",
                    f"label {short(key)} given twice ({short(labels[key])}, {short(value)})",
                    "one value a key",
                )
            labels[key] = value
    return tuple(labels.items())


def kms_key_name(flags: JobFlags, project: str, file: str) -> str | None:
    """--kms-key as a full key name: given whole, or an id completed by --kms-keyring/-location/-project."""
    parts = {"--kms-keyring": flags.kms_keyring, "--kms-location": flags.kms_location}
    if flags.kms_key is None:
        extra = next(
            (f for f, v in (*parts.items(), ("--kms-project", flags.kms_project)) if v is not None), None
        )
        if extra:
            raise JobError(
                file, extra, "completes a --kms-key id, and no --kms-key is given", f"--kms-key {KMS_KEY}"
            )
        return None
    if flags.kms_key.startswith("projects/"):
        return flags.kms_key
    missing = [flag for flag, value in parts.items() if not value]
    if missing:
        raise JobError(
            file,
            "--kms-key",
            f"{short(flags.kms_key)} is a key id, and {' and '.join(missing)} not given",
            f"{KMS_KEY}, or the id with --kms-keyring and --kms-location",
        )
    ring = (
        f"projects/{flags.kms_project or project}/locations/{flags.kms_location}/keyRings/{flags.kms_keyring}"
    )
    return f"{ring}/cryptoKeys/{flags.kms_key}"


@dataclass(frozen=True)
class _Where:
    """Where the file's values are: to name a field a flag overrides as the file writes it, with its line."""

    document: Document
    prefix: str  # body path prefix the file does not write (jobSpec. in a gcloud CustomJobSpec file)

    def field(self, body_path: str) -> tuple[str, str]:
        """(the field's path in the file, " (line N)" or "")."""
        path = body_path.removeprefix(self.prefix) if self.prefix else body_path
        line = self.document.line_of(path)
        return path, f" (line {line})" if line else ""


@dataclass(frozen=True)
class FlagOverride:
    """A field the file sets that a flag changed: what run_job.py reports on stderr."""

    flag: str
    field: str  # as the file writes it
    line: str  # " (line N)" or ""
    file_value: Any
    flag_value: Any

    def note(self, file: str) -> str:
        there, here = _differing(self.file_value, self.flag_value)
        field = f"{self.field}{self.line}"
        return f"{file}: {self.flag} overrides {field}: {there} in the file, {here} from the flag"


def _differing(old: Any, new: Any) -> tuple[str, str]:
    """Both values as one line shows them; of two lists (args), only the items between what they share at
    either end, so a changed epoch count is not cut off behind a long shared head."""
    if not (isinstance(old, list) and isinstance(new, list)):
        return short(old, BOTH), short(new, BOTH)
    head = 0
    while head < min(len(old), len(new)) and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < min(len(old), len(new)) - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1

    def middle(items: list[Any]) -> str:
        shown = [short(item, BOTH) for item in items[head : len(items) - tail]]
        return "[" + ", ".join(["..."] * bool(head) + shown + ["..."] * bool(tail)) + "]"

    return short(middle(old), BOTH * 2, quote=False), short(middle(new), BOTH * 2, quote=False)


@dataclass(frozen=True)
class Placed:
    """What the flags did to a body: {body path: flag} of every field they set, and the file's values they
    changed."""

    flagged: dict[str, str]
    overrides: tuple[FlagOverride, ...]


def apply_flags(
    body: dict[str, Any], kind: str, flags: JobFlags, document: Document, prefix: str, project: str
) -> Placed:
    """Place each given flag's value in ``body``, over the file's value where it has one (gcloud's
    precedence)."""
    where = _Where(document, prefix)
    values = {f.dest: getattr(flags, f.dest) for f in FLAGS if f.field}
    values["kms_key"] = kms_key_name(flags, project, document.file)
    placed: dict[str, str] = {}
    overrides: list[FlagOverride] = []
    for spec in FLAGS:
        value = values.get(spec.dest)
        if value in (None, False, ()):
            continue
        if kind not in spec.kinds:
            other = "hp-tuning-jobs" if kind == CUSTOM_JOB else "custom-jobs"
            raise JobError(
                document.file,
                spec.flag,
                f"a {kind} has no such field (it is a flag of `gcloud ai {other} create`)",
                f"omit it for a {kind}",
            )
        targets = _targets(body, kind, spec, value, document.file)
        for path, _, _ in targets:  # every target is checked before any is set: a refusal changes nothing
            at, old = _lookup(body, path)
            if at != path and old not in (None, "", [], {}):
                # A single value where the flag's field goes inside it (`jobSpec: 5`): nothing to override.
                field, line = where.field(at)
                raise JobError(
                    document.file,
                    spec.flag,
                    f"sets a field inside {field}{line}, which the file gives the single value {short(old)}",
                    f"a mapping at {field}, or omit {spec.flag}",
                )
        for path, new, given in targets:
            old = _lookup(body, path)[1]
            if old == new:
                continue
            if old not in (None, "", [], {}):
                overrides.append(FlagOverride(spec.flag, *where.field(path), old, given))
            _set(body, path, new)
            placed[path] = spec.flag
    return Placed(placed, tuple(overrides))


def _targets(
    body: dict[str, Any], kind: str, spec: GcloudFlag, value: Any, file: str
) -> list[tuple[str, Any, Any]]:
    """(body path, value, value as given) of each field a flag sets: one, a label each, or one per worker
    pool."""
    if spec.dest == "labels":
        return [(f"labels.{key}", _literal(item), item) for key, item in value]
    if spec.dest in ("args", "command"):
        # gcloud sets args on every pool's program, and command on every container.
        pools = [p for p in job_pools(body, kind) if p.program_field]
        if spec.dest == "command":
            pools = [p for p in pools if p.is_container]
        if not pools:
            raise JobError(
                file, spec.flag, "no worker pool runs a container", "omit it, or a containerSpec pool"
            )
        return [
            (p.field(p.program_field, spec.dest), [_literal(v) for v in value], list(value)) for p in pools
        ]
    return [(spec.field.format(spec=spec_field(kind)), _literal(value), value)]


def _literal(value: Any) -> Any:
    return _REFERENCE_DOLLAR.sub("$$", value) if isinstance(value, str) else value


def _lookup(node: Any, path: str) -> tuple[str, Any]:
    """(path, value) of the field at ``path``; of the field in its way where the file has a value that is no
    mapping above it (``jobSpec: 5``); value None where the file has nothing there."""
    walked = ""
    for key in path.split("."):
        if isinstance(node, dict):
            node = node.get(key)
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            return walked, node
        walked = f"{walked}.{key}" if walked else key
    return walked, node


def _set(node: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    node[last] = value
