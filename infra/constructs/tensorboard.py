from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from infra.cdk import Construct, TerraformResource
from infra.constructs import skip_unless_cmek
from infra.constructs import validation as v
from infra.google import VertexAiTensorboard


@dataclass(frozen=True)
class TensorboardProps:
    project: str
    region: str
    display_name: str
    labels: Mapping[str, str]
    kms_key: str | None = None
    depends_on: Sequence[TerraformResource] = ()

    def validate(self, where: str) -> None:
        v.check_project(where, self.project)
        v.check_region(where, "region", self.region)
        v.check_text(where, "display_name", self.display_name, 128)
        v.check_labels(where, self.labels)
        v.check_kms_key(where, self.kms_key, self.region)


class Tensorboard(Construct):
    """The Vertex AI TensorBoard instance jobs stream their logs to (same region as the log bucket).

    Access is project-level by design: Vertex AI TensorBoard has no resource-level IAM in the GA provider, and
    the runtime account's aiplatform.user covers writing experiments.
    """

    def __init__(self, scope: Construct, id_: str, props: TensorboardProps) -> None:
        v.validate_props(type(self), id_, props)  # first: bad props leave nothing half-built in the stack
        super().__init__(scope, id_)
        self.tensorboard = VertexAiTensorboard(
            self, "tensorboard",
            project=props.project,
            region=props.region,
            display_name=props.display_name,
            description="TensorBoard for Vertex AI training jobs (managed by infra/)",
            labels=dict(props.labels),
            encryption_spec={"kms_key_name": props.kms_key} if props.kms_key else None,
            depends_on=list(props.depends_on) or None,
        )
        skip_unless_cmek(self.tensorboard, props.kms_key, "CKV2_GCP_26")
