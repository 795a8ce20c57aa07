"""--prometheus-auth-config read by the Kubernetes client library, against a real TLS server (a proxy that requires
a client certificate, in front of the real Prometheus, recording the Authorization header it gets): an exec plugin
(a script that prints an ExecCredential), a token file, client certificates, and no secret left in a file."""

from __future__ import annotations

import base64
import logging
import ssl
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trustme
import yaml

from adapter.backends import prometheus_auth
from adapter.backends.kube_client import KubeClient
from adapter.backends.prometheus import PrometheusClient, PrometheusConfig, make_session
from adapter.backends.prometheus_auth import KubeconfigCredentials
from adapter.components import components
from adapter.errors import ConfigError, PrometheusError
from adapter.self_metrics import AdapterMetrics
from harness.adapter.in_process import settings_for
from harness.kube.pki import CA
from harness.stores.prometheus import Prometheus
from harness.stores.proxy import PrometheusProxy

# prints an ExecCredential whose token counts the runs; an expiry in seconds from now, if the file says one
PLUGIN = """
import datetime, json, os, pathlib, sys
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
runs = pathlib.Path(sys.argv[1])
n = int(runs.read_text() or "0") + 1 if runs.exists() else 1
runs.write_text(str(n))
if pathlib.Path(sys.argv[1] + ".fail").exists():
    sys.exit("the identity provider is down")
status = {"token": f"exec-token-{n}"}
expiry = pathlib.Path(sys.argv[1] + ".expiry")
if expiry.exists():
    at = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=float(expiry.read_text()))
    status["expirationTimestamp"] = at.strftime("%Y-%m-%dT%H:%M:%SZ")
print(json.dumps({"apiVersion": info["apiVersion"], "kind": "ExecCredential", "status": status}))
"""
EXEC_API = "client.authentication.k8s.io/v1"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Server:
    """The TLS proxy: its CA for the kubeconfig, and the client CA it requires certificates from."""

    def __init__(self, proxy: PrometheusProxy, server_ca: trustme.CA, client_ca: CA) -> None:
        self.proxy = proxy
        self.server_ca = server_ca
        self.client_ca = client_ca

    def authorizations(self) -> list[str | None]:
        return [s.headers.get("Authorization") for s in self.proxy.seen]


@pytest.fixture
async def server(prometheus: Prometheus) -> AsyncIterator[Server]:
    server_ca, client_ca = trustme.CA(), CA("prometheus-clients")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ca.issue_cert("127.0.0.1").configure_cert(context)
    context.load_verify_locations(cadata=client_ca.pem)
    context.verify_mode = ssl.CERT_REQUIRED
    proxy = PrometheusProxy(prometheus.url, ssl_context=context)
    await proxy.start()
    yield Server(proxy, server_ca, client_ca)
    await proxy.close()


def b64(data: bytes | str) -> str:
    return base64.b64encode(data if isinstance(data, bytes) else data.encode()).decode()


def write_kubeconfig(path: Path, server: Server, user: dict[str, Any], cluster: dict[str, Any] | None = None) -> Path:
    """A kubeconfig with the proxy's CA and a client certificate inline (as ``kubectl config --embed-certs``
    writes them), and ``user``'s credential."""
    client = server.client_ca.issue("gpuscale-adapter")
    user = {"client-certificate-data": b64(client.cert_pem), "client-key-data": b64(client.key_pem), **user}
    cluster = cluster or {"certificate-authority-data": b64(server.server_ca.cert_pem.bytes())}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        # the server is not used for Prometheus (--prometheus-url is), as in prometheus-adapter
        "clusters": [{"name": "prometheus", "cluster": {"server": "https://kubernetes.invalid", **cluster}}],
        "users": [{"name": "adapter", "user": user}],
        "contexts": [{"name": "prometheus", "context": {"cluster": "prometheus", "user": "adapter"}}],
        "current-context": "prometheus",
    }
    path.write_text(yaml.safe_dump(config))
    return path


class Plugin:
    """The exec plugin's script, and the files that make it fail or give an expiry."""

    def __init__(self, directory: Path) -> None:
        self.script, self.runs = directory / "plugin.py", directory / "runs"
        self.script.write_text(PLUGIN)
        exec_spec = {"apiVersion": EXEC_API, "command": sys.executable, "args": [str(self.script), str(self.runs)]}
        self.user = {"exec": exec_spec}

    def failing(self, failing: bool) -> None:
        mark = Path(f"{self.runs}.fail")
        if failing:
            mark.touch()
        else:
            mark.unlink()

    def expiring_in(self, seconds: float) -> None:
        Path(f"{self.runs}.expiry").write_text(str(seconds))

    def count(self) -> int:
        return int(self.runs.read_text())


def files_in(directory: Path) -> list[Path]:
    return [p for p in directory.rglob("*") if p.is_file()]


async def connected(
    url: str, credentials: KubeconfigCredentials, config: PrometheusConfig | None = None
) -> PrometheusClient:
    config = config or PrometheusConfig(url=url, timeout=5.0)
    return PrometheusClient(make_session(config), config, AdapterMetrics(), credentials)


@pytest.fixture
def private_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The temporary directory every library of this process writes to (as TMPDIR would make it)."""
    directory = tmp_path / "tmp"
    directory.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(directory))
    return directory


async def test_an_exec_plugin_gives_the_token_and_runs_again_after_a_401(server: Server, tmp_path: Path) -> None:
    plugin = Plugin(tmp_path)
    credentials = KubeconfigCredentials(write_kubeconfig(tmp_path / "kubeconfig", server, plugin.user))
    await credentials.start()
    client = await connected(server.proxy.url, credentials)
    try:
        assert (await client.query("vector(1)")).samples[0].value == "1"
        assert (await client.query("vector(2)")).samples[0].value == "2"
        assert server.authorizations() == ["Bearer exec-token-1"] * 2
        server.proxy.respond = (401, b'{"status":"error","errorType":"unauthorized","error":"token expired"}')
        with pytest.raises(PrometheusError, match="HTTP 401"):
            await client.query("vector(3)")
        server.proxy.respond = None
        await client.query("vector(4)")
        assert server.authorizations()[-1] == "Bearer exec-token-2"
        assert plugin.count() == 2
    finally:
        await client.session.close()


async def test_an_exec_credential_is_renewed_before_it_expires(server: Server, tmp_path: Path) -> None:
    plugin = Plugin(tmp_path)
    plugin.expiring_in(13)  # renewed 10 s before: after about 3 s
    clock = FakeClock()
    credentials = KubeconfigCredentials(write_kubeconfig(tmp_path / "kubeconfig", server, plugin.user), clock=clock)
    await credentials.start()
    assert (await credentials.current()).authorization == "Bearer exec-token-1"
    clock.now += 1
    assert (await credentials.current()).authorization == "Bearer exec-token-1"
    clock.now += 5
    assert (await credentials.current()).authorization == "Bearer exec-token-2"


async def test_a_failing_plugin_keeps_the_credential_in_use_and_is_tried_again(
    server: Server, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plugin = Plugin(tmp_path)
    clock = FakeClock()
    credentials = KubeconfigCredentials(write_kubeconfig(tmp_path / "kubeconfig", server, plugin.user), clock=clock)
    await credentials.start()
    plugin.failing(True)
    clock.now += prometheus_auth.REREAD_SECONDS
    with caplog.at_level(logging.WARNING):
        assert (await credentials.current()).authorization == "Bearer exec-token-1"
    assert "the identity provider is down; the credentials in use are kept, tried again in 10s" in caplog.text
    plugin.failing(False)
    clock.now += prometheus_auth.RETRY_SECONDS
    assert (await credentials.current()).authorization == "Bearer exec-token-3"


async def test_a_token_file_relative_to_the_kubeconfig_is_read_again(server: Server, tmp_path: Path) -> None:
    (tmp_path / "token").write_text("first-token\n")
    clock = FakeClock()
    credentials = KubeconfigCredentials(
        write_kubeconfig(tmp_path / "kubeconfig", server, {"tokenFile": "token"}), clock=clock
    )
    await credentials.start()
    client = await connected(server.proxy.url, credentials)
    try:
        await client.query("vector(1)")
        (tmp_path / "token").write_text("rotated-token\n")
        clock.now += prometheus_auth.REREAD_SECONDS
        await client.query("vector(1)")
    finally:
        await client.session.close()
    assert server.authorizations() == ["Bearer first-token", "Bearer rotated-token"]


async def test_client_certificates_are_required_and_no_secret_is_left_in_a_file(
    server: Server, tmp_path: Path, private_tmp: Path
) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server, {"token": "static-token"})
    # the library alone leaves the certificate data it was given in files until the process exits
    from kubernetes_asyncio import client as k8s_client
    from kubernetes_asyncio import config as k8s_config

    await k8s_config.load_kube_config(
        config_file=str(kubeconfig), client_configuration=k8s_client.Configuration(), persist_config=False
    )
    left_by_the_library = files_in(private_tmp)
    assert len(left_by_the_library) == 3  # the CA, the client certificate and its key
    for p in left_by_the_library:
        p.unlink()
    credentials = KubeconfigCredentials(kubeconfig)
    await credentials.start()
    assert files_in(private_tmp) == []
    client = await connected(server.proxy.url, credentials)
    try:
        assert (await client.query("vector(7)")).samples[0].value == "7"
        assert server.authorizations() == ["Bearer static-token"]
        # read again (as every minute): the files are written anew and removed again
        credentials.rejected()
        await client.query("vector(7)")
    finally:
        await client.session.close()
    assert files_in(private_tmp) == []
    # the same kubeconfig as --lister-kubeconfig: the Kubernetes client leaves nothing either
    kube = await KubeClient.connect(kubeconfig, 5.0)
    await kube.close()
    assert files_in(private_tmp) == []


async def test_without_the_kubeconfigs_client_certificate_the_server_refuses(server: Server, tmp_path: Path) -> None:
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server, {"token": "t"})
    raw = yaml.safe_load(kubeconfig.read_text())
    del raw["users"][0]["user"]["client-certificate-data"], raw["users"][0]["user"]["client-key-data"]
    kubeconfig.write_text(yaml.safe_dump(raw))
    credentials = KubeconfigCredentials(kubeconfig)
    await credentials.start()
    client = await connected(server.proxy.url, credentials)
    try:
        with pytest.raises(PrometheusError, match="unreachable"):
            await client.query("vector(1)")
    finally:
        await client.session.close()


async def test_skip_tls_verify_and_flags_that_win(server: Server, tmp_path: Path) -> None:
    """insecure-skip-tls-verify accepts a server the CA does not vouch for; --prometheus-token-file wins over the
    kubeconfig's token, and TLS flags over its TLS settings, as in prometheus-adapter."""
    kubeconfig = write_kubeconfig(
        tmp_path / "kubeconfig", server, {"token": "kubeconfig-token"}, {"insecure-skip-tls-verify": True}
    )
    credentials = KubeconfigCredentials(kubeconfig)
    await credentials.start()
    (tmp_path / "flag-token").write_text("flag-token")
    config = PrometheusConfig(url=server.proxy.url, timeout=5.0, token_file=tmp_path / "flag-token")
    client = await connected(server.proxy.url, credentials, config)
    try:
        await client.query("vector(1)")
    finally:
        await client.session.close()
    assert server.authorizations() == ["Bearer flag-token"]
    config = PrometheusConfig(url=server.proxy.url, ca_file=tmp_path / "ca.pem")
    _, from_flags = await prometheus_auth.resolve(config, auth_config=kubeconfig)
    assert from_flags is not None
    assert (await from_flags.current()).ssl is None  # the session's, from --prometheus-ca-file
    assert (await from_flags.current()).authorization == "Bearer kubeconfig-token"


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (None, "cannot read it: No such file or directory"),
        ("current-context: missing\ncontexts: []\nclusters: []\n", "kubeconfig"),
        ("{", "kubeconfig"),
    ],
)
async def test_an_unusable_kubeconfig_stops_the_start_naming_it(
    tmp_path: Path, content: str | None, reason: str
) -> None:
    path = tmp_path / "kubeconfig"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError) as raised:
        await prometheus_auth.resolve(PrometheusConfig(), auth_config=path)
    assert str(raised.value).startswith(f"--prometheus-auth-config: kubeconfig {path}: ")
    assert reason in str(raised.value)
    with pytest.raises(ConfigError, match=f"cannot configure the Kubernetes client: kubeconfig {path}: "):
        await KubeClient.connect(path, 5.0)


async def test_a_plugin_that_fails_at_start_stops_it(server: Server, tmp_path: Path) -> None:
    plugin = Plugin(tmp_path)
    plugin.failing(True)
    with pytest.raises(ConfigError, match=r"exec: process returned 1\. the identity provider is down"):
        await prometheus_auth.resolve(
            PrometheusConfig(), auth_config=write_kubeconfig(tmp_path / "kubeconfig", server, plugin.user)
        )


async def test_the_adapter_relists_through_the_exec_credential(server: Server, tmp_path: Path) -> None:
    """The assembled adapter: its first relist reaches Prometheus with the plugin's token and the client certificate."""
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", server, Plugin(tmp_path).user)
    settings = settings_for(server.proxy.url, None, prometheus_auth_config=kubeconfig)
    async with components(settings) as c:
        await c.discovery.relist()
        assert c.discovery.catalog.resources_of("gpu_utilization")
    assert server.authorizations()
    assert set(server.authorizations()) == {"Bearer exec-token-1"}


async def test_incluster_auth_uses_the_service_account_unless_flags_say_otherwise() -> None:
    config, credentials = await prometheus_auth.resolve(PrometheusConfig(), incluster=True)
    assert credentials is None
    assert config.token_file == prometheus_auth.SERVICE_ACCOUNT / "token"
    assert config.ca_file == prometheus_auth.SERVICE_ACCOUNT / "ca.crt"
    explicit = PrometheusConfig(ca_file=Path("/etc/ca.pem"))
    assert (await prometheus_auth.resolve(explicit, incluster=True))[0].ca_file == Path("/etc/ca.pem")
