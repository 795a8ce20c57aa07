"""The kubelet's pod-resources ``List`` answer, read from the wire (``pods/protowire.py``): the fields the collector
uses, and nothing else.

Field numbers are those of the kubelet's ``api.proto`` (k8s.io/kubelet/pkg/apis/podresources/v1; the copy in
harness/node/podresources/ is what the stand-in kubelet's stubs are generated from):

    ListPodResourcesResponse  pod_resources = 1
    PodResources              name = 1, namespace = 2, containers = 3
    ContainerResources        name = 1, devices = 2, dynamic_resources = 5      (cpu_ids = 3, memory = 4: skipped)
    ContainerDevices          resource_name = 1, device_ids = 2                 (topology = 3: skipped)
    DynamicResource           claim_name = 2, claim_namespace = 3, claim_resources = 4   (class_name = 1: skipped)
    ClaimResource             driver_name = 2, pool_name = 3, device_name = 4   (cdi_devices = 1, share_id = 5: skipped)

The request, ``ListPodResourcesRequest``, has no fields: it is zero bytes on the wire.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple, TypeVar

from collector.pods import protowire

REQUEST = b""
T = TypeVar("T")


class Devices(NamedTuple):
    resource_name: str
    device_ids: tuple[str, ...]


class ClaimDevice(NamedTuple):
    driver_name: str
    pool_name: str
    device_name: str


class Claim(NamedTuple):
    name: str
    namespace: str
    devices: tuple[ClaimDevice, ...]


class Container(NamedTuple):
    name: str
    devices: tuple[Devices, ...]
    claims: tuple[Claim, ...]


class Pod(NamedTuple):
    name: str
    namespace: str
    containers: tuple[Container, ...]


def parse(answer: bytes) -> list[Pod]:
    """The pods of a ``ListPodResourcesResponse``; ``protowire.WireError`` says where the bytes stopped being one."""
    return list(_each(protowire.length_delimited(answer).get(1, ()), _pod, "pod_resources"))


def _pod(data: memoryview) -> Pod:
    found = protowire.length_delimited(data)
    containers = _each(found.get(3, ()), _container, "containers")
    return Pod(_last(found, 1, "name"), _last(found, 2, "namespace"), containers)


def _container(data: memoryview) -> Container:
    found = protowire.length_delimited(data)
    devices = _each(found.get(2, ()), _devices, "devices")
    claims = _each(found.get(5, ()), _claim, "dynamic_resources")
    return Container(_last(found, 1, "name"), devices, claims)


def _devices(data: memoryview) -> Devices:
    found = protowire.length_delimited(data)
    ids = _each(found.get(2, ()), lambda value: protowire.text(value, ""), "device_ids")
    return Devices(_last(found, 1, "resource_name"), ids)


def _claim(data: memoryview) -> Claim:
    found = protowire.length_delimited(data)
    devices = _each(found.get(4, ()), _claim_device, "claim_resources")
    return Claim(_last(found, 2, "claim_name"), _last(found, 3, "claim_namespace"), devices)


def _claim_device(data: memoryview) -> ClaimDevice:
    found = protowire.length_delimited(data)
    return ClaimDevice(_last(found, 2, "driver_name"), _last(found, 3, "pool_name"), _last(found, 4, "device_name"))


def _each(values: Sequence[memoryview], read: Callable[[memoryview], T], field: str) -> tuple[T, ...]:
    """A repeated field's values, read; an error in one is named by its place (``containers[2]``)."""
    if not values:
        return ()
    out = []
    for i, value in enumerate(values):
        try:
            out.append(read(value))
        except protowire.WireError as e:
            raise e.within(f"{field}[{i}]") from None
    return tuple(out)


def _last(found: protowire.Fields, number: int, field: str) -> str:
    """A singular string field: its last value on the wire, as the library keeps it; empty when absent."""
    values = found.get(number)
    return protowire.text(values[-1], field) if values else ""
