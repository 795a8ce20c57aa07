"""Where the collector's Kubernetes API is and how the collector proves who it is: the pod's service account, or a
kubeconfig.

``KubeAccess`` says where to look, ``KubeConfig`` is what was found there. In a pod (``KUBERNETES_SERVICE_HOST``
set) with no kubeconfig named, the service account, as client-go's ``InClusterConfig`` reads it:
``https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`` (an IPv6 address in brackets), the CA and the token
files of the service account's directory. Anywhere else a kubeconfig: ``--kubeconfig``, else ``$KUBECONFIG``, else
``~/.kube/config`` (``kubeconfig.py``, which alone imports PyYAML: a collector in a pod never loads it).

Tokens and certificates are kept as files where they are files, never as copies: the kubelet rewrites a projected
service account token as it rotates (about hourly), and a kubeconfig's ``tokenFile`` or client certificate may
rotate the same way; ``credentials.py`` and ``tls.py`` read them again when they change.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from collector.errors import ConfigError

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")  # where the kubelet mounts it in a pod
DEFAULT_KUBECONFIG = "~/.kube/config"  # where kubectl looks when nothing names a kubeconfig


@dataclass(frozen=True)
class ExecPlugin:
    """A kubeconfig user's ``exec``: a command that prints an ExecCredential (``credentials.py`` runs it)."""

    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    api_version: str = "client.authentication.k8s.io/v1"
    provide_cluster_info: bool = False


@dataclass(frozen=True)
class KubeConfig:
    """How to reach one API server. ``*_data`` (PEM) wins over the file beside it, as in kubectl."""

    server: str  # scheme://host[:port][/path], without a trailing slash
    origin: str  # where it was found, for messages ("the pod's service account", "kubeconfig X, context Y")
    ca_file: Path | None = None
    ca_data: bytes | None = None
    cert_file: Path | None = None
    cert_data: bytes | None = None
    key_file: Path | None = None
    key_data: bytes | None = None
    token: str | None = None
    token_file: Path | None = None  # read again when it changes; wins over ``token``, as in client-go
    exec_plugin: ExecPlugin | None = None
    insecure: bool = False  # insecure-skip-tls-verify
    tls_server_name: str | None = None

    @property
    def has_client_certificate(self) -> bool:
        return bool(self.cert_data or self.cert_file)


@dataclass(frozen=True)
class KubeAccess:
    """Where to find the API: ``kubeconfig`` (``--kubeconfig``) when given, else in a pod its service account, else
    ``$KUBECONFIG`` or ``~/.kube/config``. ``service_account`` and ``environ`` are the pod's, unless a test or a
    benchmark stands in for them."""

    kubeconfig: str | None = None
    service_account: Path = SERVICE_ACCOUNT
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ, compare=False, repr=False)

    def config(self) -> KubeConfig:
        """Read now; ``ConfigError`` says what is missing or unusable."""
        in_cluster = self.kubeconfig is None and "KUBERNETES_SERVICE_HOST" in self.environ
        named = self.kubeconfig or self.environ.get("KUBECONFIG")
        default = self._default_kubeconfig()
        if not in_cluster and not named and not default.exists():
            raise ConfigError(
                f"no Kubernetes API configuration: not in a pod, no --kubeconfig, $KUBECONFIG unset and no "
                f"{DEFAULT_KUBECONFIG}"
            )
        try:
            if in_cluster:
                return in_cluster_config(self.environ, self.service_account)
            from collector.kube.kubeconfig import read_kubeconfig  # PyYAML: only here

            return read_kubeconfig(named or str(default))
        except ConfigError as e:
            raise ConfigError(
                f"no Kubernetes API configuration ({e}); in a pod the service account is used, elsewhere "
                "--kubeconfig or $KUBECONFIG"
            ) from None

    def _default_kubeconfig(self) -> Path:
        home = self.environ.get("HOME")
        return Path(home) / ".kube" / "config" if home else Path(DEFAULT_KUBECONFIG).expanduser()


def in_cluster_config(environ: Mapping[str, str], directory: Path) -> KubeConfig:
    """The service account of the pod: the API's address from the environment the kubelet sets, its files."""
    host, port = environ.get("KUBERNETES_SERVICE_HOST", ""), environ.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise ConfigError("in a pod, but KUBERNETES_SERVICE_HOST or KUBERNETES_SERVICE_PORT is empty")
    token, ca = directory / "token", directory / "ca.crt"
    for path in (token, ca):
        try:
            empty = not path.read_bytes().strip()
        except OSError as e:
            raise ConfigError(f"the service account's {path} cannot be read: {e.strerror or e}") from None
        if empty:
            raise ConfigError(f"the service account's {path} is empty")
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    return KubeConfig(f"https://{host}:{port}", "the pod's service account", ca_file=ca, token_file=token)
