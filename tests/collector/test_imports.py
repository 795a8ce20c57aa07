"""Libraries only some flags need are imported only when those flags are given: each costs resident memory
(h2 ~1.3 MiB, cryptography ~8 MiB; docs/collector-bench.md). gRPC's library (~13 MiB once its channel is open),
protobuf (~3.2 MiB), the Kubernetes client library (~39 MiB), aiohttp (~16 MiB) and prometheus_client (~1 MiB) are
never imported: the kubelet's List is one HTTP/2 call (collector/pods/grpc_unary.py) whose answer is read from the
wire (collector/pods/kubelet_list.py), the collector's own client reads the API (YAML only for a kubeconfig, never in
a pod), its own server on h11 answers (collector/web/) and it renders its own pages. Nor is unicodedata (1 MiB
resident under gVisor), which ssl's IDNA codec would load to encode the API server's name, ASCII as it is."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.kube.api import USER
from harness.kube.threaded import ThreadedApiServer

ROOT = Path(__file__).resolve().parents[2]
HEAVY = {"grpc", "google", "h2", "kubernetes_asyncio", "cryptography", "bcrypt", "yaml", "re2", "prometheus_client",
         "aiohttp", "multidict", "yarl", "email", "zipfile", "statistics", "unicodedata", "stringprep"}  # fmt: skip

_BUILD = """
import json, sys
from collector.cli import build_node, choose_nvml
from collector.settings import parse_settings
settings = parse_settings(sys.argv[1:], env={})
nvml, simulated = choose_nvml(settings)
build_node(settings, nvml, simulated)
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


# the parts built, then every Kubernetes read made: the -m ConfigMap read, the pod and ResourceSlice watches synced
_READ = """
import asyncio, json, sys
from pathlib import Path
from collector.cli import build_node, choose_nvml, counters_source
from collector.kube.config import KubeAccess
from collector.settings import parse_settings
settings = parse_settings(sys.argv[2:], env={"NODE_NAME": "node-a"})
kube = KubeAccess(settings.kubeconfig, Path(sys.argv[1]))
nvml, simulated = choose_nvml(settings)
counters = counters_source(settings, kube=kube)
node = build_node(settings, nvml, simulated, counters=counters, kube=kube)

async def synced():
    tasks = [asyncio.create_task(node.directory.run()), asyncio.create_task(node.slices.run())]
    async with asyncio.timeout(30):
        while not (node.directory.synced and node.slices.synced):
            await asyncio.sleep(0.05)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)

asyncio.run(synced())
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


def loaded(*args: str, program: str = _BUILD, env: dict[str, str] | None = None) -> set[str]:
    """The top-level packages a collector process has imported once its parts are built for ``args``."""
    out = subprocess.run(
        [sys.executable, "-c", program, *args], cwd=ROOT, capture_output=True, text=True, timeout=60, env=env
    )
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout.splitlines()[-1])) & HEAVY


def test_a_collector_without_kubernetes_or_web_configuration_imports_none_of_them() -> None:
    assert loaded("--simulate-gpus", "2") == set()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["-k", "--pod-resources-kubelet-socket", "/nonexistent.sock"], {"h2"}),
        (["--kubernetes-pod-label-allowlist-regex", "^app"], {"re2"}),
    ],
)
def test_the_flags_that_need_them_import_them(args: list[str], expected: set[str]) -> None:
    assert loaded("--simulate-gpus", "2", *args) >= expected


def test_a_simulation_spec_brings_yaml(tmp_path: Path) -> None:
    spec = tmp_path / "gpus.yaml"
    spec.write_text("gpus: 1\n")
    assert "yaml" in loaded("--simulate-spec", str(spec))


@pytest.fixture
def api(tmp_path: Path) -> Iterator[ThreadedApiServer]:
    """Over HTTPS: a pod on node-a, its DRA ResourceSlice and a counters ConfigMap."""
    with ThreadedApiServer(tmp_path / "apiserver") as api:
        api.put("pods", "trainer", labels={"app": "x"}, namespace="ml", uid="uid-1", spec={"nodeName": "node-a"})
        api.put("resourceslices.resource.k8s.io", "node-a-gpu", spec={"nodeName": "node-a", "driver": "gpu.nvidia.com"})
        api.put("configmaps", "counters", namespace="gpuscale", data={"metrics": "DCGM_FI_DEV_GPU_UTIL, gauge, x\n"})
        yield api


KUBE = ["-k", "--kubernetes-enable-pod-labels", "--kubernetes-enable-dra", "-m", "gpuscale:counters",
        "--pod-resources-kubelet-socket", "/nonexistent.sock", "--simulate-gpus", "2"]  # fmt: skip


def test_in_a_pod_every_kubernetes_read_is_made_without_the_client_library_or_yaml(
    api: ThreadedApiServer, tmp_path: Path
) -> None:
    account = tmp_path / "serviceaccount"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **api.service_account(account)}
    assert loaded(str(account), *KUBE, program=_READ, env=env) == {"h2"}
    assert api.server.users
    assert set(api.server.users) == {USER}  # the service account's token


def test_with_a_kubeconfig_only_yaml_is_added(api: ThreadedApiServer, tmp_path: Path) -> None:
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    args = [str(tmp_path / "no-account"), *KUBE, "--kubeconfig", str(kubeconfig)]
    assert loaded(*args, program=_READ, env=env) == {"h2", "yaml"}
