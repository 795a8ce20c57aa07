"""LLM serving engines as Prometheus sees them: each pod's /metrics page written as that engine's own code writes it.

Names, types, labels, help texts and histogram buckets are those of the versions read (docs/adapter.md, "Inference
metrics"): vLLM 0.34.0 (and 0.10, which writes the renamed KV gauge under both names, and 0.9.1, the old one only),
SGLang 0.5.23, TGI 3.3.7, Triton (core 2026-06), llm-d-router v0.10 (the endpoint picker, which writes its metrics
under the new and the old names at once) and vLLM production-stack's router. The layout follows each one's client
library: Python's prometheus_client (``_total`` counters, a ``_created`` family beside each counter and histogram,
except in SGLang's multiprocess mode), Rust's metrics-exporter-prometheus for TGI (counters without ``_total``),
prometheus-cpp for Triton (bare counter names; a histogram's count and sum before its buckets) and Go's
client_golang for the endpoint picker (help texts prefixed ``[ALPHA]``).

This module writes the text by hand and shares nothing with the product, except one vLLM pod whose page is made as
vLLM makes it, by prometheus_client with its content negotiation (``vllm_served``): there the format depends on
what the scraper asks for, and prometheus_client 0.26 writes each colon of a sample's name as "_" in OpenMetrics
unless the scraper allows UTF-8 names (Prometheus 2.x asks for OpenMetrics and does not), so Prometheus stores
``vllm_num_requests_waiting``; VictoriaMetrics asks for the text format and stores the colons.

Counters and histograms move by a fixed step at every scrape (``Page.scrapes``), so a rate's ratio (a mean queue
time) is exact whatever the timing; arrival counters grow with the clock instead (``Page.seconds``), so their rate is
requests per second.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Gauge, Histogram
from prometheus_client.exposition import choose_encoder

# vLLM's TIME_TO_FIRST_TOKEN_BUCKETS and REQUEST_LATENCY_BUCKETS (vllm/v1/metrics/buckets.py)
VLLM_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                     20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
VLLM_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                        240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip
# vLLM's inter-token latency buckets (the same for vllm:time_per_output_token_seconds, the name it replaced)
VLLM_ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                    40.0, 80.0)  # fmt: skip
SGLANG_TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0,
                       400.0)  # fmt: skip
SGLANG_QUEUE_BUCKETS = (0.0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 15.0, 20.0, 30.0,
                        40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0, 200.0, 300.0, 400.0, 500.0, 600.0, 700.0, 800.0,
                        900.0, 1000.0, 1200.0, 1400.0, 1600.0, 1800.0, 2000.0, 2500.0, 3000.0)  # fmt: skip
# TGI: every name ending in "duration" gets 0.0001 x 1.5^k seconds, k = 1..35 (router/src/server.rs)
TGI_DURATION_BUCKETS = tuple(0.0001 * 1.5**k for k in range(1, 36))

Labels = Mapping[str, str]
CREATED = 1_764_000_000.0  # when a prometheus_client counter was made: a fixed Unix time


def _labels(labels: Labels, sort: bool = True) -> str:
    if not labels:
        return ""
    items = sorted(labels.items()) if sort else list(labels.items())
    return "{" + ",".join(f'{k}="{v}"' for k, v in items) + "}"


def _py(value: float) -> str:
    """A number as Python's prometheus_client writes it (``repr`` of a float: 7.0, 0.8123, nan)."""
    if value != value:
        return "NaN"
    return repr(float(value))


@dataclass
class Page:
    """One engine pod's /metrics: ``render(page)`` builds the text at each scrape."""

    render: Callable[[Page], str]
    scrapes: int = 0
    started: float = field(default_factory=time.monotonic)

    def text(self) -> str:
        self.scrapes += 1
        return self.render(self)

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.started


# -- Python's prometheus_client: vLLM, SGLang, production-stack's router --------------------------------------------


def py_gauge(name: str, help_: str, samples: Iterable[tuple[Labels, float]]) -> str:
    lines = [f"# HELP {name} {help_}", f"# TYPE {name} gauge"]
    lines += [f"{name}{_labels(labels)} {_py(value)}" for labels, value in samples]
    return "\n".join(lines) + "\n"


def py_counter(name: str, help_: str, samples: Iterable[tuple[Labels, float]], created: bool = True) -> str:
    """``name`` without ``_total``, as the code declares it; the page shows ``_total`` (and ``_created``)."""
    samples = list(samples)
    lines = [f"# HELP {name}_total {help_}", f"# TYPE {name}_total counter"]
    lines += [f"{name}_total{_labels(labels)} {_py(value)}" for labels, value in samples]
    if created:
        lines += [f"# HELP {name}_created {help_}", f"# TYPE {name}_created gauge"]
        lines += [f"{name}_created{_labels(labels)} {_py(CREATED)}" for labels, _ in samples]
    return "\n".join(lines) + "\n"


def py_histogram(
    name: str,
    help_: str,
    buckets: tuple[float, ...],
    samples: Iterable[tuple[Labels, int, float]],
    created: bool = True,
) -> str:
    """Each sample: labels, how many observations, and their value (all alike, so the mean is that value)."""
    samples = list(samples)
    lines = [f"# HELP {name} {help_}", f"# TYPE {name} histogram"]
    for labels, n, value in samples:
        for bound in (*buckets, float("inf")):
            le = "+Inf" if bound == float("inf") else _py(bound)
            lines.append(f"{name}_bucket{_labels({**labels, 'le': le})} {_py(n if value <= bound else 0)}")
        lines.append(f"{name}_count{_labels(labels)} {_py(n)}")
        lines.append(f"{name}_sum{_labels(labels)} {_py(n * value)}")
    if created:
        lines += [f"# HELP {name}_created {help_}", f"# TYPE {name}_created gauge"]
        lines += [f"{name}_created{_labels(labels)} {_py(CREATED)}" for labels, _, _ in samples]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class VllmEngine:
    """One vLLM engine (a data-parallel rank) of one model: its gauges, and the mean of its histograms."""

    waiting: float
    running: float
    kv: float
    ttft: float = 0.25  # seconds, every request alike
    queue_time: float = 0.1
    itl: float = 0.02  # seconds between two tokens, every gap alike


def vllm(
    engines: Mapping[str, VllmEngine], model: str = "llama", version: str = "0.34", hidden: bool = False
) -> Callable[[Page], str]:
    """vLLM's V1 engine (``vllm/v1/metrics/loggers.py``): labels model_name and engine. ``version`` 0.10 writes the KV
    gauge under both names, the old one's help marked deprecated; 0.9.1 only the old name. The time between tokens is
    ``vllm:inter_token_latency_seconds`` in 0.34, ``vllm:time_per_output_token_seconds`` in 0.10 and 0.9.1 (the same
    observations, before the rename); ``hidden`` is --show-hidden-metrics-for-version, which writes the old name beside
    the new one, its help marked deprecated (vLLM's tests/entrypoints/openai/test_metrics.py lists it in
    HIDDEN_DEPRECATED_METRICS)."""

    def render(page: Page) -> str:
        def each(value: Callable[[VllmEngine], float]) -> list[tuple[Labels, float]]:
            return [({"engine": i, "model_name": model}, value(e)) for i, e in engines.items()]

        done = 4 * page.scrapes  # four requests finish between two scrapes
        text = py_gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
                        each(lambda e: e.running))  # fmt: skip
        text += py_gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                         each(lambda e: e.waiting))  # fmt: skip
        if version != "0.9.1":
            text += py_gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                             each(lambda e: e.kv))  # fmt: skip
        if version in ("0.10", "0.9.1"):
            deprecated = "DEPRECATED: Use vllm:kv_cache_usage_perc instead." if version == "0.10" else ""
            text += py_gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage." + deprecated,
                             each(lambda e: e.kv))  # fmt: skip
        text += py_counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [({"engine": i, "finished_reason": reason, "model_name": model}, done if reason == "stop" else 0)
             for i in engines for reason in ("stop", "length", "abort", "error", "repetition")],
        )  # fmt: skip
        text += py_histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                             VLLM_TTFT_BUCKETS,
                             [({"engine": i, "model_name": model}, done, e.ttft)
                              for i, e in engines.items()])  # fmt: skip
        text += py_histogram("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
                             VLLM_LATENCY_BUCKETS,
                             [({"engine": i, "model_name": model}, done, e.queue_time)
                              for i, e in engines.items()])  # fmt: skip
        gaps = [({"engine": i, "model_name": model}, 9 * done, e.itl) for i, e in engines.items()]  # 10 tokens each
        if version == "0.34":
            text += py_histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                                 VLLM_ITL_BUCKETS, gaps)  # fmt: skip
        if version != "0.34" or hidden:
            deprecated = "DEPRECATED: Use vllm:inter_token_latency_seconds instead." if hidden else ""
            text += py_histogram("vllm:time_per_output_token_seconds",
                                 "Histogram of time per output token in seconds." + deprecated,
                                 VLLM_ITL_BUCKETS, gaps)  # fmt: skip
        return text

    return render


def vllm_served(engine: VllmEngine, model: str = "llama") -> Callable[[str], tuple[bytes, str]]:
    """One vLLM engine's page as vLLM serves it: prometheus_client's registry, encoded as the scraper's Accept header
    asks (four requests finish between two scrapes, at the engine's times)."""
    registry = CollectorRegistry()
    names = ["model_name", "engine"]
    for name, help_, value in (
        ("vllm:num_requests_running", "Number of requests in model execution batches.", engine.running),
        ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", engine.waiting),
        ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", engine.kv),
    ):
        Gauge(name, help_, names, registry=registry).labels(model, "0").set(value)
    ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", names,
                     buckets=VLLM_TTFT_BUCKETS, registry=registry).labels(model, "0")  # fmt: skip
    queue = Histogram("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
                      names, buckets=VLLM_LATENCY_BUCKETS, registry=registry).labels(model, "0")  # fmt: skip

    def negotiate(accept: str) -> tuple[bytes, str]:
        for _ in range(4):
            ttft.observe(engine.ttft)
            queue.observe(engine.queue_time)
        encode, content_type = choose_encoder(accept)
        return encode(registry), content_type

    return negotiate


def sglang(waiting: float, running: float, usage: float, ttft: float, queue_time: float) -> Callable[[Page], str]:
    """SGLang's scheduler and tokenizer collectors (multiprocess mode: no ``_created``), priority scheduling on (the
    total under ``priority=""`` beside each priority's share) and metrics from every tensor-parallel rank (rank 1
    repeats rank 0's queue)."""
    base = {"engine_type": "unified", "model_name": "qwen", "moe_ep_rank": "0", "pp_rank": "0"}

    def ranks(value: float) -> list[tuple[Labels, float]]:
        return [({**base, "priority": "", "tp_rank": r}, value) for r in ("0", "1")]

    def render(page: Page) -> str:
        done = 2 * page.scrapes
        queue = [*ranks(waiting), ({**base, "priority": "1", "tp_rank": "0"}, waiting - 1),
                 ({**base, "priority": "2", "tp_rank": "0"}, 1.0)]  # fmt: skip
        text = py_gauge("sglang:num_running_reqs", "The number of running requests.", ranks(running))
        text += py_gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.", queue)
        text += py_gauge("sglang:token_usage", "The token usage.", ranks(usage))
        tokenizer = {"engine_type": "unified", "model_name": "qwen"}
        text += py_histogram("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                             SGLANG_TTFT_BUCKETS,
                             [({**tokenizer, "is_streaming": s}, done, ttft) for s in ("true", "false")],
                             created=False)  # fmt: skip
        text += py_histogram("sglang:queue_time_seconds", "Histogram of queueing time in seconds.",
                             SGLANG_QUEUE_BUCKETS, [({**base, "tp_rank": "0"}, done, queue_time)],
                             created=False)  # fmt: skip
        text += py_counter("sglang:http_requests", "Total number of HTTP requests by endpoint and method",
                           [({"endpoint": "/generate", "method": "POST"}, round(1.5 * page.seconds, 3)),
                            ({"endpoint": "/metrics", "method": "GET"}, float(page.scrapes))],
                           created=False)  # fmt: skip
        return text

    return render


def stack_router(running: Mapping[str, float], arrivals_per_second: float) -> Callable[[Page], str]:
    """vLLM production-stack's router (``vllm_router/services/metrics_service``): it reuses vLLM's gauge names with a
    ``server`` label for what it routed, declares ``vllm:num_requests_waiting`` without ever setting it, and counts
    arrivals in ``vllm:num_incoming_requests_total``."""

    def render(page: Page) -> str:
        text = py_gauge("vllm:num_requests_running", "Number of running requests",
                        [({"server": s}, v) for s, v in running.items()])  # fmt: skip
        text += py_gauge("vllm:num_requests_waiting", "Number of waiting requests", [])
        text += py_counter("vllm:num_incoming_requests",
                           "Total valid incoming requests to router (including when no backends available).",
                           [({"model": "llama"}, round(arrivals_per_second * page.seconds, 3))])  # fmt: skip
        return text

    return render


# -- Rust's metrics-exporter-prometheus: TGI ------------------------------------------------------------------------


def tgi(queue: float, batch: float, queue_time: float, arrivals_per_second: float) -> Callable[[Page], str]:
    """TGI's router (no labels; counters without ``_total``; ``..._duration`` names as histograms)."""

    def render(page: Page) -> str:
        done = 3 * page.scrapes
        lines = [
            "# HELP tgi_request_count Total number of requests",
            "# TYPE tgi_request_count counter",
            f"tgi_request_count {int(arrivals_per_second * page.seconds)}",
            "# HELP tgi_request_success Number of successful requests",
            "# TYPE tgi_request_success counter",
            f"tgi_request_success {done}",
            "# HELP tgi_queue_size Current queue size",
            "# TYPE tgi_queue_size gauge",
            f"tgi_queue_size {queue:g}",
            "# HELP tgi_batch_current_size Current batch size",
            "# TYPE tgi_batch_current_size gauge",
            f"tgi_batch_current_size {batch:g}",
            "# HELP tgi_request_queue_duration Request queue duration",
            "# TYPE tgi_request_queue_duration histogram",
        ]
        for bound in TGI_DURATION_BUCKETS:
            lines.append(f'tgi_request_queue_duration_bucket{{le="{bound!r}"}} {done if queue_time <= bound else 0}')
        lines += [
            f'tgi_request_queue_duration_bucket{{le="+Inf"}} {done}',
            f"tgi_request_queue_duration_sum {done * queue_time!r}",
            f"tgi_request_queue_duration_count {done}",
        ]
        return "\n".join(lines) + "\n"

    return render


# -- prometheus-cpp: Triton ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TritonModel:
    name: str
    pending: float
    queued_us_per_scrape: int  # microseconds of queueing added between two scrapes
    done_per_scrape: int  # requests finished between two scrapes


def triton(models: Iterable[TritonModel]) -> Callable[[Page], str]:
    """Triton's per-model metrics (labels model and version; counters under their bare names)."""
    models = list(models)

    def render(page: Page) -> str:
        def family(name: str, kind: str, help_: str, value: Callable[[TritonModel], float]) -> list[str]:
            out = [f"# HELP {name} {help_}", f"# TYPE {name} {kind}"]
            return out + [f'{name}{{model="{m.name}",version="1"}} {value(m):g}' for m in models]

        n = page.scrapes
        lines = family(
            "nv_inference_request_success",
            "counter",
            "Number of successful inference requests, all batch sizes",
            lambda m: m.done_per_scrape * n,
        )
        lines += family(
            "nv_inference_queue_duration_us",
            "counter",
            "Cumulative inference queuing duration in microseconds (includes cached requests)",
            lambda m: m.queued_us_per_scrape * n,
        )
        lines += family(
            "nv_inference_pending_request_count",
            "gauge",
            "Instantaneous number of pending requests awaiting execution per-model.",
            lambda m: m.pending,
        )
        return "\n".join(lines) + "\n"  # fmt: skip

    return render


# -- Go's client_golang: the endpoint picker -------------------------------------------------------------------------


def endpoint_picker(queue: float, requests_per_second: float) -> Callable[[Page], str]:
    """llm-d-router's endpoint picker with flow control on: each metric under its new ``llm_d_epp_`` name and its
    deprecated Gateway API inference extension twin, with the same value."""
    queue_labels = {"fairness_id": "default", "inference_pool": "llama-pool", "model_name": "llama", "priority": "0",
                    "target_model_name": "llama"}  # fmt: skip
    request_labels = {"model_name": "llama", "priority": "0", "target_model_name": "llama"}

    def render(page: Page) -> str:
        served = round(requests_per_second * page.seconds, 3)
        lines = []
        for new, old, kind, help_, labels, value in (
            ("llm_d_epp_flow_control_queue_size", "inference_extension_flow_control_queue_size", "gauge",
             "Current number of requests actively held in the Flow Control queue.", queue_labels, queue),
            ("llm_d_epp_request_total", "inference_objective_request_total", "counter",
             "Total number of processed requests.", request_labels, served),
        ):  # fmt: skip
            extra = {"fairness_id": "default"} if new == "llm_d_epp_request_total" else {}
            lines += [f"# HELP {new} [ALPHA] {help_}", f"# TYPE {new} {kind}"]
            lines.append(f"{new}{_labels({**labels, **extra})} {value:g}")
            lines += [f"# HELP {old} [ALPHA] [Deprecated: Use {new}] {help_}", f"# TYPE {old} {kind}"]
            lines.append(f"{old}{_labels(labels)} {value:g}")
        return "\n".join(lines) + "\n"

    return render


def garbled(page: Page) -> str:
    """A page no engine should write: a queue that is not a number. Prometheus refuses the whole scrape (the target
    is down), VictoriaMetrics the line: either way the pod has no series."""
    return (
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        'vllm:num_requests_waiting{engine="0",model_name="llama"} seven\n'
    )


# -- the pods of the tests' cluster ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class EnginePod:
    namespace: str
    pod: str
    node: str
    app: str  # the pod's app label
    page: Callable[[Page], str]
    # a page in the format the scraper asks for, made by the engine's own client library (then ``page`` is unused)
    negotiate: Callable[[str], tuple[bytes, str]] | None = None


def pods() -> list[EnginePod]:
    """What the integration tests serve, with what each reads (docs/adapter.md works the same numbers)."""
    return [
        EnginePod("llm", "vllm-0", "node-a", "chat", vllm({"0": VllmEngine(7, 12, 0.8123)})),
        EnginePod(
            "llm",
            "vllm-1",
            "node-a",
            "chat",
            vllm({"0": VllmEngine(3, 5, 0.6, ttft=0.5, itl=0.04), "1": VllmEngine(1, 6, 0.4)}),
        ),
        EnginePod("llm", "vllm-010-0", "node-a", "chat", vllm({"0": VllmEngine(2, 4, 0.5, itl=0.05)}, version="0.10")),
        EnginePod("llm", "vllm-091-0", "node-a", "chat", vllm({"0": VllmEngine(0, 1, 0.25)}, version="0.9.1")),
        EnginePod("llm", "vllm-om-0", "node-a", "chat", garbled, vllm_served(VllmEngine(6, 9, 0.3))),
        EnginePod("llm", "sglang-0", "node-b", "chat", sglang(4, 6, 0.42, ttft=0.5, queue_time=0.2)),
        EnginePod("llm", "tgi-0", "node-b", "chat", tgi(5, 8, queue_time=0.05, arrivals_per_second=2.0)),
        EnginePod(
            "llm",
            "triton-0",
            "node-c",
            "vision",
            triton([TritonModel("resnet", 2, 8000, 4), TritonModel("bert", 1, 2000, 1)]),
        ),
        # one pod, two engines: two pages under the same pod
        EnginePod("llm", "mixed-0", "node-c", "chat", vllm({"0": VllmEngine(1, 2, 0.3)})),
        EnginePod("llm", "mixed-0", "node-c", "chat", sglang(2, 3, 0.5, ttft=0.5, queue_time=0.2)),
        # what no engine should say: a queue that is not a number, a negative batch, a KV use above 1
        EnginePod("llm", "bad-0", "node-c", "chat", vllm({"0": VllmEngine(float("nan"), -1, 1.7)})),
        EnginePod("llm", "garbled-0", "node-c", "chat", garbled),
        EnginePod("llm", "epp-0", "node-c", "gateway", endpoint_picker(6, requests_per_second=3.0)),
        # production-stack: a router in front of one vLLM pod, no endpoint picker
        EnginePod(
            "stack",
            "router-0",
            "node-b",
            "router",
            stack_router({"http://stack-vllm-0:8000": 12}, arrivals_per_second=2.0),
        ),
        EnginePod("stack", "stack-vllm-0", "node-b", "chat", vllm({"0": VllmEngine(9, 12, 0.7)})),
        # engines alone, nothing in front: arrivals counted by the engines that count them (TGI 2/s, SGLang's /generate
        # 1.5/s; not its /metrics scrapes)
        EnginePod("edge", "edge-tgi-0", "node-c", "chat", tgi(1, 2, queue_time=0.05, arrivals_per_second=2.0)),
        EnginePod("edge", "edge-sglang-0", "node-c", "chat", sglang(2, 3, 0.5, ttft=0.5, queue_time=0.2)),
    ]


def scrape_jobs(targets: Mapping[str, EnginePod]) -> list[dict[str, object]]:
    """One scrape job for the engine pages, each target labelled as the shipped scrape job labels a pod it
    discovers (namespace, pod, node), and its own labels kept as the engine wrote them (no honor_labels)."""
    return [
        {
            "job_name": "gpuscale-inference-engines",
            "static_configs": [
                {"targets": [target], "labels": {"namespace": p.namespace, "pod": p.pod, "node": p.node}}
                for target, p in targets.items()
            ],
        }
    ]
