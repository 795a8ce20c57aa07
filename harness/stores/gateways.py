"""What sits in front of the engines, as Prometheus sees it: llm-d's endpoint picker (its flow control's pool
saturation, its running requests, its stale endpoints) and NVIDIA Dynamo's HTTP frontend (its time-to-first-token
and inter-token-latency histograms), each page written as that program's own client library writes it.

Read from: llm-d-router v0.10.0 (71f4f09) and main at ebab687 (``pkg/epp/metrics/llm_d_router_metrics.go`` and
``metrics.go``; Go's client_golang: help texts prefixed ``[ALPHA]``, families sorted by name, labels by name), and
Dynamo's ``lib/llm/src/http/service/metrics.rs`` at 0014908 with ``lib/runtime/src/metrics/prometheus_names.rs`` at
04070c7 (Rust's prometheus crate: ``_bucket`` lines, then ``_sum`` and ``_count``; numbers as Rust prints an f64).

The pods are in their own namespace (``gateway``, on node-c), so the engines' numbers of harness/stores/engines.py
stay as they are worked out there. Histograms move by a fixed step at every scrape (``Page.scrapes``): every
observation of a page has one value, so a mean is that value and a 95th percentile falls in that value's bucket,
whatever the timing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from harness.stores.engines import EnginePod, Labels, Page, VllmEngine, vllm

# Dynamo's frontend buckets: generate_log_buckets(min, max, count) at their defaults (DYN_METRICS_TTFT_* 0.001, 480,
# 18; DYN_METRICS_ITL_* 0.001, 2.0, 13): 0, then log-spaced values rounded to two significant figures
DYNAMO_TTFT_BUCKETS = (0.0, 0.0022, 0.0047, 0.01, 0.022, 0.047, 0.1, 0.22, 0.47, 1.0, 2.2, 4.7, 10.0, 22.0, 48.0,
                       100.0, 220.0, 480.0)  # fmt: skip
DYNAMO_ITL_BUCKETS = (0.0, 0.0019, 0.0035, 0.0067, 0.013, 0.024, 0.045, 0.084, 0.16, 0.3, 0.56, 1.1, 2.0)


def _go_labels(labels: Labels) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}" if labels else ""


def _rust_number(value: float) -> str:
    """An f64 as Rust's ``Display`` writes it: 0, 0.0022, 480, 12.5."""
    return str(int(value)) if value == int(value) else repr(value)


@dataclass(frozen=True)
class Pool:
    """One InferencePool's flow control: its saturation by stage, as the endpoint picker records it."""

    name: str
    saturation: Mapping[str, float]  # stage → value; "" for v0.10.0, which has no stage label


def endpoint_picker(pools: list[Pool], running: Mapping[str, float], stale: float | None) -> Callable[[Page], str]:
    """llm-d-router's endpoint picker with the flowControl feature gate on: pool saturation under its new name and its
    deprecated Gateway API inference extension twin (same values), running requests per model under
    ``llm_d_epp_request_running`` (labels fairness_id, model_name, priority, target_model_name) and the deprecated
    ``inference_objective_running_requests`` (model_name only), and the utilization detector's stale endpoints.
    ``stale`` None is the Gateway API inference extension's own endpoint picker (v1.5), which writes the deprecated
    running requests only (and, here, no flow control)."""

    def saturation(name: str, help_: str) -> list[str]:
        lines = [f"# HELP {name} {help_}", f"# TYPE {name} gauge"]
        for pool in pools:
            for stage, value in sorted(pool.saturation.items()):
                labels = {"inference_pool": pool.name, **({"stage": stage} if stage else {})}
                lines.append(f"{name}{_go_labels(labels)} {value:g}")
        return lines

    def render(page: Page) -> str:
        lines = saturation(
            "inference_extension_flow_control_pool_saturation",
            "[ALPHA] [Deprecated: Use llm_d_epp_flow_control_pool_saturation] Pool saturation signal gating Flow "
            "Control dispatch.",
        )
        lines += [
            "# HELP inference_objective_running_requests [ALPHA] [Deprecated: Use llm_d_epp_request_running] "
            "Inference objective number of running requests in each model.",
            "# TYPE inference_objective_running_requests gauge",
        ]
        lines += [f'inference_objective_running_requests{{model_name="{m}"}} {v:g}' for m, v in running.items()]
        if stale is None:
            return "\n".join(lines) + "\n"
        lines += saturation(
            "llm_d_epp_flow_control_pool_saturation", "[ALPHA] Pool saturation signal gating Flow Control dispatch."
        )
        lines += [
            "# HELP llm_d_epp_flow_control_stale_endpoints [ALPHA] Number of candidate endpoints whose metrics are "
            "missing or older than the staleness threshold, as of the most recent saturation evaluation.",
            "# TYPE llm_d_epp_flow_control_stale_endpoints gauge",
            f'llm_d_epp_flow_control_stale_endpoints{{detector="utilization-detector"}} {stale:g}',
            "# HELP llm_d_epp_request_running [ALPHA] Current number of active running requests.",
            "# TYPE llm_d_epp_request_running gauge",
        ]
        for model, value in running.items():
            labels = {"fairness_id": "default", "model_name": model, "priority": "0", "target_model_name": model}
            lines.append(f"llm_d_epp_request_running{_go_labels(labels)} {value:g}")
        return "\n".join(lines) + "\n"

    return render


@dataclass(frozen=True)
class Frontend:
    """What one Dynamo frontend's requests took: every time to first token alike, every inter-token gap alike."""

    ttft: float
    itl: float
    requests_per_scrape: int = 4
    tokens_per_request: int = 11  # ten gaps after the first token: ten inter-token observations


def dynamo_frontend(frontend: Frontend, model: str = "Qwen/Qwen3-0.6B", prefix: str = "dynamo_frontend"
                    ) -> Callable[[Page], str]:  # fmt: skip
    """Dynamo's frontend (label ``model``); ``prefix`` is ``nv_llm_http_service`` where DYN_METRICS_PREFIX sets it."""

    def histogram(name: str, help_: str, buckets: tuple[float, ...], n: int, value: float) -> list[str]:
        lines = [f"# HELP {name} {help_}", f"# TYPE {name} histogram"]
        for bound in buckets:
            lines.append(f'{name}_bucket{{model="{model}",le="{_rust_number(bound)}"}} {n if value <= bound else 0}')
        lines.append(f'{name}_bucket{{model="{model}",le="+Inf"}} {n}')
        lines.append(f'{name}_sum{{model="{model}"}} {_rust_number(n * value)}')
        lines.append(f'{name}_count{{model="{model}"}} {n}')
        return lines

    def render(page: Page) -> str:
        done = frontend.requests_per_scrape * page.scrapes
        gaps = done * (frontend.tokens_per_request - 1)
        lines = [
            f"# HELP {prefix}_inflight_requests Number of inflight requests",
            f"# TYPE {prefix}_inflight_requests gauge",
            f'{prefix}_inflight_requests{{model="{model}"}} 3',
        ]
        lines += histogram(f"{prefix}_inter_token_latency_seconds", "Inter-token latency in seconds",
                           DYNAMO_ITL_BUCKETS, gaps, frontend.itl)  # fmt: skip
        lines += histogram(f"{prefix}_time_to_first_token_seconds", "Time to first token in seconds",
                           DYNAMO_TTFT_BUCKETS, done, frontend.ttft)  # fmt: skip
        return "\n".join(lines) + "\n"

    return render


def pods() -> list[EnginePod]:
    """The gateway namespace: two pools behind one endpoint picker (main's staged saturation), one v0.10.0 picker
    that writes no stage, two Dynamo frontends (one under the NIM prefix) and a vLLM that shows its hidden series;
    docs/adapter.md works the same numbers."""
    staged = [
        Pool("chat", {"prefill": 0.4, "decode": 1.3, "effective": 1.3}),  # past the set point: kept, never clamped
        Pool("code", {"decode": 0.2, "effective": 0.2}),
    ]
    return [
        EnginePod("gateway", "epp-0", "node-c", "epp", endpoint_picker(staged, {"llama": 12, "qwen": 4}, stale=2)),
        EnginePod("gateway", "epp-old-0", "node-c", "epp", endpoint_picker([Pool("batch", {"": 0.5})], {"m": 7}, 0)),
        EnginePod("gateway", "gaie-epp-0", "node-c", "epp", endpoint_picker([], {"phi": 5}, None)),
        EnginePod("gateway", "frontend-0", "node-c", "frontend", dynamo_frontend(Frontend(ttft=0.3, itl=0.02))),
        EnginePod(
            "gateway",
            "frontend-1",
            "node-c",
            "frontend",
            dynamo_frontend(Frontend(ttft=2.0, itl=0.05), prefix="nv_llm_http_service"),
        ),
        # a vLLM run with --show-hidden-metrics-for-version (the time between tokens under both names, counted once)
        # and one without; neither queues anything, so node-c's queue stays the engines' own
        EnginePod("gateway", "vllm-gw-0", "node-c", "chat", vllm({"0": VllmEngine(0, 2, 0.1, itl=0.06)})),
        EnginePod(
            "gateway", "vllm-hidden-0", "node-c", "chat", vllm({"0": VllmEngine(0, 2, 0.1, itl=0.03)}, hidden=True)
        ),
    ]
