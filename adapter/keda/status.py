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


def status_of(error: AdapterError) -> tuple[grpc.StatusCode, str]:
    """The code and the message a client may see (backend errors keep their detail for the log, as over HTTP)."""
    code = next((c for kind, c in _CODES if isinstance(error, kind)), grpc.StatusCode.INTERNAL)
    return code, error.client_message
