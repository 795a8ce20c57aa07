"""What a replay shows: the table, its rows as JSON, a picture of replicas against demand, and the manifest of the
best policy that meets the objective."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..errors import LoadError
from .policies import manifest
from .run import Report, Row

COLUMNS = ("policy", "GPU-s", "x bound", "served", "TTFT p50", "p90", "p99", "within objective", "waited for a cold "
           "start", "cut", "scale events", "peak replicas")  # fmt: skip


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return "never" if math.isinf(value) else f"{value:.2f} s"


def _cells(r: Row) -> list[str]:
    return [r.policy, f"{r.gpu_seconds:,.0f}", f"{r.ratio:.2f}", f"{r.served:,} of {r.requests:,}",
            _seconds(r.ttft_p50_seconds), _seconds(r.ttft_p90_seconds), _seconds(r.ttft_p99_seconds),
            f"{100 * r.slo_attainment:.2f} %", f"{r.waited_for_cold_start:,}", f"{r.requests_cut:,}",
            str(r.scale_events), str(r.peak_replicas)]  # fmt: skip


def table(report: Report) -> str:
    spec = report.spec
    s = spec.settings
    lines = [
        f"trace: {spec.source}, {len(spec.arrivals):,} requests over {spec.arrivals[-1].at / 60:.0f} minutes",
        f"objective: {100 * spec.attainment:g} % of requests with their first token within {s.ttft_objective:g} s; "
        f"cold start {s.cold_start:g} s, grace {s.grace:g} s, scrape every {s.scrape_interval:g} s, HPA sync every "
        f"{s.controller.sync_period:g} s",
        f"replica: {spec.cost.source}; at most {s.limits.max_batch} requests, {s.limits.kv_tokens:,} KV tokens, "
        f"{s.limits.max_step_tokens:,} tokens a step",
        f"bound: {report.bound_per_replica:.2f} requests/s a replica; fluid floor {report.fluid_floor:,.0f} GPU-s "
        f"({report.fluid_floor / report.bound.gpu_seconds:.2f} x bound); every policy capped at {spec.max_replicas} "
        "replicas",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    for r in (*report.rows, report.bound):
        mark = "" if r.slo_attainment >= spec.attainment else " (misses)"
        cells = _cells(r)
        cells[0] += mark
        lines.append("| " + " | ".join(cells) + " |")
    best = report.best()
    lines.append("")
    lines.append(f"best policy that meets the objective: {best[0].name} ({best[1].ratio:.2f} x bound)" if best
                 else "no policy meets the objective")  # fmt: skip
    return "\n".join(lines) + "\n"


def rows_json(report: Report) -> list[dict[str, Any]]:
    def entry(r: Row) -> dict[str, Any]:
        def finite(x: float | None) -> float | None:
            return None if x is None or math.isinf(x) else round(x, 4)

        return {
            "policy": r.policy,
            "recommended_by": r.recommended_by,
            "gpu_seconds": round(r.gpu_seconds, 1),
            "bound_gpu_seconds": round(r.bound_gpu_seconds, 1),
            "ratio_to_bound": round(r.ratio, 4),
            "slo_attainment": round(r.slo_attainment, 6),
            "ttft_p50_seconds": finite(r.ttft_p50_seconds),
            "ttft_p90_seconds": finite(r.ttft_p90_seconds),
            "ttft_p99_seconds": finite(r.ttft_p99_seconds),
            "requests": r.requests,
            "requests_served": r.served,
            "requests_waited_for_cold_start": r.waited_for_cold_start,
            "requests_cut": r.requests_cut,
            "scale_events": r.scale_events,
            "peak_replicas": r.peak_replicas,
        }

    return [entry(r) for r in (*report.rows, report.bound)]


def write_json(report: Report, path: Path) -> None:
    _write(path, json.dumps(rows_json(report), indent=1) + "\n")


def write_manifest(report: Report, path: Path, namespace: str, deployment: str) -> bool:
    """The best policy's manifest; False (nothing written) when no policy meets the objective."""
    best = report.best()
    if best is None:
        return False
    _write(path, manifest(best[0], namespace, deployment))
    return True


def write_png(report: Report, path: Path) -> None:
    """Replicas (and those ready) against the requests arriving per minute, one panel a policy."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise LoadError(f"--png needs matplotlib ({e})") from None
    rows = (*report.rows, report.bound)
    fig, axes = plt.subplots(len(rows), 1, figsize=(10, 1.8 * len(rows)), sharex=True, squeeze=False)
    for ax, r in zip(axes[:, 0], rows, strict=True):
        tl = r.timeline
        minutes = [t / 60 for t in tl.t]
        ax.step(minutes, tl.replicas, where="post", label="replicas", color="tab:blue")
        ax.step(minutes, tl.ready, where="post", label="ready", color="tab:green", linestyle="--")
        demand = ax.twinx()
        interval = (tl.t[1] - tl.t[0]) if len(tl.t) > 1 else 1.0
        demand.plot(minutes, [60 * n / interval for n in tl.arrivals], color="tab:gray", alpha=0.5, linewidth=0.8)
        demand.set_ylabel("requests/min", fontsize=7)
        ax.set_ylabel("replicas", fontsize=7)
        ax.set_title(f"{r.policy}: {r.gpu_seconds:,.0f} GPU-s ({r.ratio:.2f} x bound), "
                     f"{100 * r.slo_attainment:.2f} % within objective", fontsize=8)  # fmt: skip
    axes[0, 0].legend(loc="upper left", fontsize=7)
    axes[-1, 0].set_xlabel("minutes")
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=90)
    except OSError as e:
        raise LoadError(f"cannot write {path}: {e.strerror or e}") from None
    finally:
        plt.close(fig)


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text)
    except OSError as e:
        raise LoadError(f"cannot write {path}: {e.strerror or e}") from None
