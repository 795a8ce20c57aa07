"""Which GPU a Dynamic Resource Allocation device is: this node's ResourceSlices, watched as dcgm-exporter does.

The kubelet's pod-resources API names a DRA device by driver, pool and device name (``gpu.nvidia.com``,
``node-a``, ``gpu-0``), not by UUID. NVIDIA's DRA driver publishes each device in a ResourceSlice with the
attributes ``type`` (``gpu`` or ``mig``) and ``uuid`` (``GPU-...``, or ``MIG-...`` with ``parentUUID`` and
``profile``); this table maps (pool, device) to that UUID. Only this node's slices of that driver are listed
(field selectors ``spec.nodeName`` and ``spec.driver``): dcgm-exporter watches every slice of the cluster.

ResourceSlices are served as ``resource.k8s.io/v1`` from Kubernetes 1.34, ``v1beta2`` in 1.33 and ``v1beta1`` in
1.32, where a device's attributes sit under ``basic``; the first version the API server has is used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from collector.kube.config import KubeAccess
from collector.kube.watch import KubeWatch, Object
from collector.pods.device_ids import DeviceRef
from collector.pods.labels import Labels
from common.freshness import Freshness

GPU_DRIVER = "gpu.nvidia.com"
PATHS = tuple(f"/apis/resource.k8s.io/{version}/resourceslices" for version in ("v1", "v1beta2", "v1beta1"))


@dataclass(frozen=True)
class DraDevice:
    ref: DeviceRef
    labels: Labels = ()  # dra_mig_profile and dra_mig_device_uuid for a MIG device, as dcgm-exporter adds them


def devices_of(slice_: Object) -> dict[tuple[str, str], DraDevice]:
    """(pool, device name) → the GPU or MIG device, for the devices of one ResourceSlice that name a UUID."""
    spec = slice_.get("spec") or {}
    pool = str((spec.get("pool") or {}).get("name") or "")
    out = {}
    for device in spec.get("devices") or []:
        if not isinstance(device, dict) or not device.get("name"):
            continue
        attributes = (device.get("basic") or device).get("attributes") or {}
        kind, uuid = _text(attributes, "type"), _text(attributes, "uuid")
        if kind == "gpu" and uuid.startswith("GPU-"):
            out[(pool, str(device["name"]))] = DraDevice(DeviceRef(gpu_uuid=uuid))
        elif kind == "mig" and uuid.startswith("MIG-"):
            labels = (("dra_mig_profile", _text(attributes, "profile")), ("dra_mig_device_uuid", uuid))
            out[(pool, str(device["name"]))] = DraDevice(DeviceRef(mig_uuid=uuid), labels)
    return out


def _text(attributes: Any, name: str) -> str:
    """A string attribute, under its bare name or qualified by the driver's domain."""
    if not isinstance(attributes, dict):
        return ""
    value = attributes.get(name) or attributes.get(f"{GPU_DRIVER}/{name}") or {}
    return str(value.get("string") or "") if isinstance(value, dict) else ""


class KubeResourceSlices:
    def __init__(self, node_name: str, access: KubeAccess, source: Freshness | None = None) -> None:
        self._by_slice: dict[str, dict[tuple[str, str], DraDevice]] = {}  # slice name → its devices
        self._devices: dict[tuple[str, str], DraDevice] = {}
        self._watch = KubeWatch(
            "DRA ResourceSlices",
            access,
            PATHS,
            f"spec.nodeName={node_name},spec.driver={GPU_DRIVER}",
            self._replace,
            self._apply,
            "GPUs allocated through DRA claims carry no pod labels",
            source,
        )

    @property
    def synced(self) -> bool:
        return self._watch.synced

    @property
    def source(self) -> Freshness | None:
        return self._watch.source

    async def run(self) -> None:
        await self._watch.run()

    def lookup(self, pool: str, device: str) -> DraDevice | None:
        return self._devices.get((pool, device))

    def _replace(self, slices: list[Object]) -> None:
        by_slice = {str((s.get("metadata") or {}).get("name") or ""): devices_of(s) for s in slices}
        self._by_slice = by_slice
        self._devices = {key: device for devices in by_slice.values() for key, device in devices.items()}

    def _apply(self, kind: str, slice_: Object) -> None:
        name = str((slice_.get("metadata") or {}).get("name") or "")
        if kind == "DELETED":
            self._by_slice.pop(name, None)
        elif kind in ("ADDED", "MODIFIED"):
            self._by_slice[name] = devices_of(slice_)
        else:
            return
        self._devices = {key: device for devices in self._by_slice.values() for key, device in devices.items()}
