"""Where the counters come from: ``-m <namespace>:<name>`` (a ConfigMap through the Kubernetes API), and without
``-f`` dcgm-exporter's default path when a file is there, else the built-in file."""

import asyncio
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from collector.counters.configmap import ConfigMapCounters, ConfigMapRef, parse_configmap_ref
from collector.counters.source import counters_file
from collector.errors import ConfigError
from collector.kube.client import KubeClient
from collector.kube.config import KubeAccess
from harness.kube.api import FakeKubeAPIServer
from harness.kube.threaded import ThreadedApiServer
from harness.node.collector_process import ROOT, running_collector, scrape
from harness.tasks import running

REF = ConfigMapRef("monitoring", "gpu-metrics")
UTIL_ONLY = "DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n"
UTIL_AND_TEMP = UTIL_ONLY + "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n"


@pytest.mark.parametrize(
    ("text", "ref"),
    [("none", None), ("", None), ("monitoring:gpu-metrics", REF),
     (" kube-system:a.b-c ", ConfigMapRef("kube-system", "a.b-c"))],
)  # fmt: skip
def test_configmap_references(text: str, ref: ConfigMapRef | None) -> None:
    assert parse_configmap_ref(text) == ref


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gpu-metrics", "expected <namespace>:<name> (or none), got 'gpu-metrics'"),
        ("a:b:c", "expected <namespace>:<name>"),
        ("Monitoring:x", "'Monitoring' is not a namespace name"),
        ("ns:", "'' is not a ConfigMap name"),
    ],
)
def test_bad_configmap_references_say_what_is_expected(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_configmap_ref(text)


@pytest.fixture
async def api() -> AsyncIterator[FakeKubeAPIServer]:
    server = FakeKubeAPIServer()
    await server.start()
    yield server
    await server.stop()


async def _read(api: FakeKubeAPIServer, tmp_path: Path) -> str:
    source = ConfigMapCounters(REF, KubeAccess(str(api.kubeconfig(tmp_path / "kubeconfig"))), refresh=0)
    client = KubeClient(KubeAccess(str(tmp_path / "kubeconfig")).config())
    try:
        return await source.read(client)
    finally:
        await client.close()


async def test_the_metrics_key_is_read(api: FakeKubeAPIServer, tmp_path: Path) -> None:
    api.put("configmaps", "gpu-metrics", namespace="monitoring", data={"metrics": UTIL_ONLY, "other": "x"})
    assert await _read(api, tmp_path) == UTIL_ONLY


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("absent", "ConfigMap monitoring/gpu-metrics (-m): it does not exist (404: configmaps \"gpu-metrics\" not "
                   "found)"),
        ("forbidden", "ConfigMap monitoring/gpu-metrics (-m): reading it is forbidden (403: configmaps \"gpu-metrics\" "
                      "is forbidden: User \"system:serviceaccount:gpuscale:gpuscale-collector\" cannot get resource "
                      "\"configmaps\" in API group \"\" in the namespace \"monitoring\"); the collector's service "
                      "account needs 'get' on configmaps (resourceNames: [gpu-metrics]) in namespace monitoring"),
        ("no key", "ConfigMap monitoring/gpu-metrics (-m) has no 'metrics' key (its keys: counters.csv); put the "
                   "counters CSV under data.metrics"),
    ],
)  # fmt: skip
async def test_each_failure_names_the_configmap_and_what_to_do(
    api: FakeKubeAPIServer, tmp_path: Path, setup: str, message: str
) -> None:
    if setup == "forbidden":
        api.put("configmaps", "gpu-metrics", namespace="monitoring", data={"metrics": UTIL_ONLY})
        api.forbidden.add(("configmaps", "monitoring"))
    elif setup == "no key":
        api.put("configmaps", "gpu-metrics", namespace="monitoring", data={"counters.csv": UTIL_ONLY})
    with pytest.raises(ConfigError) as info:
        await _read(api, tmp_path)
    assert message in str(info.value)


async def test_an_unreachable_api_is_a_clear_error(tmp_path: Path) -> None:
    server = FakeKubeAPIServer()
    await server.start()
    server.kubeconfig(tmp_path / "kubeconfig")
    await server.stop()
    with pytest.raises(ConfigError, match=r"monitoring/gpu-metrics \(-m\): the Kubernetes API did not answer"):
        await _read(server, tmp_path)


def test_no_kubernetes_configuration_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no Kubernetes API configuration .* --kubeconfig or \$KUBECONFIG"):
        KubeAccess(str(tmp_path / "missing-kubeconfig")).config()


async def until(check: Any, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.05)


async def test_changes_are_read_again_and_failures_keep_the_last_counters(
    api: FakeKubeAPIServer, tmp_path: Path
) -> None:
    api.put("configmaps", "gpu-metrics", namespace="monitoring", data={"metrics": UTIL_ONLY})
    source = ConfigMapCounters(REF, KubeAccess(str(api.kubeconfig(tmp_path / "kubeconfig"))), refresh=0.3)
    async with running(source.run()):
        await until(source.changed)  # the first read
        assert [c.field for c in source.load().counters] == ["DCGM_FI_DEV_GPU_UTIL"]
        api.put("configmaps", "gpu-metrics", namespace="monitoring", data={"metrics": UTIL_AND_TEMP})
        await until(source.changed)
        assert [c.field for c in source.load().counters] == ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_TEMP"]
        api.delete("configmaps", "gpu-metrics", namespace="monitoring")
        await until(source.changed)
        with pytest.raises(ConfigError, match="does not exist"):
            source.load()
        reads = api.count("/api/v1/namespaces/monitoring/configmaps/gpu-metrics")
        await until(lambda: api.count("/api/v1/namespaces/monitoring/configmaps/gpu-metrics") >= reads + 2)
        assert not source.changed()  # the same failure again is not news
        api.put("configmaps", "gpu-metrics", namespace="monitoring", data={"metrics": UTIL_ONLY})
        await until(source.changed)
        assert [c.field for c in source.load().counters] == ["DCGM_FI_DEV_GPU_UTIL"]
        # with no refresh interval it is read only when asked (SIGHUP)
        idle = ConfigMapCounters(REF, KubeAccess(str(tmp_path / "kubeconfig")), refresh=0)
        idle_task = asyncio.create_task(idle.run())
        await asyncio.sleep(0.5)
        assert not idle.changed()
        idle.request_refresh()
        await until(idle.changed)
        idle_task.cancel()


def test_without_f_dcgm_exporters_default_path_is_read_when_a_file_is_there(tmp_path: Path) -> None:
    default = tmp_path / "default-counters.csv"
    assert counters_file(None, str(default)).path is None  # nothing there: the built-in file
    assert "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE" in counters_file(None, str(default)).load().fields
    default.write_text(UTIL_ONLY)
    source = counters_file(None, str(default))
    assert source.path == str(default)
    assert source.load().fields == {"DCGM_FI_DEV_GPU_UTIL"}
    assert counters_file(str(tmp_path / "mine.csv"), str(default)).path == str(tmp_path / "mine.csv")  # -f wins


@pytest.fixture
def api_thread(tmp_path: Path) -> Iterator[ThreadedApiServer]:
    """The stand-in API server (HTTPS) on a loop of its own, so that this test's thread can wait on a collector."""
    with ThreadedApiServer(tmp_path / "apiserver") as api:
        yield api


def test_in_a_pod_the_command_line_serves_the_configmaps_counters_and_follows_its_changes(
    api_thread: ThreadedApiServer, tmp_path: Path
) -> None:
    def put(text: str) -> None:
        api_thread.put("configmaps", "gpu-metrics", namespace="monitoring", data={"metrics": text})

    put(UTIL_ONLY)
    account = tmp_path / "serviceaccount"
    env = api_thread.service_account(account)  # read as in a pod: its service account, no kubeconfig
    with running_collector("--simulate-gpus", "1", "-c", "200", "-m", "monitoring:gpu-metrics",
                           "--configmap-refresh", "300", env=env, service_account=account) as url:  # fmt: skip
        body, _ = scrape(url)
        assert "DCGM_FI_DEV_GPU_UTIL{" in body
        assert "DCGM_FI_DEV_GPU_TEMP{" not in body
        put(UTIL_AND_TEMP)
        deadline = time.monotonic() + 15
        while "DCGM_FI_DEV_GPU_TEMP{" not in (body := scrape(url)[0]):
            assert "DCGM_FI_DEV_GPU_UTIL{" in body  # never an empty page in between
            assert time.monotonic() < deadline, "the changed ConfigMap was not applied"
            time.sleep(0.1)


@pytest.mark.parametrize(
    ("setup", "message"),
    [("absent", "it does not exist (404"), ("forbidden", "reading it is forbidden (403"),
     ("no key", "has no 'metrics' key")],
)  # fmt: skip
def test_the_command_line_stops_with_a_clear_error_when_the_configmap_cannot_be_used(
    api_thread: ThreadedApiServer, tmp_path: Path, setup: str, message: str
) -> None:
    def arrange(api: FakeKubeAPIServer) -> None:
        if setup != "absent":
            key = "metrics" if setup == "forbidden" else "counters"
            api.put("configmaps", "gpu-metrics", namespace="monitoring", data={key: UTIL_ONLY})
        if setup == "forbidden":
            api.forbidden.add(("configmaps", "monitoring"))

    api_thread.call(arrange)
    result = subprocess.run(
        [sys.executable, "-m", "collector", "--simulate-gpus", "1", "-m", "monitoring:gpu-metrics",
         "--kubeconfig", str(api_thread.kubeconfig(tmp_path / "kubeconfig"))],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert "gpuscale-collector: error: ConfigMap monitoring/gpu-metrics (-m)" in result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_a_malformed_reference_stops_the_start_naming_the_flag() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "collector", "--simulate-gpus", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={"PATH": "/usr/bin:/bin", "DCGM_EXPORTER_CONFIGMAP_DATA": "gpu-metrics"},
    )  # fmt: skip
    assert result.returncode == 2
    assert "environment variable DCGM_EXPORTER_CONFIGMAP_DATA (--configmap-data): expected <namespace>:<name>" in (
        result.stderr
    )
