"""The Prometheus HTTP API client, behind the small ``PrometheusAPI`` protocol the rest of the adapter uses.

Works against any server speaking Prometheus's ``/api/v1`` (Prometheus, Thanos, Mimir, VictoriaMetrics): instant
queries, label names and label values, each filtered with ``match[]``. Long queries go as POST (a 1,500-pod regex is
25 KB; GET fails with 414); every request has a deadline, sent to Prometheus too so it gives up when we do.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import aiohttp

from adapter.config.flags import default
from adapter.errors import PrometheusError, QueryError
from adapter.self_metrics import AdapterMetrics
from common.watched_file import WatchedFiles

# Above this many bytes of query string a GET is turned into a POST: proxies and Prometheus's own Go server
# refuse long request lines well before the query is long.
MAX_GET_QUERY_BYTES = 4096


class Sample(NamedTuple):
    labels: Mapping[str, str]
    timestamp: float
    value: str


@dataclass(frozen=True, slots=True)
class QueryResult:
    result_type: str
    samples: tuple[Sample, ...]
    warnings: tuple[str, ...] = ()


class PrometheusAPI(Protocol):
    async def query(self, promql: str) -> QueryResult: ...

    async def label_names(self, match: str, start: float, end: float) -> list[str]: ...

    async def label_values(self, label: str, match: str, start: float, end: float) -> list[str]: ...


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


class PrometheusClient:
    def __init__(self, session: aiohttp.ClientSession, config: PrometheusConfig, metrics: AdapterMetrics) -> None:
        self.session = session
        self.config = config
        self.metrics = metrics
        self.base = config.url.rstrip("/")
        self._token = _BearerToken(config.token_file) if config.token_file else None

    def _headers(self) -> dict[str, str]:
        headers = dict(self.config.headers)
        if self._token:
            headers["Authorization"] = f"Bearer {self._token.value()}"
        return headers

    async def query(self, promql: str) -> QueryResult:
        timeout = self.config.timeout
        params = [("query", promql), ("timeout", f"{timeout:g}s")]
        answer = await self._call("query", "/api/v1/query", params, timeout, post_allowed=True)
        data = answer.get("data")
        data = data if isinstance(data, dict) else {}
        result_type = data.get("resultType")
        result = data.get("result")
        if result_type in ("vector", "scalar") and not isinstance(result, list):
            # a well-formed query whose answer is not: Prometheus (or what stands in front of it) is broken
            raise PrometheusError(f"Prometheus returned a malformed {result_type} for {promql!r}: {result!r:.200}")
        if result_type == "vector" and isinstance(result, list):
            samples = tuple(_sample(item) for item in result)
        elif result_type == "scalar":
            samples = (_sample({"metric": {}, "value": result}),)
        else:
            raise QueryError(f"query {promql!r} returned a {result_type}; a metrics query must return a vector")
        return QueryResult(result_type, samples, tuple(str(w) for w in answer.get("warnings") or ()))

    async def label_names(self, match: str, start: float, end: float) -> list[str]:
        params = [("match[]", match), ("start", f"{start:.3f}"), ("end", f"{end:.3f}")]
        data = (await self._call("labels", "/api/v1/labels", params, self.config.discovery_timeout)).get("data")
        return [str(v) for v in data] if isinstance(data, list) else []

    async def label_values(self, label: str, match: str, start: float, end: float) -> list[str]:
        params = [("match[]", match), ("start", f"{start:.3f}"), ("end", f"{end:.3f}")]
        path = f"/api/v1/label/{urllib.parse.quote(label, safe='')}/values"
        data = (await self._call("label_values", path, params, self.config.discovery_timeout)).get("data")
        return [str(v) for v in data] if isinstance(data, list) else []

    async def _call(
        self, endpoint: str, path: str, params: Sequence[tuple[str, str]], deadline: float, post_allowed: bool = False
    ) -> dict[str, Any]:
        encoded = urllib.parse.urlencode(params)
        post = post_allowed and (self.config.verb == "POST" or len(encoded) > MAX_GET_QUERY_BYTES)
        headers = self._headers()
        url = f"{self.base}{path}"
        started = time.perf_counter()
        kind = "bad_answer"
        try:
            if post:
                headers["Content-Type"] = "application/x-www-form-urlencoded"
                request = self.session.post(url, data=encoded, headers=headers, timeout=_timeout(deadline))
            else:
                request = self.session.get(f"{url}?{encoded}", headers=headers, timeout=_timeout(deadline))
            async with request as resp:
                body = await resp.read()
                status = resp.status
        except TimeoutError as e:
            kind = "timeout"
            self.metrics.prometheus_errors.labels(endpoint, kind).inc()
            raise PrometheusError(f"Prometheus {path} did not answer within {deadline:g}s") from e
        except (aiohttp.ClientError, OSError) as e:
            kind = "unreachable"
            self.metrics.prometheus_errors.labels(endpoint, kind).inc()
            raise PrometheusError(f"Prometheus {path} at {self.base} unreachable: {e}") from e
        finally:
            self.metrics.prometheus_seconds.labels(endpoint).observe(time.perf_counter() - started)
        try:
            answer = json.loads(body)
            if not isinstance(answer, dict):
                raise ValueError("not an object")
        except ValueError as e:
            self.metrics.prometheus_errors.labels(endpoint, kind).inc()
            raise PrometheusError(
                f"Prometheus {path} answered HTTP {status} with a body that is not its JSON: {body[:200]!r}"
            ) from e
        if answer.get("status") != "success":
            error_type = str(answer.get("errorType", ""))
            message = f"Prometheus {path} answered HTTP {status} {error_type}: {answer.get('error', '')}"
            if error_type in ("bad_data", "execution") or status in (400, 422):
                self.metrics.prometheus_errors.labels(endpoint, "refused").inc()
                raise QueryError(f"{message} (query: {dict(params).get('query', dict(params).get('match[]'))})")
            self.metrics.prometheus_errors.labels(endpoint, "unavailable").inc()
            raise PrometheusError(message)
        return answer


def _timeout(seconds: float) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(total=seconds)


def _sample(item: Any) -> Sample:
    try:
        ts, value = item["value"]
        return Sample(item["metric"], float(ts), value if type(value) is str else str(value))
    except (KeyError, TypeError, ValueError) as e:
        raise PrometheusError(f"Prometheus returned a malformed sample: {item!r}") from e
