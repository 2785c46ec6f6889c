"""One stack per environment: everything a Vertex AI training job needs, built from `EnvironmentConfig`."""

from __future__ import annotations

from infra.cdk import Construct, Fn, GcsBackend, TerraformOutput, TerraformResource, TerraformStack
from infra.config import EnvironmentConfig, member_id
from infra.constructs import Grant
from infra.constructs.artifact_registry import ImageRegistry, ImageRegistryProps
from infra.constructs.buckets import BucketProps, TrainingBucket
from infra.constructs.ci_identity import (
    DEPLOYER_PROJECT_ROLES,
    SERVICE_ACCOUNT_ADMIN,
    GithubCiIdentity,
    GithubCiIdentityProps,
)
from infra.constructs.cmek import CmekKey, CmekKeyProps
from infra.constructs.image_builder import BUILDER_DESCRIPTION, BUILDER_PROJECT_ROLES, ImageBuilder
from infra.constructs.job_submitters import SUBMITTER_PROJECT_ROLES, JobSubmitters, JobSubmittersProps
from infra.constructs.project_services import ProjectServices, ProjectServicesProps
from infra.constructs.runtime_identity import RUNTIME_DESCRIPTION, RUNTIME_PROJECT_ROLES, RuntimeIdentity
from infra.constructs.service_agents import ServiceAgents, ServiceAgentsProps
from infra.constructs.service_identity import ServiceIdentityProps
from infra.constructs.tensorboard import Tensorboard, TensorboardProps
from infra.google import GoogleProvider
from infra.naming import resource_names
from infra.outputs import BUCKET_OUTPUTS, OUTPUT_KEYS, planned_outputs, tensorboard_prefix

SERVICES = (
    "aiplatform.googleapis.com",
    "artifactregistry.googleapis.com",
    "cloudbuild.googleapis.com",  # builds of the trainer image (scripts/run_job.py, the deploy workflow)
    "cloudresourcemanager.googleapis.com",
    "iam.googleapis.com",
    "iamcredentials.googleapis.com",
    "logging.googleapis.com",
    "monitoring.googleapis.com",
    "serviceusage.googleapis.com",
    "storage.googleapis.com",
    "sts.googleapis.com",  # token exchange for workload identity federation
    "tpu.googleapis.com",
)
CMEK_SERVICES = ("cloudkms.googleapis.com",)

SERVICE_ACCOUNT_USER = "roles/iam.serviceAccountUser"
OBJECT_VIEWER = "roles/storage.objectViewer"
# objectUser = read, list, create, overwrite (delete): what checkpointing and restoring needs.
OBJECT_USER = "roles/storage.objectUser"
# tf.io.gfile.makedirs (SavedModel export, checkpoints, TensorBoard writers) walks up to the bucket root when
# no parent prefix exists yet, e.g. a job's first write, and TensorFlow's GCS filesystem then reads the
# bucket's metadata (storage.buckets.get), which object roles lack: the write fails with 403.
# legacyBucketReader is buckets.get + objects.list on this bucket only, no object reads and no IAM.
BUCKET_METADATA_READER = "roles/storage.legacyBucketReader"
STATE_PREFIX = "infra"


class PlatformStack(TerraformStack):
    """Stack `cfg.name` (`cdktn deploy dev`). Resource names come from `infra.naming`, the same source as
    `infra.outputs.planned_outputs`, so outputs planned before a deploy match what the deploy creates."""

    def __init__(self, scope: Construct, cfg: EnvironmentConfig) -> None:
        super().__init__(scope, cfg.name)
        self.cfg = cfg
        names = resource_names(cfg)
        labels = cfg.all_labels
        project = cfg.project_id

        GoogleProvider(self, "google", project=project, region=cfg.region)
        GcsBackend(self, bucket=cfg.state_bucket, prefix=f"{STATE_PREFIX}/{cfg.name}")

        services = ProjectServices(self, "services", ProjectServicesProps(
            project=project, services=SERVICES + (CMEK_SERVICES if cfg.cmek else ())))
        enabled = services.services
        agents = ServiceAgents(self, "service-agents", ServiceAgentsProps(
            project=project, project_number=cfg.project_number, with_storage_agent=cfg.cmek,
            depends_on=enabled))

        submitters = tuple((member_id(member), member) for member in cfg.job_submitters)
        ci = GithubCiIdentity(self, "ci", GithubCiIdentityProps(
            project=project,
            pool_id=names.wif_pool_id,
            provider_id=names.wif_provider_id,
            repository=cfg.github.full_name,
            repository_id=cfg.github.repository_id,
            deploy_branch=cfg.github.deploy_branch,
            deployer_account_id=names.deployer_account_id,
            project_roles=DEPLOYER_PROJECT_ROLES,
            grantable_project_roles=(RUNTIME_PROJECT_ROLES + SUBMITTER_PROJECT_ROLES + DEPLOYER_PROJECT_ROLES
                                     + BUILDER_PROJECT_ROLES),
            depends_on=enabled,
        ))
        # Submitters and CI run jobs as the runtime account and builds as the builder account; nobody else may
        # act as either, and CI manages both (the per-account pattern of ci_identity.SERVICE_ACCOUNT_ADMIN).
        actors = (
            *(Grant(f"{key}-sa-user", SERVICE_ACCOUNT_USER, member)
              for key, member in (*submitters, ("ci-deployer", ci.member))),
            Grant("ci-deployer-sa-admin", SERVICE_ACCOUNT_ADMIN, ci.member),
        )
        runtime = RuntimeIdentity(self, "runtime", ServiceIdentityProps(
            project=project,
            account_id=names.runtime_account_id,
            display_name="Vertex AI training runtime",
            description=RUNTIME_DESCRIPTION,
            project_roles=RUNTIME_PROJECT_ROLES,
            account_grants=actors,
            depends_on=enabled,
        ))
        builder = ImageBuilder(self, "image-builder", ServiceIdentityProps(
            project=project,
            account_id=names.builder_account_id,
            display_name="Trainer image builder",
            description=BUILDER_DESCRIPTION,
            project_roles=BUILDER_PROJECT_ROLES,
            account_grants=actors,
            depends_on=enabled,
        ))
        JobSubmitters(self, "job-submitters", JobSubmittersProps(
            project=project, members=submitters, project_roles=SUBMITTER_PROJECT_ROLES,
            depends_on=tuple(enabled)))

        encryption_deps = list(enabled)
        if cfg.kms_key:
            key = CmekKey(self, "cmek", CmekKeyProps(kms_key=cfg.kms_key, grants=(
                Grant("storage-agent", "roles/cloudkms.cryptoKeyEncrypterDecrypter", agents.storage),
                Grant("artifact-registry-agent", "roles/cloudkms.cryptoKeyEncrypterDecrypter",
                      agents.artifact_registry),
                Grant("vertex-ai-agent", "roles/cloudkms.cryptoKeyEncrypterDecrypter", agents.vertex_ai),
            )))
            encryption_deps += key.grants

        rt = ("runtime", runtime.member)
        vertex = ("vertex-ai-agent", agents.vertex_ai)
        tpus = (("cloud-tpu-agent", agents.cloud_tpu), ("cloud-tpu-vm-agent", agents.cloud_tpu_vm))
        # bucket role -> (object viewers, object users, TensorFlow writers), each as (key, member)
        access = {
            # Jobs read data; the agents read it for TPU input pipelines and dataset/model imports.
            "data": ((rt, vertex, *tpus), submitters, ()),
            # Submitters and CI upload trainer packages and image build contexts; jobs, Vertex AI and the
            # image builder (it fetches the context) only read them.
            "staging": ((rt, vertex, ("builder", builder.member)),
                        (*submitters, ("ci-deployer", ci.member)), ()),
            # Jobs (and TPU workers) write checkpoints, models and event files; people read results.
            "models": ((vertex, *submitters), (rt, *tpus), (rt, *tpus)),
            "tensorboard-logs": ((vertex, *submitters), (rt, *tpus), (rt, *tpus)),
        }
        self.buckets: dict[str, TrainingBucket] = {}
        for role, (viewers, users, tf_writers) in access.items():
            grants = (
                *(Grant(f"{key}-objectViewer", OBJECT_VIEWER, m) for key, m in viewers),
                *(Grant(f"{key}-objectUser", OBJECT_USER, m) for key, m in users),
                *(Grant(f"{key}-legacyBucketReader", BUCKET_METADATA_READER, m) for key, m in tf_writers),
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
                Grant("runtime-reader", "roles/artifactregistry.reader", runtime.member),
                Grant("vertex-ai-agent-reader", "roles/artifactregistry.reader", agents.vertex_ai),
                Grant("ci-deployer-writer", "roles/artifactregistry.writer", ci.member),
                # The builder pushes the trainer images; submitters only check which tags exist (or pull).
                Grant("builder-writer", "roles/artifactregistry.writer", builder.member),
                *(Grant(f"{key}-reader", "roles/artifactregistry.reader", m) for key, m in submitters),
            ),
            kms_key=cfg.kms_key,
            depends_on=tuple(encryption_deps),
        ))
        self.tensorboard = Tensorboard(self, "vertex-ai-tensorboard", TensorboardProps(
            project=project, region=cfg.region, display_name=names.tensorboard_display_name, labels=labels,
            kms_key=cfg.kms_key, depends_on=tuple(encryption_deps),
        ))
        self.runtime = runtime
        self.builder = builder
        self.ci = ci
        self._add_outputs(runtime)

    def _output_dependencies(self) -> dict[str, list[TerraformResource]]:
        """Output key -> the grants that make what it names usable, so Terraform writes an output only once a
        consumer of it (a job, a build, the deploy workflow) can use the thing: the bucket the runtime writes,
        the account with its roles and its actAs grants, the repository the builder pushes to.

        The project, its number and region are config literals that name no resource, so nothing holds them
        back. The TensorBoard has no resource-level IAM: writing to it is the runtime's project-level
        aiplatform.user (its project grants), and its CMEK grants already precede the instance itself.
        """
        runtime, builder, ci = self.runtime, self.builder, self.ci
        registry = list(self.registry.grants)
        return {
            **{key: list(self.buckets[role].grants) for key, role in BUCKET_OUTPUTS.items()},
            "runtime_service_account": [*runtime.project_grants, *runtime.account_grants],
            "tensorboard": list(runtime.project_grants),
            "artifact_registry": registry,
            "trainer_image": registry,
            "builder_service_account": [*builder.project_grants, *builder.account_grants],
            # The provider is usable once its tokens may impersonate the deployer (workloadIdentityUser).
            "workload_identity_provider": list(ci.account_grants),
            "deployer_service_account": [*ci.project_grants, *ci.account_grants],
        }

    def _add_outputs(self, runtime: RuntimeIdentity) -> None:
        cfg = self.cfg
        planned = planned_outputs(cfg)
        # References (not literals) so the deployed file reports what Terraform actually created; the tests
        # prove each reference resolves to the planned value.
        values = {
            "project": planned["project"],
            "project_number": planned["project_number"],
            "region": planned["region"],
            **{key: f"gs://{self.buckets[role].bucket.name}" for key, role in BUCKET_OUTPUTS.items()},
            "runtime_service_account": runtime.email,
            # Vertex returns the name with the project *number*; rebuild it with the project id like the plan.
            "tensorboard": tensorboard_prefix(cfg)
            + Fn.element(Fn.split("/", self.tensorboard.tensorboard.name), 5),
            "artifact_registry": self.registry.repository.registry_uri,
            "trainer_image": f"{self.registry.repository.registry_uri}/trainer",
            "builder_service_account": self.builder.email,
            "workload_identity_provider": self.ci.provider.name,
            "deployer_service_account": self.ci.account.email,
        }
        assert tuple(values) == OUTPUT_KEYS, "stack outputs must be exactly infra.outputs.OUTPUT_KEYS"
        dependencies = self._output_dependencies()
        for key, value in values.items():
            TerraformOutput(self, key, value=value, description=f"{key} (see infra/outputs.py)",
                            depends_on=dependencies.get(key) or None)
