from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from infra.cdk import Construct, TerraformResource
from infra.constructs import validation as v
from infra.google import ProjectIamAuditConfig, ProjectIamAuditConfigAuditLogConfig

LOG_TYPES = ("ADMIN_READ", "DATA_READ", "DATA_WRITE")


@dataclass(frozen=True)
class DataAccessLogsProps:
    project: str
    service: str
    log_types: tuple[str, ...] = ("DATA_READ", "DATA_WRITE")
    depends_on: Sequence[TerraformResource] = ()

    def validate(self, where: str) -> None:
        v.check_project(where, self.project)
        v.check_str(where, "service", self.service, v.SERVICE, "a name such as storage.googleapis.com")
        ok = isinstance(self.log_types, tuple) and bool(self.log_types)
        v.check(where, "log_types", self.log_types, ok, f"a non-empty tuple of {', '.join(LOG_TYPES)}")
        for i, log_type in enumerate(self.log_types):
            v.check(where, f"log_types[{i}]", log_type, log_type in LOG_TYPES, ", ".join(LOG_TYPES))
            v.check_once(where, "log_types", self.log_types, i, "log type")


class DataAccessLogs(Construct):
    """Cloud Audit Logs Data Access logs for one service of the project (for Cloud Storage: who read and wrote
    which object), the audit trail the buckets' CKV_GCP_62 skip relies on instead of legacy usage logs.

    `google_project_iam_audit_config` is authoritative for its service's audit config and edits the
    project's IAM policy (auditConfigs), so it lives in the bootstrap stack with the rest of the project IAM.
    No exempted members: nobody's access goes unlogged.
    """

    def __init__(self, scope: Construct, id_: str, props: DataAccessLogsProps) -> None:
        v.validate_props(type(self), id_, props)  # first: bad props leave nothing half-built in the stack
        super().__init__(scope, id_)
        self.audit_config = ProjectIamAuditConfig(
            self, "audit-config", project=props.project, service=props.service,
            audit_log_config=[ProjectIamAuditConfigAuditLogConfig(log_type=t) for t in props.log_types],
            depends_on=list(props.depends_on) or None,
        )
