"""The one place that imports Google provider bindings (prebuilt `cdktn-provider-google`, GA provider only).

google-beta is deliberately absent: its bindings add ~500 MB and ~3 s per synth, and the only beta resource
this platform would want (`google_project_service_identity`) is replaced by building service agent emails from
the project number (see infra/constructs/service_agents.py).

Nested blocks inside lists must be built from these struct classes, not dicts: jsii converts a dict only where
a struct is passed directly, so snake_case keys inside list elements would be silently dropped.
"""

from cdktn_provider_google.artifact_registry_repository import (
    ArtifactRegistryRepository,
    ArtifactRegistryRepositoryCleanupPolicies,
    ArtifactRegistryRepositoryCleanupPoliciesCondition,
    ArtifactRegistryRepositoryCleanupPoliciesMostRecentVersions,
)
from cdktn_provider_google.artifact_registry_repository_iam_member import ArtifactRegistryRepositoryIamMember
from cdktn_provider_google.bigquery_dataset_iam_member import BigqueryDatasetIamMember
from cdktn_provider_google.billing_budget import (
    BillingBudget,
    BillingBudgetAllUpdatesRule,
    BillingBudgetAmount,
    BillingBudgetAmountSpecifiedAmount,
    BillingBudgetBudgetFilter,
    BillingBudgetThresholdRules,
)
from cdktn_provider_google.cloud_scheduler_job import (
    CloudSchedulerJob,
    CloudSchedulerJobHttpTarget,
    CloudSchedulerJobHttpTargetOauthToken,
    CloudSchedulerJobRetryConfig,
)
from cdktn_provider_google.data_google_storage_project_service_account import (
    DataGoogleStorageProjectServiceAccount,
)
from cdktn_provider_google.iam_workload_identity_pool import IamWorkloadIdentityPool
from cdktn_provider_google.iam_workload_identity_pool_provider import IamWorkloadIdentityPoolProvider
from cdktn_provider_google.kms_crypto_key_iam_member import KmsCryptoKeyIamMember
from cdktn_provider_google.monitoring_alert_policy import (
    MonitoringAlertPolicy,
    MonitoringAlertPolicyAlertStrategy,
    MonitoringAlertPolicyAlertStrategyNotificationRateLimit,
    MonitoringAlertPolicyConditions,
    MonitoringAlertPolicyConditionsConditionMatchedLog,
    MonitoringAlertPolicyConditionsConditionPrometheusQueryLanguage,
    MonitoringAlertPolicyConditionsConditionThreshold,
    MonitoringAlertPolicyConditionsConditionThresholdAggregations,
    MonitoringAlertPolicyConditionsConditionThresholdTrigger,
    MonitoringAlertPolicyDocumentation,
)
from cdktn_provider_google.monitoring_notification_channel import MonitoringNotificationChannel
from cdktn_provider_google.project_iam_audit_config import (
    ProjectIamAuditConfig,
    ProjectIamAuditConfigAuditLogConfig,
)
from cdktn_provider_google.project_iam_custom_role import ProjectIamCustomRole
from cdktn_provider_google.project_iam_member import ProjectIamMember
from cdktn_provider_google.project_service import ProjectService
from cdktn_provider_google.provider import GoogleProvider
from cdktn_provider_google.service_account import ServiceAccount
from cdktn_provider_google.service_account_iam_member import ServiceAccountIamMember
from cdktn_provider_google.storage_bucket import (
    StorageBucket,
    StorageBucketLifecycleRule,
    StorageBucketLifecycleRuleAction,
    StorageBucketLifecycleRuleCondition,
)
from cdktn_provider_google.storage_bucket_iam_member import StorageBucketIamMember
from cdktn_provider_google.vertex_ai_endpoint import (
    VertexAiEndpoint,
    VertexAiEndpointEncryptionSpec,
    VertexAiEndpointPredictRequestResponseLoggingConfig,
    VertexAiEndpointPredictRequestResponseLoggingConfigBigqueryDestination,
    VertexAiEndpointPrivateServiceConnectConfig,
)
from cdktn_provider_google.vertex_ai_tensorboard import VertexAiTensorboard
from cdktn_provider_google.workflows_workflow import WorkflowsWorkflow

__all__ = [
    "ArtifactRegistryRepository",
    "ArtifactRegistryRepositoryCleanupPolicies",
    "ArtifactRegistryRepositoryCleanupPoliciesCondition",
    "ArtifactRegistryRepositoryCleanupPoliciesMostRecentVersions",
    "ArtifactRegistryRepositoryIamMember",
    "BigqueryDatasetIamMember",
    "BillingBudget",
    "BillingBudgetAllUpdatesRule",
    "BillingBudgetAmount",
    "BillingBudgetAmountSpecifiedAmount",
    "BillingBudgetBudgetFilter",
    "BillingBudgetThresholdRules",
    "CloudSchedulerJob",
    "CloudSchedulerJobHttpTarget",
    "CloudSchedulerJobHttpTargetOauthToken",
    "CloudSchedulerJobRetryConfig",
    "DataGoogleStorageProjectServiceAccount",
    "GoogleProvider",
    "IamWorkloadIdentityPool",
    "IamWorkloadIdentityPoolProvider",
    "KmsCryptoKeyIamMember",
    "MonitoringAlertPolicy",
    "MonitoringAlertPolicyAlertStrategy",
    "MonitoringAlertPolicyAlertStrategyNotificationRateLimit",
    "MonitoringAlertPolicyConditions",
    "MonitoringAlertPolicyConditionsConditionMatchedLog",
    "MonitoringAlertPolicyConditionsConditionPrometheusQueryLanguage",
    "MonitoringAlertPolicyConditionsConditionThreshold",
    "MonitoringAlertPolicyConditionsConditionThresholdAggregations",
    "MonitoringAlertPolicyConditionsConditionThresholdTrigger",
    "MonitoringAlertPolicyDocumentation",
    "MonitoringNotificationChannel",
    "ProjectIamAuditConfig",
    "ProjectIamAuditConfigAuditLogConfig",
    "ProjectIamCustomRole",
    "ProjectIamMember",
    "ProjectService",
    "ServiceAccount",
    "ServiceAccountIamMember",
    "StorageBucket",
    "StorageBucketLifecycleRule",
    "StorageBucketLifecycleRuleAction",
    "StorageBucketLifecycleRuleCondition",
    "StorageBucketIamMember",
    "VertexAiEndpoint",
    "VertexAiEndpointEncryptionSpec",
    "VertexAiEndpointPredictRequestResponseLoggingConfig",
    "VertexAiEndpointPredictRequestResponseLoggingConfigBigqueryDestination",
    "VertexAiEndpointPrivateServiceConnectConfig",
    "VertexAiTensorboard",
    "WorkflowsWorkflow",
]
