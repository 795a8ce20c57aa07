"""The serving certificate: from files, or self-signed at start when none is given (as Kubernetes API servers do)."""

from __future__ import annotations

import datetime
import ipaddress
import logging
import os
import socket
import ssl
import tempfile
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from adapter.errors import ConfigError
from adapter.settings import Settings

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


def serving_files(settings: Settings) -> tuple[Path, Path]:
    """The certificate and key files to serve with, making a self-signed pair when none exist."""
    if settings.tls_cert_file and settings.tls_key_file:
        return settings.tls_cert_file, settings.tls_key_file
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


def server_context(settings: Settings) -> ssl.SSLContext | None:
    """None for plain HTTP (--insecure-serve-http)."""
    if settings.insecure_serve_http:
        return None
    cert, key = serving_files(settings)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(str(cert), str(key))
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"cannot load the serving certificate {cert} and key {key}: {e}") from e
    return ctx
