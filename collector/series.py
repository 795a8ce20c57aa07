"""Readings → labelled series → metric families: the middle of the pipeline (read, attach, render).

A ``Series`` is one entity's values with the labels that name it: a whole GPU, or later a pod's share of a GPU or
a MIG instance. Families are rebuilt from the latest series each cycle, so series of GPUs or pods that are gone
disappear by themselves.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from collector.counters.file import Counters
from collector.exposition import Family, Labels
from collector.nvml.device import GpuInfo, MigInstance
from collector.nvml.event_windows import Samples
from collector.nvml.fields import Values
from collector.nvml.reader import DeviceReading
from collector.nvml.xid import XID_FIELD, xid_labels


@dataclass(frozen=True)
class Series:
    entity: Labels  # gpu, UUID, pci_bus_id, device, modelName (+ GPU_I_ID, GPU_I_PROFILE for MIG)
    values: Values
    owner: Labels = field(default=())  # pod, namespace, container when a pod owns what these values measure
    # fields served as several samples with labels of their own (counts by XID or clock event, peer GPUs)
    labelled: Mapping[str, Samples] = field(default_factory=dict)


def gpu_labels(gpu: GpuInfo, replace_blanks: bool = False) -> Labels:
    model = gpu.model.replace(" ", "-") if replace_blanks else gpu.model
    return (
        ("gpu", str(gpu.index)),
        ("UUID", gpu.uuid),
        ("pci_bus_id", gpu.pci_bus_id),
        ("device", gpu.device),
        ("modelName", model),
        *gpu.labels,
    )


def instance_labels(gpu: Labels, instance: MigInstance) -> Labels:
    """A MIG GPU instance's series are named by their GPU's labels and the instance, as dcgm-exporter names them."""
    return (*gpu, ("GPU_I_PROFILE", instance.profile), ("GPU_I_ID", str(instance.gpu_instance_id)))


def device_series(readings: Iterable[DeviceReading], replace_blanks: bool = False) -> list[Series]:
    """Every GPU, and each MIG GPU instance on its own (dcgm-exporter's default ``-d f`` serves instances too)."""
    out = []
    for r in readings:
        base = gpu_labels(r.gpu, replace_blanks)
        out.append(Series(base, r.values, labelled=r.labelled))
        out.extend(Series(instance_labels(base, i.instance), i.values) for i in r.instances)
    return out


def gpu_families(
    series: Sequence[Series],
    counters: Counters,
    common: Labels,
    label_values: Mapping[str, str],
    help_prefix: str = "",
    label_names: Mapping[str, str] | None = None,
) -> list[Family]:
    """One family per counter that at least one series has a value for; a field no GPU supports is absent.
    ``label_names`` renames labels (``-o``: dcgm-exporter 1.x's ``uuid``, ``pod_name``, ...)."""
    # label fields of the whole node; a GPU's own (serial, VBIOS ...) are among its entity labels (gpu_labels)
    extra = common + tuple((name, label_values[name]) for name in counters.labels if name in label_values)
    # a label field named by its DCGM 4.7 name (DCGM_FI_SYSTEM_DRIVER_VERSION) carries that name; -o applies after
    names = {**dict(counters.label_names), **(label_names or {})}
    rows = [(_renamed(_merged(s.entity + extra, s.owner), names), s) for s in series]
    families = []
    for counter in counters.counters:
        name, scale = counter.field, counter.scale
        samples = tuple((labels + own, value) for labels, s in rows for own, value in _field_samples(name, s, scale))
        if samples:
            families.append(Family(counter.series, counter.type, help_prefix + counter.help, samples))
    return families


def _field_samples(name: str, series: Series, scale: float = 1.0) -> Samples:
    """A series' samples of one field with the labels each adds: none, or one plain value (times ``scale``, into the
    unit the series' name carries), the last XID with its code and message, or several (window counts, peer
    statuses)."""
    if name in series.labelled:
        return series.labelled[name]
    if name not in series.values:
        return ()
    value = series.values[name]
    if name == XID_FIELD:
        return ((xid_labels(value), value),)
    return (((), _scaled(value, scale)),)


def _scaled(value: float, scale: float) -> float:
    """``value`` in the unit ``scale`` leads to, to 15 significant digits (a double's exact ones): 74.4 % is a ratio
    of 0.744, never 0.7440000000000001."""
    if scale == 1.0:
        return value
    return float(f"{value * scale:.15g}")


def _merged(named: Labels, owner: Labels) -> Labels:
    """``owner`` after ``named``, less any name already given: a repeated name would make Prometheus refuse the whole
    scrape. Pod labels never take the collector's names (``pods/labels.py`` prefixes them); this holds whatever
    else an owner's labels bring."""
    if not owner:
        return named
    taken = {k for k, _ in named}
    merged = list(named)
    for k, v in owner:
        if k not in taken:
            taken.add(k)
            merged.append((k, v))
    return tuple(merged)


def _renamed(labels: Labels, names: Mapping[str, str] | None) -> Labels:
    """``labels`` with names replaced as ``names`` says; a name that then repeats keeps its first value only."""
    if not names:
        return labels
    out: dict[str, str] = {}
    for k, v in labels:
        out.setdefault(names.get(k, k), v)
    return tuple(out.items())
