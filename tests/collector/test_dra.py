"""GPUs held through Dynamic Resource Allocation: the kubelet's dynamic resources over real gRPC, mapped to GPUs
through this node's ResourceSlices, attached to pods like device-plugin GPUs."""

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from collector.kube.config import KubeAccess
from collector.pods.device_ids import DeviceRef
from collector.pods.pod_resources import Owner, PodResourcesClient, PodResourcesWatcher
from collector.pods.resource_slices import DraDevice, KubeResourceSlices, devices_of
from harness.kube.api import FakeKubeAPIServer, is_true
from harness.kube.discovery import Served
from harness.node.kubelet import DraClaim, FakePod, PodResourcesServer, gpu_pod

GPU0 = "GPU-8265e87e-95f8-2238-161a-22c2ab522eda"
GPU1 = "GPU-1b2c3d4e-95f8-2238-161a-22c2ab522eda"
MIG = "MIG-5c2a1d3e-8f7b-5a6c-9d0e-1f2a3b4c5d6e"


def slice_v1(pool: str, devices: list[tuple[str, dict[str, str]]]) -> dict[str, Any]:
    """A ResourceSlice as resource.k8s.io/v1 serves it: attributes on the device, typed values."""
    return {
        "metadata": {"name": f"{pool}-gpu.nvidia.com-x"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": pool,
            "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {"name": name, "attributes": {k: {"string": v} for k, v in attrs.items()}, "capacity": {}}
                for name, attrs in devices
            ],
        },
    }


def test_devices_of_a_slice_by_pool_and_name() -> None:
    found = devices_of(
        slice_v1(
            "node-a",
            [
                ("gpu-0", {"type": "gpu", "uuid": GPU0, "productName": "NVIDIA H200"}),
                ("gpu-1-mig-19-0-1", {"type": "mig", "uuid": MIG, "parentUUID": GPU1, "profile": "1g.18gb"}),
                ("gpu-vfio-0", {"type": "vfio", "uuid": "0000:19:00.0"}),  # passed through to a VM: not ours
                ("gpu-2", {"type": "gpu"}),  # no UUID: nothing to match
            ],
        )
    )
    assert found == {
        ("node-a", "gpu-0"): DraDevice(DeviceRef(gpu_uuid=GPU0)),
        ("node-a", "gpu-1-mig-19-0-1"): DraDevice(
            DeviceRef(mig_uuid=MIG), (("dra_mig_profile", "1g.18gb"), ("dra_mig_device_uuid", MIG))
        ),
    }


def test_v1beta1_slices_keep_attributes_under_basic_and_names_may_be_qualified() -> None:
    old = {
        "metadata": {"name": "s"},
        "spec": {
            "pool": {"name": "node-a"},
            "devices": [{"name": "gpu-0", "basic": {"attributes": {"gpu.nvidia.com/type": {"string": "gpu"},
                                                                   "gpu.nvidia.com/uuid": {"string": GPU0}}}}],
        },
    }  # fmt: skip
    assert devices_of(old) == {("node-a", "gpu-0"): DraDevice(DeviceRef(gpu_uuid=GPU0))}


class Slices:
    """This node's ResourceSlices as a table (the watch itself is tested through the command line)."""

    def __init__(self, synced: bool = True) -> None:
        self.synced = synced
        self.devices = devices_of(
            slice_v1(
                "node-a",
                [
                    ("gpu-0", {"type": "gpu", "uuid": GPU0}),
                    ("gpu-1-mig-19-0-1", {"type": "mig", "uuid": MIG, "parentUUID": GPU1, "profile": "1g.18gb"}),
                ],
            )
        )

    def lookup(self, pool: str, device: str) -> DraDevice | None:
        return self.devices.get((pool, device))


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[PodResourcesServer]:
    server = PodResourcesServer(str(tmp_path / "kubelet.sock")).start()
    server.pods = [
        gpu_pod("ml", "plugin", GPU1),
        FakePod("ml", "dra", claims={"main": [DraClaim("gpu-claim", "ml", [("gpu.nvidia.com", "node-a", "gpu-0")])]}),
        FakePod("ml", "mig", claims={"main": [DraClaim("mig-claim", "ml", [("gpu.nvidia.com", "node-a",
                                                                            "gpu-1-mig-19-0-1")])]}),
        FakePod("ml", "nic", claims={"main": [DraClaim("nic", "ml", [("net.example.com", "node-a", "eth1")])]}),
        FakePod("ml", "gone", claims={"main": [DraClaim("old", "ml", [("gpu.nvidia.com", "node-a", "gpu-9")])]}),
    ]  # fmt: skip
    yield server
    server.stop()


def test_dra_claims_become_assignments_with_the_claim_as_labels(
    kubelet: PodResourcesServer, caplog: pytest.LogCaptureFixture
) -> None:
    client = PodResourcesClient(kubelet.socket_path, dra=Slices())
    with caplog.at_level(logging.WARNING):
        got = {(a.owner.pod, a.device) for a in asyncio.run(client.fetch())}
        asyncio.run(client.fetch())
    assert got == {
        ("plugin", DeviceRef(gpu_uuid=GPU1)),
        ("dra", DeviceRef(gpu_uuid=GPU0)),
        ("mig", DeviceRef(mig_uuid=MIG)),
    }
    dra = next(a for a in asyncio.run(client.fetch()) if a.owner.pod == "dra")
    assert dra.owner == Owner("ml", "dra", "main", (
        ("dra_claim_name", "gpu-claim"), ("dra_claim_namespace", "ml"), ("dra_driver_name", "gpu.nvidia.com"),
        ("dra_pool_name", "node-a"), ("dra_device_name", "gpu-0"),
    ))  # fmt: skip
    unknown = [r.getMessage() for r in caplog.records if "'node-a/gpu-9'" in r.getMessage()]
    assert len(unknown) == 1  # once, however often it is listed
    assert "DRA claim ml/old (pod ml/gone) is in no ResourceSlice of gpu.nvidia.com" in unknown[0]


def test_without_the_flag_dynamic_resources_are_ignored(kubelet: PodResourcesServer) -> None:
    client = PodResourcesClient(kubelet.socket_path)
    assert {a.owner.pod for a in asyncio.run(client.fetch())} == {"plugin"}


def test_nothing_is_reported_unknown_before_the_slices_are_listed(
    kubelet: PodResourcesServer, caplog: pytest.LogCaptureFixture
) -> None:
    slices = Slices(synced=False)
    slices.devices = {}
    client = PodResourcesClient(kubelet.socket_path, dra=slices)
    with caplog.at_level(logging.WARNING):
        assert {a.owner.pod for a in asyncio.run(client.fetch())} == {"plugin"}
    assert not [r for r in caplog.records if "ResourceSlice" in r.getMessage()]


async def test_the_slices_are_watched_at_the_newest_version_the_api_server_serves(tmp_path: Path) -> None:
    """A 1.32 cluster serves ResourceSlices as v1beta1 only: v1 and v1beta2 answer 404 and the next is asked."""
    api = FakeKubeAPIServer()
    api.discovery.add(
        Served("resource.k8s.io", ("v1beta1",), "resourceslices", "resourceslice", "ResourceSlice", False)
    )
    old = {"nodeName": "node-a", "driver": "gpu.nvidia.com", "pool": {"name": "node-a"},
           "devices": [{"name": "gpu-0", "basic": {"attributes": {"type": {"string": "gpu"},
                                                                  "uuid": {"string": GPU0}}}}]}  # fmt: skip
    api.put("resourceslices.resource.k8s.io", "node-a-gpu", spec=old)
    api.put("resourceslices.resource.k8s.io", "node-b-gpu", spec={**old, "nodeName": "node-b"})
    await api.start()
    slices = KubeResourceSlices("node-a", KubeAccess(str(api.kubeconfig(tmp_path / "kubeconfig"))))
    task = asyncio.create_task(slices.run())
    try:
        # the watch is sent after the LIST is synced: wait for it rather than assume it was already sent
        async with asyncio.timeout(20):
            while not (slices.synced and any(is_true(query.get("watch")) for _, query in api.requests)):
                await asyncio.sleep(0.05)
        assert slices.lookup("node-a", "gpu-0") == DraDevice(DeviceRef(gpu_uuid=GPU0))
        asked = [path.split("/")[3] for path, _ in api.requests]
        assert asked[:3] == ["v1", "v1beta2", "v1beta1"]
        assert set(asked[3:]) == {"v1beta1"}  # the watch, and any LIST after, stay there
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await api.stop()


def test_the_watcher_has_answered_only_with_an_answer_read_after_the_slices_were_listed(
    kubelet: PodResourcesServer,
) -> None:
    """The first collection waits for ``answered``: an answer read before the listing leaves claimed GPUs out."""
    slices = Slices(synced=False)
    listed = slices.devices
    slices.devices = {}
    watcher = PodResourcesWatcher(PodResourcesClient(kubelet.socket_path, dra=slices))
    asyncio.run(watcher.refresh_once())
    assert {a.owner.pod for a in watcher.current.assignments} == {"plugin"}
    assert not watcher.answered
    slices.synced, slices.devices = True, listed
    asyncio.run(watcher.refresh_once())
    assert {a.owner.pod for a in watcher.current.assignments} == {"plugin", "dra", "mig"}
    assert watcher.answered
