"""The run as a picture: the trainer's per-pod utilization (with the two pods that share one GPU), its average
against the target and its replicas, and, below them, chat's requests waiting against its target and its replicas,
over time. Every panel has a title.

matplotlib is an optional extra (``pip install 'gpuscale[plot]'``; GPU machines often lack it): without it there
is no picture, and the table the run printed is the record (demo/page.py puts both in one HTML page).
"""

from __future__ import annotations

import importlib.util
import io
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from demo.hpa import HpaSpec
from demo.hpa_controller import Sync
from demo.record import ChatSample

WIDTH, HEIGHT, DPI = 1200, 900, 100  # pixels of the PNG
CHAT_HEIGHT = 500  # pixels more for chat's two panels
# the trainer's pods share the work evenly, so their values are equal: each pod gets its own marker, nudged
# sideways from the one before by NUDGE seconds, so that four equal lines show as four
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
NUDGE = 0.3


@dataclass(frozen=True)
class ChatPanels:
    """What chat's panels are drawn from: its syncs, its HPA, and the requests arriving."""

    samples: Sequence[ChatSample]
    spec: HpaSpec
    rate: Callable[[float], float]  # requests a second arriving at a second
    capacity: float  # requests a second one replica serves at most


def height(chat: ChatPanels | None) -> int:
    return HEIGHT + (CHAT_HEIGHT if chat is not None else 0)


def available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def png(drawn: Any) -> bytes:
    """``figure``'s picture as PNG bytes, WIDTH x ``height(chat)`` pixels."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(drawn)
    out = io.BytesIO()
    drawn.savefig(out, format="png")  # no tight bounding box: the size stays WIDTH x HEIGHT
    return out.getvalue()


def figure(
    syncs: Sequence[Sync],
    spec: HpaSpec,
    title: str | None,
    work: Callable[[float], float] | None = None,
    chat: ChatPanels | None = None,
    shared: Sequence[Mapping[str, float]] = (),
) -> Any:
    """The picture, titled unless ``title`` is None; ``work``: the total work at a second, drawn with the replicas;
    ``chat``: two more panels below; ``shared``: the values of the pods that share one GPU, read at each sync."""
    # the object API, not pyplot: no global figure state and no GUI backend chosen behind our back
    from matplotlib.figure import Figure

    drawn = Figure(figsize=(WIDTH / DPI, height(chat) / DPI), dpi=DPI, layout="constrained")
    ratios = [3, 2, 1.6] + ([2, 1.6] if chat is not None else [])
    axes = drawn.subplots(len(ratios), 1, sharex=True, gridspec_kw={"height_ratios": ratios})
    pods_axes, average_axes, replicas_axes = axes[:3]
    if title is not None:
        drawn.suptitle(title)
    t = [s.at for s in syncs]

    pods = list(dict.fromkeys(name for s in syncs for name in s.values))
    for n, name in enumerate(pods):
        pods_axes.plot([at + NUDGE * n for at in t], [s.values.get(name, math.nan) for s in syncs],
                       marker=MARKERS[n % len(MARKERS)], markersize=5, linewidth=1.4, label=name)  # fmt: skip
    others = list(dict.fromkeys(name for values in shared for name in values))
    for n, name in enumerate(others):
        pods_axes.plot(t[: len(shared)], [values.get(name, math.nan) for values in shared], color="grey",
                       linestyle=("--", ":")[n % 2], marker=".", linewidth=1.4,
                       label=f"{name} (shared GPU)")  # fmt: skip
    pods_axes.set_title("trainer: Pods metric gpu_utilization, each pod's value (markers 0.3 s apart where equal)"
                        + ("; two other pods sharing one GPU, each its own share" if others else ""),
                        loc="left", fontsize="medium")  # fmt: skip
    pods_axes.set_ylabel("gpu_utilization per pod (%)")
    pods_axes.set_ylim(0, 105)
    if pods or others:
        pods_axes.legend(loc="upper right", fontsize="small", ncols=min(len(pods) + len(others), 4))

    averages = [s.decision.proposal.average for s in syncs]
    average_axes.plot(t, [math.nan if a is None else a for a in averages], marker=".", color="black", label="average")
    low, high = spec.target * (1 - spec.tolerance), spec.target * (1 + spec.tolerance)
    average_axes.axhspan(low, high, color="tab:green", alpha=0.15, label=f"tolerance ({low:g}-{high:g})")
    average_axes.axhline(spec.target, color="tab:green", linestyle="--", label=f"target {spec.target:g}")
    average_axes.set_title("trainer: the pods' average, which its HPA compares with the target", loc="left",
                           fontsize="medium")  # fmt: skip
    average_axes.set_ylabel("average (%)")
    average_axes.set_ylim(0, 105)
    average_axes.legend(loc="upper right", fontsize="small", ncols=3)

    replicas_axes.step(t, [s.decision.replicas for s in syncs], where="post", color="tab:purple", label="replicas")
    top = float(spec.max_replicas)
    if work is not None:  # drawn at its own times (every 0.1 s), not the syncs'
        every = [0.1 * i for i in range(int(t[-1] / 0.1) + 1)] if t else []
        worth = [work(at) for at in every]
        top = max([top, *worth])  # more work than replicas can take (one GPU) stays on the chart
        replicas_axes.step(every, worth, where="post", color="tab:orange", linestyle="--",
                           label="work (GPUs' worth)")  # fmt: skip
        replicas_axes.legend(loc="upper right", fontsize="small", ncols=2)
    replicas_axes.set_title(f"trainer: replicas ({spec.min_replicas} to {spec.max_replicas}) and the work arriving",
                            loc="left", fontsize="medium")  # fmt: skip
    replicas_axes.set_ylabel("replicas")
    replicas_axes.set_ylim(0, top + 0.5)
    axes[-1].set_xlabel("seconds")
    _mark_scaling([(s.at, s.decision.current, s.decision.replicas) for s in syncs if s.decision.scales],
                  (pods_axes, average_axes, replicas_axes), replicas_axes)  # fmt: skip
    if chat is not None:
        _chat(chat, axes[3], axes[4], t[-1] if t else 0.0)
    return drawn


def _mark_scaling(changes: Sequence[tuple[float, int, int]], lined: Sequence[Any], annotated: Any) -> None:
    """A dotted line at each scaling (when, from, to) on every axes of ``lined``, and "from→to" on ``annotated``."""
    for at, before, after in changes:
        for axes in lined:
            axes.axvline(at, color="grey", linestyle=":", linewidth=1)
        annotated.annotate(f"{before}→{after}", (at, after), textcoords="offset points", xytext=(3, 4),
                           fontsize="small")  # fmt: skip


def _chat(chat: ChatPanels, waiting_axes: Any, replicas_axes: Any, end: float) -> None:
    """Requests waiting (what the HPA read, the engines' part) against the target, then replicas and arrivals."""
    t = [s.sync.at for s in chat.samples]
    demand = [sum(s.sync.values) if s.sync.values else math.nan for s in chat.samples]
    engines = [math.nan if s.waiting is None else s.waiting for s in chat.samples]
    target = [chat.spec.target * s.sync.decision.replicas for s in chat.samples]
    waiting_axes.set_title(f"chat: External metric inference_demand, {chat.spec.min_replicas} to "
                           f"{chat.spec.max_replicas} replicas", loc="left", fontsize="medium")  # fmt: skip
    waiting_axes.plot(t, demand, marker=".", color="black", label="inference_demand (what the HPA read)")
    waiting_axes.plot(t, engines, marker=".", color="tab:blue", linestyle="--",
                      label="inference_requests_waiting (in the engines)")  # fmt: skip
    waiting_axes.step(t, target, where="post", color="tab:green", linestyle="--",
                      label=f"target: {chat.spec.target:g} x replicas")  # fmt: skip
    waiting_axes.set_ylabel("requests waiting")
    highest = max([v for v in (*demand, *engines, *target) if not math.isnan(v)], default=0.0)
    waiting_axes.set_ylim(0, 1.35 * highest + 1)  # room above the peak for the legend
    waiting_axes.legend(loc="upper right", fontsize="small", ncols=3)

    replicas_axes.step(t, [s.sync.decision.replicas for s in chat.samples], where="post", color="tab:purple",
                       label="replicas")  # fmt: skip
    # a sync finds the replicas ready that the interval before it made so: drawn over that interval
    replicas_axes.step(t, [s.ready for s in chat.samples], where="pre", color="tab:cyan", linewidth=1.2,
                       linestyle="-.", label="ready (model loaded)")  # fmt: skip
    every = [0.1 * i for i in range(int(end / 0.1) + 1)]
    worth = [chat.rate(at) / chat.capacity for at in every]
    replicas_axes.step(every, worth, where="post", color="tab:orange", linestyle="--",
                       label=f"arrivals (replicas' worth: {chat.capacity:.1f} requests/s each)")  # fmt: skip
    replicas_axes.set_title("chat: replicas, those ready, and the requests arriving", loc="left", fontsize="medium")
    replicas_axes.set_ylabel("replicas")
    replicas_axes.set_ylim(0, max([float(chat.spec.max_replicas), *worth]) + 0.5)
    replicas_axes.legend(loc="upper right", fontsize="small", ncols=3)
    changes = [(s.sync.at, s.sync.decision.current, s.sync.decision.replicas) for s in chat.samples
               if s.sync.decision.scales]  # fmt: skip
    _mark_scaling(changes, (waiting_axes, replicas_axes), replicas_axes)
