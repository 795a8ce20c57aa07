"""The tables the run prints, a row a sync: for the trainer the replicas, their average and what the custom metrics
API answered per pod; for chat (``ChatTable``) the replicas, those ready, and what the external metrics API answered.
The console prints both rows of a sync on one line. The cells are kept, not only the printed lines, so that the
page's HTML tables (demo/page.py) are built from the same values and headers as the console's lines, and they
cannot disagree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from demo.hpa_controller import ExternalSync, Sync

SHARED = "one shared GPU"  # what the columns right of the bar are


def _value(values: Mapping[str, float], name: str) -> str:
    return f"{values[name]:.1f}" if name in values else "-"


@dataclass
class Table:
    pods: tuple[str, ...]  # the Deployment's replicas, a column each (the ones that may exist)
    shared: tuple[str, ...] = ()  # pods on one GPU together, on the right
    rows: list[tuple[str, ...]] = field(default_factory=list)  # the cells, in the order of ``columns``

    @property
    def columns(self) -> tuple[str, ...]:
        return ("t", "replicas", "average", *self.pods, *self.shared)

    @property
    def first_shared(self) -> int:
        """Where the shared pods' cells start: after t, replicas, average and the Deployment's pods."""
        return 3 + len(self.pods)

    def add(self, sync: Sync, shared: Mapping[str, float]) -> tuple[str, ...]:
        """A row for ``sync``, with the shared pods' values read at the same time."""
        average = sync.decision.proposal.average
        row = (
            f"{sync.at:.0f}s",
            str(sync.decision.current),
            "-" if average is None else f"{average:.1f}",
            *(_value(sync.values, p) for p in self.pods),
            *(_value(shared, p) for p in self.shared),
        )
        self.rows.append(row)
        return row

    def line(self, cells: Sequence[str]) -> str:
        """Cells as the console prints them: right-aligned in fixed widths, the shared GPU's pods after a bar."""
        mine, shared = cells[3 : self.first_shared], cells[self.first_shared :]
        text = f"{cells[0]:>5}  {cells[1]:>8}  {cells[2]:>7} " + " ".join(f"{c:>9}" for c in mine)
        if self.shared:
            text += " | " + " ".join(f"{c:>7}" for c in shared)
        return text


def _count(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


@dataclass
class ChatTable:
    label: str = "chat"  # over its columns
    rows: list[tuple[str, ...]] = field(default_factory=list)  # the cells, in the order of ``columns``

    columns: ClassVar[tuple[str, ...]] = ("t", "chat", "ready", "demand", "waiting")  # "chat": its replicas

    def add(self, sync: ExternalSync, ready: int, waiting: float | None) -> tuple[str, ...]:
        """A row for ``sync``: ``demand``, what the HPA read; ``waiting``, the engines' queues read beside it."""
        demand = sum(sync.values) if sync.values else None
        row = (f"{sync.at:.0f}s", str(sync.decision.current), str(ready), _count(demand), _count(waiting))
        self.rows.append(row)
        return row

    def line(self, cells: Sequence[str]) -> str:
        """Cells as the console prints them after the trainer's, without the time they share."""
        return f"{cells[1]:>4} {cells[2]:>5} {cells[3]:>6} {cells[4]:>7}"


def console_line(table: Table, cells: Sequence[str], chat: ChatTable, chat_cells: Sequence[str]) -> str:
    """One sync of both HPAs: the trainer's row, then chat's after a bar."""
    return f"{table.line(cells)} | {chat.line(chat_cells)}"


def console_header(table: Table, chat: ChatTable) -> list[str]:
    """The header, under a line that names the groups of columns over them: the shared GPU's pods, and chat's."""
    header = console_line(table, table.columns, chat, chat.columns)
    groups = ""
    if table.shared:
        groups = " " * len(table.line(table.columns[: table.first_shared]).rstrip(" |")) + "   " + SHARED
    chat_at = len(table.line(table.columns)) + 3
    groups = f"{groups:<{chat_at}}{chat.label}"
    return [groups, header]
