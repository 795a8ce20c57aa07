"""The security package's part of the adapter's flags: the serving certificate (``TLSSettings``, section
``tls``) and delegated authentication and authorization as Kubernetes' generic API servers take them
(``AuthSettings``, section ``auth``)."""

from __future__ import annotations

import ssl

from adapter.backends.auth_api import CONFIGMAP
from common.cipher_suites import openssl_names
from common.flags import Flag, boolean, choice, defaults_of, duration, flag, optional_path, string_list

# the paths Kubernetes API servers answer without authorization (--authorization-always-allow-paths)
HEALTH_PATHS = ("/healthz", "/readyz", "/livez")

# Kubernetes' names; TLS 1.0 and 1.1 are offered only where the image's OpenSSL still allows them
_TLS_VERSIONS = {
    "VersionTLS10": ssl.TLSVersion.TLSv1,
    "VersionTLS11": ssl.TLSVersion.TLSv1_1,
    "VersionTLS12": ssl.TLSVersion.TLSv1_2,
    "VersionTLS13": ssl.TLSVersion.TLSv1_3,
}


def tls_version(text: str) -> ssl.TLSVersion:
    return _TLS_VERSIONS[choice(*_TLS_VERSIONS)(text)]


def allow_paths(text: str) -> tuple[str, ...]:
    paths = string_list(text)
    for p in paths:
        if not p.startswith("/") or "*" in p[:-1]:
            raise ValueError(f"{p!r} is not a path (a trailing * is allowed)")
    return paths


def cipher_suites(text: str) -> tuple[str, ...]:
    return openssl_names(string_list(text))


_TTL = duration(0, 3600, "0s to 1h")

TLS_FLAGS: tuple[Flag, ...] = (
    flag("--cert-dir", field="tls.cert_dir", parse=optional_path,
         help="directory for apiserver.crt/apiserver.key; a self-signed pair is made there if absent"),
    flag("--tls-cert-file", field="tls.cert_file", parse=optional_path,
         help="serving certificate (with --tls-private-key-file)"),
    flag("--tls-private-key-file", field="tls.key_file", parse=optional_path, help="serving certificate's key"),
    flag("--tls-min-version", field="tls.min_version", parse=tls_version, default="VersionTLS12",
         help="oldest TLS version accepted: VersionTLS10, VersionTLS11, VersionTLS12 or VersionTLS13"),
    flag("--tls-cipher-suites", field="tls.cipher_suites", parse=cipher_suites, default="", repeated=True,
         help="TLS 1.2 cipher suites offered, by Go's names, comma-separated (default: OpenSSL's choice); "
         "TLS 1.3 suites are not configurable"),
)  # fmt: skip
AUTH_FLAGS: tuple[Flag, ...] = (
    flag("--authentication-kubeconfig", field="auth.authentication_kubeconfig", parse=optional_path,
         help="kubeconfig for the ConfigMap and TokenReviews (default: in-cluster)"),
    flag("--authorization-kubeconfig", field="auth.authorization_kubeconfig", parse=optional_path,
         help="kubeconfig for SubjectAccessReviews (default: in-cluster)"),
    flag("--authentication-skip-lookup", field="auth.skip_lookup", parse=boolean, default="false", switch=True,
         help=f"do not read the {CONFIGMAP}"),
    flag("--authentication-token-webhook-cache-ttl", field="auth.token_cache_ttl", parse=_TTL, default="10s",
         help="how long TokenReview answers are reused, 0s to 1h"),
    flag("--authorization-webhook-cache-authorized-ttl", field="auth.authorized_ttl", parse=_TTL,
         default="10s", help="how long allowed reviews are reused, 0s to 1h"),
    flag("--authorization-webhook-cache-unauthorized-ttl", field="auth.unauthorized_ttl", parse=_TTL,
         default="10s", help="how long denied reviews are reused, 0s to 1h"),
    flag("--authorization-always-allow-paths", field="auth.always_allow_paths", parse=allow_paths,
         default=",".join(HEALTH_PATHS), repeated=True,
         help="paths served without authorization; comma-separated, repeatable"),
    flag("--client-ca-file", field="auth.client_ca_file", parse=optional_path,
         help=f"CA bundle for client certificates (default: from the {CONFIGMAP})"),
    flag("--requestheader-client-ca-file", field="auth.requestheader_client_ca_file", parse=optional_path,
         help=f"CA bundle for the front proxy (default: from the {CONFIGMAP})"),
    flag("--requestheader-allowed-names", field="auth.requestheader_allowed_names", parse=string_list,
         default="", repeated=True, help="certificate names the front proxy may use; comma-separated"),
    flag("--requestheader-username-headers", field="auth.requestheader_username_headers", parse=string_list,
         default="X-Remote-User", repeated=True, help="headers that carry the user name"),
    flag("--requestheader-group-headers", field="auth.requestheader_group_headers", parse=string_list,
         default="X-Remote-Group", repeated=True, help="headers that carry the groups"),
    flag("--requestheader-extra-headers-prefix", field="auth.requestheader_extra_headers_prefix",
         parse=string_list, default="X-Remote-Extra-", repeated=True,
         help="prefixes of headers that carry extra user information"),
)  # fmt: skip
default = defaults_of(TLS_FLAGS + AUTH_FLAGS)
