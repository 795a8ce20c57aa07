"""HTTP endpoints: /metrics (the last published snapshot), /health, and an index page."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from collector.collection import Collection
from collector.exposition import OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE, wants_openmetrics
from collector.web.messages import Answer, Request, Response, Served, status_text, text

# what each answer passes through: the web configuration file's checks and headers (collector/web/serving.py)
Check = Callable[[Request, Answer], Awaitable[Response]]


def metrics(collection: Collection, request: Request) -> Response:
    collection.scrapes.seen(time.monotonic())
    exposition = collection.latest
    if wants_openmetrics(request.header("Accept") or ""):
        return Response(200, exposition.openmetrics(), {"Content-Type": OPENMETRICS_CONTENT_TYPE})
    return Response(200, exposition.text(), {"Content-Type": TEXT_CONTENT_TYPE})


def health(collection: Collection, request: Request) -> Response:
    """200 while NVML is read and no background source has been failing past its bound (the pod watch, the counters
    ConfigMap, pod-resources...); else 503. The first line is NVML's state, then one line per stale source."""
    state, problems = collection.health, collection.background.problems()
    return text(200 if state.ok and not problems else 503, "\n".join([state.reason, *problems]) + "\n")


def index(collection: Collection, request: Request) -> Response:
    return text(200, "GPU metrics collector: /metrics (Prometheus text or OpenMetrics), /health\n")


PATHS: dict[str, Callable[[Collection, Request], Response]] = {"/metrics": metrics, "/health": health, "/": index}
METHODS = ("GET", "HEAD")


def answer_for(collection: Collection, check: Check | None = None, served: Served | None = None) -> Answer:
    """How the collector answers a request: ``check`` first (it may answer instead), then the path's page;
    ``served`` hears of each answer (the debug dumps, ``collector/debug_dump.py``)."""

    async def page(request: Request) -> Response:
        path = PATHS.get(request.path)
        if path is None:
            return text(404, status_text(404))
        if request.method not in METHODS:
            return text(405, status_text(405), Allow=", ".join(METHODS))
        return path(collection, request)

    async def answer(request: Request) -> Response:
        response = await (check(request, page) if check is not None else page(request))
        if served is not None:
            served(request, response)
        return response

    return answer
