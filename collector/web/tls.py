"""``tls_server_config`` as an ``SSLContext``, and what Python's ``ssl`` cannot do as Go's ``crypto/tls`` does.

Honoured as exporter-toolkit does: the certificate and key (files or inline), the client CAs (without them, the
system's CAs verify client certificates, as Go's nil ``ClientCAs`` does), ``min_version``/``max_version``
(TLS 1.0 and 1.1 need OpenSSL's security level 0, set only then), ``cipher_suites`` for TLS 1.0-1.2 (Go's default
list when none are given), ``prefer_server_cipher_suites``, HTTP/1.1 through ALPN. Not quite, each said in a note:
Python's ``ssl`` verifies every client certificate it asks for (OpenSSL's verify callback is not exposed), so
RequestClientCert acts as VerifyClientCertIfGiven and RequireAnyClientCert as RequireAndVerifyClientCert; it sets a
single curve, so of ``curve_preferences`` only the first is offered; TLS 1.3 suites are not chosen by a server in
either language.
"""

from __future__ import annotations

import logging
import ssl
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509

from collector.errors import ConfigError
from collector.web.config import CIPHERS, CURVES, TLSServerConfig
from common.log_limit import LogLimit, left_out

_VERSIONS = {"TLS10": "TLSv1", "TLS11": "TLSv1_1", "TLS12": "TLSv1_2", "TLS13": "TLSv1_3"}
_VERIFY = {
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_OPTIONAL,
    "RequireAnyClientCert": ssl.CERT_REQUIRED,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_UNVERIFIED = {"RequestClientCert": "VerifyClientCertIfGiven", "RequireAnyClientCert": "RequireAndVerifyClientCert"}

log = logging.getLogger(__name__)


class _LoggedRefusals(ssl.SSLObject):
    """A connection whose refused handshake is logged, as Go's HTTP server logs "TLS handshake error": asyncio
    keeps it to its debug log, and the client is not told why (the connection closes before the TLS alert)."""

    refusals = LogLimit()

    def do_handshake(self) -> None:
        try:
            super().do_handshake()
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise
        except ssl.SSLError as e:
            kind = str(e.reason or type(e).__name__)
            count = self.refusals.allow(kind)
            if count is not None:
                verify = getattr(e, "verify_message", None)
                why = f"client certificate: {verify}" if verify else kind.lower().replace("_", " ")
                log.warning("TLS handshake refused: %s%s", why, left_out(count, self.refusals.interval))
            raise


@dataclass(frozen=True)
class ServerTLS:
    context: ssl.SSLContext
    notes: tuple[str, ...]  # what is served otherwise than exporter-toolkit would, one sentence each


def server_tls(tls: TLSServerConfig, where: str) -> ServerTLS:
    """``where`` names the file in errors."""
    notes: list[str] = []
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.sslobject_class = _LoggedRefusals
    with warnings.catch_warnings():
        # Python deprecates TLS 1.0 and 1.1; the file asked for them
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx.minimum_version = getattr(ssl.TLSVersion, _VERSIONS[tls.min_version])
        ctx.maximum_version = getattr(ssl.TLSVersion, _VERSIONS[tls.max_version])
    _ciphers(ctx, tls, notes, where)
    if tls.prefer_server_cipher_suites:
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        ctx.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    if tls.curve_preferences:
        ctx.set_ecdh_curve(CURVES[tls.curve_preferences[0]])
        if len(tls.curve_preferences) > 1:
            notes.append(f"curve_preferences: Python's ssl sets one curve, so only {tls.curve_preferences[0]} is "
                         f"offered, not {', '.join(tls.curve_preferences[1:])}")  # fmt: skip
    ctx.set_alpn_protocols(["http/1.1"])
    _certificate(ctx, tls, where)
    _client_auth(ctx, tls, notes, where)
    return ServerTLS(ctx, tuple(notes))


def _ciphers(ctx: ssl.SSLContext, tls: TLSServerConfig, notes: list[str], where: str) -> None:
    names = tls.cipher_suites or tuple(n for n, o in CIPHERS.items() if o)
    openssl = [o for o in (CIPHERS[n] for n in names) if o]
    if len(openssl) < len(names):
        notes.append("cipher_suites: TLS 1.3 suites are not chosen by the server (nor are they in Go); the "
                     "client and OpenSSL agree on one of the three")  # fmt: skip
    if not openssl:
        if tls.max_version != "TLS13":
            raise ConfigError(f"{where}: tls_server_config.cipher_suites names no suite for TLS 1.2 or older, and "
                              f"max_version is {tls.max_version}")  # fmt: skip
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        notes.append("cipher_suites names only TLS 1.3 suites: TLS 1.2 and older cannot be agreed on")
        return
    # OpenSSL 3 refuses TLS 1.0 and 1.1 above security level 0; Go still speaks them when asked
    level = ":@SECLEVEL=0" if tls.min_version in ("TLS10", "TLS11") else ""
    try:
        ctx.set_ciphers(":".join(openssl) + level)
    except ssl.SSLError as e:
        raise ConfigError(f"{where}: tls_server_config.cipher_suites: this OpenSSL offers none of them: {e}") from e


def _read(path: Path, key: str, where: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as e:
        raise ConfigError(f"{where}: tls_server_config.{key} {path}: cannot be read: {e.strerror}") from e


def _certificate(ctx: ssl.SSLContext, tls: TLSServerConfig, where: str) -> None:
    cert = _read(tls.cert_file, "cert_file", where) if tls.cert_file else tls.cert.encode()
    key = _read(tls.key_file, "key_file", where) if tls.key_file else tls.key.encode()
    cert_name = f"cert_file {tls.cert_file}" if tls.cert_file else "cert"
    key_name = f"key_file {tls.key_file}" if tls.key_file else "key"
    # load_cert_chain reads only files: the pair goes through a private directory that is gone right after
    with tempfile.TemporaryDirectory(prefix="gpuscale-web-") as directory:
        cert_path, key_path = Path(directory, "cert.pem"), Path(directory, "key.pem")
        cert_path.write_bytes(cert)
        key_path.touch(mode=0o600)
        key_path.write_bytes(key)
        try:
            ctx.load_cert_chain(cert_path, key_path)
        except ssl.SSLError as e:
            raise ConfigError(
                f"{where}: tls_server_config {cert_name} and {key_name}: not a certificate and its key: {e}"
            ) from e


def _client_auth(ctx: ssl.SSLContext, tls: TLSServerConfig, notes: list[str], where: str) -> None:
    ctx.verify_mode = _VERIFY[tls.client_auth_type]
    if ctx.verify_mode == ssl.CERT_NONE:
        return
    if tls.client_auth_type in _UNVERIFIED:
        notes.append(f"client_auth_type {tls.client_auth_type} acts as {_UNVERIFIED[tls.client_auth_type]}: "
                     "Python's ssl verifies every client certificate it asks for, so one that the client CAs did "
                     "not sign is refused")  # fmt: skip
    if tls.client_ca_file:
        pem = _read(tls.client_ca_file, "client_ca_file", where).decode("ascii", "replace")
        key = f"client_ca_file {tls.client_ca_file}"
    elif tls.client_ca:
        pem, key = tls.client_ca, "client_ca"
    else:
        ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        return
    try:
        ctx.load_verify_locations(cadata=pem)
    except (ssl.SSLError, ValueError) as e:
        raise ConfigError(f"{where}: tls_server_config.{key}: holds no PEM certificate: {e}") from e


def subject_alt_names(der: bytes) -> list[str]:
    """A certificate's DNS, e-mail, IP and URI names, written as Go writes them for ``client_allowed_sans``."""
    cert = x509.load_der_x509_certificate(der)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [
        *san.get_values_for_type(x509.DNSName),
        *san.get_values_for_type(x509.RFC822Name),
        *(str(ip) for ip in san.get_values_for_type(x509.IPAddress)),
        *san.get_values_for_type(x509.UniformResourceIdentifier),
    ]
