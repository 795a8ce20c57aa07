"""The median of a few numbers, as ``statistics.median`` gives it, without that module's import: it brings
``decimal`` and ``fractions``, 0.9 MB resident in a collector that only ever wants a median of small integers."""

from __future__ import annotations

from collections.abc import Sequence


def median(values: Sequence[float]) -> float:
    """The middle value, or the mean of the two middle ones; ``values`` must not be empty."""
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
