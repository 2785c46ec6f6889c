from __future__ import annotations

from dataclasses import dataclass

from infra.cdk import Construct
from infra.constructs import Grant
from infra.google import KmsCryptoKeyIamMember


@dataclass(frozen=True)
class CmekKeyProps:
    kms_key: str
    grants: tuple[Grant, ...]


class CmekKey(Construct):
    """Grants on an existing customer-managed key (created and rotated by the security team, not this stack).

    The service agents that encrypt on our behalf need `cryptoKeyEncrypterDecrypter` *before* the encrypted
    resources are created, so buckets, registry and TensorBoard depend on `self.grants`.
    Whoever applies the stack needs cloudkms.cryptoKeys.getIamPolicy/setIamPolicy on the key, granted by the
    key's owners (a custom role; roles/cloudkms.admin also works but may destroy key versions), so the stack
    does not grant the CI deployer anything on a key it does not own.
    """

    def __init__(self, scope: Construct, id_: str, props: CmekKeyProps) -> None:
        super().__init__(scope, id_)
        self.grants = [
            KmsCryptoKeyIamMember(self, grant.key, crypto_key_id=props.kms_key, role=grant.role,
                                  member=grant.member)
            for grant in props.grants
        ]
