"""The TLS settings of requests to the API server, built again when a file they came from changes.

A CA bundle (a rotated cluster CA) or a client certificate read from files (the kubelet rotates its own, and a
kubeconfig may name it) is picked up without a restart: the files' identities are looked at before each request
(``common/watched_file.py``). Only the cluster's CA is trusted when one is given; the system's roots (what kubectl
uses without one) are loaded only when none is. A certificate and key given as data (``client-*-data``) are written
for OpenSSL to a private directory that is removed at once: OpenSSL reads them only from files.
"""

from __future__ import annotations

import ssl
import tempfile
from pathlib import Path

from collector.errors import ConfigError
from collector.kube.config import KubeConfig
from common.watched_file import WatchedFiles


class Tls:
    def __init__(self, config: KubeConfig) -> None:
        self._config = config
        self._files = WatchedFiles(
            None if config.ca_data else config.ca_file,
            None if config.cert_data else config.cert_file,
            None if config.key_data else config.key_file,
        )
        self._context: ssl.SSLContext | None = None

    def context(self) -> ssl.SSLContext:
        """The context for the next connection; ``ConfigError`` when a file cannot be used."""
        if self._context is None or self._files.changed():
            self._context = self._build()
        return self._context

    def _build(self) -> ssl.SSLContext:
        c = self._config
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies the server and its name
        try:
            if c.insecure:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            elif c.ca_data:
                context.load_verify_locations(cadata=c.ca_data.decode("ascii", "replace"))
            elif c.ca_file:
                context.load_verify_locations(cafile=str(c.ca_file))
            else:
                context.load_default_certs()
        except (ssl.SSLError, OSError, ValueError) as e:
            raise ConfigError(f"{c.origin}: its certificate authority cannot be used: {_why(e)}") from None
        if c.has_client_certificate:
            try:
                self._load_client_certificate(context)
            except (ssl.SSLError, OSError) as e:
                raise ConfigError(f"{c.origin}: its client certificate and key cannot be used: {_why(e)}") from None
        return context

    def _load_client_certificate(self, context: ssl.SSLContext) -> None:
        c = self._config
        if not (c.cert_data or c.key_data):
            context.load_cert_chain(str(c.cert_file), str(c.key_file))
            return
        with tempfile.TemporaryDirectory(prefix="gpuscale-kube-") as scratch:  # mode 0700
            cert = _write(Path(scratch) / "client.crt", c.cert_data) if c.cert_data else c.cert_file
            key = _write(Path(scratch) / "client.key", c.key_data) if c.key_data else c.key_file
            context.load_cert_chain(str(cert), str(key))


def _write(path: Path, data: bytes) -> Path:
    path.touch(mode=0o600)
    path.write_bytes(data)
    return path


def _why(error: Exception) -> str:
    if isinstance(error, OSError) and error.strerror:
        return f"{error.filename}: {error.strerror}" if error.filename else error.strerror
    return str(error) or type(error).__name__
