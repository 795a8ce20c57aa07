"""``--web-config-file`` through the real command line on simulated GPUs: real TLS clients (Python's ssl and
http.client, aiohttp) for each client_auth_type and TLS version, basic auth, reloads of users and certificates, broken
files, and a real Prometheus scraping over HTTPS with a client certificate and basic auth."""

import asyncio
import base64
import http.client
import os
import shutil
import ssl
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from email.message import Message
from pathlib import Path

import aiohttp
import bcrypt
import pytest
import trustme

from harness.processes import free_port
from harness.stores.prometheus import run_prometheus

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "s3cret"
HASH = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()  # cost 4: the checks stay quick


@dataclass(frozen=True)
class Pki:
    directory: Path
    ca: trustme.CA

    def path(self, name: str) -> str:
        return str(self.directory / name)


def _write_pair(directory: Path, name: str, leaf: trustme.LeafCert) -> None:
    leaf.cert_chain_pems[0].write_to_path(str(directory / f"{name}.crt"))
    leaf.private_key_pem.write_to_path(str(directory / f"{name}.key"))
    leaf.private_key_and_cert_chain_pem.write_to_path(str(directory / f"{name}.pem"))


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """ca.pem signs server, client (SANs prometheus@example.com, scraper.example) and other-client; another CA
    signs stranger and server2 (ca2.pem)."""
    directory = tmp_path_factory.mktemp("pki")
    ca, ca2 = trustme.CA(), trustme.CA()
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    ca2.cert_pem.write_to_path(str(directory / "ca2.pem"))
    _write_pair(directory, "server", ca.issue_cert("localhost", "127.0.0.1"))
    _write_pair(directory, "server2", ca2.issue_cert("localhost", "127.0.0.1"))
    _write_pair(directory, "client", ca.issue_cert("prometheus@example.com", "scraper.example"))
    _write_pair(directory, "other-client", ca.issue_cert("other.example"))
    _write_pair(directory, "stranger", ca2.issue_cert("scraper.example"))
    return Pki(directory, ca)


def write(path: Path, text: str) -> None:
    """Replace the file in one step, as Kubernetes updates a mounted ConfigMap or Secret."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    os.replace(partial, path)


@dataclass(frozen=True)
class Running:
    port: int
    log: Path

    def logged(self, text: str) -> int:
        return self.log.read_text().count(text)


@contextmanager
def collector(tmp_path: Path, config: Path | None, env: dict[str, str] | None = None) -> Iterator[Running]:
    port = free_port()
    log = tmp_path / f"collector-{port}.log"
    args = [
        sys.executable,
        "-m",
        "collector",
        "--simulate-gpus",
        "2",
        "-c",
        "500",
        "--dcgm-names",
        "pre-4.9",
        "-a",
        f"127.0.0.1:{port}",
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen([*args, *(["--web-config-file", str(config)] if config else [])], cwd=ROOT,
                                env={**os.environ, "NODE_NAME": "sim-node", **(env or {})}, stdout=out,
                                stderr=subprocess.STDOUT)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while "serving /metrics on" not in log.read_text():
            assert proc.poll() is None, f"exited: {log.read_text()}"
            assert time.monotonic() < deadline, f"not serving yet: {log.read_text()}"
            time.sleep(0.1)
        yield Running(port, log)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Message
    body: str
    version: str | None  # the TLS version agreed on


def get(port: int, ctx: ssl.SSLContext | None = None, auth: tuple[str, str] | None = None,
        path: str = "/metrics") -> Answer:  # fmt: skip
    """One request on a new connection (so that each sees the file as it is now)."""
    conn: http.client.HTTPConnection
    if ctx is None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    else:
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
    headers = {"Authorization": "Basic " + base64.b64encode(":".join(auth).encode()).decode()} if auth else {}
    try:
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        version = conn.sock.version() if isinstance(conn.sock, ssl.SSLSocket) else None
        return Answer(response.status, response.headers, response.read().decode(), version)
    finally:
        conn.close()


def client(pki: Pki, identity: str | None = None, trust: str = "ca.pem") -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=pki.path(trust))
    if identity:
        ctx.load_cert_chain(pki.path(f"{identity}.pem"))
    return ctx


def refused(port: int, ctx: ssl.SSLContext) -> str:
    """The error of a request the TLS layer refuses (with TLS 1.3 a refused client certificate shows on reading)."""
    with pytest.raises((ssl.SSLError, ConnectionError)) as caught:
        get(port, ctx)
    return repr(caught.value)


def tls_config(pki: Pki, extra: str = "") -> str:
    return f"tls_server_config:\n  cert_file: {pki.path('server.crt')}\n  key_file: {pki.path('server.key')}\n" + extra


def with_aiohttp(url: str, ctx: ssl.SSLContext, auth: tuple[str, str] | None = None) -> tuple[int, str]:
    """A second client, aiohttp's: the status and body, or 0 and why the connection failed."""

    async def fetch() -> tuple[int, str]:
        headers = {"Authorization": aiohttp.encode_basic_auth(*auth)} if auth else {}
        async with (
            aiohttp.ClientSession(headers=headers, timeout=aiohttp.ClientTimeout(total=10)) as session,
            session.get(url, ssl=ctx) as response,
        ):
            return response.status, await response.text()

    try:
        return asyncio.run(fetch())
    except aiohttp.ClientConnectionError as e:
        return 0, f"refused: {e!r}"


OK, REFUSED = 200, "refused"
CLIENT_AUTH: list[tuple[str, dict[str | None, int | str]]] = [
    ("NoClientCert", {None: OK, "client": OK, "stranger": OK}),
    ("RequestClientCert", {None: OK, "client": OK, "stranger": REFUSED}),
    ("RequireAnyClientCert", {None: REFUSED, "client": OK, "stranger": REFUSED}),
    ("VerifyClientCertIfGiven", {None: OK, "client": OK, "stranger": REFUSED}),
    ("RequireAndVerifyClientCert", {None: REFUSED, "client": OK, "stranger": REFUSED}),
]


def test_each_client_auth_type_and_client_allowed_sans_with_real_clients(tmp_path: Path, pki: Pki) -> None:
    config = tmp_path / "web.yml"
    write(config, tls_config(pki))
    with collector(tmp_path, config) as running:
        for auth, expected in CLIENT_AUTH:
            ca = f"  client_ca_file: {pki.path('ca.pem')}\n" if auth != "NoClientCert" else ""
            write(config, tls_config(pki, f"  client_auth_type: {auth}\n{ca}"))  # the next connection reads it
            for identity, outcome in expected.items():
                ctx = client(pki, identity)
                if outcome == OK:
                    assert get(running.port, ctx).status == OK, (auth, identity)
                else:
                    assert refused(running.port, ctx), (auth, identity)
        assert running.logged("client_auth_type RequestClientCert acts as VerifyClientCertIfGiven") == 1
        assert running.logged("client_auth_type RequireAnyClientCert acts as RequireAndVerifyClientCert") == 1
        # each kind of refusal is logged once a minute, as Go's server logs its handshake errors
        assert running.logged("TLS handshake refused: peer did not return a certificate") == 1
        assert running.logged("TLS handshake refused: client certificate: unable to get local issuer certificate") == 1
        url = f"https://127.0.0.1:{running.port}/metrics"
        with_cert = with_aiohttp(url, client(pki, "client"))
        assert with_cert[0] == 200, with_cert
        without = with_aiohttp(url, client(pki))
        assert without[0] == 0, without

        write(config, tls_config(pki, f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: "
                                      f"{pki.path('ca.pem')}\n  client_allowed_sans: [scraper.example]\n"))  # fmt: skip
        assert get(running.port, client(pki, "client")).status == OK
        answer = get(running.port, client(pki, "other-client"))
        assert (answer.status, answer.body) == (403, "the client certificate has none of the subject alternative "
                                                     "names in client_allowed_sans\n")  # fmt: skip
        assert refused(running.port, client(pki, "stranger"))  # its SAN is allowed, its CA is not


def test_minimum_and_maximum_tls_versions(tmp_path: Path, pki: Pki) -> None:
    config = tmp_path / "web.yml"
    write(config, tls_config(pki, "  min_version: TLS13\n"))
    with collector(tmp_path, config) as running:
        assert get(running.port, client(pki)).version == "TLSv1.3"
        old = client(pki)
        old.maximum_version = ssl.TLSVersion.TLSv1_2
        assert refused(running.port, old)  # asyncio closes a failed handshake without sending the alert
        health = f"https://127.0.0.1:{running.port}/health"
        assert with_aiohttp(health, old)[0] == 0
        assert with_aiohttp(health, client(pki))[0] == 200

        write(config, tls_config(pki, "  max_version: TLS12\n"))
        assert get(running.port, client(pki)).version == "TLSv1.2"

        # TLS 1.0, which OpenSSL 3 speaks only at security level 0: honoured as Go honours it
        write(config, tls_config(pki, "  min_version: TLS10\n  max_version: TLS10\n"))
        tls10 = client(pki)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            tls10.minimum_version = tls10.maximum_version = ssl.TLSVersion.TLSv1
        tls10.set_ciphers("ECDHE+AES:@SECLEVEL=0")
        assert get(running.port, tls10).version == "TLSv1"
        assert refused(running.port, client(pki))  # a client that wants TLS 1.2 or newer


def test_basic_auth_right_wrong_and_missing_and_users_reloaded(tmp_path: Path, pki: Pki) -> None:
    config = tmp_path / "web.yml"
    users = f"basic_auth_users:\n  alice: {HASH}\nhttp_server_config:\n  headers:\n    X-Frame-Options: deny\n"
    write(config, tls_config(pki) + users)
    with collector(tmp_path, config) as running:
        ctx = client(pki)
        right = get(running.port, ctx, ("alice", PASSWORD))
        assert right.status == 200
        assert 'DCGM_FI_DEV_GPU_UTIL{gpu="1"' in right.body
        assert right.headers["X-Frame-Options"] == "deny"
        for auth in [("alice", "wrong"), ("mallory", PASSWORD), None]:
            for path in ("/metrics", "/health", "/"):
                answer = get(running.port, ctx, auth, path)
                assert (answer.status, answer.body) == (401, "Unauthorized\n"), (auth, path)
                assert answer.headers["WWW-Authenticate"] == "Basic"
                assert answer.headers["X-Frame-Options"] == "deny"
                assert answer.headers["Content-Type"] == "text/plain; charset=utf-8"

        url = f"https://127.0.0.1:{running.port}/metrics"
        status, body = with_aiohttp(url, ctx, ("alice", PASSWORD))
        assert status == 200
        assert "DCGM_FI_DEV_GPU_TEMP{" in body
        assert with_aiohttp(url, ctx, ("alice", "wrong"))[0] == 401
        assert with_aiohttp(url, ctx)[0] == 401

        write(config, tls_config(pki) + users.replace("alice", "bob"))
        assert get(running.port, ctx, ("alice", PASSWORD)).status == 401  # the very next request
        assert get(running.port, ctx, ("bob", PASSWORD)).status == 200
        assert running.logged("reloaded") == 1


def test_a_new_certificate_is_served_once_its_key_matches(tmp_path: Path, pki: Pki) -> None:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    shutil.copy(pki.path("server.crt"), cert)
    shutil.copy(pki.path("server.key"), key)
    config = tmp_path / "web.yml"
    write(config, "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n")  # relative to the file
    with collector(tmp_path, config) as running:
        first, second = client(pki, trust="ca.pem"), client(pki, trust="ca2.pem")
        assert get(running.port, first).status == 200
        assert "CERTIFICATE_VERIFY_FAILED" in refused(running.port, second)

        write(cert, Path(pki.path("server2.crt")).read_text())  # the key follows a moment later
        assert get(running.port, first).status == 200  # the pair in use stays
        assert get(running.port, first).status == 200
        assert running.logged("not a certificate and its key") == 1  # once for the change, not per connection

        write(key, Path(pki.path("server2.key")).read_text())
        assert get(running.port, second).status == 200
        assert "CERTIFICATE_VERIFY_FAILED" in refused(running.port, first)


def test_a_broken_file_after_start_keeps_the_last_good_one(tmp_path: Path, pki: Pki) -> None:
    config = tmp_path / "web.yml"
    write(config, f"basic_auth_users:\n  alice: {HASH}\n")
    with collector(tmp_path, config) as running:
        assert get(running.port, auth=("alice", PASSWORD)).status == 200
        write(config, "basic_auth_users:\n  alice: [\n")
        for _ in range(3):
            assert get(running.port, auth=("alice", PASSWORD)).status == 200
            assert get(running.port).status == 401
        assert running.logged(f"web config file {config}: not valid YAML") == 1
        assert running.logged("the configuration in use stays") == 1

        write(config, tls_config(pki) + f"basic_auth_users:\n  bob: {HASH}\n")
        assert get(running.port, auth=("alice", PASSWORD)).status == 200
        assert running.logged("adds TLS; switching between HTTP and HTTPS needs a restart") == 1

        write(config, f"basic_auth_users:\n  bob: {HASH}\nrate_limit:\n  interval: 1h\n  burst: 2\n")
        assert get(running.port, auth=("bob", PASSWORD)).status == 200
        assert get(running.port, auth=("bob", PASSWORD)).status == 200
        limited = get(running.port, auth=("bob", PASSWORD))
        assert (limited.status, limited.body) == (429, "Too Many Requests\n")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tls_server_config:\n  cert_filse: server.crt\n", "tls_server_config.cert_filse (line 2): unknown key"),
        ("tls_server_config:\n  cert_file: none.crt\n  key_file: none.key\n",
         "tls_server_config.cert_file {d}/none.crt: cannot be read: No such file or directory"),
        ("basic_auth_users:\n  john: doe\n", "basic_auth_users.john (line 2): not a bcrypt hash"),
        (None, "cannot be read: No such file or directory"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("through", ["flag", "DCGM_EXPORTER_WEB_CONFIG_FILE"])
def test_a_broken_file_at_start_is_a_clear_error(tmp_path: Path, text: str | None, message: str, through: str) -> None:
    config = tmp_path / "web.yml"
    if text is not None:
        write(config, text)
    command = [sys.executable, "-m", "collector", "--simulate-gpus", "1"]
    env = {**os.environ, through: str(config)} if through != "flag" else os.environ
    flag = ["--web-config-file", str(config)] if through == "flag" else []
    result = subprocess.run([*command, *flag], cwd=ROOT, env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert f"gpuscale-collector: error: web config file {config}: " in result.stderr
    assert message.format(d=tmp_path) in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.prometheus
def test_a_real_prometheus_scrapes_over_https_with_a_client_certificate_and_basic_auth(
    tmp_path: Path, pki: Pki
) -> None:
    config = tmp_path / "web.yml"
    write(config, tls_config(pki, f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: "
                                  f"{pki.path('ca.pem')}\nbasic_auth_users:\n  prometheus: {HASH}\n"))  # fmt: skip
    with collector(tmp_path, config) as running:
        target = {"targets": [f"127.0.0.1:{running.port}"]}
        tls = {"ca_file": pki.path("ca.pem"), "cert_file": pki.path("client.crt"), "key_file": pki.path("client.key")}

        def job(name: str, tls_config: dict[str, str], password: str) -> dict[str, object]:
            return {"job_name": name, "scheme": "https", "tls_config": tls_config, "static_configs": [target],
                    "basic_auth": {"username": "prometheus", "password": password}}  # fmt: skip

        jobs = [
            job("gpu", tls, PASSWORD),
            job("wrong-password", tls, "wrong"),
            job("no-client-cert", {"ca_file": pki.path("ca.pem")}, PASSWORD),
        ]
        with run_prometheus(tmp_path / "prometheus", extra_config={"scrape_configs": jobs}) as prom:
            assert len(prom.wait_for('up{job="gpu"} == 1')) == 1
            util = prom.wait_for('DCGM_FI_DEV_GPU_UTIL{job="gpu"}', min_results=2)
            assert {r["metric"]["gpu"] for r in util} == {"0", "1"}
            prom.wait_for('up{job="wrong-password"} == 0')
            prom.wait_for('up{job="no-client-cert"} == 0')
            errors = {t["labels"]["job"]: t["lastError"] for t in prom.api("/api/v1/targets")["activeTargets"]}
            assert errors["gpu"] == ""
            assert "401 Unauthorized" in errors["wrong-password"]
            # refused in the handshake, before any HTTP (asyncio closes it without a TLS alert: Go reads EOF)
            assert errors["no-client-cert"]
            assert "401" not in errors["no-client-cert"]
            assert prom.query('DCGM_FI_DEV_GPU_UTIL{job!="gpu"}') == []
