"""``/explain/keda/NAMESPACE?<a trigger's metadata>``: a KEDA trigger's question explained over HTTP, as
``gpuscale-adapter explain keda/...`` explains it, by the HTTP question it asks (``scaler_request_path``).

The request is rewritten to that question's ``/explain/apis/...`` before authorization, so it is reviewed as every
explain request is, as the request it explains too: a caller may explain only what it may ask. Metadata the scaler
would refuse leaves the request as it came, to be reviewed as its own path and answered 400 by the handler.
"""

from __future__ import annotations

from collections.abc import Mapping

from aiohttp import web
from aiohttp.typedefs import Handler
from yarl import URL

from adapter.errors import BadRequest
from adapter.keda.metadata import SCALER_REQUEST, scaler_request_path

EXPLAIN = "/explain"


def scaler_question(raw_path: str, query: Mapping[str, str]) -> str | None:
    """The explained request's path and query for ``/explain/keda/...``; None for any other path; ``BadRequest`` as
    the scaler would answer it."""
    if not raw_path.startswith(f"{EXPLAIN}/{SCALER_REQUEST}"):
        return None
    return scaler_request_path(raw_path.removeprefix(EXPLAIN), query)


@web.middleware
async def as_http_question(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        asked = scaler_question(request.rel_url.raw_path, dict(request.query))
    except BadRequest:
        asked = None
    if asked is None:
        return await handler(request)
    return await handler(request.clone(rel_url=URL(EXPLAIN + asked, encoded=True)))
