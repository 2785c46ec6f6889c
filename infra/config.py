"""Typed environment configs: `infra/environments/<env>.yaml` -> `EnvironmentConfig`.

Pure (stdlib + yaml): the job runner imports this for `--dry-run`, so it must never import the CDK.
Every error is a `ConfigError` whose message is one line naming the file, the field and what is allowed.

    python -c "from infra.config import load_environment; print(load_environment('dev'))"

`INFRA_ENVIRONMENTS_DIR` points the loader at another directory of configs (tests use it; so can forks that
keep their real configs outside the repo).

The file is read by common/reader.py, the one bounded reader of every input the tools parse, with its limits
(a regular file of at most 1 MiB, printable text, 32 levels, 50,000 values counting YAML aliases each time
they are used, numbers of at most 40 characters); a config holds at most ``MAX_SCHEDULES`` schedules. Every
pattern matches the whole value (`fullmatch`: `^...$` with `re.match` lets a trailing newline through), so
nothing a construct would refuse gets past the loader.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from common import reader
from common.gcs import UNDOTTED_BUCKET_NAME
from common.prices import KINDS, MACHINES, TABLE_FILE, TIERS, Price, load_table
from infra.cron import MINUTES_PER_DAY, CronError, parse_cron
from infra.schedules import MIN_SCHEDULE_GAP_MINUTES

REPO_ROOT = Path(__file__).resolve().parent.parent
ENVIRONMENTS_DIR = REPO_ROOT / "infra" / "environments"
ENVIRONMENTS_DIR_VAR = "INFRA_ENVIRONMENTS_DIR"
# Scheduled jobs are definitions of this checkout: the stack compiles them at synthesis (scripts/synth.py).
JOBS_DIR = "jobs"

# Each schedule is a job compiled at synthesis and a scheduler job plus a workflow in the stack: a few dozen
# is a busy environment, and 100 already takes the synthesis tens of seconds.
MAX_SCHEDULES = 100
# Vertex AI's default quota is 100 endpoints per region.
MAX_ENDPOINTS = 100
ALLOWED_FILE = "a regular UTF-8 YAML file such as infra/environments/dev.yaml"

# Longest prefix that keeps every derived name valid: service account ids are 6-30 chars and the longest
# suffix is "-deployer" (9), workload identity pool ids are <= 32 chars.
MAX_PREFIX_LEN = 21

_ENV_NAME = re.compile(r"^[a-z][a-z0-9]{0,15}$")
# Also the patterns construct props are checked with (infra/constructs/ import them from here): one spelling.
PROJECT_ID = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
PROJECT_NUMBER = re.compile(r"^[1-9][0-9]{5,19}$")
# Regions are <area>-<direction><digit>: us-central1, europe-west4, northamerica-northeast2, me-central2.
REGION = re.compile(r"^[a-z]+-[a-z]+[1-9][0-9]?$")
_PREFIX = re.compile(rf"^[a-z][a-z0-9-]{{1,{MAX_PREFIX_LEN - 2}}}[a-z0-9]$")
# The undotted rule (common.gcs says why); jobs/ reads gs:// URIs with common.gcs.is_bucket_name.
BUCKET_NAME = UNDOTTED_BUCKET_NAME
_GITHUB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
BRANCH = re.compile(r"^[A-Za-z0-9._/-]{1,200}$")
MEMBER = re.compile(r"^(user|group|serviceAccount|domain|principal|principalSet):\S+$")
# A service account email (6-30 char account id, in a project whose id has the same shape).
SERVICE_ACCOUNT_EMAIL = re.compile(
    r"^[a-z][a-z0-9-]{4,28}[a-z0-9]@[a-z][a-z0-9-]{4,28}[a-z0-9]\.iam\.gserviceaccount\.com$")
LABEL_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
LABEL_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")
# Workflow ids are <= 64 chars and start with a letter; "<prefix>-<schedule>" stays within that.
SCHEDULE_NAME = re.compile(r"^[a-z][a-z0-9-]{0,28}[a-z0-9]$")
# `endpoints.<name>`: the name is the outputs key's suffix (`endpoint_<name>`) and a BigQuery-safe id.
ENDPOINT_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
# Request-response logging's destination as Vertex AI takes it: a new table of an existing dataset (project
# ids only); Vertex AI creates the table, the dataset's owner lets the stack grant it access (infra/README).
BIGQUERY_TABLE = re.compile(
    r"^bq://(?P<project>[a-z][a-z0-9-]{4,28}[a-z0-9])\.(?P<dataset>[A-Za-z0-9_]{1,1024})"
    r"\.(?P<table>[A-Za-z0-9_]{1,1024})$")
# A Cloud Billing account id, as `gcloud billing accounts list` prints it.
BILLING_ACCOUNT = re.compile(r"^[0-9A-F]{6}-[0-9A-F]{6}-[0-9A-F]{6}$")
EMAIL = re.compile(r"^[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+$")
PUBSUB_TOPIC = re.compile(r"^projects/[a-z][a-z0-9-]{4,28}[a-z0-9]/topics/[A-Za-z][A-Za-z0-9._~%+-]{2,254}$")
# A folder of a bucket as a lifecycle prefix (`study_prefixes`), ending in '/' so that census-tuning/ never
# also matches census-tuning-grid/ (a lifecycle prefix is matched as plain text).
BUCKET_FOLDER = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}(/[a-z0-9][a-z0-9._-]{0,62}){0,7}/$")
MAX_STUDY_PREFIXES = 50
# `alerts.no_success_days` at most: a schedule quiet for longer is not one to page about, and the alert's
# query must also look back a long stretch before those days (infra/constructs/alerts.py).
MAX_NO_SUCCESS_DAYS = 90
KMS_KEY = re.compile(
    r"^projects/(?P<project>[a-z][a-z0-9-]{4,28}[a-z0-9])/locations/(?P<location>[a-z0-9-]+)"
    r"/keyRings/[A-Za-z0-9_-]{1,63}/cryptoKeys/[A-Za-z0-9_-]{1,63}$"
)


class ConfigError(ValueError):
    """A broken environment config; str() is one line: file, field, what is allowed."""

    def __init__(self, path: Path | str, field_name: str, problem: str) -> None:
        self.path = str(path)
        self.field = field_name
        self.problem = problem
        # One line whatever a key or value held: newlines, control and direction characters escaped.
        text = f"{self.path}: field '{field_name}': {problem}"
        super().__init__("".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text))


@dataclass(frozen=True)
class GithubConfig:
    owner: str
    repository: str
    # GitHub's numeric id survives renames and cannot be re-registered by someone else, unlike owner/name, so
    # the OIDC provider trusts the id (`gh api repos/OWNER/REPO --jq .id`).
    repository_id: int
    deploy_branch: str = "main"

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.repository}"


@dataclass(frozen=True)
class BatchPredictConfig:
    """`schedules.<name>.batch_predict`: after a run registered its model, a batch prediction of what the
    registry block's first alias names, with `run_job.py batch-predict`'s flags (same names, `_` for `-`).
    Only shapes are checked here; the verb's own rules (URIs, machines, counts) run when jobs.schedule
    compiles it, and `${infra.*}` / `${job.id}` in `input` and `output` are resolved there."""

    input: tuple[str, ...]
    output: str
    machine_type: str | None = None  # None: the verb's default
    starting_replica_count: int = 1
    max_replica_count: int | None = None
    batch_size: int | None = None  # None: the verb's default
    signature: str = ""


@dataclass(frozen=True)
class CanaryConfig:
    """`schedules.<name>.deploy`: once the gate moved the registry block's first alias to a run's version,
    deploy it to endpoint `endpoint` (a name of `endpoints:`) with `run_job.py deploy`'s flags (same names,
    `_` for `-`); `traffic` is its share, the models there keep theirs of the rest. The verb's rules run
    when jobs.schedule compiles it."""

    endpoint: str
    traffic: int = 100
    machine_type: str | None = None  # None: the verb's default
    accelerator_type: str | None = None
    accelerator_count: int | None = None
    min_replicas: int | None = None
    max_replicas: int | None = None
    cpu_target: int | None = None


@dataclass(frozen=True)
class ScheduleConfig:
    """`schedules.<name>`: run job file `job` (a CustomJob on a container) at `cron` in `time_zone`."""

    name: str
    job: str  # repo-relative POSIX path under jobs/
    cron: str
    time_zone: str = "Etc/UTC"
    # `--set PATH=VALUE` texts, as run_job.py takes them (VALUE as JSON, which is YAML).
    overrides: tuple[str, ...] = ()
    paused: bool = False
    batch_predict: BatchPredictConfig | None = None
    deploy: CanaryConfig | None = None


@dataclass(frozen=True)
class RequestResponseLogging:
    """`endpoints.<name>.request_response_logging`: a sample of predictions written to a BigQuery table."""

    bigquery_table: str  # bq://PROJECT.DATASET.TABLE
    sampling_rate: float  # 0 < rate <= 1

    @property
    def table(self) -> tuple[str, str, str]:
        """(project, dataset, table) of the URI."""
        match = BIGQUERY_TABLE.fullmatch(self.bigquery_table)
        return match["project"], match["dataset"], match["table"]


@dataclass(frozen=True)
class EndpointConfig:
    """`endpoints.<name>`: a Vertex AI endpoint the platform stack creates (its id: infra.naming)."""

    name: str
    display_name: str
    description: str = ""
    # Members who may call predict (bootstrap stack: a project-level custom role, infra/README.md says why).
    predictors: tuple[str, ...] = ()
    request_response_logging: RequestResponseLogging | None = None
    # Projects allowed to reach the endpoint through Private Service Connect; None: the public API endpoint.
    private_service_connect: tuple[str, ...] | None = None


@dataclass(frozen=True)
class BillingBudgetConfig:
    """`billing_budget`: a monthly budget on this project's spend in its billing account (bootstrap stack),
    notifying at each threshold (percent of `amount`) an email channel and/or a Pub/Sub topic."""

    billing_account: str
    amount: float  # USD per calendar month
    thresholds: tuple[float, ...] = (50.0, 90.0, 100.0)
    email: str | None = None
    pubsub_topic: str | None = None


@dataclass(frozen=True)
class AlertsConfig:
    """`alerts`: Cloud Monitoring alert policies on the schedules (platform stack): a run that failed, and an
    unpaused schedule with no successful run in `no_success_days`, each notify the email channel `email`."""

    email: str
    no_success_days: int


@dataclass(frozen=True)
class EnvironmentConfig:
    name: str
    project_id: str
    project_number: str
    region: str
    name_prefix: str
    state_bucket: str
    github: GithubConfig
    job_submitters: tuple[str, ...] = ()
    # Service accounts jobs may run as besides the runtime account (emails). This stack grants them nothing:
    # their owner grants the submitters actAs on them and them access to the buckets they need.
    job_service_accounts: tuple[str, ...] = ()
    # Sorted (key, value) pairs rather than a dict so the config stays hashable and deterministic.
    labels: tuple[tuple[str, str], ...] = ()
    kms_key: str | None = None
    staging_retention_days: int = 14
    noncurrent_retention_days: int = 30
    registry_keep_versions: int = 10
    registry_untagged_retention_days: int = 7
    # Models bucket lifecycle (infra/README.md, "Retention"): cached pre-training results (data-scans/) and
    # the study folders listed are deleted this many days after they were written.
    result_cache_retention_days: int = 7
    study_prefixes: tuple[str, ...] = ()
    study_retention_days: int = 30
    schedules: tuple[ScheduleConfig, ...] = ()
    endpoints: tuple[EndpointConfig, ...] = ()
    # The most a job's (a tuning job's) cost ceiling may be, USD; None: no cap (jobs/definition/cost.py).
    max_job_cost: float | None = None
    max_study_cost: float | None = None
    # Prices over common/vertex_ai_prices.yaml: sorted (region, kind, name, on_demand, spot) rows.
    prices: tuple[tuple[str, str, str, float | None, float | None], ...] = ()
    billing_budget: BillingBudgetConfig | None = None
    # None: no schedules, or `alerts: false` (an explicit opt-out).
    alerts: AlertsConfig | None = None
    source: str = ""

    @property
    def cmek(self) -> bool:
        return self.kms_key is not None

    @property
    def price_overrides(self) -> dict[str, dict[str, dict[str, Price]]]:
        """`prices:` as common.prices takes them: {region: {kind: {name: Price}}}."""
        found: dict[str, dict[str, dict[str, Price]]] = {}
        for region, kind, name, on_demand, spot in self.prices:
            found.setdefault(region, {}).setdefault(kind, {})[name] = Price(on_demand, spot)
        return found

    @property
    def all_labels(self) -> dict[str, str]:
        """User labels plus the two every resource carries, so billing exports can split by environment."""
        return {**dict(self.labels), "environment": self.name, "managed-by": "cdktn"}


def environments_dir() -> Path:
    override = os.environ.get(ENVIRONMENTS_DIR_VAR)
    return Path(override) if override else ENVIRONMENTS_DIR


def list_environments() -> list[str]:
    return sorted(p.stem for p in environments_dir().glob("*.yaml"))


def member_id(member: str) -> str:
    """`group:ml@acme.example` -> `group-ml-acme-example`: keyed by member, grants survive list reordering."""
    return re.sub(r"[^a-z0-9]+", "-", member.lower()).strip("-")


def load_environment(env: str) -> EnvironmentConfig:
    directory = environments_dir()
    path = directory / f"{env}.yaml"
    exists = os.path.lexists(path)
    if exists and not _ENV_NAME.fullmatch(env):
        raise ConfigError(path, "<environment>", "the file name is the stack name; allowed: 1-16 lowercase "
                                                 "letters and digits, starting with a letter")
    if not exists:
        allowed = ", ".join(list_environments()) or f"none found in {directory}"
        raise ConfigError(path, "<environment>", f"unknown environment {env!r}; allowed: {allowed}")
    try:
        # The schedule cap is checked while composing: 100,000 of them stop at the 101st, not after parsing.
        raw = reader.plain_yaml(reader.read_text(path, ALLOWED_FILE), str(path), "a YAML mapping",
                                max_items={"schedules": (MAX_SCHEDULES, "schedules")})
    except reader.SyntaxProblem as exc:
        where = f" at line {exc.line}" if exc.line else ""
        problem = exc.problem.removeprefix("malformed YAML: ")
        raise ConfigError(path, "<document>", f"not valid YAML{where} ({problem}); allowed: a YAML mapping") \
            from None
    except reader.InputError as exc:
        raise config_error(path, exc) from None
    return parse_environment(env, raw, path)


def config_error(path: Path | str, exc: reader.InputError) -> ConfigError:
    """The shared reader's refusal as a ConfigError: the file's kind, size or text is the '<document>'."""
    document = exc.where.startswith("(") or re.match(r"line \d", exc.where) is not None
    field_name = "<document>" if document else exc.where
    where = f" ({exc.where})" if exc.where.startswith("line ") else ""
    return ConfigError(path, field_name, f"{exc.problem}{where}; allowed: {exc.allowed}")


def _schedule_count(path: Path, count: int) -> None:
    if count > MAX_SCHEDULES:
        raise ConfigError(path, "schedules", f"{count} schedules; allowed: at most {MAX_SCHEDULES} per "
                                             "environment")


def _check(path: Path, name: str, value: Any, ok: Callable[[Any], bool], allowed: str) -> Any:
    if not ok(value):
        raise ConfigError(path, name, f"got {reader.shown(value, 200)}; allowed: {allowed}")
    return value


def _str_matching(pattern: re.Pattern[str]) -> Callable[[Any], bool]:
    return lambda v: reader.fullmatch(pattern, v)


def _positive_int(limit: int) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= limit


def _mapping(path: Path, name: str, raw: Any, known: set[str], required: set[str]) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise ConfigError(path, name,
                          f"got {type(raw).__name__}; allowed: a mapping with keys {sorted(known)}")
    for key in raw:
        if key not in known:
            raise ConfigError(path, f"{name}.{key}" if name else str(key),
                              f"unknown key; allowed: {', '.join(sorted(known))}")
    for key in sorted(required - raw.keys()):
        raise ConfigError(path, f"{name}.{key}" if name else key, "missing; this field is required")
    return raw


_TOP_REQUIRED = {"project_id", "project_number", "region", "name_prefix", "state_bucket", "github"}
_TOP_OPTIONAL = {
    "job_submitters", "job_service_accounts", "labels", "kms_key", "staging_retention_days",
    "noncurrent_retention_days",
    "registry_keep_versions", "registry_untagged_retention_days", "schedules", "endpoints",
    "max_job_cost", "max_study_cost", "prices", "billing_budget",
    "result_cache_retention_days", "study_prefixes", "study_retention_days", "alerts",
}
_GITHUB_REQUIRED = {"owner", "repository", "repository_id"}


def parse_environment(env: str, raw: Any, path: Path | str = "<memory>") -> EnvironmentConfig:
    path = Path(path)
    doc = _mapping(path, "", raw if raw is not None else {}, _TOP_REQUIRED | _TOP_OPTIONAL, _TOP_REQUIRED)
    gh = _mapping(path, "github", doc["github"], _GITHUB_REQUIRED | {"deploy_branch"}, _GITHUB_REQUIRED)

    project_number = doc["project_number"]
    if isinstance(project_number, int) and not isinstance(project_number, bool):
        project_number = str(project_number)

    labels = doc.get("labels") or {}
    _check(path, "labels", labels, lambda v: isinstance(v, dict), "a mapping of label key -> value")
    for key, value in labels.items():
        _check(path, f"labels.{key}", key, _str_matching(LABEL_KEY),
               "lowercase letters, digits, '_' or '-', starting with a letter, <= 63 chars")
        _check(path, f"labels.{key}", value, _str_matching(LABEL_VALUE),
               "lowercase letters, digits, '_' or '-', <= 63 chars")

    submitters = _members(path, "job_submitters", doc.get("job_submitters") or [])

    accounts = doc.get("job_service_accounts") or []
    _check(path, "job_service_accounts", accounts, lambda v: isinstance(v, list),
           "a list of service account emails")
    for i, email in enumerate(accounts):
        _check(path, f"job_service_accounts[{i}]", email, _str_matching(SERVICE_ACCOUNT_EMAIL),
               "a service account email such as trainer-gpu@my-project.iam.gserviceaccount.com")
        first = accounts.index(email)
        if first != i:
            raise ConfigError(path, f"job_service_accounts[{i}]",
                              f"{email!r} repeats job_service_accounts[{first}]; allowed: each account once")

    region = _check(path, "region", doc["region"], _str_matching(REGION),
                    "a Google Cloud region such as us-central1 or europe-west4")
    kms_key = doc.get("kms_key")
    if kms_key is not None:
        _check(path, "kms_key", kms_key, _str_matching(KMS_KEY),
               "null or projects/P/locations/L/keyRings/R/cryptoKeys/K")
        location = KMS_KEY.fullmatch(kms_key)["location"]
        # CMEK keys for regional buckets, TensorBoard and Artifact Registry must live in the resources'
        # region.
        _check(path, "kms_key", kms_key, lambda _: location == region,
               f"a key in the environment's region {region!r} (the key is in {location!r})")

    return EnvironmentConfig(
        name=_check(path, "<environment>", env, _str_matching(_ENV_NAME), "lowercase letters and digits"),
        project_id=_check(path, "project_id", doc["project_id"], _str_matching(PROJECT_ID),
                          "6-30 lowercase letters, digits or hyphens, starting with a letter"),
        project_number=_check(path, "project_number", project_number, _str_matching(PROJECT_NUMBER),
                              "the project's numeric id, e.g. \"123456789012\""),
        region=region,
        # Bucket names start with the prefix, and GCS refuses names that start with "goog" or contain
        # "google": caught here as a config error rather than by the bucket construct at synth time.
        name_prefix=_check(path, "name_prefix", doc["name_prefix"],
                           lambda v: _str_matching(_PREFIX)(v) and not v.startswith("goog")
                           and "google" not in v,
                           f"3-{MAX_PREFIX_LEN} lowercase letters, digits or hyphens, starting with a "
                           "letter, not starting with 'goog' or containing 'google'"),
        state_bucket=_check(path, "state_bucket", doc["state_bucket"], _str_matching(BUCKET_NAME),
                            "a bucket name: 3-63 lowercase letters, digits, '-' or '_'"),
        github=GithubConfig(
            owner=_check(path, "github.owner", gh["owner"], _str_matching(_GITHUB_NAME), "a GitHub user/org"),
            repository=_check(path, "github.repository", gh["repository"], _str_matching(_GITHUB_NAME),
                              "a GitHub repository name"),
            repository_id=_check(path, "github.repository_id", gh["repository_id"], _positive_int(10**12),
                                 "the numeric id from `gh api repos/OWNER/REPO --jq .id`"),
            deploy_branch=_check(path, "github.deploy_branch", gh.get("deploy_branch", "main"),
                                 _str_matching(BRANCH), "a branch name such as main"),
        ),
        job_submitters=submitters,
        job_service_accounts=tuple(accounts),
        labels=tuple(sorted(labels.items())),
        kms_key=kms_key,
        staging_retention_days=_days(path, doc, "staging_retention_days", 14),
        noncurrent_retention_days=_days(path, doc, "noncurrent_retention_days", 30),
        registry_keep_versions=_check(path, "registry_keep_versions", doc.get("registry_keep_versions", 10),
                                      _positive_int(1000), "an integer from 1 to 1000"),
        registry_untagged_retention_days=_days(path, doc, "registry_untagged_retention_days", 7),
        result_cache_retention_days=_days(path, doc, "result_cache_retention_days", 7),
        study_prefixes=_study_prefixes(path, doc.get("study_prefixes") or []),
        study_retention_days=_days(path, doc, "study_retention_days", 30),
        schedules=(schedules := _schedules(path, doc.get("schedules") or {})),
        alerts=_alerts(path, doc.get("alerts"), schedules),
        endpoints=_endpoints(path, doc.get("endpoints") or {}, doc["name_prefix"]),
        max_job_cost=_cap(path, doc, "max_job_cost"),
        max_study_cost=_cap(path, doc, "max_study_cost"),
        prices=_prices(path, doc.get("prices") or {}),
        billing_budget=_billing_budget(path, doc.get("billing_budget")),
        source=str(path),
    )


def _days(path: Path, doc: dict[str, Any], key: str, default: int) -> int:
    return _check(path, key, doc.get(key, default), _positive_int(3650),
                  "a whole number of days from 1 to 3650")


def _number(minimum: float, above: bool = False) -> Callable[[Any], bool]:
    """A finite int or float (never a bool or a string) of at least (``above``: over) ``minimum``."""
    def ok(v: Any) -> bool:
        number = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        return number and (v > minimum if above else v >= minimum)
    return ok


def _cap(path: Path, doc: dict[str, Any], key: str) -> float | None:
    value = doc.get(key)
    if value is None:
        return None
    return float(_check(path, key, value, _number(0, above=True),
                        "a positive number of US dollars, e.g. 50 (a job whose cost ceiling is over it is "
                        "refused), or null for no cap"))


def _prices(path: Path, raw: Any) -> tuple[tuple[str, str, str, float | None, float | None], ...]:
    _check(path, "prices", raw, lambda v: isinstance(v, dict),
           "a mapping of region -> {machines: {TYPE: {on_demand, spot}}, accelerators: {TYPE: ...}}")
    table = load_table()
    rows = []
    for region, kinds in raw.items():
        _check(path, f"prices.{region}", region, _str_matching(REGION),
               "a Google Cloud region such as us-central1 or europe-west4")
        kinds = _mapping(path, f"prices.{region}", kinds if kinds is not None else {}, set(KINDS), set())
        for kind, names in kinds.items():
            field = f"prices.{region}.{kind}"
            _check(path, field, names, lambda v: isinstance(v, dict),
                   "a mapping of name -> {on_demand, spot}")
            known = table.names(kind)
            what = "a machine type" if kind == MACHINES else "an accelerator type"
            example = "n1-standard-4" if kind == MACHINES else "NVIDIA_TESLA_T4"
            for name, entry in names.items():
                _check(path, f"{field}.{name}", name, known.__contains__,
                       f"{what} Vertex AI offers, as {_table_file()} names them (e.g. {example})")
                entry = _mapping(path, f"{field}.{name}", entry, set(TIERS), set())
                _check(path, f"{field}.{name}", entry, bool, f"{' and/or '.join(TIERS)}: USD per hour")
                for tier, value in entry.items():
                    _check(path, f"{field}.{name}.{tier}", value, _number(0),
                           "a number of US dollars per hour, 0 or more")
                given = {t: (None if entry.get(t) is None else float(entry[t])) for t in TIERS}
                rows.append((region, kind, name, given["on_demand"], given["spot"]))
    return tuple(sorted(rows))


def _table_file() -> str:
    return str(TABLE_FILE.relative_to(REPO_ROOT))


_BUDGET_KEYS = {"billing_account", "amount", "thresholds", "email", "pubsub_topic"}


def _billing_budget(path: Path, raw: Any) -> BillingBudgetConfig | None:
    if raw is None:
        return None
    entry = _mapping(path, "billing_budget", raw, _BUDGET_KEYS, {"amount"})
    account = entry.get("billing_account")
    if account is None:  # the budget needs an account: without one the bootstrap stack says it has none
        return None
    _check(path, "billing_budget.billing_account", account, _str_matching(BILLING_ACCOUNT),
           "a billing account id such as 012345-6789AB-CDEF01 (`gcloud billing accounts list`), or null")
    amount = _check(path, "billing_budget.amount", entry["amount"], _number(0, above=True),
                    "a positive number of US dollars per calendar month")
    thresholds = entry.get("thresholds", [50, 90, 100])
    _check(path, "billing_budget.thresholds", thresholds,
           lambda v: isinstance(v, list) and 0 < len(v) <= 10 and all(_number(0, above=True)(t) for t in v)
           and all(a < b for a, b in zip(v, v[1:], strict=False)),
           "1-10 percentages of the amount in increasing order, e.g. [50, 90, 100]")
    email = entry.get("email")
    if email is not None:
        _check(path, "billing_budget.email", email, _str_matching(EMAIL), "an email address, or null")
    topic = entry.get("pubsub_topic")
    if topic is not None:
        _check(path, "billing_budget.pubsub_topic", topic, _str_matching(PUBSUB_TOPIC),
               "an existing Pub/Sub topic as projects/PROJECT_ID/topics/TOPIC, or null")
    return BillingBudgetConfig(billing_account=account, amount=float(amount), email=email, pubsub_topic=topic,
                               thresholds=tuple(float(t) for t in thresholds))


def _study_prefixes(path: Path, raw: Any) -> tuple[str, ...]:
    _check(path, "study_prefixes", raw, lambda v: isinstance(v, list) and len(v) <= MAX_STUDY_PREFIXES,
           f"a list of at most {MAX_STUDY_PREFIXES} folders of the models bucket such as census-tuning/")
    for i, prefix in enumerate(raw):
        _check(path, f"study_prefixes[{i}]", prefix, _str_matching(BUCKET_FOLDER),
               "a folder of the models bucket ending in '/', such as census-tuning/ (lowercase letters, "
               "digits, '.', '_' or '-')")
        first = raw.index(prefix)
        if first != i:
            raise ConfigError(path, f"study_prefixes[{i}]",
                              f"{prefix!r} repeats study_prefixes[{first}]; allowed: each folder once")
    return tuple(raw)


_ALERT_KEYS = {"email", "no_success_days"}


def _alerts(path: Path, raw: Any, schedules: tuple[ScheduleConfig, ...]) -> AlertsConfig | None:
    """Schedules require a choice: where to send their alerts, or `false` for none (a failed run otherwise
    tells nobody)."""
    if raw is None and schedules:
        raise ConfigError(path, "alerts", "missing; required with schedules: {email: ADDRESS} (alerts on "
                                          "failed and missing runs), or false for none")
    if raw is None or raw is False:
        return None
    _check(path, "alerts", raw, lambda v: isinstance(v, dict),
           "{email: ADDRESS, no_success_days: N}, or false for no alerts")
    entry = _mapping(path, "alerts", raw, _ALERT_KEYS, {"email"})
    email = _check(path, "alerts.email", entry["email"], _str_matching(EMAIL),
                   "an email address (the alerts' notification channel)")
    # The window must hold the longest wait for an unpaused schedule's next run and that run's own time.
    needed = {s.name: (-(-parse_cron(s.cron).max_gap_minutes() // MINUTES_PER_DAY) + 1, s.cron)
              for s in schedules if not s.paused}
    most = max((days for days, _ in needed.values()), default=1)
    default = min(most, MAX_NO_SUCCESS_DAYS)
    days = _check(path, "alerts.no_success_days", entry.get("no_success_days", default),
                  _positive_int(MAX_NO_SUCCESS_DAYS),
                  f"a whole number of days from 1 to {MAX_NO_SUCCESS_DAYS}")
    for name, (least, cron) in needed.items():
        apart = f"schedule {name!r} ({cron!r}) runs up to {least - 1} day{'s' * (least > 2)} apart"
        if least > MAX_NO_SUCCESS_DAYS:
            raise ConfigError(path, "alerts.no_success_days",
                              f"{apart}; allowed: schedules at most {MAX_NO_SUCCESS_DAYS - 1} days apart "
                              "(pause it, or alerts: false)")
        if days < least:
            raise ConfigError(path, "alerts.no_success_days",
                              f"got {days}; {apart} and a run takes time; allowed: at least {least}")
    return AlertsConfig(email=email, no_success_days=days)


_SCHEDULE_KEYS = {"job", "cron", "time_zone", "set", "paused", "batch_predict", "deploy"}


def _schedules(path: Path, raw: Any) -> tuple[ScheduleConfig, ...]:
    _check(path, "schedules", raw, lambda v: isinstance(v, dict), "a mapping of schedule name -> settings")
    _schedule_count(path, len(raw))
    schedules = []
    for name, entry in raw.items():
        field = f"schedules.{name}"
        _check(path, field, name, _str_matching(SCHEDULE_NAME),
               "2-30 lowercase letters, digits or hyphens, starting with a letter")
        entry = _mapping(path, field, entry, _SCHEDULE_KEYS, {"job", "cron"})
        cron = entry["cron"]
        try:
            gap = parse_cron(cron).min_gap_minutes()
        except CronError as exc:
            raise ConfigError(path, f"{field}.cron", f"{reader.shown(cron)}: {exc}") from None
        # A trigger retried within this window is recognised as the same run (infra.schedules), so two real
        # runs must never fall inside it.
        if gap < MIN_SCHEDULE_GAP_MINUTES:
            raise ConfigError(path, f"{field}.cron", f"{cron!r} can run {gap} minutes apart; allowed: runs "
                                                     f"at least {MIN_SCHEDULE_GAP_MINUTES} minutes apart")
        time_zone = entry.get("time_zone", "Etc/UTC")
        _check(path, f"{field}.time_zone", time_zone, lambda v: isinstance(v, str) and v in _time_zones(),
               "an IANA time zone name such as Etc/UTC or Europe/Berlin")
        overrides = entry.get("set") or {}
        _check(path, f"{field}.set", overrides, lambda v: isinstance(v, dict),
               "a mapping of field path (as run_job.py --set takes it) -> value")
        for key, value in overrides.items():
            _check(path, f"{field}.set", key, lambda k: isinstance(k, str) and k.strip() == k and k != "",
                   "field paths such as jobSpec.workerPoolSpecs.0.machineSpec.machineType")
            _check(path, f"{field}.set.{key}", value, _json_value, "a string, number, boolean, null, list or "
                                                                    "mapping (quote dates and times)")
        paused = _check(path, f"{field}.paused", entry.get("paused", False), lambda v: isinstance(v, bool),
                        "true or false")
        schedules.append(ScheduleConfig(
            name=name, job=_job_file(path, f"{field}.job", entry["job"]), cron=cron, time_zone=time_zone,
            overrides=tuple(f"{key}={json.dumps(value)}" for key, value in overrides.items()), paused=paused,
            batch_predict=_batch_predict(path, f"{field}.batch_predict", entry.get("batch_predict")),
            deploy=_canary(path, f"{field}.deploy", entry.get("deploy"))))
    return tuple(schedules)


_BATCH_KEYS = {"input", "output", "machine_type", "starting_replica_count", "max_replica_count", "batch_size",
               "signature"}


def _batch_predict(path: Path, field: str, raw: Any) -> BatchPredictConfig | None:
    if raw is None:
        return None
    entry = _mapping(path, field, raw, _BATCH_KEYS, {"input", "output"})
    text = _one_line(2048)
    inputs = entry["input"] if isinstance(entry["input"], list) else [entry["input"]]
    _check(path, f"{field}.input", inputs, lambda v: 0 < len(v) and all(map(text, v)),
           "a gs:// JSONL URI or a list of them (${infra.<key>} and ${job.id} allowed)")
    count = _positive_int(10**6)
    optional = {
        "machine_type": (text, "a Vertex AI machine type such as n1-standard-4"),
        "starting_replica_count": (count, "an integer >= 1"),
        "max_replica_count": (count, "an integer >= 1"),
        "batch_size": (count, "an integer >= 1"),
        "signature": (text, "a SavedModel signature name such as top_k"),
    }
    for key, (ok, allowed) in optional.items():
        if key in entry:
            _check(path, f"{field}.{key}", entry[key], ok, allowed)
    return BatchPredictConfig(
        input=tuple(inputs),
        output=_check(path, f"{field}.output", entry["output"], text,
                      "a gs:// folder (${infra.<key>} and ${job.id} allowed)"),
        **{key: entry[key] for key in optional if key in entry},
    )


_CANARY_INTEGERS = ("traffic", "accelerator_count", "min_replicas", "max_replicas", "cpu_target")


def _canary(path: Path, field: str, raw: Any) -> CanaryConfig | None:
    if raw is None:
        return None
    known = {"endpoint", "machine_type", "accelerator_type", *_CANARY_INTEGERS}
    entry = _mapping(path, field, raw, known, {"endpoint"})
    _check(path, f"{field}.endpoint", entry["endpoint"], _str_matching(ENDPOINT_NAME),
           "the name of one of this file's endpoints")
    for key in ("machine_type", "accelerator_type"):
        if key in entry:
            _check(path, f"{field}.{key}", entry[key], _one_line(128), "a name such as n1-standard-4")
    for key in _CANARY_INTEGERS:
        if key in entry:
            _check(path, f"{field}.{key}", entry[key], _positive_int(100), "an integer from 1 to 100")
    return CanaryConfig(**entry)


_ENDPOINT_KEYS = {"display_name", "description", "predictors", "request_response_logging",
                  "private_service_connect"}


def _endpoints(path: Path, raw: Any, prefix: str) -> tuple[EndpointConfig, ...]:
    _check(path, "endpoints", raw, lambda v: isinstance(v, dict), "a mapping of endpoint name -> settings")
    _check(path, "endpoints", raw, lambda v: len(v) <= MAX_ENDPOINTS,
           f"at most {MAX_ENDPOINTS} endpoints per environment")
    endpoints = []
    # The bootstrap stack grants each predictor once, keyed by member_id: one spelling across endpoints.
    predictor_ids: dict[str, tuple[str, str]] = {}
    for name, entry in raw.items():
        field = f"endpoints.{name}"
        _check(path, field, name, _str_matching(ENDPOINT_NAME),
               "1-32 lowercase letters, digits or '_', starting with a letter")
        entry = _mapping(path, field, entry if entry is not None else {}, _ENDPOINT_KEYS, set())
        display_name = _check(path, f"{field}.display_name", entry.get("display_name", f"{prefix}-{name}"),
                              _one_line(128), "text on one line, 1-128 characters")
        description = _check(path, f"{field}.description", entry.get("description", ""), _one_line(2048, 0),
                             "text on one line, at most 2048 characters")
        predictors = _members(path, f"{field}.predictors", entry.get("predictors") or [])
        for i, member in enumerate(predictors):
            other, where = predictor_ids.setdefault(member_id(member), (member, f"{field}.predictors[{i}]"))
            if other != member:
                raise ConfigError(path, f"{field}.predictors[{i}]", f"{member!r} and {other!r} ({where}) "
                                                                    "are one grant; allowed: one spelling")
        endpoints.append(EndpointConfig(
            name=name, display_name=display_name, description=description, predictors=predictors,
            request_response_logging=_logging(path, f"{field}.request_response_logging",
                                              entry.get("request_response_logging")),
            private_service_connect=_private_service_connect(path, f"{field}.private_service_connect",
                                                             entry.get("private_service_connect"))))
    return tuple(endpoints)


def _one_line(max_len: int, min_len: int = 1) -> Callable[[Any], bool]:
    return lambda v: (isinstance(v, str) and min_len <= len(v.strip()) and len(v) <= max_len
                      and v.isprintable())


def _members(path: Path, field: str, members: Any) -> tuple[str, ...]:
    _check(path, field, members, lambda v: isinstance(v, list), "a list of IAM members")
    seen: dict[str, int] = {}
    for i, member in enumerate(members):
        _check(path, f"{field}[{i}]", member, _str_matching(MEMBER),
               "an IAM member such as group:ml@example.com or user:me@example.com")
        # Grants are keyed by member_id in construct ids, which must be unique in the stack.
        first = seen.setdefault(member_id(member), i)
        if first != i:
            raise ConfigError(path, f"{field}[{i}]", f"{member!r} repeats {field}[{first}] "
                                                     f"({members[first]!r}); allowed: each member once")
    return tuple(members)


def _logging(path: Path, field: str, raw: Any) -> RequestResponseLogging | None:
    if raw is None:
        return None
    keys = {"bigquery_table", "sampling_rate"}
    entry = _mapping(path, field, raw, keys, keys)
    table = _check(path, f"{field}.bigquery_table", entry["bigquery_table"], _str_matching(BIGQUERY_TABLE),
                   "bq://PROJECT.DATASET.TABLE: a project id, an existing dataset and a new table "
                   "(letters, digits, '_')")
    rate = _check(path, f"{field}.sampling_rate", entry["sampling_rate"],
                  lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 1,
                  "a number greater than 0 and at most 1 (the fraction of requests logged)")
    return RequestResponseLogging(bigquery_table=table, sampling_rate=float(rate))


def _private_service_connect(path: Path, field: str, raw: Any) -> tuple[str, ...] | None:
    if raw is None:
        return None
    entry = _mapping(path, field, raw, {"project_allowlist"}, {"project_allowlist"})
    projects = entry["project_allowlist"]
    _check(path, f"{field}.project_allowlist", projects, lambda v: isinstance(v, list) and 0 < len(v) <= 100,
           "a list of 1-100 project ids that may connect to the endpoint")
    for i, project in enumerate(projects):
        _check(path, f"{field}.project_allowlist[{i}]", project, _str_matching(PROJECT_ID),
               "a project id: 6-30 lowercase letters, digits or hyphens, starting with a letter")
        if projects.index(project) != i:
            raise ConfigError(path, f"{field}.project_allowlist[{i}]",
                              f"{project!r} repeats {field}.project_allowlist[{projects.index(project)}]; "
                              "allowed: each project once")
    return tuple(projects)


def _job_file(path: Path, field: str, value: Any) -> str:
    allowed = f"a job definition of this repository, e.g. {JOBS_DIR}/recommender.yaml"
    _check(path, field, value, lambda v: isinstance(v, str) and v != "", allowed)
    rel = PurePosixPath(value)
    # Checked on the text before touching the disk: no absolute paths, no climbing out of jobs/.
    if rel.is_absolute() or ".." in rel.parts or "\\" in value or rel.parts[:1] != (JOBS_DIR,) \
            or rel.suffix not in (".yaml", ".yml"):
        raise ConfigError(path, field, f"got {reader.shown(value, 200)}; allowed: {allowed} (a .yaml file "
                                       f"under {JOBS_DIR}/)")
    full = REPO_ROOT / rel
    # A symlink (the file, or a folder on the way) could stand for anything outside jobs/.
    inside = full.resolve().is_relative_to((REPO_ROOT / JOBS_DIR).resolve())
    if full.is_symlink() or not inside or not full.is_file():
        raise ConfigError(path, field, f"{value!r} is not a regular file; allowed: {allowed}")
    return str(rel)


def _json_value(value: Any) -> bool:
    """What `set:` can hand run_job.py as JSON: YAML dates and times (unquoted 2024-01-01) cannot be."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    return True


_ZONES: frozenset[str] | None = None


def _time_zones() -> frozenset[str]:
    """The IANA zone names Cloud Scheduler takes (read once: listing them walks the tz database)."""
    global _ZONES
    if _ZONES is None:
        import zoneinfo

        _ZONES = frozenset(zoneinfo.available_timezones()) - {"Factory", "localtime"}
    return _ZONES
