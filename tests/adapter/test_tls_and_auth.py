import asyncio
import ipaddress
import ssl
from pathlib import Path

import pytest
from cryptography import x509

from adapter import cli
from adapter.errors import ConfigError
from adapter.security import tls
from adapter.security.tls import TLSSettings
from adapter.settings import Settings
from harness.adapter.process import secure_adapter
from harness.kube.api import FakeKubeAPIServer
from harness.stores.prometheus import Prometheus


def test_self_signed_certificate_names_and_authority() -> None:
    cert_pem, key_pem = tls.self_signed(["localhost", "127.0.0.1", "adapter.gpu.svc"])
    cert = x509.load_pem_x509_certificate(cert_pem)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["localhost", "adapter.gpu.svc"]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert b"PRIVATE KEY" in key_pem


def test_a_certificate_is_made_once_in_the_cert_dir_and_reused(tmp_path: Path) -> None:
    settings = TLSSettings(cert_dir=tmp_path / "certs")
    cert, key = tls.serving_files(settings)
    assert cert == tmp_path / "certs" / "apiserver.crt"
    assert key.stat().st_mode & 0o777 == 0o600
    first = cert.read_bytes()
    assert tls.serving_files(settings) == (cert, key)
    assert cert.read_bytes() == first
    serving = tls.serving_tls(settings, request_certs=True)
    assert isinstance(serving.context, ssl.SSLContext)


def test_given_files_are_used_and_plain_http_needs_none(tmp_path: Path) -> None:
    cert_pem, key_pem = tls.self_signed(["localhost"])
    (tmp_path / "c.pem").write_bytes(cert_pem)
    (tmp_path / "k.pem").write_bytes(key_pem)
    settings = TLSSettings(cert_file=tmp_path / "c.pem", key_file=tmp_path / "k.pem")
    assert tls.serving_files(settings) == (tmp_path / "c.pem", tmp_path / "k.pem")
    plain = Settings(tls=TLSSettings(cert_dir=tmp_path / "none"), insecure_serve_http=True, insecure_disable_auth=True)
    assert cli.serving_tls(plain) is None
    assert not (tmp_path / "none").exists()
    with pytest.raises(ConfigError, match="cannot load the serving certificate"):
        tls.serving_tls(TLSSettings(cert_file=tmp_path / "k.pem", key_file=tmp_path / "c.pem"), request_certs=True)


async def test_tls_min_version_through_the_command_line_refuses_older_clients(
    kube: FakeKubeAPIServer, prometheus: Prometheus, tmp_path: Path
) -> None:
    async with secure_adapter(kube, prometheus.url, tmp_path, "--tls-min-version=VersionTLS13") as adapter:
        _, writer = await asyncio.open_connection(adapter.host, adapter.port, ssl=adapter.context())
        assert writer.get_extra_info("ssl_object").version() == "TLSv1.3"
        writer.close()
        old = adapter.context()
        old.maximum_version = ssl.TLSVersion.TLSv1_2
        with pytest.raises((ssl.SSLError, ConnectionError)):  # refused in the handshake
            await asyncio.open_connection(adapter.host, adapter.port, ssl=old)
