"""The adapter's own metrics, served on ``/metrics``, and the freshness of its background sources (``sources``,
which ``/readyz`` reads too).

Each app gets its own registry, so several apps in one process (tests, the benchmark) never share counters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric

from common.freshness import Sources

PREFIX = "gpuscale_adapter"
# Checks whose stale sources are reported (/readyz?verbose, /metrics, the log) without failing /readyz. Discovery is
# stale when Prometheus is down; every replica sees that alike, and failing readiness would only take the APIService
# away, which Kubernetes turns into a cluster-wide discovery failure (stuck namespace deletion, kubectl errors),
# while the last good catalog keeps answering and each request reports Prometheus's state itself.
ADVISORY_CHECKS = frozenset({"discovery"})
_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _latency(r: CollectorRegistry, name: str, documentation: str, labels: list[str]) -> Histogram:
    """A duration in seconds, in the buckets every latency of the adapter shares."""
    return Histogram(name, documentation, labels, buckets=_LATENCY_BUCKETS, registry=r)


@dataclass(frozen=True)
class HoldState:
    """One API's answers held in Prometheus' place now (``--backend-failure-hold``): how many, the oldest one's age
    (seconds since Prometheus gave it; 0 when none), and the latest error that made one be held."""

    api: str
    hold: float
    held: int
    oldest_age: float
    error: str


class HeldAnswersReport:
    """A collector of the held answers' gauges, read from the provider at each scrape (``watch``)."""

    def __init__(self) -> None:
        self._states: Callable[[], list[HoldState]] = list

    def watch(self, states: Callable[[], list[HoldState]]) -> None:
        """Report ``states`` from now on (replacing a provider built before: a component built again)."""
        self._states = states

    def collect(self) -> Iterable[Metric]:
        held = GaugeMetricFamily(
            f"{PREFIX}_held_answers",
            "Questions answered now with their last good answer because Prometheus fails (--backend-failure-hold), "
            "by API (custom, external; KEDA's calls count under the API they ask).",
            labels=["api"],
        )
        age = GaugeMetricFamily(
            f"{PREFIX}_held_answers_oldest_age_seconds",
            "Seconds since Prometheus gave the oldest answer held now, by API; 0 when none is held.",
            labels=["api"],
        )
        for state in self._states():
            held.add_metric([state.api], state.held)
            age.add_metric([state.api], state.oldest_age)
        yield held
        yield age


class AdapterMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self.sources = Sources(PREFIX, "/readyz", ADVISORY_CHECKS)
        self.registry.register(self.sources)
        self.held_answers = HeldAnswersReport()
        self.registry.register(self.held_answers)
        self._serving(self.registry)
        self._backends(self.registry)
        self._security(self.registry)
        self._keda(self.registry)

    def restarted(self, task: str) -> None:
        self.background_restarts.labels(task).inc()

    def _serving(self, r: CollectorRegistry) -> None:
        """Requests, their answers and the value cache."""
        p = PREFIX
        self.request_seconds = _latency(
            r,
            f"{p}_request_duration_seconds",
            "Time to answer an HTTP request, by route kind and status code.",
            ["route", "code"],
        )
        self.errors = Counter(
            f"{p}_errors",
            "Requests answered with an error Status, by route kind and reason.",
            ["route", "reason"],
            registry=r,
        )
        self.prometheus_seconds = _latency(
            r,
            f"{p}_prometheus_request_duration_seconds",
            "Time Prometheus took to answer, by API endpoint (query, label_values, series).",
            ["endpoint"],
        )
        self.prometheus_errors = Counter(
            f"{p}_prometheus_errors",
            "Failed Prometheus requests, by endpoint and kind (unreachable, timeout, refused, bad_answer).",
            ["endpoint", "kind"],
            registry=r,
        )
        self.prometheus_warnings = Counter(
            f"{p}_prometheus_warnings",
            "What Prometheus-compatible servers remarked beside their answers, by backend, endpoint and kind "
            "(warning: the data may be partial; info; truncated: a series listing cut at --prometheus-series-limit).",
            ["backend", "endpoint", "kind"],
            registry=r,
        )
        self.cache_requests = Counter(
            f"{p}_query_cache_requests",
            "Value lookups by outcome: hit (cached), shared (joined an identical query in flight), miss.",
            ["result"],
            registry=r,
        )
        self.held_served = Counter(
            f"{p}_held_answers_served",
            "Answers given with a question's last good answer in place of Prometheus' failure "
            "(--backend-failure-hold), by API (custom, external).",
            ["api"],
            registry=r,
        )
        self.dropped_samples = Counter(
            f"{p}_dropped_samples",
            "Samples Prometheus returned that had no quantity form (NaN, Inf), by reason.",
            ["reason"],
            registry=r,
        )

    def _backends(self, r: CollectorRegistry) -> None:
        """Background tasks, discovery, the rules file and the Kubernetes object cache."""
        p = PREFIX
        self.background_restarts = Counter(
            f"{p}_background_restarts",
            "Background tasks started again after they stopped (an unexpected error), by task.",
            ["task"],
            registry=r,
        )
        self.discovery_runs = Counter(
            f"{p}_discovery_runs", "Relists of the series names in Prometheus, by result.", ["result"], registry=r
        )
        self.discovery_last_success = Gauge(
            f"{p}_discovery_last_success_timestamp_seconds", "When a relist last succeeded.", registry=r
        )
        self.discovered_metrics = Gauge(
            f"{p}_discovered_metrics", "Metrics served, by API (custom, external).", ["api"], registry=r
        )
        self.config_reloads = Counter(
            f"{p}_config_reloads", "Reloads of the rules file, by result.", ["result"], registry=r
        )
        self.config_last_reload_successful = Gauge(
            f"{p}_config_last_reload_successful",
            "0 while the rules file on disk is refused (the rules loaded before stay in force), else 1.",
            registry=r,
        )
        self.config_last_reload_successful.set(1)
        self.kube_objects = Gauge(
            f"{p}_kube_cache_objects", "Objects held by the metadata cache, by resource.", ["resource"], registry=r
        )
        self.kube_synced = Gauge(
            f"{p}_kube_cache_synced", "1 once the metadata cache has listed the resource.", ["resource"], registry=r
        )
        self.kube_live_lists = Counter(
            f"{p}_kube_live_lists",
            "LIST requests made while answering (before the cache synced, or for uncached resources).",
            ["resource"],
            registry=r,
        )
        self.kube_watch_restarts = Counter(
            f"{p}_kube_watch_restarts",
            "Watch restarts, by resource and reason (expired: 410 Gone, closed, error).",
            ["resource", "reason"],
            registry=r,
        )

    def _security(self, r: CollectorRegistry) -> None:
        """Authentication, authorization and the serving certificate."""
        p = PREFIX
        self.authentications = Counter(
            f"{p}_authentications",
            "Authentication outcomes, by method (front_proxy, client_certificate, token, none) and result "
            "(success, failure, error).",
            ["method", "result"],
            registry=r,
        )
        self.authorizations = Counter(
            f"{p}_authorizations",
            "Authorization outcomes, by decision (allowed, denied, error) and source (review, cache, masters).",
            ["decision", "source"],
            registry=r,
        )
        self.auth_config_loaded = Gauge(
            f"{p}_auth_config_loaded",
            "1 while the authentication configuration (CA files, the extension-apiserver-authentication ConfigMap) "
            "is loaded and none of its sources is stale; 0 before it is loaded and while one is.",
            registry=r,
        )
        self.auth_config_reloads = Counter(
            f"{p}_auth_config_reloads",
            "Changes to the authentication configuration, by result.",
            ["result"],
            registry=r,
        )
        self.serving_cert_reloads = Counter(
            f"{p}_serving_certificate_reloads",
            "Reloads of the serving certificate and key after they changed on disk, by result.",
            ["result"],
            registry=r,
        )

    def _keda(self, r: CollectorRegistry) -> None:
        """KEDA's external scaler (gRPC)."""
        p = PREFIX
        self.keda_requests = Counter(
            f"{p}_keda_requests",
            "Calls of KEDA's external scaler, by method and gRPC status code (a stream's when it ends).",
            ["method", "code"],
            registry=r,
        )
        self.keda_request_seconds = _latency(
            r,
            f"{p}_keda_request_duration_seconds",
            "Time to answer a call of KEDA's external scaler other than a stream, by method.",
            ["method"],
        )
        self.keda_streams = Gauge(
            f"{p}_keda_streams", "StreamIsActive streams open now (at most --keda-max-streams).", registry=r
        )
        self.keda_stream_updates = Counter(
            f"{p}_keda_stream_updates",
            "Activity sent on StreamIsActive streams: the first value of each stream and every change after it.",
            registry=r,
        )
