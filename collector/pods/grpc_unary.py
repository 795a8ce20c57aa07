"""One unary gRPC call over a unix socket: the kubelet's pod-resources ``List``, without gRPC's C core.

The collector makes one kind of gRPC call, a unary ``List`` to the kubelet on its node every refresh, and gRPC's
library cost it about 13 MB of resident memory for that (8.6 at import, the rest once its channel was open;
docs/collector-bench.md), a fifth of the whole process. gRPC is HTTP/2 underneath: a POST of the serialized request
behind a five-byte prefix (a compression flag, the length), answered by the response message with the same prefix,
then trailers holding ``grpc-status`` and ``grpc-message`` (or those in the headers alone, "trailers-only", when the
call fails at once). The framing and HPACK come from ``h2`` (pure Python, 1.3 MB). Each call opens a connection of
its own: the kubelet may restart and make a new socket at any time, and a connection on a unix socket costs
microseconds. The call runs on the event loop, beside the pod and ResourceSlice watches, not on a thread of its own:
under gVisor a thread's stack alone is 2 MB resident (docs/collector-bench.md).

Failures are reported as gRPC's own status names, as the library reports them: the server's ``grpc-status``; a reset
stream or an HTTP status other than 200 mapped as gRPC maps them (PROTOCOL-HTTP2.md, http-grpc-status-mapping.md);
``UNAVAILABLE`` when nothing answers, the peer is not gRPC or the server goes away (GOAWAY: h2 takes no frame after
one, so the call cannot be finished on that connection; the next refresh asks again); ``DEADLINE_EXCEEDED`` past the
timeout, however the server spaces what it sends. Server push is turned off, and frames of any other stream ignored.
"""

from __future__ import annotations

import asyncio
import urllib.parse

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings

# gRPC's status codes, by number (grpc/doc/statuscodes.md)
STATUS_NAMES = (
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
    "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
    "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
)  # fmt: skip
MAX_MESSAGE = 64 * 1024 * 1024  # a node's every pod and device is far less; a bound whatever the peer sends
# a reset stream's HTTP/2 error code, as gRPC reports it (PROTOCOL-HTTP2.md, "Errors"); any other code is INTERNAL
_RESET: dict[int, str] = {h2.errors.ErrorCodes.REFUSED_STREAM: "UNAVAILABLE", h2.errors.ErrorCodes.CANCEL: "CANCELLED",
          h2.errors.ErrorCodes.ENHANCE_YOUR_CALM: "RESOURCE_EXHAUSTED",
          h2.errors.ErrorCodes.INADEQUATE_SECURITY: "PERMISSION_DENIED"}  # fmt: skip
# an HTTP status other than 200, as gRPC reports it (http-grpc-status-mapping.md); any other status is UNKNOWN
_HTTP = {"400": "INTERNAL", "401": "UNAUTHENTICATED", "403": "PERMISSION_DENIED", "404": "UNIMPLEMENTED",
         "429": "UNAVAILABLE", "502": "UNAVAILABLE", "503": "UNAVAILABLE", "504": "UNAVAILABLE"}  # fmt: skip


class GrpcError(Exception):
    """A failed call: ``code`` is gRPC's status name (``UNAVAILABLE``, ``DEADLINE_EXCEEDED``, ...)."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail


async def call(socket_path: str, method: str, request: bytes, within: float) -> bytes:
    """The response message of the unary ``method`` (``/package.Service/Method``) on the server at ``socket_path``,
    the whole call ``within`` seconds; ``GrpcError`` when the call fails."""
    try:
        async with asyncio.timeout(within):  # the whole call, however the server spaces what it sends
            reader, writer = await asyncio.open_unix_connection(socket_path)
            try:
                return await _exchange(reader, writer, method, request, max(1, int(within * 1000)))
            finally:
                writer.close()
    except TimeoutError:
        raise GrpcError("DEADLINE_EXCEEDED", f"no answer within {within:g}s") from None
    except OSError as e:
        raise GrpcError("UNAVAILABLE", f"{socket_path}: {e.strerror or e}") from None
    except h2.exceptions.ProtocolError as e:
        raise GrpcError("UNAVAILABLE", f"the peer does not speak HTTP/2: {e}") from None


async def _exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, method: str, request: bytes, deadline_ms: int
) -> bytes:
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
    conn.local_settings = h2.settings.Settings(client=True, initial_values={h2.settings.SettingCodes.ENABLE_PUSH: 0})
    conn.initiate_connection()
    stream = conn.get_next_available_stream_id()
    conn.send_headers(
        stream,
        [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", method),
            (":authority", "localhost"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
            ("grpc-timeout", f"{deadline_ms}m"),  # the server may give up when the caller will
        ],
    )
    conn.send_data(stream, b"\x00" + len(request).to_bytes(4, "big") + request, end_stream=True)
    writer.write(conn.data_to_send())
    await writer.drain()
    body = bytearray()
    metadata: dict[str, str] = {}
    while True:
        data = await reader.read(65536)
        if not data:
            raise GrpcError("UNAVAILABLE", "the connection closed before the call ended")
        try:
            events = conn.receive_data(data)
        except h2.exceptions.ProtocolError:
            if conn.state_machine.state is h2.connection.ConnectionState.CLOSED:  # frames after its GOAWAY
                raise GrpcError("UNAVAILABLE", "the server is going away (GOAWAY)") from None
            raise
        for event in events:
            if getattr(event, "stream_id", stream) != stream:
                continue  # another stream's: none is asked for
            if isinstance(event, (h2.events.ResponseReceived, h2.events.TrailersReceived)):
                metadata.update((_text(k), _text(v)) for k, v in event.headers)
            elif isinstance(event, h2.events.DataReceived):
                body += event.data
                if len(body) > MAX_MESSAGE + 5:
                    raise GrpcError("RESOURCE_EXHAUSTED", f"an answer over {MAX_MESSAGE} bytes")
                # h2 opens the stream's and the connection's windows again once half of each is read
                conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamReset):
                code = _RESET.get(event.error_code, "INTERNAL")
                raise GrpcError(code, f"the server reset the call (HTTP/2 error {event.error_code})")
            elif isinstance(event, h2.events.ConnectionTerminated):
                raise GrpcError("UNAVAILABLE", f"the server is going away (GOAWAY, HTTP/2 error {event.error_code})")
            elif isinstance(event, h2.events.StreamEnded):
                return _message(metadata, bytes(body))
        pending = conn.data_to_send()
        if pending:
            writer.write(pending)
            await writer.drain()


def _text(value: bytes | str) -> str:
    """A header's name or value as text, whatever its bytes: gRPC's clients must not fail on a bad grpc-message."""
    return value if isinstance(value, str) else value.decode("utf-8", errors="replace")


def _message(metadata: dict[str, str], body: bytes) -> bytes:
    status = metadata.get(":status", "200")
    if status != "200":
        raise GrpcError(_HTTP.get(status, "UNKNOWN"), f"HTTP status {status}")
    code = metadata.get("grpc-status")
    if code is None:
        raise GrpcError("INTERNAL", "the call ended without a grpc-status")
    if not (code.isascii() and code.isdigit()):
        raise GrpcError("INTERNAL", f"a grpc-status that is not a number: {code[:20]!r}")
    number = int(code)
    if number != 0:
        name = STATUS_NAMES[number] if number < len(STATUS_NAMES) else "UNKNOWN"
        raise GrpcError(name, urllib.parse.unquote(metadata.get("grpc-message", "")))
    if len(body) < 5 or body[0] != 0 or int.from_bytes(body[1:5], "big") != len(body) - 5:
        raise GrpcError("INTERNAL", "the answer is not one uncompressed gRPC message")
    return body[5:]
