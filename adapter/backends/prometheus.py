"""The Prometheus HTTP API client, behind the small ``PrometheusAPI`` protocol the rest of the adapter uses.

Works against any server speaking Prometheus's ``/api/v1`` (Prometheus, Thanos, Mimir, VictoriaMetrics): instant
queries, label values and series (read for their names and label names only), each filtered with ``match[]``. Long
queries go as POST (a 1,500-pod regex is 25 KB; GET fails with 414); every request has a deadline, sent as
``timeout`` too so the server gives up when we do (Prometheus and Thanos read it on queries, VictoriaMetrics on
every call). Listings carry ``limit`` (Prometheus 2.49+, Thanos, Mimir and VictoriaMetrics read it; older
Prometheus ignores it), and every request ``partial_response`` when ``--prometheus-partial-response`` is given (Thanos).
What the server remarks beside its data is counted and logged (``prometheus_warnings``).

An answer is read up to ``--prometheus-max-answer-bytes`` (refused by its Content-Length when that says more, else
once that much has arrived), then checked and converted by ``prometheus_answer``: on the event loop when it is small,
in a worker thread when it is not, so a large answer never stops the adapter from answering other requests. From its
first chunk to the end of its decoding it holds room in the ``AnswerBudget`` every client of the adapter shares
(``--prometheus-max-bytes-in-flight``), waiting for room until its deadline.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import time
import urllib.parse
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import aiohttp

from adapter.backends.answer_budget import Answer, AnswerBudget
from adapter.backends.backend_specs import DEFAULT
from adapter.backends.flags import default, show_bytes
from adapter.backends.prometheus_answer import QueryResult as QueryResult
from adapter.backends.prometheus_answer import Reply, SeriesShapes, names_reply, query_reply, series_reply
from adapter.backends.prometheus_answer import Sample as Sample
from adapter.backends.prometheus_warnings import TRUNCATED, Remarks
from adapter.errors import AnswerTooLarge, BadAnswer, MalformedAnswer, NoRoomForAnswer, PrometheusError, QueryError
from adapter.self_metrics import AdapterMetrics
from common.watched_file import WatchedFiles

# Above this many bytes of query string a GET is turned into a POST: proxies and Prometheus's own Go server
# refuse long request lines well before the query is long.
MAX_GET_QUERY_BYTES = 4096
# Answers up to this size are read on the event loop: about 5 ms of it. Larger ones go to a worker thread.
PARSE_IN_THREAD_ABOVE = 256 * 1024
# What the query cache may keep, by the results' weight: a few large results, or some 60,000 small ones.
QUERY_CACHE_BYTES = 64 * 1024 * 1024
# One more than discovery serves of a label's values, so that it can tell a list the store cut at the limit
LABEL_VALUES_LIMIT = 10_001
# A store that did not answer, inside an error answer (Thanos's querier with partial_response=false; Mimir's and
# Cortex's queriers): gRPC's status of the failed call, never a fault of the query
_STORE_DOWN = re.compile(r"rpc error: code = (Unavailable|Aborted|DeadlineExceeded|Canceled)\b")
# VictoriaMetrics answers 422 to every error, its own deadline passing too ("timeout exceeded during the query: ...")
_TIMED_OUT = re.compile(r"\btimeout exceeded\b")
T = TypeVar("T")


class PrometheusAPI(Protocol):
    async def query(self, promql: str) -> QueryResult: ...

    async def label_values(self, label: str, match: str, start: float, end: float) -> list[str]: ...

    async def series(self, match: str, start: float, end: float) -> SeriesShapes:
        """The names of the series ``match`` selects with samples from ``start`` to ``end``, and their label names."""
        ...


@dataclass(frozen=True)
class PrometheusConfig:
    url: str = "http://localhost:9090"
    verb: str = default("prometheus-verb")
    timeout: float = default("prometheus-timeout")
    discovery_timeout: float = 30.0  # label listings take longer than queries; never shorter than the timeout
    token_file: Path | None = default("prometheus-token-file")
    ca_file: Path | None = default("prometheus-ca-file")
    client_cert_file: Path | None = default("prometheus-client-tls-cert-file")
    client_key_file: Path | None = default("prometheus-client-tls-key-file")
    headers: tuple[tuple[str, str], ...] = default("prometheus-header")
    partial_response: bool | None = default("prometheus-partial-response")  # None: not sent
    series_limit: int = default("prometheus-series-limit")  # 0: not sent
    max_answer_bytes: int = default("prometheus-max-answer-bytes")
    max_bytes_in_flight: int = default("prometheus-max-bytes-in-flight")  # 0: no bound
    parse_in_thread_above: int = PARSE_IN_THREAD_ABOVE
    backend: str = DEFAULT  # the name rules pick it by; errors and logs name the others


def make_session(config: PrometheusConfig) -> aiohttp.ClientSession:
    """A session with the TLS settings for Prometheus; the caller owns and closes it."""
    ssl_context: ssl.SSLContext | bool = True
    if config.ca_file or config.client_cert_file:
        ctx = ssl.create_default_context(cafile=str(config.ca_file) if config.ca_file else None)
        if config.client_cert_file:
            key = str(config.client_key_file) if config.client_key_file else None
            ctx.load_cert_chain(str(config.client_cert_file), key)
        ssl_context = ctx
    connector = aiohttp.TCPConnector(ssl=ssl_context, limit=64, keepalive_timeout=60)
    # answers are read once, close by: compressing them costs Prometheus and the adapter more time than it saves
    headers = {"User-Agent": "gpuscale-adapter", "Accept-Encoding": "identity"}
    return aiohttp.ClientSession(connector=connector, headers=headers)


class _BearerToken:
    """The token file's content, re-read when the file changes (projected tokens rotate)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = WatchedFiles(path)
        self._token: str | None = None

    def value(self) -> str:
        try:
            # a missing file is read (and fails) every time rather than serving the old token
            if self._file.changed() or self._token is None or self._file.stamps[0] is None:
                self._token = self.path.read_text().strip()
        except OSError as e:
            raise PrometheusError(f"cannot read the Prometheus token file {self.path}: {e.strerror}") from e
        return self._token


@dataclass(frozen=True)
class Credential:
    """What a request carries from --prometheus-auth-config's kubeconfig: the Authorization header's value and, when
    the kubeconfig sets them, its TLS settings (None: the session's, from the --prometheus-* flags)."""

    authorization: str | None = None
    ssl: ssl.SSLContext | None = None
    server_hostname: str | None = None
    proxy: str | None = None

    def request_options(self) -> dict[str, Any]:
        """The TLS settings as aiohttp's request arguments."""
        given = {"ssl": self.ssl, "server_hostname": self.server_hostname, "proxy": self.proxy}
        return {k: v for k, v in given.items() if v is not None}


class Credentials(Protocol):
    async def current(self) -> Credential: ...

    def rejected(self) -> None:
        """Prometheus answered 401: read the credentials again before the next request."""


class PrometheusClient:
    def __init__(
        self,
        session: aiohttp.ClientSession,
        config: PrometheusConfig,
        metrics: AdapterMetrics,
        credentials: Credentials | None = None,
        budget: AnswerBudget | None = None,
    ) -> None:
        """``budget``: the room for answers that every client of the adapter shares (None: one for this client)."""
        self.session = session
        self.config = config
        self.metrics = metrics
        self.budget = budget if budget is not None else AnswerBudget(config.max_bytes_in_flight)
        url = urllib.parse.urlsplit(config.url)
        self.base = urllib.parse.urlunsplit(url._replace(query="", fragment="")).rstrip("/")
        # the URL's own query parameters go with every request, as vmalert's -datasource.url takes them
        # (VictoriaMetrics' nocache=1: values as of now rather than -search.latencyOffset ago)
        self._url_params = urllib.parse.parse_qsl(url.query, keep_blank_values=True)
        self._token = _BearerToken(config.token_file) if config.token_file else None
        self._credentials = credentials
        self.who = "Prometheus" if config.backend == DEFAULT else f"Prometheus backend {config.backend}"
        self.remarks = Remarks(config.backend, self.who, metrics)

    def _headers(self) -> dict[str, str]:
        headers = dict(self.config.headers)
        if self._token:
            headers["Authorization"] = f"Bearer {self._token.value()}"
        return headers

    async def query(self, promql: str) -> QueryResult:
        path, params = "/api/v1/query", [("query", promql)]
        result, _ = await self._call("query", path, params, self.config.timeout, query_reply, post_allowed=True)
        self.remarks.note("query", path, promql, result.warnings, result.infos)
        if result.result_type not in ("vector", "scalar"):
            raise QueryError(f"query {promql!r} returned a {result.result_type}; a metrics query must return a vector")
        return result

    async def label_values(self, label: str, match: str, start: float, end: float) -> list[str]:
        params = [
            ("match[]", match),
            ("start", f"{start:.3f}"),
            ("end", f"{end:.3f}"),
            ("limit", str(LABEL_VALUES_LIMIT)),
        ]
        path = f"/api/v1/label/{urllib.parse.quote(label, safe='')}/values"
        names, reply = await self._call("label_values", path, params, self.config.discovery_timeout, names_reply)
        cut = len(names) == LABEL_VALUES_LIMIT  # discovery says so: it serves fewer (more: the limit was ignored)
        self.remarks.note("label_values", path, match, _unless(cut, reply.warnings), reply.infos)
        return names

    async def series(self, match: str, start: float, end: float) -> SeriesShapes:
        # label values are filtered by time only per storage block (hours), series by their samples: a series that
        # stopped leaves this list once its last sample is older than start
        params = [("match[]", match), ("start", f"{start:.3f}"), ("end", f"{end:.3f}")]
        path, limit = "/api/v1/series", self.config.series_limit
        if limit:
            params.append(("limit", str(limit)))
        listing, reply = await self._call("series", path, params, self.config.discovery_timeout, series_reply)
        cut = 0 < limit == listing.entries  # more: a server that ignores limit (Prometheus before 2.49) sent all
        if cut:
            self.remarks.cut("series", path, match, limit)
        self.remarks.note("series", path, match, _unless(cut, reply.warnings), reply.infos)
        return listing.shapes

    async def _call(
        self,
        endpoint: str,
        path: str,
        params: Sequence[tuple[str, str]],
        deadline: float,
        parse: Callable[[bytearray], Reply[T]],
        post_allowed: bool = False,
    ) -> tuple[T, Reply[T]]:
        """The answer's data, and the answer for what it says beside the data."""
        params = [*params, ("timeout", f"{deadline:g}s")]
        if self.config.partial_response is not None:
            params.append(("partial_response", "true" if self.config.partial_response else "false"))
        encoded = urllib.parse.urlencode([*self._url_params, *params])
        post = post_allowed and (self.config.verb == "POST" or len(encoded) > MAX_GET_QUERY_BYTES)
        headers = self._headers()
        options: dict[str, Any] = {}
        if self._credentials is not None:
            credential = await self._credentials.current()
            if credential.authorization and "Authorization" not in headers:  # --prometheus-token-file wins
                headers["Authorization"] = credential.authorization
            options = credential.request_options()
        url = f"{self.base}{path}"
        if post:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
            request = self.session.post(url, data=encoded, headers=headers, timeout=_timeout(deadline), **options)
        else:
            request = self.session.get(f"{url}?{encoded}", headers=headers, timeout=_timeout(deadline), **options)
        room = self.budget.answer(self.config.max_answer_bytes)
        try:
            status, body = await self._fetch(endpoint, path, deadline, request, room)
            reply = await self._parse(endpoint, path, status, body, parse, room)
        finally:
            room.release()  # the bytes are garbage now, and what was decoded of them is the result's
        if reply.status == "success" and reply.data is not None:
            return reply.data, reply
        message = f"{self.who} {path} answered HTTP {status} {reply.error_type}: {reply.error}{_hint(status)}"
        refused = reply.error_type in ("bad_data", "execution") or status in (400, 422)
        if refused and not _STORE_DOWN.search(reply.error) and not _TIMED_OUT.search(reply.error):
            self.metrics.prometheus_errors.labels(endpoint, "refused").inc()
            raise QueryError(f"{message} (query: {dict(params).get('query', dict(params).get('match[]'))})")
        self.metrics.prometheus_errors.labels(endpoint, "unavailable").inc()
        raise PrometheusError(message)

    async def _fetch(
        self,
        endpoint: str,
        path: str,
        deadline: float,
        request: AbstractAsyncContextManager[aiohttp.ClientResponse],
        room: Answer,
    ) -> tuple[int, bytearray]:
        """The answer's status and body, read within ``deadline`` seconds, waiting for room in the budget included."""
        started = time.perf_counter()
        expires = asyncio.get_running_loop().time() + deadline
        try:
            async with request as resp:
                status = resp.status
                body = await self._read(resp, path, room, expires)
            if status == 401 and self._credentials is not None:
                self._credentials.rejected()
            return status, body
        except AnswerTooLarge:
            self.metrics.prometheus_errors.labels(endpoint, "too_large").inc()
            raise
        except NoRoomForAnswer:
            self.metrics.prometheus_errors.labels(endpoint, "no_room").inc()
            raise
        except TimeoutError as e:
            self.metrics.prometheus_errors.labels(endpoint, "timeout").inc()
            raise PrometheusError(f"{self.who} {path} did not answer within {deadline:g}s") from e
        except (aiohttp.ClientError, OSError) as e:
            self.metrics.prometheus_errors.labels(endpoint, "unreachable").inc()
            raise PrometheusError(f"{self.who} {path} at {self.base} unreachable: {e}") from e
        finally:
            self.metrics.prometheus_seconds.labels(endpoint).observe(time.perf_counter() - started)

    async def _read(self, resp: aiohttp.ClientResponse, path: str, room: Answer, expires: float) -> bytearray:
        """The body, refused as soon as it is known to be over a limit: by its Content-Length, else while read. Each
        chunk takes room in the budget before it is kept."""
        length = resp.content_length
        if length is not None:
            self._check_size(resp, path, length, f"its Content-Length is {length}")
            room.expect(length)
        body = bytearray()
        async for chunk in resp.content.iter_any():
            size = len(body) + len(chunk)
            self._check_size(resp, path, size, f"{size} bytes had arrived when reading stopped")
            try:
                async with asyncio.timeout_at(expires):
                    await room.take(len(chunk))
            except TimeoutError:
                resp.close()
                raise self._no_room(path) from None
            body += chunk
        return body

    def _check_size(self, resp: aiohttp.ClientResponse, path: str, size: int, detail: str) -> None:
        """Refuse an answer of ``size`` bytes over the per-answer limit or over the budget, where it could never fit;
        the error names the smaller, the one to raise."""
        limits = [(self.config.max_answer_bytes, "--prometheus-max-answer-bytes")]
        if self.budget.limit:
            limits.append((self.budget.limit, "--prometheus-max-bytes-in-flight"))
        limit, flag = min(limits)
        if size > limit:
            resp.close()  # the rest is never read; the connection is not reused
            raise self._too_large(path, detail, limit, flag)

    def _too_large(self, path: str, detail: str, limit: int, flag: str) -> AnswerTooLarge:
        what = f"the {show_bytes(limit)} limit of {flag}"
        return AnswerTooLarge(f"{self.who} {path} answered more than {what}: {detail}", f"it is larger than {what}")

    def _no_room(self, path: str) -> NoRoomForAnswer:
        budget = self.budget
        return NoRoomForAnswer(
            f"{self.who} {path}: no room to read the answer before its deadline: the answers being read held "
            f"{budget.held / 2**20:.1f} MiB of the {show_bytes(budget.limit)} limit of --prometheus-max-bytes-in-flight"
        )

    async def _parse(
        self,
        endpoint: str,
        path: str,
        status: int,
        body: bytearray,
        parse: Callable[[bytearray], Reply[T]],
        room: Answer,
    ) -> Reply[T]:
        try:
            if len(body) <= self.config.parse_in_thread_above:
                return parse(body)
            # the reply comes back in a box, not as the thread's result: the executor's thread and the task would
            # hold a result until they next run, and the request would ask its next rule with this answer alive
            box: list[Reply[T]] = []
            decoding = asyncio.ensure_future(asyncio.to_thread(lambda: box.append(parse(body))))
            try:
                await asyncio.shield(decoding)
            except asyncio.CancelledError:
                room.keep_until(decoding)  # the thread decodes on, and its bytes stay counted until it ends
                raise
            return box.pop()
        except MalformedAnswer as e:
            message = f"{self.who} {path} answered HTTP {status} with {len(body)} bytes that are not its API's: {e}"
            message += _hint(status)
            if status >= 400:  # an error page from Prometheus or from a proxy in front of it: not there, for us
                self.metrics.prometheus_errors.labels(endpoint, "unavailable").inc()
                raise PrometheusError(message) from e
            self.metrics.prometheus_errors.labels(endpoint, "bad_answer").inc()
            raise BadAnswer(message, str(e)) from e


def _timeout(seconds: float) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(total=seconds)


def _hint(status: int) -> str:
    if status in (401, 403):  # Mimir and Cortex answer 401 "no org id" to a request without a tenant
        return " (a credential or tenant header missing or refused? --prometheus-header, --prometheus-token-file)"
    return ""


def _unless(cut: bool, warnings: tuple[str, ...]) -> tuple[str, ...]:
    """The warnings, without the one that says the list was cut when the cut is reported on its own."""
    return tuple(w for w in warnings if w != TRUNCATED) if cut else warnings
