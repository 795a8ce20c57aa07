"""The collector's Kubernetes client against the stand-in API server over TLS: the pod's service account (its token
read again as it rotates), a kubeconfig's client certificates, tls-server-name, exec plugins, refusals."""

from __future__ import annotations

import base64
import json
import stat
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml

from collector.errors import ConfigError, KubeApiError, KubeUnreachable
from collector.kube.client import KubeClient
from collector.kube.config import KubeAccess
from collector.kube.watch import LIST_METADATA, WATCH_METADATA
from harness.kube.api import TOKEN, USER, FakeKubeAPIServer
from harness.kube.pki import CA

PODS = "/api/v1/pods"


@dataclass
class Served:
    api: FakeKubeAPIServer
    ca: trustme.CA  # issued the serving certificate
    clients: CA  # issues client certificates the server accepts
    port: int


async def serve(tmp_path: Path, *names: str) -> AsyncIterator[Served]:
    ca, clients = trustme.CA(), CA("client-ca")
    leaf = ca.issue_cert(*names)
    cert, key, ca_file, client_ca = (tmp_path / n for n in ("apiserver.crt", "apiserver.key", "ca.crt", "client-ca"))
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    ca.cert_pem.write_to_path(str(ca_file))
    client_ca.write_text(clients.pem)
    api = FakeKubeAPIServer()
    api.put("pods", "a", namespace="ml", spec={"nodeName": "node-a"})
    url = await api.start(serving=(cert, key), ca=ca_file, client_ca=client_ca)
    try:
        yield Served(api, ca, clients, int(url.rsplit(":", 1)[1]))
    finally:
        await api.stop()


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    async for s in serve(tmp_path, "127.0.0.1"):
        yield s


def items(body: bytes) -> list[str]:
    return [item["metadata"]["name"] for item in json.loads(body)["items"]]


async def test_in_a_pod_the_service_accounts_token_is_read_again_when_it_rotates(
    served: Served, tmp_path: Path
) -> None:
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "ca.crt").write_bytes(served.ca.cert_pem.bytes())
    (account / "token").write_text("a-token-that-expired\n")
    environ = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(served.port)}
    client = KubeClient(KubeAccess(None, account, environ).config())
    try:
        with pytest.raises(KubeApiError) as refused:
            await client.get(PODS, {}, 5)
        assert (refused.value.status, str(refused.value)) == (401, "401 Unauthorized")
        (account / "token").write_text(TOKEN + "\n")  # the kubelet's rotation
        assert items(await client.get(PODS, {}, 5)) == ["a"]
        assert served.api.users == [USER]
    finally:
        await client.close()


def kubeconfig(path: Path, server: str, cluster: dict[str, Any], user: dict[str, Any]) -> str:
    path.write_text(
        yaml.safe_dump(
            {
                "clusters": [{"name": "c", "cluster": {"server": server, **cluster}}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return str(path)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.mark.parametrize("given_as", ["data", "files"])
async def test_a_client_certificate_authenticates_as_its_common_name(
    served: Served, tmp_path: Path, given_as: str
) -> None:
    alice = served.clients.issue("alice", ("team-ml",))
    if given_as == "data":
        cluster = {"certificate-authority-data": b64(served.ca.cert_pem.bytes())}
        user = {"client-certificate-data": b64(alice.cert_pem), "client-key-data": b64(alice.key_pem)}
    else:
        cert, key = alice.write(tmp_path / "pki", "alice")
        served.ca.cert_pem.write_to_path(str(tmp_path / "pki" / "ca.crt"))
        cluster = {"certificate-authority": "pki/ca.crt"}  # relative to the kubeconfig's directory
        user = {"client-certificate": str(cert), "client-key": str(key)}
    path = kubeconfig(tmp_path / "kubeconfig", f"https://127.0.0.1:{served.port}", cluster, user)
    client = KubeClient(KubeAccess(path).config())
    try:
        assert items(await client.get(PODS, {"fieldSelector": "spec.nodeName=node-a"}, 5)) == ["a"]
        assert served.api.users == ["alice"]
    finally:
        await client.close()


@pytest.mark.parametrize(
    ("cluster", "works"),
    [({"tls-server-name": "kubernetes.default.svc"}, True), ({}, False), ({"insecure-skip-tls-verify": True}, True)],
)
async def test_the_server_is_checked_under_the_name_the_kubeconfig_says(
    tmp_path: Path, cluster: dict[str, Any], works: bool
) -> None:
    async for served in serve(tmp_path, "kubernetes.default.svc"):  # a certificate without the address
        if not cluster.get("insecure-skip-tls-verify"):
            cluster = {**cluster, "certificate-authority-data": b64(served.ca.cert_pem.bytes())}
        path = kubeconfig(tmp_path / "kubeconfig", f"https://127.0.0.1:{served.port}", cluster, {"token": TOKEN})
        client = KubeClient(KubeAccess(path).config())
        try:
            if works:
                assert items(await client.get(PODS, {}, 5)) == ["a"]
            else:
                with pytest.raises(KubeUnreachable, match="certificate verify failed"):
                    await client.get(PODS, {}, 5)
        finally:
            await client.close()


async def test_a_server_its_ca_does_not_vouch_for_is_not_sent_the_token(served: Served, tmp_path: Path) -> None:
    other = trustme.CA()
    cluster = {"certificate-authority-data": b64(other.cert_pem.bytes())}
    path = kubeconfig(tmp_path / "kubeconfig", f"https://127.0.0.1:{served.port}", cluster, {"token": TOKEN})
    client = KubeClient(KubeAccess(path).config())
    try:
        with pytest.raises(KubeUnreachable, match=r"^GET /api/v1/pods: .*certificate verify failed"):
            await client.get(PODS, {}, 5)
        assert served.api.requests == []
    finally:
        await client.close()


def plugin(tmp_path: Path, script: str) -> Path:
    """An exec credential plugin: a Python script that sees its environment and counts its runs."""
    path = tmp_path / "bin" / "get-token"
    path.parent.mkdir(exist_ok=True)
    head = f"#!{sys.executable}\nimport json, os, pathlib, sys\nruns = pathlib.Path({str(tmp_path)!r}) / 'runs'\n"
    path.write_text(f"{head}runs.write_text(str(int(runs.read_text()) + 1 if runs.exists() else 1))\n{script}")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


async def test_an_exec_plugins_token_is_kept_until_the_server_refuses_it(served: Served, tmp_path: Path) -> None:
    get_token = plugin(
        tmp_path,
        f"""
pathlib.Path(runs.parent / 'info').write_text(os.environ['KUBERNETES_EXEC_INFO'] + os.environ['REGION'])
token = {TOKEN!r} if runs.read_text() != '1' else 'stale'
print(json.dumps({{'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential',
                  'status': {{'token': token, 'expirationTimestamp': '2999-01-01T00:00:00Z'}}}}))
""",
    )
    cluster = {"certificate-authority-data": b64(served.ca.cert_pem.bytes())}
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "bin/get-token",
                     "env": [{"name": "REGION", "value": "eu"}], "provideClusterInfo": True}}  # fmt: skip
    client = KubeClient(KubeAccess(kubeconfig(tmp_path / "kubeconfig", f"https://127.0.0.1:{served.port}", cluster,
                                              user)).config())  # fmt: skip
    try:
        with pytest.raises(KubeApiError, match="401"):
            await client.get(PODS, {}, 5)
        for _ in range(3):
            assert items(await client.get(PODS, {}, 5)) == ["a"]
        assert (tmp_path / "runs").read_text() == "2"  # once more after the 401, then its token until it expires
        info, region = (tmp_path / "info").read_text().rsplit("}", 1)
        spec = json.loads(info + "}")["spec"]
        assert (spec["interactive"], spec["cluster"]["server"], region) == (False, f"https://127.0.0.1:{served.port}",
                                                                            "eu")  # fmt: skip
        assert base64.b64decode(spec["cluster"]["certificate-authority-data"]) == served.ca.cert_pem.bytes()
    finally:
        await client.close()
    assert get_token.exists()


@pytest.mark.parametrize(
    ("script", "message"),
    [
        ("print('nope', file=sys.stderr); sys.exit(3)", "exited with 3: nope"),
        ("print('{}')", "printed no ExecCredential"),
        ("print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential', "
         "'status': {'clientCertificateData': 'x', 'clientKeyData': 'y'}}))",
         "gave a client certificate; the collector uses plugin tokens only"),
    ],
)  # fmt: skip
async def test_an_exec_plugin_that_gives_no_token_is_a_clear_error(
    served: Served, tmp_path: Path, script: str, message: str
) -> None:
    get_token = plugin(tmp_path, script)
    path = kubeconfig(
        tmp_path / "kubeconfig", f"https://127.0.0.1:{served.port}", {}, {"exec": {"command": str(get_token)}}
    )
    client = KubeClient(KubeAccess(path).config())
    try:
        with pytest.raises(ConfigError, match=f"exec plugin {get_token} {message}" if "exited" in message else message):
            await client.get(PODS, {}, 5)
    finally:
        await client.close()


async def test_a_refusal_carries_the_api_servers_message(served: Served, tmp_path: Path) -> None:
    served.api.forbidden.add(("pods", None))
    cluster = {"certificate-authority-data": b64(served.ca.cert_pem.bytes())}
    path = kubeconfig(tmp_path / "kubeconfig", f"https://127.0.0.1:{served.port}", cluster, {"token": TOKEN})
    client = KubeClient(KubeAccess(path).config())
    try:
        with pytest.raises(KubeApiError) as refused:
            await client.watch(PODS, {"watch": "1"}, 5)
        assert str(refused.value) == (
            f'403 Forbidden: pods is forbidden: User "{USER}" cannot watch resource "pods" in API group "" at the '
            "cluster scope"
        )
    finally:
        await client.close()


async def test_metadata_only_lists_and_watches_carry_no_spec(served: Served, tmp_path: Path) -> None:
    cluster = {"certificate-authority-data": b64(served.ca.cert_pem.bytes())}
    path = kubeconfig(tmp_path / "kubeconfig", f"https://127.0.0.1:{served.port}", cluster, {"token": TOKEN})
    client = KubeClient(KubeAccess(path).config())
    try:
        listed = json.loads(await client.get(PODS, {}, 5, LIST_METADATA))
        assert (listed["kind"], listed["apiVersion"]) == ("PartialObjectMetadataList", "meta.k8s.io/v1")
        [pod] = listed["items"]
        assert sorted(pod) == ["apiVersion", "kind", "metadata"]
        assert (pod["kind"], pod["metadata"]["name"]) == ("PartialObjectMetadata", "a")
        params = {"watch": "1", "resourceVersion": listed["metadata"]["resourceVersion"], "timeoutSeconds": "5"}
        async with await client.watch(PODS, params, 10, WATCH_METADATA) as stream:
            served.api.put("pods", "b", namespace="ml", spec={"nodeName": "node-a"})
            async for line in stream.lines():
                event = json.loads(line)
                break
        assert (event["type"], sorted(event["object"]), event["object"]["kind"]) == (
            "ADDED", ["apiVersion", "kind", "metadata"], "PartialObjectMetadata",
        )  # fmt: skip
        assert "spec" in json.loads(await client.get(PODS, {}, 5))["items"][0]  # asked for the whole object
    finally:
        await client.close()
