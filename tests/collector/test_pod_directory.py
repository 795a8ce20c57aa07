"""The pod directory (pod UID → namespace/name on this node) against a fake API server's LIST and WATCH."""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from collector.pods.directory import KubePodDirectory
from harness.kube.api import FakeKubeAPIServer
from harness.node.collector_process import running_collector


@pytest.fixture
async def api() -> AsyncIterator[FakeKubeAPIServer]:
    server = FakeKubeAPIServer()
    await server.start()
    yield server
    await server.stop()


def pod(api: FakeKubeAPIServer, name: str, node: str, uid: str) -> None:
    api.put("pods", name, {"app": "x"}, namespace="ml", uid=uid, spec={"nodeName": node})


async def until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.02)


async def test_lists_then_watches_the_pods_of_its_node(api: FakeKubeAPIServer, tmp_path: Path) -> None:
    pod(api, "a", "node-a", "uid-a")
    pod(api, "elsewhere", "node-b", "uid-b")
    directory = KubePodDirectory("node-a", str(api.kubeconfig(tmp_path / "kubeconfig")))
    task = asyncio.create_task(directory.run())
    try:
        await until(lambda: directory.synced)
        assert directory.lookup("uid-a") == ("ml", "a")
        assert directory.lookup("uid-b") is None
        pod(api, "c", "node-a", "uid-c")
        await until(lambda: directory.lookup("uid-c") == ("ml", "c"))
        api.delete("pods", "a", namespace="ml")
        await until(lambda: directory.lookup("uid-a") is None)
        # the watch's version is compacted away and the stream ends: 410 Gone, then a fresh LIST. A write the
        # watch does not show (another node's pod) moves the current version past the last one the watch saw
        pod(api, "elsewhere-2", "node-b", "uid-e")
        api.compact()
        api.close_watches()
        pod(api, "d", "node-a", "uid-d")
        await until(lambda: directory.lookup("uid-d") == ("ml", "d"))
        assert api.count("/api/v1/pods") >= 2
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_an_unreachable_api_is_counted_and_retried(tmp_path: Path) -> None:
    server = FakeKubeAPIServer()
    await server.start()
    kubeconfig = server.kubeconfig(tmp_path / "kubeconfig")
    await server.stop()  # nothing listens there any more
    directory = KubePodDirectory("node-a", str(kubeconfig))
    task = asyncio.create_task(directory.run())
    try:
        await until(lambda: sum(directory.errors.values()) >= 1)
        assert not directory.synced
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_refused_list_is_counted_by_its_status(api: FakeKubeAPIServer, tmp_path: Path) -> None:
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
    text = kubeconfig.read_text()
    assert "token" in text
    kubeconfig.write_text(text.replace("token: ", "token: not-", 1))  # the API server answers 401
    directory = KubePodDirectory("node-a", str(kubeconfig))
    task = asyncio.create_task(directory.run())
    try:
        await until(lambda: sum(directory.errors.values()) >= 1)
        assert set(directory.errors) == {"HTTP401"}
        assert not directory.synced
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def test_off_the_cluster_a_failing_api_is_said_once_a_minute_in_one_line(tmp_path: Path) -> None:
    """-k with no Kubernetes API configured: one line of ours, not one a retry and the client library's beside it."""
    log = tmp_path / "collector.log"
    env = {"HOME": str(tmp_path), "KUBECONFIG": ""}  # and no KUBERNETES_SERVICE_HOST: not in a pod
    with running_collector("--simulate-gpus", "1", "-k", "-c", "500", env=env, log=log, collections=10):
        pass  # 5 s: the pod watch tried three times or more (back-off 1 s, 2 s, ...)
    lines = log.read_text().splitlines()
    failed = [line for line in lines if "pod directory: Kubernetes API failed" in line]
    assert len(failed) == 1, lines
    assert "not in a pod, no --kubeconfig, $KUBECONFIG unset and no ~/.kube/config" in failed[0]
    assert not [line for line in lines if "kubernetes_asyncio" in line]
