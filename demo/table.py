"""The table the run prints, a row a sync: the replicas, their average and what the custom metrics API answered per
pod. The cells are kept, not only the printed lines, so that the page's HTML table (demo/chart.py) is built from the
same values and header as the console's lines, and the two cannot disagree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from demo.hpa_controller import Sync

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
            text += " | " + " ".join(f"{c:>8}" for c in shared)
        return text

    def header(self) -> str:
        return self.line(self.columns) + (f" ({SHARED})" if self.shared else "")
