"""One platform stack per environment (`<env>`, what CI applies): everything a Vertex AI training job needs
that is not an identity or project IAM, built from `EnvironmentConfig`.

The service accounts, the workload identity federation and every project-level grant are in the environment's
bootstrap stack (`<env>-bootstrap`, infra/bootstrap.py), applied by a project administrator. This stack names
those accounts by their deterministic emails (infra.naming) and grants only on the resources it creates, only
to members `infra.naming.platform_member_allowed` accepts; `check_platform_members` refuses anything else at
synthesis.
"""

from __future__ import annotations

from infra.cdk import Construct, Fn, GcsBackend, TerraformOutput, TerraformResource, TerraformStack
from infra.config import EnvironmentConfig, member_id
from infra.constructs import Grant
from infra.constructs.alerts import AlertedSchedule, ScheduleAlerts, ScheduleAlertsProps
from infra.constructs.artifact_registry import ImageRegistry, ImageRegistryProps
from infra.constructs.billing_budget import budget_services
from infra.constructs.buckets import CACHE_PREFIX, BucketProps, FolderExpiry, TrainingBucket
from infra.constructs.cmek import CmekKey, CmekKeyProps
from infra.constructs.endpoint import Endpoint, EndpointProps
from infra.constructs.project_services import ProjectServices, ProjectServicesProps
from infra.constructs.scheduled_job import ScheduledJob, ScheduledJobProps
from infra.constructs.service_agents import ServiceAgents, ServiceAgentsProps
from infra.constructs.tensorboard import Tensorboard, TensorboardProps
from infra.google import GoogleProvider
from infra.naming import custom_role, platform_member_allowed, resource_names, service_account_email
from infra.outputs import (
    Output,
    endpoint_resource_names,
    planned_outputs,
    platform_outputs,
    tensorboard_prefix,
)
from infra.schedules import ScheduledRun, check_compiled

SERVICES = (
    "aiplatform.googleapis.com",
    "artifactregistry.googleapis.com",
    "cloudbuild.googleapis.com",  # builds of the trainer image (scripts/run_job.py, the deploy workflow)
    "logging.googleapis.com",
    "monitoring.googleapis.com",
    "storage.googleapis.com",
    "tpu.googleapis.com",
)
CMEK_SERVICES = ("cloudkms.googleapis.com",)
# Scheduled retraining (environments with `schedules:`): Cloud Scheduler starts Workflows executions.
SCHEDULE_SERVICES = (
    "cloudscheduler.googleapis.com",
    "workflowexecutions.googleapis.com",
    "workflows.googleapis.com",
)
# Granting Vertex AI access to a request-response logging dataset calls the BigQuery API with the deployer's
# credentials, which count against the deployer's project (this one) wherever the dataset lives.
LOGGING_SERVICES = ("bigquery.googleapis.com",)
# The workflow environment variable holding the TensorBoard's deployed name (infra.schedules).
TENSORBOARD_VAR = "TENSORBOARD"

OBJECT_VIEWER = "roles/storage.objectViewer"
# objectUser = read, list, create, overwrite (delete): what checkpointing and restoring needs.
OBJECT_USER = "roles/storage.objectUser"
# tf.io.gfile.makedirs (SavedModel export, checkpoints, TensorBoard writers) walks up to the bucket root when
# no parent prefix exists yet, e.g. a job's first write, and TensorFlow's GCS filesystem then reads the
# bucket's metadata (storage.buckets.get), which object roles lack: the write fails with 403.
# legacyBucketReader is buckets.get + objects.list on this bucket only, no object reads and no IAM.
BUCKET_METADATA_READER = "roles/storage.legacyBucketReader"
STATE_PREFIX = "infra"
# The IAM resources this stack may hold: grants on the resources it creates (or on the CMEK key), never on the
# project, a service account or a workload identity pool.
RESOURCE_IAM_TYPES = (
    "google_storage_bucket_iam_member",
    "google_artifact_registry_repository_iam_member",
    "google_kms_crypto_key_iam_member",
    "google_bigquery_dataset_iam_member",  # an endpoint's request-response logging dataset
)


class PlatformMemberError(ValueError):
    """A grant of the platform stack names a member it may not; str() is one line."""


def check_platform_members(stack: TerraformStack, cfg: EnvironmentConfig) -> int:
    """Refuse any IAM resource in `stack` that is not a resource-level grant, or whose member is not a literal
    that `platform_member_allowed` accepts; returns the number of grants checked."""
    checked = 0
    for node in stack.node.find_all():
        rtype = getattr(node, "terraform_resource_type", None)
        if not isinstance(node, TerraformResource) or rtype is None or "iam" not in rtype:
            continue
        where = f"{type(stack).__name__} {cfg.name!r}: {node.node.path}"
        if rtype not in RESOURCE_IAM_TYPES:
            raise PlatformMemberError(f"{where}: {rtype} is not allowed here; allowed: "
                                      f"{', '.join(RESOURCE_IAM_TYPES)} (the rest is the bootstrap stack's)")
        member = node.member_input  # what was configured (`.member` is a reference to the attribute)
        if not platform_member_allowed(cfg, member):
            raise PlatformMemberError(
                f"{where}: member {member!r} is not allowed; allowed: this project's service accounts "
                f"(...@{cfg.project_id}.iam.gserviceaccount.com), its Google service agents "
                f"(service-{cfg.project_number}@...) or a job_submitters member of {cfg.source or cfg.name}")
        checked += 1
    return checked


class PlatformStack(TerraformStack):
    """Stack `cfg.name` (`cdktn deploy dev`, what CI applies; apply `<env>-bootstrap` first). Resource names
    come from `infra.naming`, the same source as `infra.outputs.planned_outputs`, so outputs planned before a
    deploy match what the deploy creates."""

    def __init__(self, scope: Construct, cfg: EnvironmentConfig, schedules: tuple[ScheduledRun, ...] = ()
                 ) -> None:
        check_compiled(cfg, schedules)
        super().__init__(scope, cfg.name)
        self.cfg = cfg
        names = resource_names(cfg)
        labels = cfg.all_labels
        project = cfg.project_id

        GoogleProvider(self, "google", project=project, region=cfg.region)
        GcsBackend(self, bucket=cfg.state_bucket, prefix=f"{STATE_PREFIX}/{cfg.name}")

        services = ProjectServices(self, "services", ProjectServicesProps(
            project=project,
            services=tuple(s for s in SERVICES if s not in budget_services(cfg.billing_budget))
            + (CMEK_SERVICES if cfg.cmek else ())
            + (SCHEDULE_SERVICES if schedules else ())
            + (LOGGING_SERVICES if any(e.request_response_logging for e in cfg.endpoints) else ())))
        enabled = services.services
        agents = ServiceAgents(self, "service-agents", ServiceAgentsProps(
            project=project, project_number=cfg.project_number, with_storage_agent=cfg.cmek,
            depends_on=enabled))

        submitters = tuple((member_id(member), member) for member in cfg.job_submitters)
        # The bootstrap stack's accounts, by their deterministic emails: this stack creates no identity.
        runtime_member, builder_member, deployer_member, scheduler_member = (
            f"serviceAccount:{service_account_email(cfg, account_id)}"
            for account_id in (names.runtime_account_id, names.builder_account_id, names.deployer_account_id,
                               names.scheduler_account_id))

        encryption_deps = list(enabled)
        if cfg.kms_key:
            key = CmekKey(self, "cmek", CmekKeyProps(kms_key=cfg.kms_key, grants=(
                Grant("storage-agent", "roles/cloudkms.cryptoKeyEncrypterDecrypter", agents.storage),
                Grant("artifact-registry-agent", "roles/cloudkms.cryptoKeyEncrypterDecrypter",
                      agents.artifact_registry),
                Grant("vertex-ai-agent", "roles/cloudkms.cryptoKeyEncrypterDecrypter", agents.vertex_ai),
                *((Grant("workflows-agent", "roles/cloudkms.cryptoKeyEncrypterDecrypter", agents.workflows),)
                  if schedules else ()),
            ), depends_on=(agents.storage_lookup,)))
            encryption_deps += key.grants

        rt = ("runtime", runtime_member)
        vertex = ("vertex-ai-agent", agents.vertex_ai)
        tpus = (("cloud-tpu-agent", agents.cloud_tpu), ("cloud-tpu-vm-agent", agents.cloud_tpu_vm))
        # Scheduled runs that register their model read each version's metrics.json (the evaluation gate).
        registers = any(run.registration for run in schedules)
        registrars = (("schedule-runner", scheduler_member),) if registers else ()
        # bucket role -> (object viewers, object users, TensorFlow writers), each as (key, member)
        access = {
            # Jobs read data; the agents read it for TPU input pipelines and dataset/model imports.
            "data": ((rt, vertex, *tpus), submitters, ()),
            # Submitters and CI upload trainer packages and image build contexts; jobs, Vertex AI and the
            # image builder (it fetches the context) only read them.
            "staging": ((rt, vertex, ("builder", builder_member)),
                        (*submitters, ("ci-deployer", deployer_member)), ()),
            # Jobs (and TPU workers) write checkpoints, models and event files; people read results.
            "models": ((vertex, *submitters, *registrars), (rt, *tpus), (rt, *tpus)),
            "tensorboard-logs": ((vertex, *submitters), (rt, *tpus), (rt, *tpus)),
        }
        # What jobs write to the models bucket for themselves alone: the trainer's cached pre-training results
        # and, where the config names their folders, finished studies (infra/README.md, "Retention").
        expiring = {"models": (
            FolderExpiry((CACHE_PREFIX,), cfg.result_cache_retention_days),
            *((FolderExpiry(cfg.study_prefixes, cfg.study_retention_days),) if cfg.study_prefixes else ()),
        )}
        # Submitters may also hold (never write) objects in the models bucket: run_job.py holds a finished
        # study's best model past its folder's lifecycle. The role is the bootstrap stack's (ModelHolders).
        holder = custom_role(cfg, names.model_holder_role_id)
        holders = {"models": tuple(Grant(f"{key}-modelHolder", holder, m) for key, m in submitters)}
        self.buckets: dict[str, TrainingBucket] = {}
        for role, (viewers, users, tf_writers) in access.items():
            grants = (
                *(Grant(f"{key}-objectViewer", OBJECT_VIEWER, m) for key, m in viewers),
                *(Grant(f"{key}-objectUser", OBJECT_USER, m) for key, m in users),
                *(Grant(f"{key}-legacyBucketReader", BUCKET_METADATA_READER, m) for key, m in tf_writers),
                *holders.get(role, ()),
            )
            self.buckets[role] = TrainingBucket(self, f"{role}-bucket", BucketProps(
                name=names.bucket(role),
                project=project,
                # All buckets sit in the TensorBoard's region: Vertex AI TensorBoard reads logs regionally and
                # training reads data without cross-region egress.
                location=cfg.region,
                labels={**labels, "bucket-role": role},
                grants=grants,
                noncurrent_retention_days=cfg.noncurrent_retention_days,
                protect_from_destroy=role in ("data", "models"),
                expire_after_days=cfg.staging_retention_days if role == "staging" else None,
                expiring_folders=expiring.get(role, ()),
                kms_key=cfg.kms_key,
                depends_on=tuple(encryption_deps),
            ))

        self.registry = ImageRegistry(self, "registry", ImageRegistryProps(
            project=project,
            location=cfg.region,
            repository_id=names.registry_id,
            labels=labels,
            keep_versions=cfg.registry_keep_versions,
            untagged_retention_days=cfg.registry_untagged_retention_days,
            grants=(
                Grant("runtime-reader", "roles/artifactregistry.reader", runtime_member),
                Grant("vertex-ai-agent-reader", "roles/artifactregistry.reader", agents.vertex_ai),
                Grant("ci-deployer-writer", "roles/artifactregistry.writer", deployer_member),
                # The builder pushes the trainer images; submitters only check which tags exist (or pull).
                Grant("builder-writer", "roles/artifactregistry.writer", builder_member),
                *(Grant(f"{key}-reader", "roles/artifactregistry.reader", m) for key, m in submitters),
            ),
            kms_key=cfg.kms_key,
            depends_on=tuple(encryption_deps),
        ))
        self.tensorboard = Tensorboard(self, "vertex-ai-tensorboard", TensorboardProps(
            project=project, region=cfg.region, display_name=names.tensorboard_display_name, labels=labels,
            kms_key=cfg.kms_key, depends_on=tuple(encryption_deps),
        ))
        # Each with the id the plan reports; the Vertex AI agent's key grant (above) covers their CMEK.
        self.endpoints: dict[str, Endpoint] = {}
        endpoint_names = endpoint_resource_names(cfg)
        for endpoint in cfg.endpoints:
            logging = endpoint.request_response_logging
            self.endpoints[endpoint.name] = Endpoint(self, f"endpoint-{endpoint.name}", EndpointProps(
                project=project,
                region=cfg.region,
                endpoint_id=endpoint_names[endpoint.name].rsplit("/", 1)[1],
                display_name=endpoint.display_name,
                description=endpoint.description,
                labels={**labels, "endpoint": endpoint.name},
                kms_key=cfg.kms_key,
                logging_table=logging.bigquery_table if logging else None,
                sampling_rate=logging.sampling_rate if logging else 1.0,
                logs_writer=agents.vertex_ai,
                psc_projects=endpoint.private_service_connect,
                depends_on=tuple(encryption_deps),
            ))
        scheduler = service_account_email(cfg, names.scheduler_account_id)
        planned_tensorboard = planned_outputs(cfg)["tensorboard"]
        self.schedules = [
            ScheduledJob(self, f"schedule-{run.name}", ScheduledJobProps(
                project=project, name=names.schedule(run.name), run=run, service_account=scheduler,
                late_values=((planned_tensorboard, TENSORBOARD_VAR, self._tensorboard_name()),),
                labels=labels, kms_key=cfg.kms_key, depends_on=tuple(encryption_deps)))
            for run in schedules
        ]
        # Who hears of a failed or missing run (config `alerts`; none without schedules, or alerts: false).
        self.alerts: ScheduleAlerts | None = None
        if schedules and cfg.alerts:
            self.alerts = ScheduleAlerts(self, "schedule-alerts", ScheduleAlertsProps(
                project=project, display_name=f"{cfg.name_prefix} scheduled retraining",
                email=cfg.alerts.email, no_success_days=cfg.alerts.no_success_days,
                schedules=tuple(AlertedSchedule(name=run.name, workflow=names.schedule(run.name),
                                                region=run.region, job_file=run.job_file, paused=run.paused)
                                for run in schedules),
                labels=labels, depends_on=tuple(enabled)))
        self.members = {"runtime": runtime_member, "builder": builder_member, "deployer": deployer_member}
        self._add_outputs()
        # Last: every grant above exists now, and none may name anyone else.
        check_platform_members(self, cfg)

    def _tensorboard_name(self) -> str:
        # Vertex returns the name with the project *number*; rebuild it with the project id like the plan.
        return tensorboard_prefix(self.cfg) + Fn.element(Fn.split("/", self.tensorboard.tensorboard.name), 5)

    def _grants_naming(self, member: str) -> list[TerraformResource]:
        return [grant for grants in (*(b.grants for b in self.buckets.values()), self.registry.grants)
                for grant in grants if grant.member_input == member]

    def _output_value(self, output: Output, planned: str) -> str:
        """A reference where this stack creates the thing, so the deployed file reports what Terraform
        actually created; the bootstrap stack's accounts and provider as the literals it creates them with.
        The tests prove each value equals the planned one."""
        if output.kind == "bucket":
            return f"gs://{self.buckets[output.of].bucket.name}"
        if output.kind == "registry":
            uri = self.registry.repository.registry_uri
            return f"{uri}/{output.of}" if output.of else uri
        if output.kind == "tensorboard":
            return self._tensorboard_name()
        if output.kind == "endpoint":
            return planned.rsplit("/", 1)[0] + "/" + self.endpoints[output.of].endpoint.name
        return planned

    def _output_dependencies(self, output: Output) -> list[TerraformResource]:
        """The grants that make what the output names usable, so Terraform writes an output only once a
        consumer of it (a job, a build, the deploy workflow) can use the thing: the bucket the runtime writes,
        the repository the builder pushes to, and for an account of the bootstrap stack the grants this stack
        gives it.

        The project, its number and region are config literals that name no resource, so nothing holds them
        back; nor does the provider (the bootstrap stack's). The TensorBoard has no resource-level IAM:
        writing to it is the runtime's project-level aiplatform.user (bootstrap stack), and its CMEK grants
        already precede the instance itself. An endpoint waits for its logging grant (Vertex AI may write the
        sampled requests); who may call it is the bootstrap stack's project-level IAM.
        """
        if output.kind == "bucket":
            return list(self.buckets[output.of].grants)
        if output.kind == "registry":
            return list(self.registry.grants)
        if output.kind == "account":
            return self._grants_naming(self.members[output.of])
        if output.kind == "endpoint":
            return list(self.endpoints[output.of].grants)
        return []

    def _add_outputs(self) -> None:
        planned = planned_outputs(self.cfg)
        for output in platform_outputs(self.cfg):
            TerraformOutput(self, output.key, value=self._output_value(output, planned[output.key]),
                            description=f"{output.key} (see infra/outputs.py)",
                            depends_on=self._output_dependencies(output) or None)
