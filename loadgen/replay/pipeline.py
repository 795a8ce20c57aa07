"""The metric pipeline as deployed, in virtual time: Prometheus scraping the replicas, the gateway and the GPU
collector, and the adapter's built-in rules (adapter/default-rules.yaml) answering the metrics APIs.

At each scrape the replay hands a ``Scrape``: the series each target exports then. A target (an engine pod, a pod's
GPU on the collector's page, a gateway) missing from a scrape gets a staleness marker at that scrape, as Prometheus
writes one for a target gone from discovery or a series gone from a page, so its series leave instant queries at
once. Queries follow Prometheus 2.42 (Debian's, which the tests run): an instant vector takes each series' latest
sample at most 5 minutes old unless it is a staleness marker; a range ``[1m]`` takes the samples in the closed
interval [t - 1m, t] (Prometheus 3 made it left-open), staleness markers left out; ``rate()`` extrapolates as
``extrapolatedRate`` in promql/functions.go does. Times are kept in whole milliseconds, as Prometheus stores them.

What each metric is: ``POD_METRICS`` and ``EXTERNAL_METRICS``; docs/replay.md, "The metric pipeline", says what is
modelled and what is not. Work per scrape is linear in the targets, and a target's samples are kept for the lookback
and one window, so an hour of dozens of replicas stays small.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal

SCRAPE_INTERVAL = 15.0  # seconds between scrapes unless the replay is told otherwise
LOOKBACK = 300.0  # Prometheus's --query.lookback-delta default
WINDOW = 60.0  # the built-in rules' rate() window, [1m]
QUEUE_CAP = 2.0  # inference_capacity_demand counts an engine's waiting requests up to as many as it runs

POD_METRICS = (
    "gpu_utilization",
    "inference_requests_waiting",
    "inference_requests_running",
    "inference_kv_cache_usage",
    "inference_time_to_first_token_seconds",
)
EXTERNAL_METRICS = (
    "inference_demand",
    "inference_request_rate",
    "inference_capacity_demand",
    "inference_activity",
    "inference_requests_waiting",
    "inference_requests_running",
    "inference_kv_cache_usage",
    "inference_time_to_first_token_seconds",
)
_NANO = Decimal("1e-9")


@dataclass(frozen=True)
class EngineSample:
    """An engine replica's page: vLLM's gauges and counters. ``None``: the page has no such series."""

    namespace: str
    pod: str
    node: str
    waiting: float  # vllm:num_requests_waiting
    running: float  # vllm:num_requests_running
    kv_cache_usage: float  # vllm:kv_cache_usage_perc, 0-1
    ttft_sum: float  # vllm:time_to_first_token_seconds_sum
    ttft_count: float  # vllm:time_to_first_token_seconds_count
    queue_time_sum: float  # vllm:request_queue_time_seconds_sum
    queue_time_count: float  # vllm:request_queue_time_seconds_count
    success_total: float  # vllm:request_success_total
    incoming_total: float | None = None  # vllm:num_incoming_requests_total (vLLM 0.34 writes it)


@dataclass(frozen=True)
class GpuSample:
    """A pod's GPU on its node's collector page: DCGM_FI_DEV_GPU_UTIL, percent busy over the collector's last
    interval, labelled with the pod that holds the GPU (it does from the pod's start, loading included)."""

    namespace: str
    pod: str
    node: str
    utilization: float


@dataclass(frozen=True)
class GatewaySample:
    """The endpoint picker's page: inference_extension_flow_control_queue_size (requests it holds) and
    inference_objective_request_total (requests it received)."""

    namespace: str
    pod: str
    queue_size: float | None
    request_total: float | None


@dataclass(frozen=True)
class Scrape:
    """What every target exports at ``at`` (seconds). A target not listed is not scraped: deleted, or not Ready."""

    at: float
    engines: Sequence[EngineSample] = ()
    gpus: Sequence[GpuSample] = ()
    gateways: Sequence[GatewaySample] = ()


Key = tuple[str, str]  # (namespace, pod)
Stored = EngineSample | GpuSample | GatewaySample
Field = Callable[[Stored], float | None]


class _Target:
    """One target's samples, oldest first: (milliseconds, what it exported), ``None`` for a staleness marker."""

    __slots__ = ("samples",)

    def __init__(self) -> None:
        self.samples: deque[tuple[int, Stored | None]] = deque()

    def latest(self, at: int, lookback: int) -> Stored | None:
        """The sample an instant query at ``at`` reads (the marker's None hides the series)."""
        for t, value in reversed(self.samples):
            if t <= at:
                return value if t >= at - lookback else None
        return None

    def points(self, field: Field, start: int, end: int) -> list[tuple[int, float]]:
        """``field``'s samples in [start, end], oldest first, without staleness markers."""
        out = []
        for t, value in reversed(self.samples):
            if t < start:
                break
            if t <= end and value is not None and (v := field(value)) is not None:
                out.append((t, v))
        out.reverse()
        return out


def extrapolated_rate(points: Sequence[tuple[int, float]], start: int, end: int, window: float) -> float | None:
    """``rate()`` of a counter's samples (milliseconds, value) in the range [start, end] of ``window`` seconds, as
    Prometheus 2.42's extrapolatedRate: None below two samples; a drop counts as a reset to zero; the result is
    extrapolated to each end of the range by the gap there when that gap is below 1.1 average sample intervals
    (else by half an interval), and never before the counter's extrapolated zero."""
    if len(points) < 2:
        return None
    (first_t, first_v), (last_t, last_v) = points[0], points[-1]
    result = last_v - first_v
    previous = first_v
    for _, value in points[1:]:
        if value < previous:
            result += previous
        previous = value
    to_start = (first_t - start) / 1000
    to_end = (end - last_t) / 1000
    sampled = (last_t - first_t) / 1000
    average = sampled / (len(points) - 1)
    if result > 0 and first_v >= 0:
        to_zero = sampled * (first_v / result)
        if to_zero < to_start:
            to_start = to_zero
    threshold = average * 1.1
    interval = sampled
    interval += to_start if to_start < threshold else average / 2
    interval += to_end if to_end < threshold else average / 2
    factor = interval / sampled
    factor /= window
    return result * factor


def served(value: float) -> float | None:
    """What the adapter serves for a sample value: None for NaN and ±Inf (dropped), else the value rounded
    half-up to a nano-unit, as its quantities are (what the HPA then reads in milli-units)."""
    if math.isnan(value) or math.isinf(value):
        return None
    exact = Decimal(repr(value))
    if exact.as_tuple().exponent < -9:  # type: ignore[operator]
        return float(exact.quantize(_NANO, rounding=ROUND_HALF_UP))
    return value


def _mean(values: Iterable[float]) -> float | None:
    """``avg`` as Prometheus 2.42 aggregates it: a running mean."""
    mean, count = 0.0, 0
    for value in values:
        count += 1
        mean = value if count == 1 else mean + value / count - mean / count
    return mean if count else None


def _count(value: float | None) -> float | None:
    """The rules' ``>= 0 < +Inf`` filter."""
    return value if value is not None and 0 <= value < math.inf else None


def _ratio(value: float | None) -> float | None:
    """The rules' ``>= 0 <= 1`` filter."""
    return value if value is not None and 0 <= value <= 1 else None


def _engine(name: str) -> Field:
    return lambda s: getattr(s, name)


class MetricPipeline:
    """Prometheus and the adapter's built-in rules. ``scrape`` at increasing times; ``pods`` and ``external`` at
    any time from one window before the last scrape on."""

    def __init__(self, *, lookback: float = LOOKBACK, window: float = WINDOW) -> None:
        self.lookback = round(lookback * 1000)
        self.window = window
        self._window_ms = round(window * 1000)
        self._kept = self.lookback + self._window_ms
        self._last: int | None = None
        self._engines: dict[Key, _Target] = {}
        self._gpus: dict[Key, _Target] = {}
        self._gateways: dict[Key, _Target] = {}

    def scrape(self, scrape: Scrape) -> None:
        at = round(scrape.at * 1000)
        if self._last is not None and at <= self._last:
            raise ValueError(f"scrape at {scrape.at} s is not after the last one ({self._last / 1000} s)")
        self._last = at
        for targets, samples in (
            (self._engines, scrape.engines),
            (self._gpus, scrape.gpus),
            (self._gateways, scrape.gateways),
        ):
            _record(targets, samples, at, at - self._kept)

    def samples_kept(self) -> int:
        """How many samples are held, staleness markers included."""
        return sum(len(t.samples) for targets in (self._engines, self._gpus, self._gateways) for t in targets.values())

    def pods(self, metric: str, at: float) -> dict[Key, float]:
        """A Pods metric's value per (namespace, pod), for the pods that have one."""
        t = round(at * 1000)
        if metric == "gpu_utilization":
            return self._served({k: _gpu(s) for k, s in self._instant(self._gpus, t).items()})
        if metric in _GAUGES:
            pick, _, factor = _GAUGES[metric]
            picked = {k: pick(s) for k, s in self._instant(self._engines, t).items()}
            return self._served({k: v * factor for k, v in picked.items() if v is not None})
        if metric == "inference_time_to_first_token_seconds":
            sums, counts = self._ttft(t)
            return self._served({k: sums[k] / c for k, c in counts.items() if c > 0 and k in sums})
        raise KeyError(f"no Pods metric {metric!r}; the replay serves {', '.join(POD_METRICS)}")

    def external(self, metric: str, namespace: str, at: float) -> float | None:
        """An External metric's value for ``namespace``; None where the adapter has none."""
        t = round(at * 1000)
        if metric in _GAUGES:
            pick, aggregate, factor = _GAUGES[metric]
            values = [v for s in self._instant(self._engines, t, namespace).values() if (v := pick(s)) is not None]
            return served(aggregate(values) * factor) if values else None
        if metric == "inference_time_to_first_token_seconds":
            sums, counts = self._ttft(t, namespace)
            if not sums or not counts or (total := sum(counts.values())) <= 0:
                return None
            return served(sum(sums.values()) / total)
        if metric == "inference_demand":
            return self._demand(namespace, t)
        if metric == "inference_request_rate":
            arrivals = self._arrivals(namespace, t)
            return None if arrivals is None else served(arrivals)
        if metric == "inference_capacity_demand":
            return self._capacity_demand(namespace, t)
        if metric == "inference_activity":
            return self._activity(namespace, t)
        raise KeyError(f"no External metric {metric!r}; the replay serves {', '.join(EXTERNAL_METRICS)}")

    def _ttft(self, t: int, namespace: str | None = None) -> tuple[dict[Key, float], dict[Key, float]]:
        """The rates of the TTFT histogram's sum and count per pod."""
        return (
            self._rates(self._engines, _engine("ttft_sum"), t, namespace),
            self._rates(self._engines, _engine("ttft_count"), t, namespace),
        )

    def _demand(self, namespace: str, t: int) -> float | None:
        # sum(label_replace(sum(gateway queue >= 0 < +Inf), ...) or label_replace(sum(engines' waiting ...), ...)):
        # the two sums carry different labels, so `or` keeps both and the outer sum adds them
        waiting = [v for s in self._instant(self._engines, t, namespace).values() if (v := _waiting(s)) is not None]
        parts = [p for p in (self._held(namespace, t), sum(waiting) if waiting else None) if p is not None]
        return served(sum(parts)) if parts else None

    def _arrivals(self, namespace: str, t: int) -> float | None:
        # the first arm with a sample answers: the gateway's counter, else the engines' arrivals, else their
        # finished requests
        for targets, field in (
            (self._gateways, _requests),
            (self._engines, _engine("incoming_total")),
            (self._engines, _engine("success_total")),
        ):
            rates = self._rates(targets, field, t, namespace)
            if rates:
                return sum(rates.values())
        return None

    def _held(self, namespace: str, t: int) -> float | None:
        held = [v for s in self._instant(self._gateways, t, namespace).values() if (v := _count(_queue(s))) is not None]
        return sum(held) if held else None

    def _capacity_demand(self, namespace: str, t: int) -> float | None:
        # KV * max(ARRIVALS / SERVED, QUEUE, 1), where KV = avg(kv >= 0 <= 1) * 100; ARRIVALS as
        # inference_request_rate; SERVED = what the engines there now finish a second at the last minute's rate per
        # engine: sum(rate(finished[1m])) / (sum(count_over_time(kv[1m])) / max(count_over_time(kv[1m]))) *
        # count(kv), so an engine that came up within the minute counts for the share of it that it reported;
        # QUEUE = avg over the engines running any of clamp_max((running + waiting) / running, 2); ARRIVALS / SERVED
        # only while a request waits in an engine or is held at the gateway
        engines = self._instant(self._engines, t, namespace).values()
        kv = _mean(v for s in engines if (v := _kv(s)) is not None)
        if kv is None:
            return None
        kv *= 100
        factors = [1.0]
        # the queue: each engine's waiting over its running, as much again at most, averaged over the engines
        queued = [(_waiting(e) or 0.0, r) for e in engines if (r := _running(e)) is not None and r > 0]
        if queued:
            factors.append(sum(min((r + w) / r, QUEUE_CAP) for w, r in queued) / len(queued))
        arrivals = self._arrivals(namespace, t)
        done = self._rates(self._engines, _engine("success_total"), t, namespace)
        finished = sum(done.values()) if done else 0.0
        waiting = sum(w for e in engines if (w := _waiting(e)) is not None) + (self._held(namespace, t) or 0.0)
        if arrivals is not None and finished > 0 and waiting > 0:
            # count_over_time and count read every sample of the series, a KV use outside 0-1 included
            start, kv_samples = t - self._window_ms, _engine("kv_cache_usage")
            samples = [n for key, target in sorted(self._engines.items())
                       if key[0] == namespace and (n := len(target.points(kv_samples, start, t)))]  # fmt: skip
            serving = finished / (sum(samples) / max(samples)) * len(engines)
            factors.append(arrivals / serving)
        return served(kv * max(factors))

    def _activity(self, namespace: str, t: int) -> float | None:
        # max of (arrivals > bool 0), (held > bool 0) and (sum of the engines' waiting and running > bool 0), each
        # where present
        engines = self._instant(self._engines, t, namespace).values()
        in_flight = [v for s in engines for v in (_waiting(s), _running(s)) if v is not None]
        parts = [self._arrivals(namespace, t), self._held(namespace, t), sum(in_flight) if in_flight else None]
        present = [p for p in parts if p is not None]
        return float(max(p > 0 for p in present)) if present else None

    def _instant(self, targets: dict[Key, _Target], t: int, namespace: str | None = None) -> dict[Key, Stored]:
        out = {}
        for key, target in sorted(targets.items()):
            if namespace is None or key[0] == namespace:
                value = target.latest(t, self.lookback)
                if value is not None:
                    out[key] = value
        return out

    def _rates(
        self, targets: dict[Key, _Target], field: Field, t: int, namespace: str | None = None
    ) -> dict[Key, float]:
        out = {}
        for key, target in sorted(targets.items()):
            if namespace is None or key[0] == namespace:
                rate = extrapolated_rate(
                    target.points(field, t - self._window_ms, t), t - self._window_ms, t, self.window
                )
                if rate is not None:
                    out[key] = rate
        return out

    @staticmethod
    def _served(values: dict[Key, float | None]) -> dict[Key, float]:
        return {k: s for k, v in values.items() if v is not None and (s := served(v)) is not None}


def _record(targets: dict[Key, _Target], samples: Sequence[Stored], at: int, oldest: int) -> None:
    seen = set()
    for sample in samples:
        key = (sample.namespace, sample.pod)
        seen.add(key)
        targets.setdefault(key, _Target()).samples.append((at, sample))
    for key in list(targets):
        kept = targets[key].samples
        if key not in seen and kept and kept[-1][1] is not None:
            kept.append((at, None))  # the staleness marker of a target no longer scraped
        while kept and kept[0][0] < oldest:  # no query from one window before this scrape on reads it
            kept.popleft()
        if not kept:
            del targets[key]


def _gpu(s: Stored) -> float | None:
    assert isinstance(s, GpuSample)
    return s.utilization


def _queue(s: Stored) -> float | None:
    assert isinstance(s, GatewaySample)
    return s.queue_size


def _requests(s: Stored) -> float | None:
    assert isinstance(s, GatewaySample)
    return s.request_total


def _waiting(s: Stored) -> float | None:
    assert isinstance(s, EngineSample)
    return _count(s.waiting)


def _running(s: Stored) -> float | None:
    assert isinstance(s, EngineSample)
    return _count(s.running)


def _kv(s: Stored) -> float | None:
    assert isinstance(s, EngineSample)
    return _ratio(s.kv_cache_usage)


def _average(values: Sequence[float]) -> float:
    mean = _mean(values)
    assert mean is not None
    return mean


# engine gauge metric → (one engine's filtered value, how a namespace aggregates them, the factor applied after)
_GAUGES: dict[str, tuple[Field, Callable[[Sequence[float]], float], float]] = {
    "inference_requests_waiting": (_waiting, sum, 1.0),
    "inference_requests_running": (_running, sum, 1.0),
    "inference_kv_cache_usage": (_kv, _average, 100.0),  # avg(x >= 0 <= 1) * 100
}
