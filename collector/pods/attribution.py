"""Readings → series named by the pods that use them: the "attach" step between reading NVML and rendering.

- A GPU (or MIG instance) held by one pod: its series carry ``pod``, ``namespace`` and ``container``.
- A GPU shared by several pods (time-slicing, MPS): the device-wide series stays without pod labels, and each
  sharing pod gets its own ``DCGM_FI_DEV_GPU_UTIL`` and ``DCGM_FI_DEV_FB_USED``. Utilization is split by NVML's
  per-process samples: a pod's value is the device's utilization over the collection interval times the pod's part
  of the process samples' utilization over the sampler's window (10 s: each ~200 ms sample names one process, so
  shorter windows split noisily). The pods of a GPU thus sum to its device value. Memory is the sum of its
  processes' memory. A sharing pod with no process on the GPU reports 0.
- MIG: one series set per GPU instance, labelled ``GPU_I_PROFILE`` and ``GPU_I_ID``, owned through ``MIG-<uuid>``.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterable
from typing import Protocol

from collector.errors import ProcessGone
from collector.exposition import Family, Labels
from collector.nvml.reader import CycleResult, DeviceReading
from collector.pods.cgroups import CgroupReader
from collector.pods.directory import PodDirectory
from collector.pods.pod_resources import Assignment, Owner, PodResourcesWatcher
from collector.pods.process_sampler import ProcessSampler
from collector.self_metrics import PREFIX
from collector.series import Series, gpu_labels, instance_labels

GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
MIB = 1024 * 1024

Slot = tuple[int, int | None]  # (GPU index, MIG GPU instance ID or None for the whole GPU)


def owner_labels(owner: Owner) -> Labels:
    return (("pod", owner.pod), ("namespace", owner.namespace), ("container", owner.container), *owner.details)


def _one_pod(owners: Iterable[Owner]) -> Owner | None:
    """The owner when all holders are containers of one pod (the first container by name), else None."""
    ordered = sorted(owners)
    if ordered and len({(o.namespace, o.pod) for o in ordered}) == 1:
        return ordered[0]
    return None


def resolve(assignments: Iterable[Assignment], readings: Iterable[DeviceReading]) -> dict[Slot, set[Owner]]:
    by_uuid: dict[str, int] = {}
    by_minor: dict[int, int] = {}
    by_mig: dict[str, Slot] = {}
    indices: set[int] = set()
    for r in readings:
        by_uuid[r.gpu.uuid] = by_minor[r.gpu.minor] = r.gpu.index
        indices.add(r.gpu.index)
        for inst in r.instances:
            by_mig[inst.instance.uuid] = (r.gpu.index, inst.instance.gpu_instance_id)
    owners: dict[Slot, set[Owner]] = {}
    for a in assignments:
        ref = a.device
        slot: Slot | None = None
        if ref.mig_uuid is not None:
            slot = by_mig.get(ref.mig_uuid)
        else:
            index = (
                by_uuid.get(ref.gpu_uuid or "")
                if ref.gpu_uuid is not None
                else by_minor.get(ref.minor) if ref.minor is not None
                else ref.index if ref.index in indices
                else None
            )  # fmt: skip
            if index is not None:
                slot = (index, ref.gpu_instance)
        if slot is not None:
            owners.setdefault(slot, set()).add(a.owner)
    return owners


class ProcessMemoryReader(Protocol):
    def process_memory(self, index: int) -> dict[int, int]: ...


class Attribution:
    def __init__(
        self,
        reader: ProcessMemoryReader,
        watcher: PodResourcesWatcher,
        directory: PodDirectory | None,
        cgroups: CgroupReader,
        sampler: ProcessSampler | None,
        replace_blanks: bool = False,
        pod_uid: bool = False,
    ) -> None:
        """``pod_uid``: a ``pod_uid`` label on pod-owned series; pod labels come with the directory's answers."""
        self._reader = reader
        self._pod_uid = pod_uid
        self.watcher = watcher  # the kubelet's pod-resources map, refreshed on its own thread
        self._directory = directory
        self._cgroups = cgroups
        self._sampler = sampler
        self._replace_blanks = replace_blanks
        self.shared_gpus = 0
        self.unattributable = 0
        self.unsplit = 0

    @property
    def ready(self) -> bool:
        """The kubelet has answered (or failed) and the pod directory has listed the node's pods once."""
        return self.watcher.answered and (self._directory is None or self._directory.synced)

    def wait_ready(self, timeout: float, stop: threading.Event) -> bool:
        """Wait until ``ready``, at most ``timeout`` seconds or until ``stop`` is set; whether it became ready. Both
        answers come from tasks on the event loop, so this polls them."""
        deadline = time.monotonic() + timeout
        while not self.ready:
            if stop.wait(0.01) or time.monotonic() >= deadline:
                return self.ready
        return True

    def __call__(self, result: CycleResult) -> list[Series]:
        owners = resolve(self.watcher.current.assignments, result.readings)
        shared = {
            r.gpu.index
            for r in result.readings
            if len({(o.namespace, o.pod) for o in owners.get((r.gpu.index, None), ())}) > 1
        }
        self.shared_gpus = len(shared)
        if self._sampler is not None:
            self._sampler.watch(sorted(shared))
        series: list[Series] = []
        for reading in result.readings:
            index = reading.gpu.index
            base = gpu_labels(reading.gpu, self._replace_blanks)
            owner = _one_pod(owners.get((index, None), ()))
            series.append(Series(base, reading.values, self._owner_labels(owner), reading.labelled))
            if index in shared:
                series.extend(self._shares(reading, base, owners[(index, None)]))
            for inst in reading.instances:
                inst_owner = _one_pod(owners.get((index, inst.instance.gpu_instance_id), ()))
                series.append(Series(instance_labels(base, inst.instance), inst.values, self._owner_labels(inst_owner)))
        return series

    def _owner_labels(self, owner: Owner | None) -> Labels:
        """The pod's labels, then its UID and Kubernetes labels where asked for and known (from the pod watch)."""
        if owner is None:
            return ()
        labels = owner_labels(owner)
        meta = self._directory.pod(owner.namespace, owner.pod) if self._directory is not None else None
        if meta is None:
            return labels
        return (*labels, *((("pod_uid", meta.uid),) if self._pod_uid else ()), *meta.labels)

    def _shares(self, reading: DeviceReading, base: Labels, holders: set[Owner]) -> list[Series]:
        if self._sampler is None or self._directory is None or not self._directory.synced:
            self.unattributable += 1  # without naming processes' pods, a per-pod 0 would be a lie: leave them out
            return []
        index = reading.gpu.index
        sums = self._sampler.window_sums(index)
        if sums is None:  # its processes' samples failed or are not in yet: memory only, no utilization share
            self.unsplit += 1
        memory = {pid: used // MIB for pid, used in self._reader.process_memory(index).items()}  # pid → MiB
        pod_of: dict[int, tuple[str, str]] = {}
        for pid in set(sums or ()) | set(memory):
            try:
                uid = self._cgroups.pod_uid(pid)
            except ProcessGone:
                continue
            ref = self._directory.lookup(uid) if uid else None
            if ref is not None:
                pod_of[pid] = ref
        total = sum(sums.values()) if sums else 0.0
        device = reading.values.get(GPU_UTIL)
        out = []
        pods: dict[tuple[str, str], Owner] = {}
        for owner in sorted(holders):
            pods.setdefault((owner.namespace, owner.pod), owner)
        for key, owner in pods.items():
            pids = [pid for pid, ref in pod_of.items() if ref == key]
            values = {FB_USED: float(sum(memory.get(p, 0) for p in pids))}
            if device is not None and sums is not None:  # no device value or no samples: no share of it either
                share = sum(sums.get(p, 0.0) for p in pids) / total if total > 0 else 0.0
                values[GPU_UTIL] = round(device * share, 2)
            out.append(Series(base, values, self._owner_labels(owner)))
        return out

    def families(self) -> list[Family]:
        def one(name: str, type_: str, help_: str, value: float) -> Family:
            return Family(PREFIX + name, type_, help_, (((), value),))

        out = [
            one("shared_gpus", "gauge", "GPUs held by more than one pod; each pod gets a share.", self.shared_gpus),
            one(
                "cgroup_read_errors_total",
                "counter",
                "Processes whose /proc/<pid>/cgroup could not be read.",
                self._cgroups.errors,
            ),
            one(
                "shared_gpu_unattributed_total",
                "counter",
                "Cycles in which a shared GPU could not be split by pod (pod directory not synced).",
                self.unattributable,
            ),
            one(
                "shared_gpu_utilization_unsplit_total",
                "counter",
                "Cycles in which a shared GPU's pods got memory but no utilization share: its per-process samples "
                "failed or were not in yet.",
                self.unsplit,
            ),
        ]
        if self._directory is not None:
            out.append(
                one(
                    "pod_directory_synced",
                    "gauge",
                    "1 once pods on this node are known by UID.",
                    float(self._directory.synced),
                )
            )
        if self._sampler is not None:
            out.append(
                one(
                    "process_sampler_errors_total",
                    "counter",
                    "Per-process utilization reads that failed.",
                    self._sampler.errors,
                )
            )
        watcher = self.watcher
        out.append(
            one("pod_mapping_up", "gauge", "1 when the kubelet's pod-resources map is fresh.", float(watcher.fresh))
        )
        age = watcher.age()
        if age is not None:
            out.append(one("pod_mapping_age_seconds", "gauge", "Seconds since the pod map was refreshed.", age))
        errors: Counter[str] = watcher.errors
        if errors:
            out.append(
                Family(
                    PREFIX + "pod_mapping_errors_total",
                    "counter",
                    "pod-resources refreshes that failed, by kind.",
                    tuple(((("kind", k),), float(n)) for k, n in sorted(errors.items())),
                )
            )
        return out
