"""Which client certificates authenticate whom: the CA bundles and request-header names of Kubernetes' delegated
authentication, from flags or from ConfigMap ``kube-system/extension-apiserver-authentication``.

kube-apiserver publishes that ConfigMap for extension API servers: ``client-ca-file`` (PEM) signs
users' client certificates; ``requestheader-client-ca-file`` (PEM) signs the front proxy's certificate, whose
requests carry the user in headers named by ``requestheader-username-headers``, ``-group-headers`` and
``-extra-headers-prefix``, and ``requestheader-allowed-names`` (when not empty) lists the certificate names the front
proxy may use. The lists are JSON string arrays. As in Kubernetes, a CA given by flag wins over the ConfigMap, and the
request-header names come with the CA they belong to (flags with the flag's CA, the ConfigMap's with its CA).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509

from adapter.backends.auth_api import CONFIGMAP
from adapter.errors import ConfigError
from adapter.security.flags import default


@dataclass(frozen=True)
class AuthSettings:
    """The authentication and authorization flags of Kubernetes' generic API servers, with their defaults."""

    authentication_kubeconfig: Path | None = default("authentication-kubeconfig")
    authorization_kubeconfig: Path | None = default("authorization-kubeconfig")
    skip_lookup: bool = default("authentication-skip-lookup")
    token_cache_ttl: float = default("authentication-token-webhook-cache-ttl")
    authorized_ttl: float = default("authorization-webhook-cache-authorized-ttl")
    unauthorized_ttl: float = default("authorization-webhook-cache-unauthorized-ttl")
    always_allow_paths: tuple[str, ...] = default("authorization-always-allow-paths")
    client_ca_file: Path | None = default("client-ca-file")
    requestheader_client_ca_file: Path | None = default("requestheader-client-ca-file")
    requestheader_allowed_names: tuple[str, ...] = default("requestheader-allowed-names")
    requestheader_username_headers: tuple[str, ...] = default("requestheader-username-headers")
    requestheader_group_headers: tuple[str, ...] = default("requestheader-group-headers")
    requestheader_extra_headers_prefix: tuple[str, ...] = default("requestheader-extra-headers-prefix")

    @property
    def needs_configmap(self) -> bool:
        """Whether a CA is left for the ConfigMap to give (Kubernetes looks it up only then)."""
        return not self.skip_lookup and (self.client_ca_file is None or self.requestheader_client_ca_file is None)


@dataclass(frozen=True)
class CABundle:
    pem: bytes
    certs: tuple[x509.Certificate, ...]
    source: str


@dataclass(frozen=True)
class RequestHeaderConfig:
    ca: CABundle
    allowed_names: tuple[str, ...]
    username_headers: tuple[str, ...]
    group_headers: tuple[str, ...]
    extra_prefixes: tuple[str, ...]


@dataclass(frozen=True)
class AuthenticationConfig:
    client_ca: CABundle | None = None
    request_header: RequestHeaderConfig | None = None

    @property
    def bundles(self) -> list[CABundle]:
        header_ca = self.request_header.ca if self.request_header else None
        return [b for b in (self.client_ca, header_ca) if b is not None]

    def trusted_pem(self) -> bytes:
        """Every CA a client certificate may chain to, for the TLS handshake."""
        return b"".join(b.pem.strip() + b"\n" for b in self.bundles)


def parse_ca_bundle(pem: bytes, source: str) -> CABundle:
    try:
        certs = tuple(x509.load_pem_x509_certificates(pem))
    except ValueError as e:
        raise ConfigError(f"{source}: not a PEM certificate bundle ({e})") from e
    return CABundle(pem, certs, source)


def read_ca_file(path: Path, flag: str) -> CABundle:
    try:
        pem = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"{flag} {path}: cannot read it: {e.strerror}") from e
    return parse_ca_bundle(pem, f"{flag} {path}")


def _string_list(data: Mapping[str, str], key: str) -> tuple[str, ...]:
    text = data.get(key)
    if text is None or not text.strip():
        return ()
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{CONFIGMAP}: {key} is not a JSON array of strings ({e})") from e
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{CONFIGMAP}: {key} is not a JSON array of strings")
    return tuple(value)


def client_ca_from_configmap(data: Mapping[str, str]) -> CABundle | None:
    pem = data.get("client-ca-file")
    return parse_ca_bundle(pem.encode(), f"{CONFIGMAP}: client-ca-file") if pem and pem.strip() else None


def request_header_from_configmap(data: Mapping[str, str]) -> RequestHeaderConfig | None:
    pem = data.get("requestheader-client-ca-file")
    if not pem or not pem.strip():
        return None
    return RequestHeaderConfig(
        parse_ca_bundle(pem.encode(), f"{CONFIGMAP}: requestheader-client-ca-file"),
        _string_list(data, "requestheader-allowed-names"),
        _string_list(data, "requestheader-username-headers"),
        _string_list(data, "requestheader-group-headers"),
        _string_list(data, "requestheader-extra-headers-prefix"),
    )


def request_header_from_flags(settings: AuthSettings) -> RequestHeaderConfig | None:
    if settings.requestheader_client_ca_file is None:
        return None
    return RequestHeaderConfig(
        read_ca_file(settings.requestheader_client_ca_file, "--requestheader-client-ca-file"),
        settings.requestheader_allowed_names,
        settings.requestheader_username_headers,
        settings.requestheader_group_headers,
        settings.requestheader_extra_headers_prefix,
    )


def build_config(settings: AuthSettings, configmap: Mapping[str, str] | None) -> AuthenticationConfig:
    """Flags first, the ConfigMap's data (None: not looked up, or absent) for what the flags leave out."""
    client_ca = read_ca_file(settings.client_ca_file, "--client-ca-file") if settings.client_ca_file else None
    request_header = request_header_from_flags(settings)
    if configmap is not None:
        if client_ca is None:
            client_ca = client_ca_from_configmap(configmap)
        if request_header is None:
            request_header = request_header_from_configmap(configmap)
    return AuthenticationConfig(client_ca, request_header)
