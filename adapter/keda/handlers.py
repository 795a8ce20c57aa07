"""The scaler's methods as gRPC handlers whose requests are read by deserializers that never raise: bytes that are
not the method's message become a ``Malformed`` request, which the scaler answers INVALID_ARGUMENT and logs at a
bounded rate (``Scaler._call``).

The generated ``add_ExternalScalerServicer_to_server`` reads requests with ``FromString``, and a ``DecodeError`` there
is grpc.aio's to handle: it answers UNKNOWN and logs a traceback for every such call (3.7 MB of log for 5,000). The
table here is built from the service's descriptor, as the generated one is, so a method added to the .proto is
served without a change here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import grpc
from google.protobuf.message import DecodeError, Message

from adapter.keda.externalscaler import externalscaler_pb2 as pb
from adapter.keda.externalscaler import externalscaler_pb2_grpc as pb_grpc

SERVICE = pb.DESCRIPTOR.services_by_name["ExternalScaler"]


@dataclass(frozen=True)
class Malformed:
    """A request whose bytes are not a ``message``; ``reason``: protobuf's words for what is wrong."""

    message: str
    reason: str


def lenient(message: type[Message]) -> Callable[[bytes], Message | Malformed]:
    """``message``'s deserializer, answering ``Malformed`` where ``FromString`` raises."""

    def read(data: bytes) -> Message | Malformed:
        try:
            return message.FromString(data)
        except DecodeError as e:
            return Malformed(message.DESCRIPTOR.full_name, str(e))

    return read


def add_scaler(servicer: pb_grpc.ExternalScalerServicer, server: grpc.aio.Server) -> None:
    """``pb_grpc.add_ExternalScalerServicer_to_server``, with ``lenient`` deserializers."""
    table: dict[str, grpc.RpcMethodHandler[object, object]] = {}
    for method in SERVICE.methods:
        assert not method.client_streaming, "every method takes one request"
        request: type[Message] = getattr(pb, method.input_type.name)
        response: type[Message] = getattr(pb, method.output_type.name)
        make = grpc.unary_stream_rpc_method_handler if method.server_streaming else grpc.unary_unary_rpc_method_handler
        table[method.name] = make(
            getattr(servicer, method.name),
            request_deserializer=lenient(request),
            response_serializer=response.SerializeToString,
        )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE.full_name, table),))
