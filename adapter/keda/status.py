"""The adapter's errors as gRPC status codes, in one place (the HTTP edge turns the same errors into ``Status``
objects, ``adapter/errors.py``). KEDA treats every code alike (the trigger failed: it keeps the replicas, or uses the
ScaledObject's ``fallback``); the codes are for the people reading its log and ours."""

from __future__ import annotations

import grpc

from adapter.errors import (
    AdapterError,
    BackendError,
    BadRequest,
    Forbidden,
    NotConfigured,
    NotFound,
    QueryError,
    Unauthorized,
)

# the first class an error is an instance of gives its code: subclasses before their bases
_CODES: tuple[tuple[type[AdapterError], grpc.StatusCode], ...] = (
    (BadRequest, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (Unauthorized, grpc.StatusCode.UNAUTHENTICATED),
    (Forbidden, grpc.StatusCode.PERMISSION_DENIED),
    # started without what the request needs (a Kubernetes API for labelSelector): asking again will not help
    (NotConfigured, grpc.StatusCode.FAILED_PRECONDITION),
    # a query built from a rule that Prometheus refuses: the rule is wrong, as HTTP's 500 says
    (QueryError, grpc.StatusCode.INTERNAL),
    # Prometheus or the Kubernetes API down, slow or answering what cannot be used: asking again may help
    (BackendError, grpc.StatusCode.UNAVAILABLE),
)
INTERNAL_MESSAGE = "the adapter failed to answer; see its log"
# the message travels in the grpc-message trailer, each byte past ASCII written as three (%XX); grpcio clients
# refuse trailers over 8 KiB, turning the answer into RESOURCE_EXHAUSTED. Errors quote their values cut already;
# this bounds what they say about several at once (a selector and the same question as an HTTP path)
MESSAGE_BYTES = 2048


def status_of(error: AdapterError) -> tuple[grpc.StatusCode, str]:
    """The code and the message a client may see (backend errors keep their detail for the log, as over HTTP)."""
    code = next((c for kind, c in _CODES if isinstance(error, kind)), grpc.StatusCode.INTERNAL)
    return code, bounded(error.client_message)


def bounded(message: str) -> str:
    """``message``, or its first ``MESSAGE_BYTES`` bytes of UTF-8 and how long it was."""
    data = message.encode()
    if len(data) <= MESSAGE_BYTES:
        return message
    cut = data[: MESSAGE_BYTES - 64].decode(errors="ignore")  # a character cut in two is left out
    return f"{cut}... (cut: {len(data)} bytes)"
