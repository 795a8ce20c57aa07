"""The kubelet's gRPC call made over HTTP/2 by hand (collector/pods/grpc_unary.py), against a server scripted frame
by frame with h2: what grpc-go or grpcio may send and the stand-in kubelet (real grpcio, the happy paths and its
status codes; tests/collector/test_pod_mapping.py) does not. Each outcome is the status gRPC's own client reports
for the same frames (PROTOCOL-HTTP2.md; grpc/doc/http-grpc-status-mapping.md)."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.settings
import pytest

from collector.pods import grpc_unary
from collector.pods.grpc_unary import GrpcError

LIST = "/v1.PodResourcesLister/List"
MESSAGE = b"\x0a\x04\x0a\x02pp"  # a ListPodResourcesResponse with one pod named "pp"
OK_HEADERS = [(b":status", b"200"), (b"content-type", b"application/grpc")]

Script = Callable[[socket.socket, h2.connection.H2Connection, int], None]


def framed(message: bytes) -> bytes:
    return b"\x00" + len(message).to_bytes(4, "big") + message


class ScriptedServer:
    """An HTTP/2 server on a unix socket that reads one request and then runs ``script`` on the connection: on a
    thread, or with ``forked`` in a process of its own, whose frames then come as fast as it sends them and not when
    the client's thread lets go of the interpreter."""

    def __init__(self, path: Path, script: Script, forked: bool = False) -> None:
        self.path = str(path)
        self.script = script
        self.client_settings: dict[int, int] = {}
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.path)
        self._listener.listen(4)
        self._process: multiprocessing.process.BaseProcess | None = None
        self._thread: threading.Thread | None = None
        if forked:
            self._process = multiprocessing.get_context("fork").Process(target=self._serve, daemon=True)
            self._process.start()
        else:
            self._thread = threading.Thread(target=self._serve, daemon=True)
            self._thread.start()

    def _serve(self) -> None:
        try:
            sock, _ = self._listener.accept()
        except OSError:
            return
        with sock:
            conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
            conn.initiate_connection()
            sock.sendall(conn.data_to_send())
            stream = None
            while stream is None:
                data = sock.recv(65536)
                if not data:
                    return
                for event in conn.receive_data(data):
                    if isinstance(event, h2.events.RemoteSettingsChanged):
                        self.client_settings.update({int(k): v.new_value for k, v in event.changed_settings.items()})
                    if isinstance(event, h2.events.RequestReceived):
                        stream = event.stream_id
                sock.sendall(conn.data_to_send())
            with contextlib.suppress(OSError):  # the client gave up and closed: what some scripts expect
                self.script(sock, conn, stream)

    def close(self) -> None:
        self._listener.close()
        if self._thread is not None:
            self._thread.join(5)
        if self._process is not None:
            self._process.kill()
            self._process.join(5)


@pytest.fixture
def scripted(tmp_path: Path) -> Iterator[Callable[..., ScriptedServer]]:
    servers: list[ScriptedServer] = []

    def start(script: Script, forked: bool = False) -> ScriptedServer:
        servers.append(ScriptedServer(tmp_path / f"kubelet-{len(servers)}.sock", script, forked))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def status_only(status: bytes = b"200", **trailers: bytes) -> Script:
    """A trailers-only answer (no message): ``status`` and the given grpc-* fields."""

    def script(sock: socket.socket, conn: h2.connection.H2Connection, stream: int) -> None:
        fields = [(b":status", status), (b"content-type", b"application/grpc")]
        fields += [(name.replace("_", "-").encode(), value) for name, value in trailers.items()]
        conn.send_headers(stream, fields, end_stream=True)
        sock.sendall(conn.data_to_send())
        time.sleep(0.2)

    return script


def reset(code: h2.errors.ErrorCodes) -> Script:
    def script(sock: socket.socket, conn: h2.connection.H2Connection, stream: int) -> None:
        conn.reset_stream(stream, code)
        sock.sendall(conn.data_to_send())
        time.sleep(0.2)

    return script


def answer(sock: socket.socket, conn: h2.connection.H2Connection, stream: int) -> None:
    conn.send_headers(stream, OK_HEADERS)
    conn.send_data(stream, framed(MESSAGE))
    conn.send_headers(stream, [(b"grpc-status", b"0")], end_stream=True)
    sock.sendall(conn.data_to_send())
    time.sleep(0.2)


def call(server: ScriptedServer, timeout: float = 2.0) -> bytes:
    return asyncio.run(grpc_unary.call(server.path, LIST, b"", timeout))


def test_an_answer_and_the_client_turns_server_push_off(scripted: Callable[..., ScriptedServer]) -> None:
    server = scripted(answer)
    assert call(server) == MESSAGE
    assert server.client_settings.get(h2.settings.SettingCodes.ENABLE_PUSH) == 0


@pytest.mark.parametrize(
    ("script", "code", "detail"),
    [
        (status_only(grpc_status=b"5", grpc_message=b"no%20such%20%E2%9C%93"), "NOT_FOUND", "no such \u2713"),
        (status_only(grpc_status=b"13", grpc_message=b"bad\xffbyte"), "INTERNAL", "bad\ufffdbyte"),
        (status_only(grpc_status="\u00b2".encode()), "INTERNAL", "a grpc-status that is not a number: '\u00b2'"),
        (status_only(grpc_status=b"abc"), "INTERNAL", "a grpc-status that is not a number"),
        (reset(h2.errors.ErrorCodes.CANCEL), "CANCELLED", "reset the call (HTTP/2 error 8)"),
        (reset(h2.errors.ErrorCodes.NO_ERROR), "INTERNAL", "reset the call (HTTP/2 error 0)"),
        (reset(h2.errors.ErrorCodes.ENHANCE_YOUR_CALM), "RESOURCE_EXHAUSTED", "HTTP/2 error 11"),
        (reset(h2.errors.ErrorCodes.REFUSED_STREAM), "UNAVAILABLE", "HTTP/2 error 7"),
        (status_only(b"404"), "UNIMPLEMENTED", "HTTP status 404"),
        (status_only(b"401"), "UNAUTHENTICATED", "HTTP status 401"),
        (status_only(b"503"), "UNAVAILABLE", "HTTP status 503"),
        (status_only(b"500"), "UNKNOWN", "HTTP status 500"),
    ],
)
def test_failures_carry_the_status_grpc_reports_for_them(
    scripted: Callable[..., ScriptedServer], script: Script, code: str, detail: str
) -> None:
    with pytest.raises(GrpcError) as info:
        call(scripted(script))
    assert info.value.code == code
    assert detail in info.value.detail


def test_a_server_going_away_is_unavailable_and_says_so(scripted: Callable[..., ScriptedServer]) -> None:
    def goaway_then_ping(sock: socket.socket, conn: h2.connection.H2Connection, stream: int) -> None:
        # grpc-go's GracefulStop: a GOAWAY, then a PING (which h2 on the client's side no longer takes)
        conn.close_connection(last_stream_id=stream)
        ping = b"\x00\x00\x08\x06\x00\x00\x00\x00\x00" + b"12345678"  # length 8, type PING, stream 0
        sock.sendall(conn.data_to_send() + ping)
        time.sleep(0.2)

    with pytest.raises(GrpcError, match=r"^UNAVAILABLE: the server is going away"):
        call(scripted(goaway_then_ping))


def test_the_deadline_holds_however_the_server_spaces_its_frames(
    scripted: Callable[..., ScriptedServer],
) -> None:
    def pings(sock: socket.socket, conn: h2.connection.H2Connection, stream: int) -> None:
        sock.setblocking(False)
        end = time.monotonic() + 3
        while time.monotonic() < end:  # frames back to back for 3 s, the client's ACKs read and dropped ...
            with contextlib.suppress(BlockingIOError):
                conn.ping(b"12345678")
                sock.send(conn.data_to_send())
            with contextlib.suppress(BlockingIOError):
                sock.recv(65536)
        sock.setblocking(True)
        answer(sock, conn, stream)  # ... then the answer, long after the client's deadline

    with pytest.raises(GrpcError, match=r"^DEADLINE_EXCEEDED"):
        call(scripted(pings, forked=True), timeout=0.5)
