"""The run as one self-contained HTML page: the settings, the picture (as base64, no file beside it), the decisions,
the ``kubectl get --raw`` the run printed with its answer, and the tables (HTML tables with the console's header rows).
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence

from demo.chart import HEIGHT, WIDTH
from demo.table import SHARED, ChatTable, Table

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


def chat_table_html(table: ChatTable) -> str:
    """Chat's table as an HTML table: the same header and cells as the console's, with the time of each sync."""

    def cells(tag: str, row: Sequence[str]) -> str:
        return "".join(f"<{tag}>{html.escape(cell)}</{tag}>" for cell in row)

    body = "\n".join(f"<tr>{cells('td', row)}</tr>" for row in table.rows)
    return (
        f'<div class="scroll"><table>\n<thead><tr>{cells("th", table.columns)}</tr></thead>\n<tbody>\n{body}\n'
        "</tbody>\n</table></div>"
    )


def page(
    title: str,
    settings: str,
    picture: bytes | None,
    decisions: Sequence[str],
    table: Table,
    kubectl: str = "",
    chat: ChatTable | None = None,
    height: int = HEIGHT,
) -> str:
    """One HTML page, nothing outside it: the settings, the picture inline (drawn without a title: the page's heading
    is the title; ``height`` pixels tall), the decisions, the ``kubectl`` command and its answer when the run asked
    it, and the tables: the trainer's, and chat's when there is one."""
    alt = "per-pod utilization, average and replicas over time" + (
        "; chat's requests waiting and replicas" if chat is not None else ""
    )
    image = (
        f'<img alt="{html.escape(alt)}" width="{WIDTH}" height="{height}" '
        f'src="data:image/png;base64,{base64.b64encode(picture).decode()}">'
        if picture
        else "<p>No picture: matplotlib is not installed (<code>pip install 'gpuscale[plot]'</code>).</p>"
    )
    asked = f"<h2>What the HPA reads, as you would ask it</h2>\n<pre>{html.escape(kubectl)}</pre>\n" if kubectl else ""
    answered = (
        f"<h2>What the external metrics API answered chat's HPA, every sync</h2>\n{chat_table_html(chat)}\n"
        if chat is not None
        else ""
    )
    return (
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>\n"
        f"<h1>{html.escape(title)}</h1>\n<pre>{html.escape(settings)}</pre>\n{image}\n"
        f"<h2>Scaling decisions</h2>\n<pre>{html.escape(chr(10).join(decisions) or 'none')}</pre>\n{asked}"
        f"<h2>What the custom metrics API answered the trainer's HPA, every sync</h2>\n{table_html(table)}\n"
        f"{answered}"
        "</body></html>\n"
    )
