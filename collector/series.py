"""Readings → labelled series → metric families: the middle of the pipeline (read, attach, render).

A ``Series`` is one entity's values with the labels that name it: a whole GPU, or later a pod's share of a GPU or
a MIG instance. Families are rebuilt from the latest series each cycle, so series of GPUs or pods that are gone
disappear by themselves.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .counters import Counters
from .exposition import Family, Labels
from .fields import Values
from .nvml_device import GpuInfo
from .nvml_reader import DeviceReading


@dataclass(frozen=True)
class Series:
    entity: Labels  # gpu, UUID, pci_bus_id, device, modelName (+ GPU_I_ID, GPU_I_PROFILE for MIG)
    values: Values
    owner: Labels = field(default=())  # pod, namespace, container when a pod owns what these values measure


def gpu_labels(gpu: GpuInfo, replace_blanks: bool = False) -> Labels:
    model = gpu.model.replace(" ", "-") if replace_blanks else gpu.model
    return (
        ("gpu", str(gpu.index)),
        ("UUID", gpu.uuid),
        ("pci_bus_id", gpu.pci_bus_id),
        ("device", gpu.device),
        ("modelName", model),
    )


def device_series(readings: Iterable[DeviceReading], replace_blanks: bool = False) -> list[Series]:
    return [Series(gpu_labels(r.gpu, replace_blanks), r.values) for r in readings]


def gpu_families(
    series: Sequence[Series],
    counters: Counters,
    common: Labels,
    label_values: Mapping[str, str],
    help_prefix: str = "",
) -> list[Family]:
    """One family per counter that at least one series has a value for; a field no GPU supports is absent."""
    extra = common + tuple((name, label_values.get(name, "")) for name in counters.labels)
    labelled = [(s.entity + extra + s.owner, s.values) for s in series]
    families = []
    for counter in counters.counters:
        samples = tuple((labels, values[counter.field]) for labels, values in labelled if counter.field in values)
        if samples:
            families.append(Family(counter.field, counter.type, help_prefix + counter.help, samples))
    return families
