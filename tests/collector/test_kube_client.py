"""The collector's Kubernetes client against the stand-in API server over TLS: the pod's service account (its token
read again as it rotates), a kubeconfig's client certificates, tls-server-name, exec plugins, refusals; and against
a bare HTTP server that answers with bytes as they are, for what the stand-in never sends: a body cut short, a watch
cut off, a line too long, the connection kept between requests."""

from __future__ import annotations

import asyncio
import base64
import json
import stat
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml

from collector.errors import ConfigError, KubeApiError, KubeError, KubeUnreachable
from collector.kube import client as kube_client
from collector.kube.client import MAX_BODY_BYTES, KubeClient, WatchStream
from collector.kube.config import KubeAccess, KubeConfig
from collector.kube.watch import LIST_METADATA, WATCH_METADATA
from collector.pods.directory import KubePodDirectory
from common.freshness import Freshness
from harness.kube.api import TOKEN, USER, FakeKubeAPIServer
from harness.kube.pki import CA
from harness.tasks import running
from harness.waiting import wait_until

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
    [({"tls-server-name": "kubernetes.default.svc"}, True), ({"tls-server-name": "Kubernetes.Default.Svc"}, True),
     ({"tls-server-name": "kubernetes.example.com"}, False), ({}, False), ({"insecure-skip-tls-verify": True}, True)],
)  # fmt: skip
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


def ended(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie not yet reaped by this test's own process counts)."""
    stat_file = Path(f"/proc/{pid}/stat")
    return not stat_file.exists() or stat_file.read_text().rsplit(")", 1)[1].split()[0] == "Z"


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


async def test_a_slow_exec_plugin_runs_under_its_own_time_not_the_requests(served: Served, tmp_path: Path) -> None:
    get_token = plugin(
        tmp_path,
        f"""
import time
(runs.parent / 'pids').open('a').write(f"{{os.getpid()}}\\n")
time.sleep(1.5)
print(json.dumps({{'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential',
                  'status': {{'token': {TOKEN!r}}}}}))
""",
    )
    cluster = {"certificate-authority-data": b64(served.ca.cert_pem.bytes())}
    user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(get_token)}}
    client = KubeClient(KubeAccess(kubeconfig(tmp_path / "kubeconfig", f"https://127.0.0.1:{served.port}", cluster,
                                              user)).config())  # fmt: skip
    try:
        for _ in range(2):  # each gives up before the plugin answers; the second waits for the first's run
            with pytest.raises(KubeUnreachable, match=r"no answer within 0\.5s"):
                await client.get(PODS, {}, 0.5)
        assert items(await client.get(PODS, {}, 5)) == ["a"]  # the same run's token
        assert (tmp_path / "runs").read_text() == "1"
    finally:
        await client.close()
    [pid] = (tmp_path / "pids").read_text().split()
    assert ended(int(pid))


async def test_an_exec_plugin_still_running_when_the_collector_stops_is_ended(tmp_path: Path) -> None:
    get_token = plugin(tmp_path, "import time\n(runs.parent / 'pid').write_text(str(os.getpid()))\ntime.sleep(60)")
    path = kubeconfig(tmp_path / "kubeconfig", "https://127.0.0.1:1", {}, {"exec": {"command": str(get_token)}})
    client = KubeClient(KubeAccess(path).config())
    request = asyncio.create_task(client.get(PODS, {}, 30))
    while not (tmp_path / "pid").exists():
        await asyncio.sleep(0.05)
    pid = int((tmp_path / "pid").read_text())
    request.cancel()
    await asyncio.gather(request, return_exceptions=True)
    await client.close()
    running = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in running:  # what the event loop does to its tasks when the program ends
        task.cancel()
    await asyncio.gather(*running, return_exceptions=True)
    assert ended(pid)


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


async def test_selectors_reach_the_server_as_they_were_given(served: Served, tmp_path: Path) -> None:
    cluster = {"certificate-authority-data": b64(served.ca.cert_pem.bytes())}
    path = kubeconfig(tmp_path / "kubeconfig", f"https://127.0.0.1:{served.port}", cluster, {"token": TOKEN})
    client = KubeClient(KubeAccess(path).config())
    served.api.put("pods", "b", labels={"app": "x"}, namespace="ml", spec={"nodeName": "node-a"})
    served.api.put("pods", "c", labels={"app": "x"}, namespace="ml", spec={"nodeName": "node-b"})
    params = {"fieldSelector": "spec.nodeName=node-a", "labelSelector": "app in (x, y),tier!=db"}
    try:
        assert items(await client.get(PODS, params, 5)) == ["b"]
        assert served.api.requests[-1] == (PODS, params)
    finally:
        await client.close()


# --- a bare server, for answers the stand-in does not give -----------------------------------------------------


@dataclass
class Raw:
    """What the bare server was sent: each connection's request heads, in order."""

    port: int
    connections: list[list[bytes]] = field(default_factory=list)


@dataclass(frozen=True)
class Cut:
    """An answer after which the server closes the connection: a watch cut off, when its last chunk is left out."""

    data: bytes


@asynccontextmanager
async def raw_server(*answers: bytes | Cut | None, hold: bool = False) -> AsyncIterator[Raw]:
    """An HTTP server on 127.0.0.1 that answers each request it reads, whichever connection brings it, with the next
    of ``answers`` as it is (None: it closes the connection without answering; ``Cut``: it closes it after the
    bytes); after the last it closes the connection, or with ``hold`` keeps it open silent."""
    left = list(answers)
    handlers: set[asyncio.Task[None]] = set()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        heads: list[bytes] = []
        raw.connections.append(heads)
        try:
            while left:
                try:
                    heads.append(await reader.readuntil(b"\r\n\r\n"))
                except asyncio.IncompleteReadError:
                    return  # the client closed the connection
                reply = left.pop(0)
                if reply is None:
                    return
                writer.write(reply.data if isinstance(reply, Cut) else reply)
                await writer.drain()
                if isinstance(reply, Cut):
                    return
            if hold:
                await asyncio.Event().wait()
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    raw = Raw(server.sockets[0].getsockname()[1])
    try:
        yield raw
    finally:
        server.close()
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)
        await server.wait_closed()


@asynccontextmanager
async def client_of(raw: Raw, prefix: str = "", **options: Any) -> AsyncIterator[KubeClient]:
    """``options``: ``KubeClient``'s keyword parameters (its sleep, its limits)."""
    client = KubeClient(KubeConfig(f"http://127.0.0.1:{raw.port}{prefix}", "a test", token=TOKEN), **options)
    try:
        yield client
    finally:
        await client.close()


def answer(body: bytes, status: str = "200 OK", headers: str = "") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n{headers}\r\n".encode()
        + body
    )


def chunked(*parts: bytes, last: bool = True) -> bytes:
    """A 200 whose body is ``parts`` as chunks, with the last chunk unless ``last`` is false (the body cut off)."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in parts)
    return head + chunks + (b"0\r\n\r\n" if last else b"")


async def read_lines(stream: WatchStream, into: list[bytes]) -> None:
    async for line in stream.lines():
        into.append(line)


async def test_requests_made_one_after_the_other_share_one_connection() -> None:
    async with raw_server(answer(b'{"n": 1}'), answer(b'{"n": 2}')) as raw, client_of(raw, "/prefix") as client:
        assert await client.get(PODS, {"fieldSelector": "spec.nodeName=node-a"}, 5) == b'{"n": 1}'
        assert await client.get(PODS, {}, 5) == b'{"n": 2}'
    [[first, second]] = raw.connections
    lines = first.decode().split("\r\n")
    assert lines[0] == "GET /prefix/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-a HTTP/1.1"
    headers = {name.lower(): value for name, _, value in (line.partition(": ") for line in lines[1:] if line)}
    assert headers == {
        "host": f"127.0.0.1:{raw.port}", "accept": "application/json", "user-agent": "gpuscale-collector",
        "authorization": f"Bearer {TOKEN}",
    }  # fmt: skip
    assert second.startswith(b"GET /prefix/api/v1/pods HTTP/1.1\r\n")


@pytest.mark.parametrize("why", ["the server closes it", "it was idle too long"])
async def test_a_connection_the_server_closes_or_idle_too_long_is_not_used_again(
    why: str,
) -> None:
    headers = "Connection: close\r\n" if why == "the server closes it" else ""
    idle_seconds = 0.0 if why == "it was idle too long" else kube_client.IDLE_SECONDS
    async with (
        raw_server(answer(b"{}", headers=headers), answer(b"[]")) as raw,
        client_of(raw, idle_seconds=idle_seconds) as client,
    ):
        assert await client.get(PODS, {}, 5) == b"{}"
        assert await client.get(PODS, {}, 5) == b"[]"
    assert [len(heads) for heads in raw.connections] == [1, 1]


async def test_a_429_or_5xx_with_retry_after_is_asked_again_after_it() -> None:
    slept: list[float] = []

    async def recorded(seconds: float) -> None:
        slept.append(seconds)

    throttled = answer(b"{}", "429 Too Many Requests", "Retry-After: 2\r\n")
    unavailable = answer(b"{}", "503 Service Unavailable", "Retry-After: 1\r\n")
    async with (
        raw_server(throttled, unavailable, answer(b'{"n": 1}')) as raw,
        client_of(raw, sleep=recorded) as client,
    ):
        assert await client.get(PODS, {}, 5) == b'{"n": 1}'
    assert slept == [2.0, 1.0]
    assert sum(len(heads) for heads in raw.connections) == 3


@pytest.mark.parametrize(
    ("status", "header"),
    [("500 Internal Server Error", ""), ("404 Not Found", "Retry-After: 1\r\n"),
     ("503 Service Unavailable", "Retry-After: 60\r\n"), ("429 Too Many Requests", "Retry-After: soon\r\n")],
)  # fmt: skip
async def test_an_error_without_a_retry_after_in_time_is_not_asked_again(status: str, header: str) -> None:
    async with raw_server(answer(b"{}", status, header), answer(b"{}")) as raw, client_of(raw) as client:
        with pytest.raises(KubeApiError, match=f"^{status}"):
            await client.get(PODS, {}, 5)  # 60 s would end past the caller's 5: not waited for
    assert sum(len(heads) for heads in raw.connections) == 1


async def test_a_kept_connection_the_server_closes_as_the_request_goes_out_is_replaced() -> None:
    # the server closes the kept connection on the second request without answering: sent again on a new one
    async with raw_server(answer(b'{"n": 1}'), None, answer(b'{"n": 2}')) as raw, client_of(raw) as client:
        assert await client.get(PODS, {}, 5) == b'{"n": 1}'
        assert await client.get(PODS, {}, 5) == b'{"n": 2}'
    assert [len(heads) for heads in raw.connections] == [2, 1]


async def test_a_kept_connection_that_answered_in_part_is_not_asked_again() -> None:
    cut = Cut(answer(b'{"n": 2}')[:-3])
    async with raw_server(answer(b'{"n": 1}'), cut, answer(b"{}")) as raw, client_of(raw) as client:
        assert await client.get(PODS, {}, 5) == b'{"n": 1}'
        with pytest.raises(KubeUnreachable, match="RemoteProtocolError"):
            await client.get(PODS, {}, 5)
    assert [len(heads) for heads in raw.connections] == [2]


async def test_a_kept_connection_that_anything_arrived_on_while_idle_is_not_used_again() -> None:
    connections: list[int] = []
    timed_out = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(0)
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(answer(b'{"n": %d}' % len(connections)))
            await writer.drain()
            if len(connections) == 1:
                await asyncio.sleep(0.1)  # idle now: a proxy gives up on it, answering no request
                writer.write(answer(b"", "408 Request Timeout", "Connection: close\r\n"))
                await writer.drain()
                timed_out.set()
            await reader.read()
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    client = KubeClient(KubeConfig(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}", "a test", token=TOKEN))
    try:
        assert await client.get(PODS, {}, 5) == b'{"n": 1}'
        # the 408 has gone out (a fixed 0.3 s wait raced it when the loop stalled), and a timer's wait lets the loop
        # read it off the socket first: it reads ready sockets before it runs the timers that fell due
        await timed_out.wait()
        await asyncio.sleep(0.01)
        assert await client.get(PODS, {}, 5) == b'{"n": 2}'  # not the 408 meant for no request
    finally:
        await client.close()
        server.close()
        await server.wait_closed()
    assert len(connections) == 2


async def test_a_body_shorter_than_its_length_is_unreachable() -> None:
    async with raw_server(answer(b'{"items": []}')[:-3]) as raw, client_of(raw) as client:
        with pytest.raises(KubeUnreachable, match=r"^GET /api/v1/pods: RemoteProtocolError: .*expected 13"):
            await client.get(PODS, {}, 5)


async def test_a_server_that_closes_without_answering_is_unreachable() -> None:
    async with raw_server(b"") as raw, client_of(raw) as client:
        with pytest.raises(KubeUnreachable, match="closed the connection without answering"):
            await client.get(PODS, {}, 5)


async def test_a_get_not_answered_in_time_is_unreachable() -> None:
    async with (
        raw_server(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{", hold=True) as raw,
        client_of(raw) as client,
    ):
        with pytest.raises(KubeUnreachable, match=r"^GET /api/v1/pods: no answer within 0.2s$"):
            await client.get(PODS, {}, 0.2)


async def test_an_error_status_is_an_api_error_and_a_redirect_is_not_followed() -> None:
    status = json.dumps({"kind": "Status", "code": 404, "message": 'pods "x" not found'}).encode()
    async with (
        raw_server(answer(status, "404 Not Found"), answer(b"", "302 Found", "Location: /elsewhere\r\n")) as raw,
        client_of(raw) as client,
    ):
        with pytest.raises(KubeApiError, match=r'^404 Not Found: pods "x" not found$'):
            await client.get(PODS, {}, 5)
        with pytest.raises(KubeApiError, match=r"^302 Found$"):
            await client.get(PODS, {}, 5)


async def test_a_watch_yields_its_lines_as_they_come_and_a_last_one_without_its_newline() -> None:
    async with (
        raw_server(chunked(b'{"a": 1}\n{"b"', b': 2}\n\n{"c": 3}')) as raw,
        client_of(raw) as client,
        await client.watch(PODS, {"watch": "1"}, 5) as stream,
    ):
        lines = [line async for line in stream.lines()]
    assert lines == [b'{"a": 1}\n', b'{"b": 2}\n', b"\n", b'{"c": 3}']


async def test_a_watch_cut_off_mid_stream_ends_without_its_partial_line() -> None:
    # as client-go's watch ends on a probable EOF: the caller watches again from the last version it saw
    async with (
        raw_server(Cut(chunked(b'{"a": 1}\n', b'{"b": ', last=False))) as raw,
        client_of(raw) as client,
        await client.watch(PODS, {"watch": "1"}, 5) as stream,
    ):
        assert [line async for line in stream.lines()] == [b'{"a": 1}\n']


async def test_a_watch_the_server_breaks_is_unreachable() -> None:
    async with raw_server(chunked(b'{"a": 1}\n', last=False) + b"zz\r\n", hold=True) as raw, client_of(raw) as client:
        lines: list[bytes] = []
        async with await client.watch(PODS, {"watch": "1"}, 5) as stream:
            with pytest.raises(KubeUnreachable, match=r"^watch /api/v1/pods: RemoteProtocolError: .*chunk"):
                await read_lines(stream, lines)
        assert lines == [b'{"a": 1}\n']


async def test_a_silent_watch_ends() -> None:
    async with (
        raw_server(chunked(b'{"a": 1}\n', last=False), hold=True) as raw,
        client_of(raw) as client,
        await client.watch(PODS, {"watch": "1"}, 0.2) as stream,
    ):
        assert [line async for line in stream.lines()] == [b'{"a": 1}\n']


async def test_a_watch_event_over_the_limit_is_refused() -> None:
    limit = 2**20
    at_the_limit = b"x" * (limit - 1) + b"\n"
    answers = raw_server(chunked(at_the_limit, b"y" * 1000, b"y" * limit, b"\n"))
    async with answers as raw, client_of(raw, max_body_bytes=limit) as client:
        lines: list[bytes] = []
        async with await client.watch(PODS, {"watch": "1"}, 5) as stream:
            with pytest.raises(KubeError, match=r"^watch /api/v1/pods: a watch event over 1 MiB$"):
                await read_lines(stream, lines)
        assert lines == [at_the_limit]


async def test_an_endless_answer_to_a_get_is_cut_at_the_body_limit() -> None:
    # the red team's endless LIST body took the collector to 6,954 MiB in 30 s; the server here never ends it
    limit = 2**20
    endless = chunked(b"[" + b"0," * (limit // 2), b"0," * 1000, last=False)
    async with raw_server(endless, hold=True) as raw, client_of(raw, max_body_bytes=limit) as client:
        said = r"^GET /api/v1/pods: an answer over 1 MiB: \d+ bytes had arrived when reading stopped$"
        with pytest.raises(KubeError, match=said):
            await client.get(PODS, {}, 30)
        assert client.max_body_bytes == limit


async def test_an_answer_to_a_get_whose_length_is_over_the_limit_is_refused_before_it_is_read() -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1048577\r\n\r\n"
    async with raw_server(head, hold=True) as raw, client_of(raw, max_body_bytes=2**20) as client:
        said = r"^GET /api/v1/pods: an answer over 1 MiB \(its Content-Length is 1048577\)$"
        with pytest.raises(KubeError, match=said):
            await client.get(PODS, {}, 30)


async def test_an_answer_to_a_get_at_the_limit_is_read() -> None:
    body = b"x" * 2**20
    async with raw_server(answer(body), chunked(body)) as raw, client_of(raw, max_body_bytes=2**20) as client:
        assert await client.get(PODS, {}, 30) == body
        assert await client.get(PODS, {}, 30) == body


async def test_closing_the_client_ends_its_open_watches() -> None:
    async with raw_server(chunked(b'{"a": 1}\n', last=False), hold=True) as raw, client_of(raw) as client:
        stream = await client.watch(PODS, {"watch": "1"}, 5)
        await client.close()
        assert [line async for line in stream.lines()] in ([], [b'{"a": 1}\n'])  # ended, whatever it had read
        stream.close()


@pytest.mark.parametrize(
    ("server", "said"),
    [("https://127.0.0.1:port", "could not be cast to integer"), ("ftp://127.0.0.1", r"is not an http\(s\) URL")],
)
async def test_a_server_address_that_cannot_be_used_is_a_config_error(server: str, said: str) -> None:
    client = KubeClient(KubeConfig(server, "a test", token=TOKEN))
    with pytest.raises(ConfigError, match=rf"^a test: server {server}.*{said}"):
        await client.get(PODS, {}, 5)


async def test_a_list_whose_body_does_not_end_is_refused_and_the_directory_lists_again(tmp_path: Path) -> None:
    # the red team's endless LIST body took the collector to 6,954 MiB in 30 s
    pod = {"metadata": {"name": "a", "namespace": "ml", "uid": "uid-a", "resourceVersion": "101"}}
    listed = json.dumps({"kind": "PartialObjectMetadataList", "metadata": {"resourceVersion": "101"}, "items": [pod]})
    endless = chunked(b'{"items":[' + b'{"metadata":{}},' * (MAX_BODY_BYTES // 16 + 4096), last=False)
    async with raw_server(endless, answer(listed.encode()), chunked(last=False), hold=True) as raw:
        path = kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{raw.port}", {}, {"token": TOKEN})
        source = Freshness("pod-directory", 60.0)
        directory = KubePodDirectory("node-a", KubeAccess(path), None, source)
        async with running(directory.run()):
            await wait_until(lambda: directory.lookup("uid-a") == ("ml", "a"), within=30)
            assert directory.errors == {"KubeError": 1}
            assert source.failing_since is None


async def test_a_copy_whose_watch_is_cut_midway_watches_again_from_its_last_version(tmp_path: Path) -> None:
    pod = {"metadata": {"name": "a", "namespace": "ml", "uid": "uid-a", "resourceVersion": "101"}}
    listed = json.dumps({"kind": "PartialObjectMetadataList", "metadata": {"resourceVersion": "100"}, "items": []})
    event = json.dumps({"type": "ADDED", "object": pod}).encode() + b"\n"
    async with raw_server(
        answer(listed.encode()), Cut(chunked(event, last=False)), chunked(last=False), hold=True
    ) as raw:
        path = kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{raw.port}", {}, {"token": TOKEN})
        source = Freshness("pod-directory", 60.0)
        directory = KubePodDirectory("node-a", KubeAccess(path), None, source)
        async with running(directory.run()):
            await wait_until(lambda: sum(len(heads) for heads in raw.connections) == 3)
    requests = [head.split(b" ")[1].decode() for heads in raw.connections for head in heads]
    assert ["watch=1" in r for r in requests] == [False, True, True]  # listed once
    assert "resourceVersion=100" in requests[1]
    assert "resourceVersion=101" in requests[2]  # from the last version seen, without listing again
    assert directory.lookup("uid-a") == ("ml", "a")
    assert not directory.errors
    assert source.failing_since is None
