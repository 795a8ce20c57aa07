"""A list request's ``watch`` option, as the API server reads it (Go's ``strconv.ParseBool``): the metrics APIs list
and get, and a watch is refused with the API server's 405 rather than answered with a list."""

from __future__ import annotations

from collections.abc import Mapping

from adapter.errors import BadRequest, MethodNotSupported

TRUE = ("1", "t", "T", "TRUE", "true", "True")
FALSE = ("0", "f", "F", "FALSE", "false", "False")


def asks_watch(query: Mapping[str, str]) -> bool:
    """Whether ``?watch`` is true (a value that is no boolean is not, and is refused where it is read)."""
    return query.get("watch", "") in TRUE


def refuse_watch(query: Mapping[str, str], resource: str) -> None:
    """``MethodNotSupported`` for a watch of a list of ``resource`` (``pods.metrics.k8s.io``): no metrics API serves
    one, and a list in its place breaks a client reading watch events; ``BadRequest`` for a value that is no
    boolean."""
    value = query.get("watch", "false")
    if value not in TRUE + FALSE:
        raise BadRequest(f'watch: strconv.ParseBool: parsing "{value}": invalid syntax')
    if value in TRUE:
        raise MethodNotSupported(f'watch is not supported on resources of kind "{resource}"')
