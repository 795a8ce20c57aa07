"""What the adapter trusts follows the cluster without a restart: the ConfigMap's CAs and names, CA files given by
flag, its own serving certificate; and until it knows whom to trust, it serves no metrics."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from adapter.security import tls
from harness.adapter.in_process import MakeSecure
from harness.kube.api import FakeKubeAPIServer
from harness.kube.cluster import HPA_REQUEST, HPA_TOKEN, Cluster, status_of
from harness.kube.pki import CA
from harness.processes import free_port
from harness.waiting import eventually, wait_until

CONFIGMAPS = "/api/v1/namespaces/kube-system/configmaps"


async def test_nothing_is_served_until_the_configmap_is_read(
    make_secure: MakeSecure, cluster: Cluster, kube: FakeKubeAPIServer, tmp_path: Path
) -> None:
    unreachable = tmp_path / "unreachable-kubeconfig"
    config = yaml.safe_load(kube.kubeconfig(tmp_path / "k").read_text())
    config["clusters"][0]["cluster"]["server"] = f"http://127.0.0.1:{free_port()}"
    unreachable.write_text(yaml.safe_dump(config))
    adapter = await make_secure(ready=False, authentication_kubeconfig=unreachable)
    r = await adapter.get("/readyz?verbose")
    assert r.status == 503
    # the reason (it quotes the unreachable address) is for callers that authenticate, and none can yet
    assert "[-]authentication failed: reason withheld\n" in r.text
    assert r.text.endswith("readyz check failed\n")
    assert (await adapter.get("/healthz")).text == "ok"
    # no CA is trusted yet, so no certificate gets through the handshake; a token is not even reviewed
    assert await status_of(adapter, cluster.front_proxy) == "tls"
    for token in (HPA_TOKEN, None):
        r = await adapter.get(HPA_REQUEST, token=token)
        assert r.status == 503, r.text
        assert r.body["reason"] == "ServiceUnavailable"
    assert kube.reviews.token_reviews == 0
    assert adapter.sample("gpuscale_adapter_auth_config_loaded") == 0


async def test_a_configmap_that_appears_later_is_picked_up(
    make_secure: MakeSecure, cluster: Cluster, kube: FakeKubeAPIServer, caplog: pytest.LogCaptureFixture
) -> None:
    adapter = await make_secure(publish=False)
    assert "does not exist" in caplog.text
    assert await status_of(adapter, cluster.front_proxy) == "tls"
    assert (await adapter.get(HPA_REQUEST, token=HPA_TOKEN)).status == 200
    cluster.publish(kube)

    async def accepted() -> bool:
        return await status_of(adapter, cluster.front_proxy) == 200

    await eventually(accepted, what="the front proxy to be accepted")
    assert kube.count(CONFIGMAPS, watch=True) >= 1


async def test_a_rotated_front_proxy_ca_replaces_the_old_one(
    make_secure: MakeSecure, cluster: Cluster, kube: FakeKubeAPIServer
) -> None:
    adapter = await make_secure()
    assert await status_of(adapter, cluster.front_proxy) == 200
    new_ca = CA("front-proxy-ca-2")
    new_proxy = new_ca.issue("front-proxy-client")
    cluster.publish(kube, cluster.configmap() | {"requestheader-client-ca-file": new_ca.pem})

    async def rotated() -> bool:
        return await status_of(adapter, new_proxy) == 200

    await eventually(rotated, what="the new front-proxy CA to be trusted")
    # the old CA is trusted by neither the handshake nor the request-header check
    assert await status_of(adapter, cluster.front_proxy) == "tls"
    assert adapter.sample("gpuscale_adapter_auth_config_reloads_total", result="success") == 1


async def test_a_broken_configmap_keeps_the_configuration_in_force(
    make_secure: MakeSecure, cluster: Cluster, kube: FakeKubeAPIServer, caplog: pytest.LogCaptureFixture
) -> None:
    adapter = await make_secure()
    cluster.publish(kube, cluster.configmap() | {"requestheader-allowed-names": "front-proxy-client"})

    await wait_until(
        lambda: adapter.sample("gpuscale_adapter_auth_config_reloads_total", result="error") == 1,
        what="the broken ConfigMap to be refused",
    )
    assert "requestheader-allowed-names is not a JSON array of strings" in caplog.text
    assert await status_of(adapter, cluster.front_proxy) == 200
    assert (await adapter.get("/readyz")).status == 200


async def test_ca_files_given_by_flag_are_used_without_the_configmap_and_reloaded(
    make_secure: MakeSecure, cluster: Cluster, kube: FakeKubeAPIServer, tmp_path: Path
) -> None:
    client_ca, header_ca = tmp_path / "client-ca.crt", tmp_path / "front-proxy-ca.crt"
    client_ca.write_text(cluster.client_ca.pem)
    header_ca.write_text(cluster.front_proxy_ca.pem)
    adapter = await make_secure(
        publish=False,
        client_ca_file=client_ca,
        requestheader_client_ca_file=header_ca,
        requestheader_allowed_names=("front-proxy-client",),
    )
    assert await status_of(adapter, cluster.front_proxy) == 200
    assert kube.count(CONFIGMAPS) == 0
    new_ca = CA("kubernetes-2")
    bob = new_ca.issue("bob", ("system:masters",))
    assert await status_of(adapter, bob) == "tls"
    client_ca.write_text(new_ca.pem)

    async def reloaded() -> bool:
        return await status_of(adapter, bob) == 200

    await eventually(reloaded, what="the new client CA file to be used")


async def test_the_serving_certificate_is_reloaded_for_new_connections(
    make_secure: MakeSecure, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="adapter.security.tls")
    adapter = await make_secure()
    cert_file, key_file = tmp_path / "certs" / tls.CERT_NAME, tmp_path / "certs" / tls.KEY_NAME
    first = await adapter.peer_certificate()
    assert first == x509.load_pem_x509_certificate(cert_file.read_bytes()).public_bytes(serialization.Encoding.DER)

    # a half-written pair (the key of another certificate) is refused and the certificate in use stays
    _, other_key = tls.self_signed(["127.0.0.1"])
    key_file.write_bytes(other_key)

    await wait_until(
        lambda: adapter.sample("gpuscale_adapter_serving_certificate_reloads_total", result="error") == 1,
        what="the mismatched key to be refused",
    )
    assert "serving certificate not reloaded" in caplog.text
    assert await adapter.peer_certificate() == first

    cert_pem, key_pem = tls.self_signed(["127.0.0.1"])
    key_file.write_bytes(key_pem)
    cert_file.write_bytes(cert_pem)
    new = x509.load_pem_x509_certificate(cert_pem).public_bytes(serialization.Encoding.DER)

    async def served() -> bool:
        return await adapter.peer_certificate() == new

    await eventually(served, what="the new certificate on new connections")
    # and a client that trusts only the new certificate gets through
    assert (await adapter.get("/healthz")).text == "ok"
    assert f"serving certificate {cert_file} reloaded" in caplog.text
    assert adapter.sample("gpuscale_adapter_serving_certificate_reloads_total", result="success") == 1
