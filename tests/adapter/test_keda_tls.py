"""The external scaler over TLS with the serving certificate; with --keda-client-ca-file, only a client certificate
that chains to that CA gets in (KEDA's TriggerAuthentication: caCert, tlsClientCert, tlsClientKey)."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
import trustme
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from adapter.app import KEDA
from adapter.keda.externalscaler import externalscaler_pb2 as pb
from adapter.keda.externalscaler import externalscaler_pb2_grpc as pb_grpc
from adapter.keda.settings import KedaSettings
from adapter.security.tls import TLSSettings
from harness.adapter.in_process import Adapter, settings_for
from harness.kube.api import FakeKubeAPIServer
from harness.stores.prometheus import Prometheus
from harness.waiting import eventually

pytestmark = pytest.mark.prometheus

MakeAdapter = Callable[..., Awaitable[Adapter]]
TRAINERS = pb.ScaledObjectRef(
    name="scaled",
    namespace="ml",
    scalerMetadata={"metricName": "gpu_utilization", "labelSelector": "app=trainer", "targetValue": "60"},
)


class Files:
    """A serving certificate for localhost and 127.0.0.1 from one CA, written where the adapter reads it."""

    def __init__(self, directory: Path) -> None:
        self.cert, self.key = directory / "tls.crt", directory / "tls.key"
        self.issue(trustme.CA())

    def issue(self, ca: trustme.CA) -> None:
        self.ca = ca
        leaf = ca.issue_cert("localhost", "127.0.0.1")
        leaf.private_key_pem.write_to_path(str(self.key))
        leaf.cert_chain_pems[0].write_to_path(str(self.cert))


@pytest.fixture
def files(tmp_path: Path) -> Files:
    return Files(tmp_path)


async def start(
    make_adapter: MakeAdapter,
    kube: FakeKubeAPIServer,
    prometheus: Prometheus,
    files: Files,
    client_ca: Path | None,
    allowed_names: tuple[str, ...] = (),
) -> int:
    settings = settings_for(
        prometheus.adapter_url,
        kube.kubeconfig(files.cert.parent / "kubeconfig"),
        insecure_serve_http=False,
        tls=TLSSettings(cert_file=files.cert, key_file=files.key),
        keda=KedaSettings("127.0.0.1:0", client_ca_file=client_ca, client_allowed_names=allowed_names),
        config_check_interval=0.1,
    )
    adapter = await make_adapter(settings)
    return adapter.client.app[KEDA].port


async def is_active(port: int, credentials: grpc.ChannelCredentials | None) -> bool:
    """IsActive through a channel with ``credentials`` (None: plain text)."""
    target = f"127.0.0.1:{port}"
    channel = grpc.aio.insecure_channel(target) if credentials is None else grpc.aio.secure_channel(target, credentials)
    async with channel:
        stub: Any = pb_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]
        return bool((await stub.IsActive(TRAINERS, timeout=5)).result)


async def refused(port: int, credentials: grpc.ChannelCredentials | None) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await is_active(port, credentials)
    assert e.value.code() is grpc.StatusCode.UNAVAILABLE  # the handshake failed: no call was made


def trusting(ca: trustme.CA, client: trustme.LeafCert | None = None) -> grpc.ChannelCredentials:
    if client is None:
        return grpc.ssl_channel_credentials(ca.cert_pem.bytes())
    chain = b"".join(blob.bytes() for blob in client.cert_chain_pems)
    return grpc.ssl_channel_credentials(ca.cert_pem.bytes(), client.private_key_pem.bytes(), chain)


async def test_tls_with_the_serving_certificate_said_open_without_a_client_ca(
    make_adapter: MakeAdapter,
    kube: FakeKubeAPIServer,
    prometheus: Prometheus,
    files: Files,
    caplog: pytest.LogCaptureFixture,
) -> None:
    port = await start(make_adapter, kube, prometheus, files, None)
    assert await is_active(port, trusting(files.ca))
    await refused(port, None)  # plain text
    await refused(port, trusting(trustme.CA()))  # a client that trusts another CA refuses the server
    said = [r.getMessage() for r in caplog.get_records("setup") + caplog.records if "KEDA" in r.getMessage()]
    assert [m for m in said if "without client certificates" in m] == [
        f"KEDA's external scaler on 127.0.0.1:{port} takes calls without client certificates: anyone who reaches "
        "the port can read the metrics of every namespace through it (give --keda-client-ca-file, and KEDA's "
        "TriggerAuthentication the client certificate)"
    ]


async def test_client_certificates_are_refused_and_accepted_by_the_client_ca(
    make_adapter: MakeAdapter,
    kube: FakeKubeAPIServer,
    prometheus: Prometheus,
    files: Files,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    clients = trustme.CA()
    (tmp_path / "keda-ca.crt").write_bytes(clients.cert_pem.bytes())
    port = await start(make_adapter, kube, prometheus, files, tmp_path / "keda-ca.crt")
    await refused(port, trusting(files.ca))  # no client certificate
    await refused(port, trusting(files.ca, trustme.CA().issue_cert("keda-operator")))  # another CA's
    assert await is_active(port, trusting(files.ca, clients.issue_cert("keda-operator")))
    assert not [r for r in caplog.get_records("setup") if r.levelno >= logging.WARNING and "KEDA" in r.getMessage()]


def with_uri(ca: trustme.CA, uri: str) -> tuple[bytes, bytes]:
    """The key and a client certificate of ``ca`` whose one name is the URI ``uri`` (trustme writes DNS names,
    addresses and e-mail addresses only), as SPIFFE identities are written."""
    ca_key = serialization.load_pem_private_key(ca.private_key_pem.bytes(), None)
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem.bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.UniformResourceIdentifier(uri)]), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return key_pem, cert.public_bytes(serialization.Encoding.PEM)


async def test_a_certificate_of_the_client_ca_is_refused_unless_it_carries_an_allowed_name(
    make_adapter: MakeAdapter,
    kube: FakeKubeAPIServer,
    prometheus: Prometheus,
    files: Files,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # one CA issues KEDA's certificate and, through a ClusterIssuer, a tenant's: before the names were checked, the
    # tenant's read any namespace
    clients = trustme.CA()
    (tmp_path / "keda-ca.crt").write_bytes(clients.cert_pem.bytes())
    spiffe = "spiffe://cluster.local/ns/keda/sa/keda-operator"
    allowed = ("keda-operator.keda.svc", "keda-metrics", spiffe)
    port = await start(make_adapter, kube, prometheus, files, tmp_path / "keda-ca.crt", allowed)
    by_dns_name = clients.issue_cert("keda-operator.keda.svc", common_name="keda-operator")
    assert await is_active(port, trusting(files.ca, by_dns_name))
    by_common_name = clients.issue_cert("keda.example", common_name="keda-metrics")
    assert await is_active(port, trusting(files.ca, by_common_name))
    by_uri = grpc.ssl_channel_credentials(files.ca.cert_pem.bytes(), *with_uri(clients, spiffe))
    assert await is_active(port, by_uri)
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await is_active(port, grpc.ssl_channel_credentials(files.ca.cert_pem.bytes(), *with_uri(clients, spiffe + "x")))
    first = f"the client certificate's names ('{spiffe}x') are not in --keda-client-allowed-names"
    assert e.value.details() == first
    tenant = trusting(files.ca, clients.issue_cert("keda-operator.tenant.svc", common_name="keda-operator"))
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await is_active(port, tenant)
    assert e.value.code() is grpc.StatusCode.PERMISSION_DENIED
    assert e.value.details() == (
        "the client certificate's names ('keda-operator', 'keda-operator.tenant.svc') are not in "
        "--keda-client-allowed-names"
    )
    async with grpc.aio.secure_channel(f"127.0.0.1:{port}", tenant) as channel:  # a stream is refused alike
        stub: Any = pb_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await anext(aiter(stub.StreamIsActive(TRAINERS, timeout=5)))
    assert e.value.code() is grpc.StatusCode.PERMISSION_DENIED
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert refusals[0].startswith("KEDA scaler: /externalscaler.ExternalScaler/IsActive from ipv4:127.0.0.1:")
    assert refusals[0].endswith(f"refused: {first}")
    assert len(refusals) == 1  # the later refusals are of the same kind, within the minute: left out


async def test_new_certificate_files_are_served_from_the_next_handshake(
    make_adapter: MakeAdapter, kube: FakeKubeAPIServer, prometheus: Prometheus, files: Files, tmp_path: Path
) -> None:
    clients = trustme.CA()
    (tmp_path / "keda-ca.crt").write_bytes(clients.cert_pem.bytes())
    port = await start(make_adapter, kube, prometheus, files, tmp_path / "keda-ca.crt")
    keda = clients.issue_cert("keda-operator")
    assert await is_active(port, trusting(files.ca, keda))
    old = files.ca
    files.issue(trustme.CA())  # cert-manager renewed the serving certificate, from a new CA
    rotated = trustme.CA()
    (tmp_path / "keda-ca.crt").write_bytes(rotated.cert_pem.bytes())  # and the clients' CA was rotated

    async def renewed() -> bool:
        try:
            return await is_active(port, trusting(files.ca, rotated.issue_cert("keda-operator")))
        except grpc.aio.AioRpcError:
            return False

    await eventually(renewed, what="the new certificate and client CA to be served")
    await refused(port, trusting(old, keda))
