import base64
import ipaddress
import ssl
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from adapter.backends import prometheus_auth
from adapter.backends.prometheus import PrometheusConfig
from adapter.config.settings import Settings
from adapter.errors import ConfigError
from adapter.security import tls


def test_self_signed_certificate_names_and_authority() -> None:
    cert_pem, key_pem = tls.self_signed(["localhost", "127.0.0.1", "adapter.gpu.svc"])
    cert = x509.load_pem_x509_certificate(cert_pem)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["localhost", "adapter.gpu.svc"]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert b"PRIVATE KEY" in key_pem


def test_a_certificate_is_made_once_in_the_cert_dir_and_reused(tmp_path: Path) -> None:
    settings = Settings(cert_dir=tmp_path / "certs")
    cert, key = tls.serving_files(settings)
    assert cert == tmp_path / "certs" / "apiserver.crt"
    assert key.stat().st_mode & 0o777 == 0o600
    first = cert.read_bytes()
    assert tls.serving_files(settings) == (cert, key)
    assert cert.read_bytes() == first
    serving = tls.serving_tls(settings)
    assert serving is not None
    assert isinstance(serving.context, ssl.SSLContext)


def test_given_files_are_used_and_plain_http_needs_none(tmp_path: Path) -> None:
    cert_pem, key_pem = tls.self_signed(["localhost"])
    (tmp_path / "c.pem").write_bytes(cert_pem)
    (tmp_path / "k.pem").write_bytes(key_pem)
    settings = Settings(tls_cert_file=tmp_path / "c.pem", tls_key_file=tmp_path / "k.pem")
    assert tls.serving_files(settings) == (tmp_path / "c.pem", tmp_path / "k.pem")
    assert tls.serving_tls(Settings(insecure_serve_http=True)) is None
    with pytest.raises(ConfigError, match="cannot load the serving certificate"):
        tls.serving_tls(Settings(tls_cert_file=tmp_path / "k.pem", tls_key_file=tmp_path / "c.pem"))


def test_incluster_auth_uses_the_service_account_unless_flags_say_otherwise() -> None:
    config = prometheus_auth.resolve(Settings(prometheus_auth_incluster=True))
    assert config.token_file == prometheus_auth.SERVICE_ACCOUNT / "token"
    assert config.ca_file == prometheus_auth.SERVICE_ACCOUNT / "ca.crt"
    explicit = Settings(prometheus=PrometheusConfig(ca_file=Path("/etc/ca.pem")), prometheus_auth_incluster=True)
    assert prometheus_auth.resolve(explicit).ca_file == Path("/etc/ca.pem")


def test_auth_config_reads_a_kubeconfig_user_and_ca(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "clusters": [
                    {"name": "p", "cluster": {"certificate-authority-data": base64.b64encode(b"CA PEM").decode()}}
                ],
                "users": [
                    {
                        "name": "u",
                        "user": {"token": "secret", "client-certificate": "client.crt", "client-key": "client.key"},
                    }
                ],
                "contexts": [{"name": "c", "context": {"cluster": "p", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    config = prometheus_auth.resolve(Settings(prometheus_auth_config=kubeconfig))
    assert config.token_file is not None
    assert config.token_file.read_text() == "secret"
    assert config.ca_file is not None
    assert config.ca_file.read_bytes() == b"CA PEM"
    assert config.client_cert_file == tmp_path / "client.crt"
    assert config.client_key_file == tmp_path / "client.key"


def test_auth_config_that_is_not_a_kubeconfig(tmp_path: Path) -> None:
    bad = tmp_path / "kubeconfig"
    bad.write_text("current-context: missing\n")
    with pytest.raises(ConfigError, match="not a usable kubeconfig"):
        prometheus_auth.resolve(Settings(prometheus_auth_config=bad))
