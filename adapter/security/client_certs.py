"""Which CA signed a client certificate, and whom it names.

The TLS handshake verifies a client certificate against every CA a client may use (the client CA and the
request-header CA together), but Python's ``ssl`` does not say which one matched, and the answer decides whether the
certificate names a user or vouches for a front proxy's headers. So the leaf is verified again here, per CA bundle,
with ``cryptography``'s verifier. Its end-entity policy is relaxed (``permit_all``) because kubeadm's
front-proxy client certificate has no subjectAltName, which the Web PKI policy requires; the extended key usage is
then checked as Go's ``x509.Verify`` checks it for Kubernetes (``clientAuth``, or no EKU extension at all).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from dataclasses import dataclass

from cachetools import TTLCache
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from cryptography.x509.verification import ExtensionPolicy, PolicyBuilder, Store, VerificationError

from adapter.errors import CertificateRejected
from adapter.security.auth_config import CABundle

# a verdict is reused for a minute: certificates expire, and a connection may outlive one
VERDICT_SECONDS = 60.0


@dataclass(frozen=True)
class CertificateName:
    common_name: str
    organizations: tuple[str, ...]


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def name_of(cert: x509.Certificate) -> CertificateName:
    cn = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    orgs = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    return CertificateName(str(cn[0].value) if cn else "", tuple(str(o.value) for o in orgs))


def _check_usage(cert: x509.Certificate) -> None:
    try:
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return
    if ExtendedKeyUsageOID.CLIENT_AUTH not in usages and ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE not in usages:
        raise CertificateRejected("the certificate's extended key usage does not include client authentication")


class BundleVerifier:
    """Verifies leaves (DER) against one CA bundle; verdicts are cached by the leaf's bytes."""

    def __init__(self, bundle: CABundle, clock: Callable[[], datetime.datetime] = _now) -> None:
        self.bundle = bundle
        self.clock = clock
        self._store = Store(list(bundle.certs)) if bundle.certs else None
        self._verdicts: TTLCache[bytes, CertificateName | str] = TTLCache(1024, VERDICT_SECONDS)

    def verify(self, der: bytes) -> CertificateName:
        """The certificate's name; ``CertificateRejected`` when it does not chain to the bundle."""
        verdict = self._verdicts.get(der)
        if verdict is None:
            try:
                verdict = self._verify(der)
            except CertificateRejected as e:
                verdict = str(e)
            self._verdicts[der] = verdict
        if isinstance(verdict, str):
            raise CertificateRejected(verdict)
        return verdict

    def _verify(self, der: bytes) -> CertificateName:
        if self._store is None:
            raise CertificateRejected(f"{self.bundle.source} holds no certificate")
        try:
            leaf = x509.load_der_x509_certificate(der)
        except ValueError as e:
            raise CertificateRejected(f"unreadable certificate: {e}") from e
        verifier = (
            PolicyBuilder()
            .store(self._store)
            .time(self.clock())
            .extension_policies(ca_policy=ExtensionPolicy.webpki_defaults_ca(), ee_policy=ExtensionPolicy.permit_all())
            .build_client_verifier()
        )
        try:
            verifier.verify(leaf, [])
        except VerificationError as e:
            raise CertificateRejected(f"not signed by {self.bundle.source} ({e})") from e
        _check_usage(leaf)
        return name_of(leaf)
