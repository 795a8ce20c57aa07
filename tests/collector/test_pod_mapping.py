"""Device IDs, cgroup paths and the kubelet's pod-resources API over a real gRPC unix socket."""

import asyncio
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from collector.errors import PodResourcesError, ProcessGone
from collector.pods.cgroups import CgroupReader, parse_pod_uid
from collector.pods.device_ids import DeviceRef, parse_device_id
from collector.pods.pod_resources import Assignment, Owner, PodResourcesClient, PodResourcesWatcher
from common.freshness import Freshness
from harness.node import proc_tree
from harness.node.kubelet import FakePod, PodResourcesServer, gpu_pod

UUID = "GPU-8265e87e-95f8-2238-161a-22c2ab522eda"
POD_UID = "1f6e2b7a-3c4d-4e5f-8a9b-0c1d2e3f4a5b"


@pytest.mark.parametrize(
    ("device_id", "ref"),
    [
        (UUID, DeviceRef(gpu_uuid=UUID)),
        (f"{UUID}::3", DeviceRef(gpu_uuid=UUID)),
        ("MIG-5c2a1d3e-8f7b-5a6c-9d0e-1f2a3b4c5d6e", DeviceRef(mig_uuid="MIG-5c2a1d3e-8f7b-5a6c-9d0e-1f2a3b4c5d6e")),
        (f"MIG-{UUID}/7/0", DeviceRef(gpu_uuid=UUID, gpu_instance=7)),
        ("nvidia3", DeviceRef(minor=3)),
        ("nvidia0/gi1/vgpu0", DeviceRef(minor=0, gpu_instance=1)),
        ("nvidia2/vgpu4", DeviceRef(minor=2)),
        ("5", DeviceRef(index=5)),
        (" nvidia1 ", DeviceRef(minor=1)),
    ],
)
def test_every_device_id_form(device_id: str, ref: DeviceRef) -> None:
    assert parse_device_id(device_id) == ref


@pytest.mark.parametrize("device_id", ["", "gpu0", "GPU-", "nvidia", "nvidiaX", "MIG-zz", "../../etc", "0x1f", "a::b"])
def test_unknown_forms_are_none(device_id: str) -> None:
    assert parse_device_id(device_id) is None


@pytest.mark.parametrize(
    "text",
    [proc_tree.v2_systemd(POD_UID), proc_tree.v2_systemd(POD_UID, "besteffort"), proc_tree.v2_cgroupfs(POD_UID),
     proc_tree.v1(POD_UID), proc_tree.v2_systemd(POD_UID.upper())],
)  # fmt: skip
def test_pod_uid_from_every_cgroup_layout(text: str) -> None:
    assert parse_pod_uid(text) == POD_UID


def test_processes_outside_kubernetes_have_no_pod() -> None:
    assert parse_pod_uid(proc_tree.outside_kubernetes()) is None
    assert parse_pod_uid("0::/process_api/1234\n") is None  # as on the test H200
    assert parse_pod_uid("") is None


def test_cgroup_reader_on_a_fake_proc(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    tree = proc_tree.ProcTree(tmp_path)
    tree.add(100, proc_tree.v1(POD_UID))
    (tmp_path / "200" / "cgroup").mkdir(parents=True)  # unreadable as a file
    (tmp_path / "201" / "cgroup").mkdir(parents=True)
    reader = CgroupReader(str(tmp_path))
    assert reader.pod_uid(100) == POD_UID
    with pytest.raises(ProcessGone):
        reader.pod_uid(300)
    assert reader.pod_uid(200) is None
    assert reader.pod_uid(201) is None
    assert reader.errors == 2
    assert len([r for r in caplog.records if "cannot read" in r.getMessage()]) == 1  # said once


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[PodResourcesServer]:
    server = PodResourcesServer(str(tmp_path / "kubelet.sock")).start()
    yield server
    server.stop()


def test_list_turns_pods_into_gpu_assignments(kubelet: PodResourcesServer, caplog: pytest.LogCaptureFixture) -> None:
    kubelet.pods = [
        gpu_pod("ml", "trainer-0", UUID),
        gpu_pod("ml", "shared-a", f"{UUID}::0", resource="nvidia.com/gpu.shared"),
        gpu_pod("ml", "mig-a", "MIG-5c2a1d3e-8f7b-5a6c-9d0e-1f2a3b4c5d6e", resource="nvidia.com/mig-1g.18gb"),
        gpu_pod("ml", "custom", "nvidia1", resource="example.com/h200"),
        gpu_pod("ml", "weird", "???", "nvidia2"),
        FakePod("web", "nginx", {"nginx": [("cpu-only.example.com/x", ["a"])]}),
    ]
    client = PodResourcesClient(kubelet.socket_path, resource_names=["example.com/h200"])
    got = {(a.owner.pod, a.device_id) for a in asyncio.run(client.fetch())}
    assert got == {
        ("trainer-0", UUID),
        ("shared-a", f"{UUID}::0"),
        ("mig-a", "MIG-5c2a1d3e-8f7b-5a6c-9d0e-1f2a3b4c5d6e"),
        ("custom", "nvidia1"),
        ("weird", "nvidia2"),
    }
    asyncio.run(client.fetch())
    unknown = [r for r in caplog.records if "'???'" in r.getMessage()]
    assert len(unknown) == 1  # logged once, however often it is listed
    assert "pod ml/weird" in unknown[0].getMessage()


def test_a_missing_socket_and_a_file_that_is_not_one(tmp_path: Path) -> None:
    with pytest.raises(PodResourcesError) as info:
        asyncio.run(PodResourcesClient(str(tmp_path / "none.sock")).fetch())
    assert info.value.kind == "NoSocket"
    regular = tmp_path / "file.sock"
    regular.write_text("not a socket")
    with pytest.raises(PodResourcesError) as info:
        asyncio.run(PodResourcesClient(str(regular)).fetch())
    assert info.value.kind == "NotASocket"


def test_garbage_from_the_socket_is_an_error_not_a_crash(tmp_path: Path) -> None:
    path = str(tmp_path / "garbage.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen()

    def serve() -> None:
        for _ in range(3):
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.sendall(b"HTTP/1.1 200 OK\r\n\r\nthis is not gRPC" * 10)
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    client = PodResourcesClient(path, timeout=2.0)
    with pytest.raises(PodResourcesError) as info:
        asyncio.run(client.fetch())
    assert info.value.kind in {"UNAVAILABLE", "INTERNAL", "UNKNOWN"}
    listener.close()


def test_a_large_node_answer_comes_through_http2_flow_control(kubelet: PodResourcesServer) -> None:
    # several megabytes: far past HTTP/2's default 64 KiB window, so the answer needs the windows the client opens
    kubelet.pods = [gpu_pod("ml", f"pod-{i:05d}-{'x' * 200}", f"GPU-{i:08d}-0000-0000-0000-000000000000")
                    for i in range(20_000)]  # fmt: skip
    owners = {a.owner.pod for a in asyncio.run(PodResourcesClient(kubelet.socket_path, timeout=10).fetch())}
    assert len(owners) == 20_000
    assert f"pod-19999-{'x' * 200}" in owners


def test_the_servers_status_and_message_are_the_error(kubelet: PodResourcesServer) -> None:
    kubelet.fail_with = grpc.StatusCode.PERMISSION_DENIED
    with pytest.raises(PodResourcesError) as info:
        asyncio.run(PodResourcesClient(kubelet.socket_path).fetch())
    assert info.value.kind == "PERMISSION_DENIED"
    assert "scripted failure" in str(info.value)


def test_a_hung_kubelet_costs_one_timeout(kubelet: PodResourcesServer) -> None:
    kubelet.hold()
    client = PodResourcesClient(kubelet.socket_path, timeout=0.3)
    with pytest.raises(PodResourcesError) as info:
        asyncio.run(client.fetch())
    assert info.value.kind == "DEADLINE_EXCEEDED"
    kubelet.release()


def test_watcher_keeps_the_last_map_and_counts_errors(
    kubelet: PodResourcesServer, caplog: pytest.LogCaptureFixture
) -> None:
    now = [100.0]
    kubelet.pods = [gpu_pod("ml", "a", UUID)]
    watcher = PodResourcesWatcher(PodResourcesClient(kubelet.socket_path), max_age=10, clock=lambda: now[0])
    assert not watcher.answered
    asyncio.run(watcher.refresh_once())
    assert watcher.answered
    assert [a.owner for a in watcher.current.assignments] == [Owner("ml", "a", "main")]
    assert watcher.fresh
    kubelet.fail_with = grpc.StatusCode.UNAVAILABLE
    for _ in range(3):
        now[0] += 3
        asyncio.run(watcher.refresh_once())
    assert watcher.errors["UNAVAILABLE"] == 3
    assert len([r for r in caplog.records if "UNAVAILABLE" in r.getMessage()]) == 1
    assert [a.owner.pod for a in watcher.current.assignments] == ["a"]  # 9 s old: still served
    now[0] += 2
    assert watcher.current.assignments == ()  # 11 s old: dropped rather than served stale
    assert not watcher.fresh
    kubelet.fail_with = None
    kubelet.pods = []
    asyncio.run(watcher.refresh_once())
    assert watcher.fresh
    assert watcher.current.assignments == ()


def test_a_kubelet_that_fails_has_answered_too(tmp_path: Path) -> None:
    """Nothing to wait for: the first collection goes out at once, without pods, as every later one does."""
    watcher = PodResourcesWatcher(PodResourcesClient(str(tmp_path / "missing.sock")))
    asyncio.run(watcher.refresh_once())
    assert watcher.errors["NoSocket"] == 1
    assert watcher.answered


def test_varying_garbage_from_the_socket_is_logged_once_per_kind_per_minute(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = str(tmp_path / "garbage.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(64)

    def serve() -> None:
        for i in range(1000):
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.sendall(f"HTTP/1.1 {200 + i} junk-{i}-{os.urandom(4).hex()}\r\n\r\n".encode() * (1 + i % 7))
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    now = [0.0]
    watcher = PodResourcesWatcher(PodResourcesClient(path, timeout=2.0), clock=lambda: now[0])
    for _ in range(30):  # 150 s of refreshes, every 5 s
        asyncio.run(watcher.refresh_once())
        now[0] += 5
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("pod-resources:")]
    kinds = set(watcher.errors)
    assert sum(watcher.errors.values()) == 30
    assert len(lines) <= 3 * len(kinds), lines  # at 0, 60 and 120 s for each kind
    assert any("not logged" in line for line in lines[len(kinds) :]), lines
    listener.close()


def test_an_answer_the_code_cannot_take_fails_the_source_and_is_not_swallowed(kubelet: PodResourcesServer) -> None:
    kubelet.pods = [gpu_pod("ml", "a", UUID)]

    class Broken(PodResourcesClient):
        def _assignments(self, response: object) -> list[Assignment]:
            raise ValueError("a device nobody planned for")

    now = [100.0]
    source = Freshness("pod-resources", bound=5.0, clock=lambda: now[0])
    watcher = PodResourcesWatcher(Broken(kubelet.socket_path), clock=lambda: now[0], source=source)
    with pytest.raises(ValueError, match="nobody planned"):  # left to the thread's guard, which logs it and goes on
        asyncio.run(watcher.refresh_once())
    now[0] += 6
    problem = source.problem()
    assert problem is not None
    assert "ValueError: a device nobody planned for" in problem
