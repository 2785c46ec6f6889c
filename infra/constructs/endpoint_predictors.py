from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from infra.cdk import Construct, TerraformResource
from infra.constructs import validation as v
from infra.constructs.schedule_runner import CUSTOM_ROLE_ID
from infra.google import ProjectIamCustomRole, ProjectIamMember

# Calling an endpoint (predict, rawPredict and their streaming and direct forms all check
# aiplatform.endpoints.predict) and reading it (the Python SDK's aiplatform.Endpoint(name) gets it first).
# Vertex AI's narrowest predefined role that predicts, aiplatform.user, also creates jobs, endpoints, datasets
# and deploys models; explain (aiplatform.endpoints.explain) is left out on purpose.
PREDICT_PERMISSIONS = ("aiplatform.endpoints.get", "aiplatform.endpoints.predict")
PREDICTORS_DESCRIPTION = "Call the project's Vertex AI endpoints (managed by infra/, endpoints.*.predictors)"


@dataclass(frozen=True)
class EndpointPredictorsProps:
    project: str
    role_id: str
    # (construct key, IAM member) pairs; keyed by member so reordering the config lists replaces nothing.
    members: tuple[tuple[str, str], ...]
    depends_on: Sequence[TerraformResource] = ()

    def validate(self, where: str) -> None:
        v.check_project(where, self.project)
        v.check_str(where, "role_id", self.role_id, CUSTOM_ROLE_ID, "3-64 letters, digits, '_' or '.'")
        v.check(where, "members", self.members, isinstance(self.members, tuple) and len(self.members) > 0,
                "a non-empty tuple of (key, member)")
        for i, (key, member) in enumerate(self.members):
            v.check_key(where, f"members[{i}].key", key)
            v.check(where, f"members[{i}].key", key, key != "role", "a key other than 'role' (the role's id)")
            v.check_member(where, f"members[{i}].member", member)
        keys = tuple(key for key, _ in self.members)
        for i in range(len(keys)):
            v.check_once(where, "members", keys, i, "key")


class EndpointPredictors(Construct):
    """Who may call the environment's endpoints (`endpoints.<name>.predictors` of every endpoint): a custom
    project role with exactly PREDICT_PERMISSIONS, granted at project level (bootstrap stack).

    Project level because nothing narrower exists in the GA provider: endpoint IAM
    (google_vertex_ai_endpoint_iam_member) is google-beta only, and Vertex AI does not evaluate IAM conditions
    on resource names. A predictor of one endpoint may therefore call every endpoint of the project.
    """

    def __init__(self, scope: Construct, id_: str, props: EndpointPredictorsProps) -> None:
        v.validate_props(type(self), id_, props)  # first: bad props leave nothing half-built in the stack
        super().__init__(scope, id_)
        self.role = ProjectIamCustomRole(
            self, "role", project=props.project, role_id=props.role_id, title="Vertex AI endpoint predictors",
            description=PREDICTORS_DESCRIPTION, permissions=list(PREDICT_PERMISSIONS),
            depends_on=list(props.depends_on) or None)
        self.grants = [ProjectIamMember(self, key, project=props.project, role=self.role.name, member=member)
                       for key, member in props.members]
