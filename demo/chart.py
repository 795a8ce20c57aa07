"""The run as a picture: per-pod utilization, the average against the target, and the replicas, over time.

matplotlib is an optional extra (``pip install 'gpuscale[plot]'``; GPU machines often lack it): without it there
is no picture, and the table the run printed is the record. ``page`` puts the settings, the picture (as base64, no
file beside it), the decisions, the ``kubectl get --raw`` the run printed with its answer, and the table (an HTML
table with the console's header row) in one self-contained HTML page.
"""

from __future__ import annotations

import base64
import html
import importlib.util
import io
import math
from collections.abc import Callable, Sequence

from demo.hpa import HpaSpec
from demo.hpa_controller import Sync
from demo.table import SHARED, Table

WIDTH, HEIGHT, DPI = 1200, 900, 100  # pixels of the PNG


def available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def png(syncs: Sequence[Sync], spec: HpaSpec, title: str | None, work: Callable[[float], float] | None = None) -> bytes:
    """The picture, WIDTH x HEIGHT pixels, titled unless ``title`` is None; ``work``: the total work at a second,
    drawn with the replicas."""
    # the object API, not pyplot: no global figure state and no GUI backend chosen behind our back
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(WIDTH / DPI, HEIGHT / DPI), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    pods_axes, average_axes, replicas_axes = figure.subplots(
        3, 1, sharex=True, gridspec_kw={"height_ratios": [3, 2, 1.6]}
    )
    if title is not None:
        figure.suptitle(title)
    t = [s.at for s in syncs]

    pods = list(dict.fromkeys(name for s in syncs for name in s.values))
    for n, name in enumerate(pods):
        # pods that share the work evenly have the same values: each line narrower than the one before shows them all
        width = 1.2 + 1.6 * (len(pods) - 1 - n)
        pods_axes.plot(t, [s.values.get(name, math.nan) for s in syncs], marker=".", linewidth=width, label=name)
    pods_axes.set_ylabel("gpu_utilization per pod (%)")
    pods_axes.set_ylim(0, 105)
    if pods:
        pods_axes.legend(loc="upper right", fontsize="small", ncols=min(len(pods), 6))

    averages = [s.decision.proposal.average for s in syncs]
    average_axes.plot(t, [math.nan if a is None else a for a in averages], marker=".", color="black", label="average")
    low, high = spec.target * (1 - spec.tolerance), spec.target * (1 + spec.tolerance)
    average_axes.axhspan(low, high, color="tab:green", alpha=0.15, label=f"tolerance ({low:g}-{high:g})")
    average_axes.axhline(spec.target, color="tab:green", linestyle="--", label=f"target {spec.target:g}")
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
    replicas_axes.set_ylabel("replicas")
    replicas_axes.set_ylim(0, top + 0.5)
    replicas_axes.set_xlabel("seconds")
    for s in syncs:
        if s.decision.scales:
            for axes in (pods_axes, average_axes, replicas_axes):
                axes.axvline(s.at, color="grey", linestyle=":", linewidth=1)
            replicas_axes.annotate(f"{s.decision.current}→{s.decision.replicas}", (s.at, s.decision.replicas),
                                   textcoords="offset points", xytext=(3, 4), fontsize="small")  # fmt: skip
    out = io.BytesIO()
    figure.savefig(out, format="png")  # no tight bounding box: the size stays WIDTH x HEIGHT
    return out.getvalue()


# The settings, the decisions and kubectl's answer are console text: kept as lines (pre) but wrapped at the page's
# width, anywhere in a long word (a JSON item, the metric's path), so that nothing runs off the side; the picture
# shrinks with a narrow window. The table's 11 columns at most (6 replicas, 2 pods on a shared GPU) fit in 800 pixels
# with headers in the normal weight (bold ones are a column's width wider); narrower, it scrolls in its own box.
STYLE = (
    "body{font-family:sans-serif;margin:2em}"
    "@media (max-width:60em){body{margin:1em}}"
    "pre{background:#f6f6f6;padding:1em;white-space:pre-wrap;overflow-wrap:anywhere}"
    "img{max-width:100%;height:auto}"
    ".scroll{overflow-x:auto}"
    "table{border-collapse:collapse;font-size:.85em;font-variant-numeric:tabular-nums}"
    "th,td{padding:.1em .4em;text-align:right;white-space:nowrap}"
    "th{font-weight:normal;background:#eee}"
    "thead tr:last-child th{border-bottom:1px solid #888}"
    ".shared{border-left:1px solid #888}"
)


def table_html(table: Table) -> str:
    """The console's table as an HTML table: the same header and cells, numbers right-aligned, the shared GPU's pods
    set off by a rule, with their own heading above them as the console's header line ends with it."""

    def cells(tag: str, row: Sequence[str]) -> str:
        opening = [f'<{tag} class="shared">' if n == table.first_shared else f"<{tag}>" for n in range(len(row))]
        return "".join(f"{o}{html.escape(cell)}</{tag}>" for o, cell in zip(opening, row, strict=True))

    head = f"<tr>{cells('th', table.columns)}</tr>"
    if table.shared:
        head = (
            f'<tr><th colspan="{table.first_shared}"></th><th class="shared" colspan="{len(table.shared)}">'
            f"{html.escape(SHARED)}</th></tr>{head}"
        )
    body = "\n".join(f"<tr>{cells('td', row)}</tr>" for row in table.rows)
    return f'<div class="scroll"><table>\n<thead>{head}</thead>\n<tbody>\n{body}\n</tbody>\n</table></div>'


def page(
    title: str, settings: str, picture: bytes | None, decisions: Sequence[str], table: Table, kubectl: str = ""
) -> str:
    """One HTML page, nothing outside it: the settings, the picture inline (drawn without a title: the page's heading
    is the title), the decisions, the ``kubectl`` command and its answer when the run asked it, and the table."""
    image = (
        f'<img alt="per-pod utilization, average and replicas over time" width="{WIDTH}" height="{HEIGHT}" '
        f'src="data:image/png;base64,{base64.b64encode(picture).decode()}">'
        if picture
        else "<p>No picture: matplotlib is not installed (<code>pip install 'gpuscale[plot]'</code>).</p>"
    )
    asked = f"<h2>What the HPA reads, as you would ask it</h2>\n<pre>{html.escape(kubectl)}</pre>\n" if kubectl else ""
    return (
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>\n"
        f"<h1>{html.escape(title)}</h1>\n<pre>{html.escape(settings)}</pre>\n{image}\n"
        f"<h2>Scaling decisions</h2>\n<pre>{html.escape(chr(10).join(decisions) or 'none')}</pre>\n{asked}"
        f"<h2>What the custom metrics API answered, every sync</h2>\n{table_html(table)}\n"
        "</body></html>\n"
    )
