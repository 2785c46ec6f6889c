from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from infra.cdk import Construct, ITerraformDependable
from infra.config import BIGQUERY_TABLE, PROJECT_ID
from infra.constructs import checkov_skip, skip_unless_cmek
from infra.constructs import validation as v
from infra.google import (
    BigqueryDatasetIamMember,
    VertexAiEndpoint,
    VertexAiEndpointEncryptionSpec,
    VertexAiEndpointPredictRequestResponseLoggingConfig,
    VertexAiEndpointPredictRequestResponseLoggingConfigBigqueryDestination,
    VertexAiEndpointPrivateServiceConnectConfig,
)

# `google_vertex_ai_endpoint.name`: digits only, at most 10, no leading zero.
ENDPOINT_ID = re.compile(r"^[1-9][0-9]{0,9}$")
# Vertex AI writes the sampled requests as its service agent: it creates the table in the dataset and streams
# rows into it (tables.create, updateData), which dataEditor on that one dataset holds.
LOGS_WRITER = "roles/bigquery.dataEditor"
# CKV2_GCP_33 passes only VPC peering (`network`), which the provider and Vertex AI make exclusive with
# Private Service Connect.
PSC_REASON = ("Private through Private Service Connect (private_service_connect_config, allowlisted projects "
              "only); the check recognises VPC peering's `network` alone, which excludes PSC.")
PUBLIC_REASON = ("Reached through the Vertex AI API by config (no private_service_connect): every call is "
                 "authorised by IAM (aiplatform.endpoints.predict); set private_service_connect to make it "
                 "private.")


@dataclass(frozen=True)
class EndpointProps:
    project: str
    region: str
    endpoint_id: str
    display_name: str
    description: str
    labels: Mapping[str, str]
    kms_key: str | None = None
    # Request-response logging: bq://PROJECT.DATASET.TABLE and the fraction of requests logged.
    logging_table: str | None = None
    sampling_rate: float = 1.0
    # Who writes the log rows (the Vertex AI service agent's member), granted on the dataset.
    logs_writer: str = ""
    # Private Service Connect: the projects allowed to connect; None keeps the public API endpoint.
    psc_projects: tuple[str, ...] | None = None
    depends_on: Sequence[ITerraformDependable] = ()

    def validate(self, where: str) -> None:
        v.check_project(where, self.project)
        v.check_region(where, "region", self.region)
        v.check_str(where, "endpoint_id", self.endpoint_id, ENDPOINT_ID,
                    "1-10 digits without a leading zero (the provider's endpoint name)")
        v.check_text(where, "display_name", self.display_name, 128)
        v.check(where, "description", self.description, isinstance(self.description, str)
                and len(self.description) <= 2048 and "\n" not in self.description, "one line, <= 2048 chars")
        v.check_labels(where, self.labels)
        v.check_kms_key(where, self.kms_key, self.region)
        if self.logging_table is not None:
            v.check_str(where, "logging_table", self.logging_table, BIGQUERY_TABLE, "bq://PROJECT.DATASET.TABLE")
            rate = self.sampling_rate
            v.check(where, "sampling_rate", rate, isinstance(rate, float) and 0 < rate <= 1,
                    "a float greater than 0 and at most 1")
            v.check_member(where, "logs_writer", self.logs_writer)
        if self.psc_projects is not None:
            v.check(where, "psc_projects", self.psc_projects, isinstance(self.psc_projects, tuple)
                    and len(self.psc_projects) > 0, "a non-empty tuple of project ids, or None")
            for i, project in enumerate(self.psc_projects):
                v.check_str(where, f"psc_projects[{i}]", project, PROJECT_ID, "a project id")
                v.check_once(where, "psc_projects", self.psc_projects, i, "project")


class Endpoint(Construct):
    """A Vertex AI endpoint models are deployed to, with the id the config plans (infra.naming.endpoint_id).

    No IAM lives on the endpoint itself: the GA provider has no endpoint IAM resource (only google-beta's
    google_vertex_ai_endpoint_iam_*), and Vertex AI does not evaluate resource-name IAM conditions, so who may
    predict is a project-level custom role of the bootstrap stack (EndpointPredictors). Deploying to it is the
    deployers' and job submitters' aiplatform.user. What the endpoint itself needs is here: with logging, the
    Vertex AI agent may write to the logging dataset (granted before the endpoint is created).
    """

    def __init__(self, scope: Construct, id_: str, props: EndpointProps) -> None:
        v.validate_props(type(self), id_, props)  # first: bad props leave nothing half-built in the stack
        super().__init__(scope, id_)
        self.grants: list[BigqueryDatasetIamMember] = []
        logging = None
        if props.logging_table is not None:
            project, dataset = BIGQUERY_TABLE.fullmatch(props.logging_table).group("project", "dataset")
            # Additive, on the dataset only: the table does not exist until Vertex AI creates it.
            self.grants.append(BigqueryDatasetIamMember(
                self, "logs-writer", project=project, dataset_id=dataset, role=LOGS_WRITER,
                member=props.logs_writer, depends_on=list(props.depends_on) or None))
            logging = VertexAiEndpointPredictRequestResponseLoggingConfig(
                enabled=True, sampling_rate=props.sampling_rate,
                bigquery_destination=VertexAiEndpointPredictRequestResponseLoggingConfigBigqueryDestination(
                    output_uri=props.logging_table))
        self.endpoint = VertexAiEndpoint(
            self, "endpoint",
            name=props.endpoint_id,
            project=props.project,
            location=props.region,
            region=props.region,
            display_name=props.display_name,
            description=props.description or None,
            labels=dict(props.labels),
            encryption_spec=(VertexAiEndpointEncryptionSpec(kms_key_name=props.kms_key)
                             if props.kms_key else None),
            predict_request_response_logging_config=logging,
            private_service_connect_config=VertexAiEndpointPrivateServiceConnectConfig(
                enable_private_service_connect=True, project_allowlist=list(props.psc_projects))
            if props.psc_projects is not None else None,
            depends_on=[*props.depends_on, *self.grants] or None,
        )
        skip_unless_cmek(self.endpoint, props.kms_key, "CKV2_GCP_24")
        checkov_skip(self.endpoint, "CKV2_GCP_33",
                     PSC_REASON if props.psc_projects is not None else PUBLIC_REASON)
