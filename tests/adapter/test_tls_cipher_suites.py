"""--tls-cipher-suites over real TLS handshakes: the suites named by Go's names are the only TLS 1.2 suites offered;
TLS 1.3 is not restricted, as in Go."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest

from adapter.errors import ConfigError
from adapter.security import tls
from adapter.security.flags import cipher_suites
from common.cipher_suites import openssl_names
from harness.deploy.peer_args import KUBE_PROMETHEUS_CIPHERS

LISTED = "ECDHE-ECDSA-AES128-GCM-SHA256"  # TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, in kube-prometheus's list
UNLISTED = "ECDHE-ECDSA-AES256-SHA384"  # a suite Go has no name for, so no list can hold it


async def negotiated(serving: tls.ServingTLS, cert: Path, client_cipher: str | None) -> tuple[str, str]:
    """(TLS version, cipher) of a handshake with a client offering only ``client_cipher`` over TLS 1.2, or any
    cipher over TLS 1.3 when None."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # until the client has read what it needs and closes
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=serving.context)
    port = server.sockets[0].getsockname()[1]
    client = ssl.create_default_context(cafile=str(cert))
    if client_cipher is not None:
        client.maximum_version = ssl.TLSVersion.TLSv1_2
        client.set_ciphers(client_cipher)
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname="localhost")
        ssl_object = writer.get_extra_info("ssl_object")
        version, cipher = ssl_object.version(), ssl_object.cipher()[0]
        writer.close()
        return version, cipher
    finally:
        server.close()
        await server.wait_closed()


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    cert_pem, key_pem = tls.self_signed(["localhost", "127.0.0.1"])  # an ECDSA key, as the adapter makes one
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes(cert_pem)
    key.write_bytes(key_pem)
    return cert, key


async def test_only_the_listed_suites_are_offered_for_tls12(pair: tuple[Path, Path]) -> None:
    cert, key = pair
    listed = tls.ServingTLS(cert, key, request_certs=False, ciphers=cipher_suites(KUBE_PROMETHEUS_CIPHERS))
    assert await negotiated(listed, cert, LISTED) == ("TLSv1.2", LISTED)
    with pytest.raises((ssl.SSLError, ConnectionResetError)):  # the server's alert, or its reset before it is read
        await negotiated(listed, cert, UNLISTED)
    # TLS 1.3 is not restricted by the list
    assert (await negotiated(listed, cert, None))[0] == "TLSv1.3"
    # without the flag, OpenSSL's own list offers the suite the list left out
    default = tls.ServingTLS(cert, key, request_certs=False)
    assert await negotiated(default, cert, UNLISTED) == ("TLSv1.2", UNLISTED)


def test_go_names_become_openssl_names() -> None:
    names = cipher_suites(KUBE_PROMETHEUS_CIPHERS)
    assert names[:3] == ("ECDHE-RSA-CHACHA20-POLY1305", "ECDHE-ECDSA-CHACHA20-POLY1305", "ECDHE-RSA-AES128-GCM-SHA256")
    assert len(names) == 15
    # TLS 1.3 names are accepted and left out; the _SHA256 spelling of ChaCha20 is the same suite
    assert openssl_names(("TLS_AES_128_GCM_SHA256", "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256")) == (
        "ECDHE-RSA-CHACHA20-POLY1305",
    )
    with pytest.raises(ValueError, match="cipher suite TLS_BOGUS is not supported"):
        openssl_names(("TLS_BOGUS",))


def test_a_list_of_suites_this_openssl_no_longer_has_is_refused_at_start(pair: tuple[Path, Path]) -> None:
    cert, key = pair
    with pytest.raises(ConfigError, match="--tls-cipher-suites: none of RC4-SHA, DES-CBC3-SHA is offered here"):
        tls.ServingTLS(cert, key, ciphers=openssl_names(("TLS_RSA_WITH_RC4_128_SHA", "TLS_RSA_WITH_3DES_EDE_CBC_SHA")))
