"""The pod directory (pod UID → namespace/name on this node) against a fake API server's LIST and WATCH."""

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from collector.kube.config import KubeAccess
from collector.pods.directory import KubePodDirectory
from common.freshness import Freshness
from harness.kube.api import FakeKubeAPIServer
from harness.kube.wire import status_body
from harness.node.collector_process import running_collector
from harness.tasks import running
from harness.waiting import wait_until


@pytest.fixture
async def api() -> AsyncIterator[FakeKubeAPIServer]:
    server = FakeKubeAPIServer()
    await server.start()
    yield server
    await server.stop()


def pod(api: FakeKubeAPIServer, name: str, node: str, uid: str) -> None:
    api.put("pods", name, {"app": "x"}, namespace="ml", uid=uid, spec={"nodeName": node})


async def test_lists_then_watches_the_pods_of_its_node(api: FakeKubeAPIServer, tmp_path: Path) -> None:
    pod(api, "a", "node-a", "uid-a")
    pod(api, "elsewhere", "node-b", "uid-b")
    directory = KubePodDirectory("node-a", KubeAccess(str(api.kubeconfig(tmp_path / "kubeconfig"))))
    async with running(directory.run()):
        await wait_until(lambda: directory.synced)
        assert directory.lookup("uid-a") == ("ml", "a")
        assert directory.lookup("uid-b") is None
        pod(api, "c", "node-a", "uid-c")
        await wait_until(lambda: directory.lookup("uid-c") == ("ml", "c"))
        api.delete("pods", "a", namespace="ml")
        await wait_until(lambda: directory.lookup("uid-a") is None)
        # the watch's version is compacted away and the stream ends: 410 Gone, then a fresh LIST. A write the
        # watch does not show (another node's pod) moves the current version past the last one the watch saw
        pod(api, "elsewhere-2", "node-b", "uid-e")
        api.compact()
        api.close_watches()
        pod(api, "d", "node-a", "uid-d")
        await wait_until(lambda: directory.lookup("uid-d") == ("ml", "d"))
        assert api.count("/api/v1/pods") >= 2


async def test_an_unreachable_api_is_counted_and_retried(tmp_path: Path) -> None:
    server = FakeKubeAPIServer()
    await server.start()
    kubeconfig = server.kubeconfig(tmp_path / "kubeconfig")
    await server.stop()  # nothing listens there any more
    directory = KubePodDirectory("node-a", KubeAccess(str(kubeconfig)))
    async with running(directory.run()):
        await wait_until(lambda: sum(directory.errors.values()) >= 1)
        assert not directory.synced


async def test_a_refused_list_is_counted_by_its_status(api: FakeKubeAPIServer, tmp_path: Path) -> None:
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
    text = kubeconfig.read_text()
    assert "token" in text
    kubeconfig.write_text(text.replace("token: ", "token: not-", 1))  # the API server answers 401
    directory = KubePodDirectory("node-a", KubeAccess(str(kubeconfig)))
    async with running(directory.run()):
        await wait_until(lambda: sum(directory.errors.values()) >= 1)
        assert set(directory.errors) == {"HTTP401"}
        assert not directory.synced


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


async def test_a_watch_the_server_never_answers_is_given_up_and_the_pods_listed_again(
    api: FakeKubeAPIServer, tmp_path: Path
) -> None:
    """A hung server or proxy accepts the watch and sends nothing: the watch is given up when its head is late and
    the pods are listed again, instead of the copy going stale until the client's read timeout (minutes)."""
    pod(api, "a", "node-a", "uid-a")
    api.hold_watches = True
    source = Freshness("pod-directory", 60.0)
    directory = KubePodDirectory("node-a", KubeAccess(str(api.kubeconfig(tmp_path / "kubeconfig"))), None, source, 0.5)
    async with running(directory.run()):
        await wait_until(lambda: directory.synced)
        pod(api, "b", "node-a", "uid-b")
        await wait_until(lambda: directory.lookup("uid-b") == ("ml", "b"))
        assert api.held_watches >= 1
        assert directory.errors["WatchError"] >= 1


async def test_a_bookmark_moves_the_version_on_and_names_no_pod(api: FakeKubeAPIServer, tmp_path: Path) -> None:
    pod(api, "a", "node-a", "uid-a")
    source = Freshness("pod-directory", 60.0)
    directory = KubePodDirectory("node-a", KubeAccess(str(api.kubeconfig(tmp_path / "kubeconfig"))), None, source)
    async with running(directory.run()):
        await wait_until(lambda: directory.synced and len(api.watches) == 1)
        assert api.watches[0].bookmarks  # asked for, as kube-apiserver reads allowWatchBookmarks=True
        api.bookmark()
        pod(api, "b", "node-a", "uid-b")
        await wait_until(lambda: directory.lookup("uid-b") == ("ml", "b"))
        assert directory.lookup("uid-a") == ("ml", "a")
        assert not directory.errors
        assert source.last_success is not None


async def test_a_refused_list_makes_the_source_fail(api: FakeKubeAPIServer, tmp_path: Path) -> None:
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
    kubeconfig.write_text(kubeconfig.read_text().replace("token: ", "token: not-", 1))  # answered 401
    source = Freshness("pod-directory", 60.0)
    directory = KubePodDirectory("node-a", KubeAccess(str(kubeconfig)), None, source)
    async with running(directory.run()):
        await wait_until(lambda: source.failing_since is not None)
        assert source.error == "Kubernetes API failed (HTTP401: 401 Unauthorized)"


async def test_a_pod_larger_than_a_read_buffer_comes_through_the_watch(api: FakeKubeAPIServer, tmp_path: Path) -> None:
    """A pod's JSON may run to megabytes (long commands, large annotations): one such event must not break the
    watch, which would then fail again after every LIST for as long as the pod lives."""
    directory = KubePodDirectory("node-a", KubeAccess(str(api.kubeconfig(tmp_path / "kubeconfig"))))
    async with running(directory.run()):
        await wait_until(lambda: directory.synced and len(api.watches) == 1)
        api.put("pods", "big", namespace="ml", uid="uid-big", spec={"nodeName": "node-a", "note": "x" * 3_000_000})
        await wait_until(lambda: directory.lookup("uid-big") == ("ml", "big"))
        assert not directory.errors
        assert api.count("/api/v1/pods") == 1


async def test_an_error_event_is_counted_by_its_code_and_the_pods_listed_again(
    api: FakeKubeAPIServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    directory = KubePodDirectory("node-a", KubeAccess(str(api.kubeconfig(tmp_path / "kubeconfig"))))
    async with running(directory.run()):
        await wait_until(lambda: directory.synced and len(api.watches) == 1)
        error = {"type": "ERROR", "object": status_body(500, "InternalError", "etcdserver: leader changed")}
        assert api.inject("pods", json.dumps(error).encode() + b"\n") == 1
        await wait_until(lambda: api.count("/api/v1/pods") == 2)  # after the back-off
        assert directory.errors == {"HTTP500": 1}
        assert "(HTTP500: 500 InternalError: etcdserver: leader changed)" in caplog.text


async def test_a_forbidden_list_says_which_permission_is_missing(
    api: FakeKubeAPIServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    api.forbidden.add(("pods", None))
    source = Freshness("pod-directory", 60.0)
    directory = KubePodDirectory("node-a", KubeAccess(str(api.kubeconfig(tmp_path / "kubeconfig"))), None, source)
    async with running(directory.run()):
        await wait_until(lambda: source.failing_since is not None)
        assert source.error == (
            'Kubernetes API failed (HTTP403: 403 Forbidden: pods is forbidden: User "system:serviceaccount:gpuscale:'
            'gpuscale-collector" cannot list resource "pods" in API group "" at the cluster scope)'
        )
        assert "the collector's service account needs list and watch on pods (its ClusterRole)" in caplog.text
