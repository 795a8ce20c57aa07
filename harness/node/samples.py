"""A value of the collector's last published exposition, read without HTTP."""

from __future__ import annotations

from collector.collection import Collection


def sample(collection: Collection, name: str, **labels: str) -> float | None:
    """The value of one series in the last published exposition, or None when it is absent."""
    for family in collection.latest.families:
        if family.name != name:
            continue
        for sample_labels, value in family.samples:
            if all(dict(sample_labels).get(k) == v for k, v in labels.items()):
                return value
    return None
