from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from infra.cdk import Construct, ITerraformDependable
from infra.config import KMS_KEY
from infra.constructs import Grant
from infra.constructs import validation as v
from infra.google import KmsCryptoKeyIamMember


@dataclass(frozen=True)
class CmekKeyProps:
    kms_key: str
    grants: tuple[Grant, ...]
    # E.g. the lookup that materialises the Cloud Storage agent before it is granted anything.
    depends_on: Sequence[ITerraformDependable] = ()

    def validate(self, where: str) -> None:
        v.check(where, "kms_key", self.kms_key, v.matches(KMS_KEY, self.kms_key),
                "projects/P/locations/L/keyRings/R/cryptoKeys/K")
        v.check(where, "grants", self.grants, bool(self.grants), "at least one grant (else: no CmekKey)")
        v.check_grants(where, self.grants)


class CmekKey(Construct):
    """Grants on an existing customer-managed key (created and rotated by the security team, not this stack).

    The service agents that encrypt on our behalf need `cryptoKeyEncrypterDecrypter` *before* the encrypted
    resources are created, so buckets, registry and TensorBoard depend on `self.grants`.
    Whoever applies the stack needs cloudkms.cryptoKeys.getIamPolicy/setIamPolicy on the key, granted by the
    key's owners (a custom role; roles/cloudkms.admin also works but may destroy key versions), so the stack
    does not grant the CI deployer anything on a key it does not own.
    """

    def __init__(self, scope: Construct, id_: str, props: CmekKeyProps) -> None:
        v.validate_props(type(self), id_, props)  # first: bad props leave nothing half-built in the stack
        super().__init__(scope, id_)
        self.grants = [
            KmsCryptoKeyIamMember(self, grant.key, crypto_key_id=props.kms_key, role=grant.role,
                                  member=grant.member, depends_on=list(props.depends_on) or None)
            for grant in props.grants
        ]
