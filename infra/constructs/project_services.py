from __future__ import annotations

from dataclasses import dataclass

from infra.cdk import Construct
from infra.constructs import validation as v
from infra.google import ProjectService


@dataclass(frozen=True)
class ProjectServicesProps:
    project: str
    services: tuple[str, ...]

    def validate(self, where: str) -> None:
        v.check_project(where, self.project)
        v.check(where, "services", self.services, isinstance(self.services, tuple) and bool(self.services),
                "a non-empty tuple of service names")
        for i, service in enumerate(self.services):
            v.check_str(where, f"services[{i}]", service, v.SERVICE, "a name such as storage.googleapis.com")
            # Each service's construct id is its first label.
            v.check_once(where, "services", self.services, i, "service")


class ProjectServices(Construct):
    """Enables every API the platform uses.

    `disable_on_destroy` is false: destroying this stack must never switch off an API that other workloads in
    the project (or the state bucket) depend on. Enabling aiplatform.googleapis.com and tpu.googleapis.com is
    also what creates their service agents, which the grants in this stack refer to.
    """

    def __init__(self, scope: Construct, id_: str, props: ProjectServicesProps) -> None:
        v.validate_props(type(self), id_, props)  # first: bad props leave nothing half-built in the stack
        super().__init__(scope, id_)
        self.services = [
            ProjectService(self, service.split(".", 1)[0], project=props.project, service=service,
                           disable_on_destroy=False, disable_dependent_services=False)
            for service in props.services
        ]
