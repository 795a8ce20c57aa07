"""The external scaler's port under clients that open connections or calls and then send nothing: its connections are
bounded as the HTTP port's are (a cap, a handshake deadline), and a call's request message has a deadline.

The clients here are raw sockets and a raw HTTP/2 client (``h2``), since gRPC's own client always completes what it
starts; the server is the adapter's, with a real Prometheus behind it."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import h2.config
import h2.connection
import h2.events
import pytest
import trustme

from adapter.app import KEDA
from adapter.keda.externalscaler import externalscaler_pb2 as pb
from adapter.keda.externalscaler import externalscaler_pb2_grpc as pb_grpc
from adapter.keda.server import UNARY_CALLS
from adapter.keda.settings import KedaSettings
from adapter.security.tls import TLSSettings
from common.listener import Limits
from harness.adapter.in_process import Adapter, settings_for
from harness.kube.api import FakeKubeAPIServer
from harness.stores.prometheus import Prometheus
from harness.waiting import eventually, wait_until

pytestmark = pytest.mark.prometheus

MakeAdapter = Callable[..., Awaitable[Adapter]]
TRAINERS = pb.ScaledObjectRef(
    name="scaled",
    namespace="ml",
    scalerMetadata={"metricName": "gpu_utilization", "labelSelector": "app=trainer", "targetValue": "60"},
)
IS_ACTIVE = "/externalscaler.ExternalScaler/IsActive"


@dataclass
class Scaler:
    port: int
    credentials: grpc.ChannelCredentials | None  # None: plain text
    client_files: tuple[Path, Path] | None = None  # KEDA's client certificate and key

    async def is_active(self) -> bool:
        target = f"127.0.0.1:{self.port}"
        channel = (
            grpc.aio.insecure_channel(target)
            if self.credentials is None
            else grpc.aio.secure_channel(target, self.credentials)
        )
        async with channel:
            stub: Any = pb_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]
            return bool((await stub.IsActive(TRAINERS, timeout=5)).result)

    async def served(self) -> bool:
        try:
            return await self.is_active() or True
        except grpc.aio.AioRpcError:
            return False


async def start(
    make_adapter: MakeAdapter,
    kube: FakeKubeAPIServer,
    prometheus: Prometheus,
    tmp_path: Path,
    limits: Limits,
    tls: bool,
    max_streams: int = 1000,
) -> Scaler:
    """The adapter's scaler with ``limits``; with ``tls``, the serving certificate and a client CA, as the issue's
    numbers were taken."""
    overrides: dict[str, Any] = {}
    credentials = None
    ca_file = None
    if tls:
        ca, clients = trustme.CA(), trustme.CA()
        leaf = ca.issue_cert("localhost", "127.0.0.1")
        leaf.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
        leaf.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
        ca_file = tmp_path / "keda-ca.crt"
        ca_file.write_bytes(clients.cert_pem.bytes())
        keda = clients.issue_cert("keda-operator")
        keda.cert_chain_pems[0].write_to_path(str(tmp_path / "keda.crt"))
        keda.private_key_pem.write_to_path(str(tmp_path / "keda.key"))
        credentials = grpc.ssl_channel_credentials(
            ca.cert_pem.bytes(), keda.private_key_pem.bytes(), keda.cert_chain_pems[0].bytes()
        )
        overrides = {
            "insecure_serve_http": False,
            "tls": TLSSettings(cert_file=tmp_path / "tls.crt", key_file=tmp_path / "tls.key"),
        }
    settings = settings_for(
        prometheus.adapter_url,
        kube.kubeconfig(tmp_path / "kubeconfig"),
        keda=KedaSettings("127.0.0.1:0", client_ca_file=ca_file, max_streams=max_streams),
        **overrides,
    )
    adapter = await make_adapter(settings, limits=limits)
    client_files = (tmp_path / "keda.crt", tmp_path / "keda.key") if tls else None
    return Scaler(adapter.client.app[KEDA].port, credentials, client_files)


@pytest.fixture
def sockets() -> Iterator[list[socket.socket]]:
    opened: list[socket.socket] = []
    yield opened
    for s in opened:
        s.close()


def connect(port: int, opened: list[socket.socket], count: int) -> list[socket.socket]:
    """``count`` TCP connections that send nothing, as a client that never sends its ClientHello."""
    new = [socket.create_connection(("127.0.0.1", port)) for _ in range(count)]
    opened.extend(new)
    return new


def closed(s: socket.socket) -> bool:
    """Whether the server closed ``s``: it reads the end of the stream or a reset (it sends nothing before)."""
    try:
        return s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


def tls_closed(s: ssl.SSLSocket) -> bool:
    """``closed`` for a TLS connection, reading past what the server sent before it closed (a GOAWAY)."""
    s.setblocking(False)
    try:
        while s.recv(4096):
            pass
    except ssl.SSLWantReadError:
        return False
    except (ConnectionResetError, ssl.SSLEOFError):
        pass
    return True


async def test_connections_beyond_the_cap_are_closed_as_they_come_and_the_cap_is_freed_as_they_close(
    make_adapter: MakeAdapter,
    kube: FakeKubeAPIServer,
    prometheus: Prometheus,
    tmp_path: Path,
    sockets: list[socket.socket],
) -> None:
    scaler = await start(make_adapter, kube, prometheus, tmp_path, Limits(max_connections=5), tls=True)
    assert scaler.credentials is not None
    async with grpc.aio.secure_channel(f"127.0.0.1:{scaler.port}", scaler.credentials) as keda:
        stub: Any = pb_grpc.ExternalScalerStub(keda)  # type: ignore[no-untyped-call]
        await stub.IsActive(TRAINERS, timeout=5)  # KEDA's connection, open before the others
        held = connect(scaler.port, sockets, 4)
        more = connect(scaler.port, sockets, 7)
        await wait_until(lambda: all(closed(s) for s in more), what="the connections beyond the cap to be closed")
        assert not any(closed(s) for s in held)  # the handshake deadline, 32 s, is far
        await stub.IsActive(TRAINERS, timeout=5)  # an open connection keeps its place
        assert not await scaler.served()  # a new one is beyond the cap
    for s in held:
        s.close()
    await eventually(scaler.served, what="KEDA to be served once the connections are gone")


async def test_a_connection_that_does_not_finish_its_handshake_is_closed_at_the_deadline(
    make_adapter: MakeAdapter,
    kube: FakeKubeAPIServer,
    prometheus: Prometheus,
    tmp_path: Path,
    sockets: list[socket.socket],
) -> None:
    limits = Limits(handshake_timeout=1.0)
    scaler = await start(make_adapter, kube, prometheus, tmp_path, limits, tls=True)
    silent = connect(scaler.port, sockets, 3)  # no ClientHello
    # TLS done, and then no HTTP/2 preface: the deadline covers the whole handshake
    assert scaler.client_files is not None
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    context.load_cert_chain(*scaler.client_files)
    context.set_alpn_protocols(["h2"])
    (raw,) = connect(scaler.port, sockets, 1)
    tls = context.wrap_socket(raw, server_hostname="localhost")
    sockets.append(tls)
    await wait_until(lambda: all(closed(s) for s in silent), what="silent connections to be closed")
    await wait_until(lambda: tls_closed(tls), what="a connection without HTTP/2's preface to be closed")
    assert await scaler.is_active() is not None  # KEDA, which does its handshake at once, is served


class RawCalls:
    """An HTTP/2 connection that opens gRPC calls and sends their headers only."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.ended: dict[int, dict[bytes, bytes]] = {}  # stream → the headers and trailers it ended with
        self.received: dict[int, dict[bytes, bytes]] = {}
        self.settled = False  # the server's SETTINGS came

    async def settings(self) -> None:
        """Sends the preface, and reads until the server's SETTINGS."""
        self.h2.initiate_connection()
        await self.send()
        while not self.settled:
            await self.read()

    def open(self, path: str, count: int) -> list[int]:
        opened = []
        for _ in range(count):
            stream = self.h2.get_next_available_stream_id()
            headers = [(":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "localhost"),
                       ("content-type", "application/grpc"), ("te", "trailers")]  # fmt: skip
            self.h2.send_headers(stream, headers)
            opened.append(stream)
        return opened

    async def read(self) -> None:
        await self.send()
        data = await self.reader.read(65536)
        assert data, "the server closed the connection"
        for event in self.h2.receive_data(data):
            self.settled |= isinstance(event, h2.events.RemoteSettingsChanged)
            if isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                self.received.setdefault(event.stream_id, {}).update(dict(event.headers))
            if isinstance(event, (h2.events.StreamEnded, h2.events.StreamReset)):
                assert event.stream_id is not None
                self.ended[event.stream_id] = self.received.get(event.stream_id, {})
        await self.send()

    async def send(self) -> None:
        self.writer.write(self.h2.data_to_send())
        await self.writer.drain()


@pytest.fixture
async def raw_calls() -> AsyncIterator[Callable[[int], Awaitable[RawCalls]]]:
    made: list[RawCalls] = []

    async def make(port: int) -> RawCalls:
        calls = RawCalls(*await asyncio.open_connection("127.0.0.1", port))
        made.append(calls)
        await calls.settings()
        return calls

    yield make
    for calls in made:
        calls.writer.close()


async def test_calls_whose_request_never_comes_hold_their_places_only_until_the_deadline(
    make_adapter: MakeAdapter,
    kube: FakeKubeAPIServer,
    prometheus: Prometheus,
    tmp_path: Path,
    raw_calls: Callable[[int], Awaitable[RawCalls]],
) -> None:
    limits = Limits(header_timeout=5.0)  # far longer than 1,001 headers take to send and be read
    scaler = await start(make_adapter, kube, prometheus, tmp_path, limits, tls=False, max_streams=1)
    calls = await raw_calls(scaler.port)
    places = 1 + UNARY_CALLS
    # one connection may hold every place (KEDA makes all its calls on one), and no more
    assert calls.h2.remote_settings.max_concurrent_streams == places
    half_open = calls.open(IS_ACTIVE, places - 1) + calls.open("/externalscaler.ExternalScaler/StreamIsActive", 1)

    async def refused() -> bool:
        await asyncio.sleep(0)
        try:
            await scaler.is_active()
        except grpc.aio.AioRpcError as e:
            return e.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        return False

    await calls.send()
    await eventually(refused, what="KEDA to be refused while every place is held")

    async def all_ended() -> None:
        while len(calls.ended) < places:
            await calls.read()

    await asyncio.wait_for(all_ended(), 30)  # without a deadline, they never end
    assert sorted(calls.ended) == half_open
    assert {calls.ended[s].get(b"grpc-status") for s in half_open} == {b"4"}  # DEADLINE_EXCEEDED
    assert calls.ended[half_open[0]][b"grpc-message"] == (
        b"the request message did not arrive within 5s of the call's headers"
    )
    assert await scaler.served()
