from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from infra.cdk import Construct, TerraformResource
from infra.constructs import validation as v
from infra.constructs.schedule_runner import CUSTOM_ROLE_ID
from infra.google import ProjectIamCustomRole

# What `run_job.py` needs to place a temporary hold on a finished study's best model, so that its study
# folder's lifecycle rule spares it (infra/README.md, "Retention"): list the model folder, read each object's
# metadata and patch it. storage.objects.update changes metadata only (holds, content type, custom metadata;
# with uniform bucket-level access there are no ACLs): no create, no delete, no overwrite of an object's
# bytes. The narrowest predefined role with it, storage.objectUser, also creates and deletes.
HOLD_PERMISSIONS = ("storage.objects.get", "storage.objects.list", "storage.objects.update")
HOLDERS_DESCRIPTION = (
    "Hold objects in the models bucket past its lifecycle (granted on that bucket only, by the platform "
    "stack)"
)


@dataclass(frozen=True)
class ModelHoldersProps:
    project: str
    role_id: str
    depends_on: Sequence[TerraformResource] = ()

    def validate(self, where: str) -> None:
        v.check_project(where, self.project)
        v.check_str(where, "role_id", self.role_id, CUSTOM_ROLE_ID, "3-64 letters, digits, '_' or '.'")


class ModelHolders(Construct):
    """The custom project role with exactly HOLD_PERMISSIONS (bootstrap stack, when there are job submitters).

    Only the role lives here: defining a role is project-level IAM, which only the bootstrap stack's
    administrator applies. Its one grant, to the job submitters, is on the models bucket (the platform stack's
    TrainingBucket), so the role reaches no other bucket; the platform stack names it by its deterministic
    name (infra.naming.custom_role), which is why the bootstrap stack is applied first.
    """

    def __init__(self, scope: Construct, id_: str, props: ModelHoldersProps) -> None:
        v.validate_props(type(self), id_, props)  # first: bad props leave nothing half-built in the stack
        super().__init__(scope, id_)
        self.role = ProjectIamCustomRole(
            self, "role", project=props.project, role_id=props.role_id, title="Model holders",
            description=HOLDERS_DESCRIPTION, permissions=list(HOLD_PERMISSIONS),
            depends_on=list(props.depends_on) or None)
