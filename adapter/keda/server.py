"""The gRPC server of KEDA's external scaler, on the adapter's event loop (``grpc.aio``), started and stopped with
the app (``adapter/app.py``).

Its connections are bounded as the HTTP port's are (``common/listener.py``): at most ``max_connections`` open (gRPC
closes one more as it is accepted, before any TLS work) and the handshake, TLS and HTTP/2's preface and SETTINGS,
within ``handshake_timeout``; without them 10,000 connections that never sent a ClientHello held 312 MiB, and 568
as they closed. Calls are bounded per connection (HTTP/2's SETTINGS_MAX_CONCURRENT_STREAMS) and in all
(``maximum_concurrent_rpcs``), and a call's request message must follow its headers within ``header_timeout``
(``admission.py``).
"""

from __future__ import annotations

import logging

import grpc

from adapter.errors import ConfigError
from adapter.keda.admission import Admission
from adapter.keda.credentials import ScalerCertificates
from adapter.keda.handlers import add_scaler
from adapter.keda.scaler import Scaler
from common.listener import Limits

log = logging.getLogger(__name__)

# KEDA's calls are a ScaledObjectRef of a few hundred bytes: a larger one is refused before it is read
MAX_REQUEST_BYTES = 64 * 1024
UNARY_CALLS = 1000
# what a unary call in flight at shutdown gets to finish; the streams end at once (``Scaler.close``)
STOP_GRACE_SECONDS = 2.0
OPEN_WARNING = (
    "KEDA's external scaler on {address} takes calls without client certificates{plain}: anyone who reaches the "
    "port can read the metrics of every namespace through it (give --keda-client-ca-file, and KEDA's "
    "TriggerAuthentication the client certificate)"
)


class ScalerServer:
    def __init__(
        self,
        address: str,
        scaler: Scaler,
        certificates: ScalerCertificates | None,
        unused_client_ca: str = "",
        *,
        allowed_names: tuple[str, ...] = (),
        limits: Limits | None = None,
    ) -> None:
        """``certificates``: None serves plain gRPC (--insecure-serve-http); ``unused_client_ca``: the
        --keda-client-ca-file given all the same, named in the start's warning; ``allowed_names``: the names a
        client certificate must carry one of (empty: any); ``limits``: the HTTP port's."""
        self.address = address
        self.scaler = scaler
        self.certificates = certificates
        self._unused_client_ca = unused_client_ca
        self.port = 0  # the port bound, once started (the address may say 0)
        # every call the scaler serves at once: its streams, and up to UNARY_CALLS unary calls besides (KEDA makes
        # two a ScaledObject each polling interval, answered in milliseconds from a cache); beyond that gRPC answers
        # RESOURCE_EXHAUSTED itself, before the call is counted
        calls = scaler.max_streams + UNARY_CALLS
        limits = limits or Limits()
        self._server = grpc.aio.server(
            interceptors=[Admission(allowed_names, limits.header_timeout)],
            maximum_concurrent_rpcs=calls,
            options=[
                ("grpc.max_receive_message_length", MAX_REQUEST_BYTES),
                ("grpc.max_allowed_incoming_connections", limits.max_connections),
                ("grpc.server_handshake_timeout_ms", round(limits.handshake_timeout * 1000)),
                # KEDA makes every call of every ScaledObject on one connection (its pool keeps one a scaler
                # address), so one connection may need every place; a client that opens more streams than that
                # has them refused by HTTP/2 before gRPC makes a call of them
                ("grpc.max_concurrent_streams", calls),
                # as the HTTP port: a second process on the same port is an error at start, not a silent share
                ("grpc.so_reuseport", 0),
            ],
        )
        add_scaler(scaler, self._server)  # malformed requests answered INVALID_ARGUMENT, not UNKNOWN

    async def start(self) -> None:
        try:
            if self.certificates is None:
                self.port = self._server.add_insecure_port(self.address)
            else:
                self.port = self._server.add_secure_port(self.address, self.certificates.credentials())
        except RuntimeError as e:  # gRPC's "Failed to bind": the address is taken or not this host's
            raise ConfigError(f"--keda-scaler-address {self.address}: cannot listen there: {e}") from e
        await self._server.start()
        address = f"{self.address.rpartition(':')[0]}:{self.port}"
        log.info("serving KEDA's external scaler on %s://%s", "grpc" if self.certificates is None else "grpcs", address)
        if self.certificates is None or not self.certificates.checks_clients:
            plain = " and in plain text (--insecure-serve-http)" if self.certificates is None else ""
            if self._unused_client_ca:
                plain += f", --keda-client-ca-file {self._unused_client_ca} is not used without TLS"
            log.warning(OPEN_WARNING.format(address=address, plain=plain))

    async def stop(self) -> None:
        self.scaler.close()
        await self._server.stop(STOP_GRACE_SECONDS)
