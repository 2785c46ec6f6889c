"""The job's own fields around its pools' programs: display name, KMS key and labels; the pool count, output
directory, service account, network and TensorBoard of its spec; the output a registered model needs."""

from __future__ import annotations

import re
from collections.abc import Collection

# Job labels follow the Google Cloud label rules the infra config already checks: one spelling of them.
from infra.config import LABEL_KEY, LABEL_VALUE
from jobs.definition.body import is_gs, join, pools
from jobs.definition.compile import CompiledJob
from jobs.definition.errors import one_of, short
from jobs.definition.kinds import spec_field
from jobs.definition.model_registry import output_prefix
from jobs.definition.validate_pools import check_env, check_pool
from trainer.contract import WORKER_POOLS

SERVICE_ACCOUNT = re.compile(
    r"[a-z0-9-]+@[a-z0-9.-]+\.iam\.gserviceaccount\.com|[0-9]+-compute@developer\.gserviceaccount\.com"
)
TENSORBOARD = re.compile(r"projects/[^/]+/locations/([^/]+)/tensorboards/[^/]+")
# CustomJobSpec.network: "projects/{project}/global/networks/{network}, where {project} is a project number".
NETWORK = re.compile(r"projects/[0-9]+/global/networks/[^/]+")
# EncryptionSpec.kmsKeyName: the key "needs to be in the same region as where the compute resource is created"
KMS_KEY = re.compile(r"projects/[^/]+/locations/([^/]+)/keyRings/[^/]+/cryptoKeys/[^/]+")


def check_top(job: CompiledJob) -> None:
    name = job.body.get("displayName", "")
    if not name or len(name) > 128:
        raise job.error("displayName", f"must be 1-128 characters, got {len(name)}", "a shorter display name")
    key = (job.body.get("encryptionSpec") or {}).get("kmsKeyName")
    if key is not None:
        found = KMS_KEY.fullmatch(key)
        if not found:
            raise job.error(
                "encryptionSpec.kmsKeyName",
                f"{short(key)} is not a Cloud KMS key name",
                "projects/<p>/locations/<r>/keyRings/<ring>/cryptoKeys/<key>",
            )
        if found.group(1) != job.region:
            raise job.error(
                "encryptionSpec.kmsKeyName",
                f"the key is in {found.group(1)}, the job in {short(job.region, quote=False)}",
                f"a key in {short(job.region, quote=False)}",
            )
    labels = job.body.get("labels", {})
    if len(labels) > 64:
        raise job.error("labels", f"{len(labels)} labels", "at most 64 (one is used for submission_hash)")
    for key, value in labels.items():
        if not LABEL_KEY.fullmatch(key):
            raise job.error(
                join("labels", key),
                "invalid label key",
                "lowercase letters, digits, _ and -, starting with a letter, at most 63",
            )
        if not LABEL_VALUE.fullmatch(str(value)):
            raise job.error(
                join("labels", key),
                f"invalid label value {short(value)}",
                "lowercase letters, digits, _ and -, at most 63",
            )


def _check_service_account(job: CompiledJob, spec_path: str, accounts: Collection[str]) -> None:
    """A job runs as the environment's runtime account (or one its config lists): without one it would run as
    the Vertex AI Custom Code Service Agent, which the per-bucket grants of infra/ do not fence in."""
    where = join(spec_path, "serviceAccount")
    account = (job.body.get(spec_path) or {}).get("serviceAccount")
    runtime = next(iter(accounts), "")
    allowed = "${infra.runtime_service_account}" + (f" ({runtime})" if runtime else "")
    others = [a for a in accounts if a != runtime]
    if others:
        allowed += f", or one of job_service_accounts in the environment config: {one_of(others)}"
    if not account:
        raise job.error(
            where,
            "missing: the job would run as the Vertex AI Custom Code Service Agent",
            f"{allowed}; in the file or as --service-account EMAIL",
        )
    if not isinstance(account, str) or not SERVICE_ACCOUNT.fullmatch(account):
        raise job.error(where, f"{short(account)} is not a service account email", allowed)
    if account not in accounts:
        raise job.error(where, f"{short(account)} is not an account this environment runs jobs as", allowed)


def check_job_spec(job: CompiledJob, spec_path: str, accounts: Collection[str]) -> None:
    spec = job.body.get(spec_path)
    if not isinstance(spec, dict):
        raise job.error(spec_path, "missing", "a CustomJobSpec with workerPoolSpecs")
    raw_pools = spec.get("workerPoolSpecs")
    if not raw_pools:
        raise job.error(
            join(spec_path, "workerPoolSpecs"),
            "no worker pools",
            f"1-{len(WORKER_POOLS)} pools: chief, workers, parameter servers, evaluators",
        )
    if len(raw_pools) > len(WORKER_POOLS):
        raise job.error(
            join(spec_path, "workerPoolSpecs"),
            f"{len(raw_pools)} worker pools",
            f"at most {len(WORKER_POOLS)}: chief, workers, parameter servers, evaluators",
        )
    for pool in pools(spec, spec_path):
        check_pool(job, pool)
        check_env(job, pool)

    prefix = (spec.get("baseOutputDirectory") or {}).get("outputUriPrefix")
    if prefix is not None and not is_gs(prefix):
        raise job.error(
            join(spec_path, "baseOutputDirectory.outputUriPrefix"),
            f"{short(prefix)} is not a gs:// URI",
            "gs://<bucket>/<path>, e.g. ${infra.models_bucket}/<name>/${job.id}",
        )
    _check_service_account(job, spec_path, accounts)
    network = spec.get("network")
    if network is not None and not NETWORK.fullmatch(network):
        raise job.error(
            join(spec_path, "network"),
            f"{short(network)} is not a VPC network name",
            "projects/<project number>/global/networks/<name>",
        )
    tensorboard = spec.get("tensorboard")
    if tensorboard:
        found = TENSORBOARD.fullmatch(tensorboard)
        if not found:
            raise job.error(
                join(spec_path, "tensorboard"),
                f"{short(tensorboard)} is not a TensorBoard resource name",
                "projects/<p>/locations/<r>/tensorboards/<id>, i.e. ${infra.tensorboard}",
            )
        if found.group(1) != job.region:
            raise job.error(
                join(spec_path, "tensorboard"),
                f"TensorBoard is in {found.group(1)}, the job in {short(job.region, quote=False)}",
                f"a TensorBoard instance in {short(job.region, quote=False)}",
            )
        if prefix is None:
            raise job.error(
                join(spec_path, "baseOutputDirectory"),
                "TensorBoard upload needs an output directory",
                "baseOutputDirectory: {outputUriPrefix: gs://...}",
            )


def check_registered_output(job: CompiledJob) -> None:
    """A registered version is the model in AIP_MODEL_DIR, which Vertex AI sets from baseOutputDirectory."""
    path = join(spec_field(job.kind), "baseOutputDirectory", "outputUriPrefix")
    if not is_gs(output_prefix(job.body, job.kind)):
        raise job.error(
            path,
            "missing: the registry block registers the model Vertex AI writes under it (AIP_MODEL_DIR)",
            "a gs:// prefix with ${job.id}, e.g. ${infra.models_bucket}/<name>/${job.id}",
        )
