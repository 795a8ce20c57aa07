"""The external scaler's TLS: the adapter's serving certificate and key, and the CA that KEDA's client certificate
must chain to when one is given, as gRPC's server credentials; files that change are taken from the next
handshake on, as the HTTP server takes them (``security/tls.py``)."""

from __future__ import annotations

import logging
import ssl
import threading
from pathlib import Path

import grpc

from adapter.errors import ConfigError
from common.watched_file import WatchedFiles

log = logging.getLogger(__name__)


class ScalerCertificates:
    """gRPC asks ``_fetch`` for a new configuration at each handshake, from its own threads; the event loop's look
    at the files (``reload_if_changed``) leaves one there when they changed and load, and a pair that does not load
    (a certificate and its key are rarely replaced in one step) is left for the next look."""

    def __init__(self, cert: Path, key: Path, client_ca: Path | None) -> None:
        self.cert, self.key, self.client_ca = cert, key, client_ca
        self._files = WatchedFiles(cert, key, client_ca)
        self._initial = self._configuration()
        self._fresh: grpc.ServerCertificateConfiguration | None = None
        self._lock = threading.Lock()

    @property
    def checks_clients(self) -> bool:
        return self.client_ca is not None

    def credentials(self) -> grpc.ServerCredentials:
        """With a client CA, a caller without a certificate that chains to it is refused in the handshake."""
        return grpc.dynamic_ssl_server_credentials(
            self._initial, self._fetch, require_client_authentication=self.checks_clients
        )

    def _fetch(self) -> grpc.ServerCertificateConfiguration:
        with self._lock:
            fresh, self._fresh = self._fresh, None
        return fresh  # type: ignore[return-value]  # None is gRPC's "keep the one in use"

    def _configuration(self) -> grpc.ServerCertificateConfiguration:
        """The files as gRPC takes them, once ``ssl`` loaded them: gRPC would only fail the handshakes."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            context.load_cert_chain(self.cert, self.key)
            cert, key = self.cert.read_bytes(), self.key.read_bytes()
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(f"cannot load the serving certificate {self.cert} and key {self.key}: {e}") from e
        client_ca = None
        if self.client_ca is not None:
            try:
                client_ca = self.client_ca.read_bytes()
                context.load_verify_locations(cadata=client_ca.decode())
            except (OSError, ssl.SSLError, UnicodeDecodeError, ValueError) as e:
                raise ConfigError(f"--keda-client-ca-file {self.client_ca}: not a PEM CA bundle: {e}") from e
        return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=client_ca)

    def reload_if_changed(self) -> None:
        if not self._files.changed():
            return
        try:
            configuration = self._configuration()
        except ConfigError as e:
            log.error("KEDA scaler's TLS files not reloaded, keeping those in use: %s", e)
            return
        with self._lock:
            self._fresh = configuration
        log.info("KEDA scaler's TLS files reloaded (%s)", ", ".join(str(p) for p in self._files.paths if p))
