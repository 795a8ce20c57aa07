"""The serving certificate: from files (reloaded when they change), or self-signed at start when none is given, as
Kubernetes API servers do; TLS 1.2 or newer."""

from __future__ import annotations

import datetime
import ipaddress
import logging
import os
import socket
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from adapter.errors import ConfigError
from adapter.security.flags import default
from adapter.self_metrics import AdapterMetrics
from common.watched_file import WatchedFiles

log = logging.getLogger(__name__)

CERT_NAME = "apiserver.crt"
KEY_NAME = "apiserver.key"


def self_signed(names: list[str], days: int = 365) -> tuple[bytes, bytes]:
    """A certificate (PEM) valid for ``names`` (DNS names or IP addresses) that is its own CA, and its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"gpuscale-adapter@{int(now.timestamp())}")])
    alt: list[x509.GeneralName] = []
    for name in names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alt.append(x509.DNSName(name))
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        # its own CA, so clients can trust exactly this certificate (a kubeconfig's certificate-authority)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                key_encipherment=False,
                content_commitment=False,
                data_encipherment=False,
                key_agreement=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def _serving_names() -> list[str]:
    names = ["localhost", "127.0.0.1", "::1", socket.gethostname()]
    service, namespace = os.environ.get("GPUSCALE_ADAPTER_SERVICE_NAME"), os.environ.get("POD_NAMESPACE")
    if service and namespace:
        names += [f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]
    return names


@dataclass(frozen=True)
class TLSSettings:
    """The serving certificate's flags, as Kubernetes' generic API servers take them."""

    cert_dir: Path | None = default("cert-dir")
    cert_file: Path | None = default("tls-cert-file")
    key_file: Path | None = default("tls-private-key-file")
    min_version: ssl.TLSVersion = default("tls-min-version")
    cipher_suites: tuple[str, ...] = default("tls-cipher-suites")  # OpenSSL's names


def serving_files(settings: TLSSettings) -> tuple[Path, Path]:
    """The certificate and key files to serve with, making a self-signed pair when none exist."""
    if settings.cert_file and settings.key_file:
        return settings.cert_file, settings.key_file
    directory = settings.cert_dir or Path(tempfile.mkdtemp(prefix="gpuscale-adapter-"))
    cert, key = directory / CERT_NAME, directory / KEY_NAME
    if cert.exists() and key.exists():
        return cert, key
    try:
        directory.mkdir(parents=True, exist_ok=True)
        cert_pem, key_pem = self_signed(_serving_names())
        key.touch(mode=0o600)
        key.write_bytes(key_pem)
        cert.write_bytes(cert_pem)
    except OSError as e:
        raise ConfigError(f"--cert-dir {directory}: cannot write a self-signed certificate: {e.strerror}") from e
    log.info("no serving certificate given: made a self-signed one in %s", directory)
    return cert, key


class ServingTLS:
    """The server's TLS settings, changed without a restart: a new certificate on disk, or new client CAs.

    The server keeps one ``SSLContext`` (``context``); during each handshake its SNI callback hands the connection
    the newest one, so new connections get the new certificate and CAs while open ones keep theirs. Client
    certificates are requested (``CERT_OPTIONAL``) only when authentication is on, and verified against the client
    CAs; which CA signed one is decided per request (``client_certs.py``).
    """

    def __init__(
        self,
        cert: Path,
        key: Path,
        minimum: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2,
        request_certs: bool = True,
        ciphers: tuple[str, ...] = (),
    ) -> None:
        """``ciphers``: the TLS 1.2 suites offered, by OpenSSL's names (none: OpenSSL's default list)."""
        self.cert, self.key = cert, key
        self.minimum = minimum
        self.ciphers = ciphers
        self.request_certs = request_certs
        self.client_cas = b""
        self._files = WatchedFiles(cert, key)
        self.current = self._build()
        self.context = self._build()
        self.context.sni_callback = self._choose

    def _choose(self, ssl_object: ssl.SSLObject, server_name: str | None, context: ssl.SSLContext) -> None:
        ssl_object.context = self.current

    def _build(self) -> ssl.SSLContext:
        # a bare server context: create_default_context would also trust the system's public CAs for clients
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = self.minimum
        if self.ciphers:
            try:
                ctx.set_ciphers(":".join(self.ciphers))
            except ssl.SSLError as e:
                raise ConfigError(f"--tls-cipher-suites: none of {', '.join(self.ciphers)} is offered here") from e
        try:
            ctx.load_cert_chain(str(self.cert), str(self.key))
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(f"cannot load the serving certificate {self.cert} and key {self.key}: {e}") from e
        if self.request_certs:
            ctx.verify_mode = ssl.CERT_OPTIONAL
            if self.client_cas:
                ctx.load_verify_locations(cadata=self.client_cas.decode())
        return ctx

    def set_client_cas(self, pem: bytes) -> None:
        """Trust these CAs for client certificates from the next handshake on."""
        if pem == self.client_cas:
            return
        self.client_cas = pem
        try:
            self.current = self._build()
        except ConfigError as e:
            # the certificate files are being replaced right now: the reload that follows brings the CAs too
            log.error("client CAs not applied yet, the serving certificate does not load: %s", e)

    def reload_if_changed(self) -> str | None:
        """Load the certificate and key again when either file changed: ``success``, ``error`` (the pair in use
        stays), or None when nothing changed."""
        if not self._files.changed():
            return None
        try:
            self.current = self._build()
        except ConfigError as e:
            # a certificate and its key are rarely replaced in one step: the next change is tried again
            log.error("serving certificate not reloaded, keeping the one in use: %s", e)
            return "error"
        log.info("serving certificate %s reloaded", self.cert)
        return "success"

    def check(self, metrics: AdapterMetrics) -> None:
        """``reload_if_changed``, counted."""
        outcome = self.reload_if_changed()
        if outcome is not None:
            metrics.serving_cert_reloads.labels(outcome).inc()


def serving_tls(settings: TLSSettings, request_certs: bool) -> ServingTLS:
    """``request_certs``: ask callers for client certificates (off only with --insecure-disable-auth)."""
    cert, key = serving_files(settings)
    return ServingTLS(cert, key, settings.min_version, request_certs=request_certs, ciphers=settings.cipher_suites)
