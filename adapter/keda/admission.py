"""What a call to the external scaler must show before the scaler sees it: a client certificate that names an
allowed caller (--keda-client-allowed-names), and its request message within the request deadline.

gRPC's TLS checks only that a client certificate chains to --keda-client-ca-file; any certificate of that CA (one a
tenant's namespace was issued) would read every namespace. Python's gRPC has no hook in the handshake, so the names
are checked on each call, from the names gRPC read from the verified certificate (its auth context).

A unary call holds one of the server's concurrent-call places from its HEADERS frame on, and gRPC waits for its
request message as long as the caller has not set a deadline: half-open calls (HEADERS, never DATA) would hold every
place and shut KEDA out. gRPC's unary handler hides that wait, so each unary method is served here as a
request-streaming one (the same frames on the wire), whose first message is read with a deadline.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeAlias

import grpc

from common.log_limit import LogLimit, left_out

log = logging.getLogger(__name__)

Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
# grpc-stubs types method handlers as the synchronous server's; grpc.aio's hold coroutines and async generators
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
# the certificate's names that --keda-client-allowed-names may list, as gRPC's auth context calls them
NAME_PROPERTIES = ("x509_common_name", "peer_dns", "peer_uri")
# a refusal names at most this many of the certificate's names, each cut to this length
SHOWN_NAMES, SHOWN_LENGTH = 5, 100


def names_of(context: Context) -> list[str]:
    """The verified client certificate's common name and DNS and URI subject alternative names."""
    properties = context.auth_context()
    # a certificate without a common name has an empty one in gRPC's auth context
    return [value.decode("utf-8", "replace") for key in NAME_PROPERTIES for value in properties.get(key, ()) if value]


def refusal(names: Sequence[str]) -> str:
    if not names:
        return "the client certificate carries no common name, DNS or URI name in --keda-client-allowed-names"
    shown = ", ".join(repr(n[:SHOWN_LENGTH]) for n in names[:SHOWN_NAMES])
    more = f" and {len(names) - SHOWN_NAMES} more" if len(names) > SHOWN_NAMES else ""
    return f"the client certificate's names ({shown}{more}) are not in --keda-client-allowed-names"


class Admission(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    def __init__(self, allowed_names: Sequence[str], request_timeout: float, log_limit: LogLimit | None = None) -> None:
        """``allowed_names``: empty lets every caller the TLS handshake let in; ``request_timeout``: how long after
        its headers a call's request message may take to arrive."""
        self.allowed_names = frozenset(allowed_names)
        self.request_timeout = request_timeout
        self._log_limit = log_limit or LogLimit(60.0)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler:
        handler = await continuation(handler_call_details)
        if handler is None or handler.request_streaming:  # an unknown method: gRPC answers UNIMPLEMENTED
            return handler
        method = handler_call_details.method
        if handler.unary_unary is not None:
            unary: Any = handler.unary_unary

            async def unary_call(requests: AsyncIterator[Any], context: Context) -> Any:
                request = await self._admit(method, requests, context)
                return await unary(request, context)

            return grpc.stream_unary_rpc_method_handler(
                unary_call, handler.request_deserializer, handler.response_serializer
            )
        streamed: Any = handler.unary_stream

        async def streaming_call(requests: AsyncIterator[Any], context: Context) -> AsyncIterator[Any]:
            request = await self._admit(method, requests, context)
            async for answer in streamed(request, context):
                yield answer

        return grpc.stream_stream_rpc_method_handler(
            streaming_call, handler.request_deserializer, handler.response_serializer
        )

    async def _admit(self, method: str, requests: AsyncIterator[Any], context: Context) -> Any:
        """The call's one request message, once its caller is allowed; otherwise the call ends here."""
        if self.allowed_names:
            names = names_of(context)
            if self.allowed_names.isdisjoint(names):
                why = refusal(names)
                self._log("refused", f"KEDA scaler: {method} from {context.peer()} refused: {why}")
                await context.abort(grpc.StatusCode.PERMISSION_DENIED, why)
        try:
            return await asyncio.wait_for(anext(requests), self.request_timeout)
        except TimeoutError:
            why = f"the request message did not arrive within {self.request_timeout:g}s of the call's headers"
            self._log("late", f"KEDA scaler: {method} from {context.peer()} ended: {why}")
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, why)
        except StopAsyncIteration:  # the caller half-closed without sending its message
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the call ended without a request message")

    def _log(self, kind: str, line: str) -> None:
        count = self._log_limit.allow(kind)
        if count is not None:
            log.warning("%s%s", line, left_out(count, self._log_limit.interval))
