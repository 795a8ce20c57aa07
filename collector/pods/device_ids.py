"""Device IDs as device plugins hand them to the kubelet, parsed into what they point at.

Seen in the wild: a GPU UUID (``GPU-8265e87e-...``); a time-slicing or MPS replica of it (``GPU-...::3``); a MIG
device (``MIG-<uuid>``, or the older ``MIG-GPU-<uuid>/<gi>/<ci>``); a device node name (``nvidia0``); GKE's
``nvidia0/gi1/vgpu0`` (GPU instance 1 of nvidia0, sharing replica 0); a plain index (``0``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_GPU = re.compile(r"GPU-[0-9a-fA-F-]{8,}")
_MIG = re.compile(r"MIG-[0-9a-fA-F-]{8,}")
_OLD_MIG = re.compile(r"MIG-(GPU-[0-9a-fA-F-]{8,})/([0-9]+)/([0-9]+)")
_NODE = re.compile(r"nvidia([0-9]+)(?:/gi([0-9]+))?(?:/vgpu([0-9]+))?")


@dataclass(frozen=True)
class DeviceRef:
    """What a device ID names; exactly one of ``gpu_uuid``, ``mig_uuid``, ``minor`` or ``index`` is set."""

    gpu_uuid: str | None = None
    mig_uuid: str | None = None
    minor: int | None = None
    index: int | None = None
    gpu_instance: int | None = None  # a MIG GPU instance of the GPU named by gpu_uuid or minor


def parse_device_id(device_id: str) -> DeviceRef | None:
    """The device an ID names, or None for a form this collector does not know."""
    text = device_id.strip()
    base, sep, replica = text.rpartition("::")
    if sep and replica.isascii() and replica.isdigit():
        text = base
    if _GPU.fullmatch(text):
        return DeviceRef(gpu_uuid=text)
    if match := _OLD_MIG.fullmatch(text):
        return DeviceRef(gpu_uuid=match.group(1), gpu_instance=int(match.group(2)))
    if _MIG.fullmatch(text):
        return DeviceRef(mig_uuid=text)
    if match := _NODE.fullmatch(text):
        gi = match.group(2)
        return DeviceRef(minor=int(match.group(1)), gpu_instance=int(gi) if gi is not None else None)
    if text.isascii() and text.isdigit():  # str.isdigit() also accepts "²", which int() refuses
        return DeviceRef(index=int(text))
    return None
