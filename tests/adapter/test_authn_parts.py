"""The parts of authentication, without a server: CA bundles and the ConfigMap, certificate checks, request headers,
bearer tokens and TokenReview answers."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID
from multidict import CIMultiDict, CIMultiDictProxy

from adapter.errors import CertificateRejected, ConfigError
from adapter.security.auth_config import AuthSettings, build_config, parse_ca_bundle
from adapter.security.client_certs import BundleVerifier
from adapter.security.front_proxy import FrontProxy
from adapter.security.identity import AUTHENTICATED, User
from adapter.security.token_review import bearer_token, user_of
from harness.kube.cluster import Cluster
from harness.kube.pki import CA, Issued


def der(issued: Issued) -> bytes:
    return issued.cert.public_bytes(serialization.Encoding.DER)


def headers(*pairs: tuple[str, str]) -> CIMultiDictProxy[str]:
    return CIMultiDictProxy(CIMultiDict(pairs))


@pytest.fixture(scope="module")
def cluster() -> Cluster:
    return Cluster()


def test_the_configmap_gives_both_cas_and_the_header_names(cluster: Cluster) -> None:
    config = build_config(AuthSettings(), cluster.configmap())
    assert config.client_ca is not None
    assert config.client_ca.certs == (cluster.client_ca.cert,)
    header = config.request_header
    assert header is not None
    assert header.ca.certs == (cluster.front_proxy_ca.cert,)
    assert header.allowed_names == ("front-proxy-client",)
    assert (header.username_headers, header.group_headers, header.extra_prefixes) == (
        ("X-Remote-User",),
        ("X-Remote-Group",),
        ("X-Remote-Extra-",),
    )
    assert config.trusted_pem() == (cluster.client_ca.pem + cluster.front_proxy_ca.pem).encode()


def test_flags_win_over_the_configmap_and_bring_their_own_header_names(cluster: Cluster, tmp_path: Path) -> None:
    other = CA("flag-front-proxy-ca")
    (tmp_path / "fp.crt").write_text(other.pem)
    settings = AuthSettings(
        requestheader_client_ca_file=tmp_path / "fp.crt", requestheader_username_headers=("X-User",)
    )
    config = build_config(settings, cluster.configmap())
    assert config.request_header is not None
    assert config.request_header.ca.certs == (other.cert,)
    assert config.request_header.username_headers == ("X-User",)
    assert config.request_header.allowed_names == ()
    assert config.client_ca is not None
    assert config.client_ca.source == "ConfigMap kube-system/extension-apiserver-authentication: client-ca-file"


def test_an_absent_configmap_or_key_means_no_such_ca(cluster: Cluster) -> None:
    assert build_config(AuthSettings(), None).bundles == []
    data = cluster.configmap()
    del data["requestheader-client-ca-file"]
    config = build_config(AuthSettings(), data)
    assert config.request_header is None
    assert config.client_ca is not None


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("requestheader-allowed-names", "front-proxy-client", "requestheader-allowed-names is not a JSON array"),
        ("requestheader-group-headers", '{"a": 1}', "requestheader-group-headers is not a JSON array of strings"),
        ("requestheader-username-headers", "[1]", "requestheader-username-headers is not a JSON array of strings"),
        (
            "client-ca-file",
            "-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n",
            "client-ca-file: not a PEM",
        ),
        ("requestheader-client-ca-file", "hello", "requestheader-client-ca-file: not a PEM"),
    ],
)
def test_a_broken_configmap_is_refused_naming_the_key(cluster: Cluster, key: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_config(AuthSettings(), cluster.configmap() | {key: value})


def test_an_unreadable_ca_file_names_the_flag(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--client-ca-file .*missing.crt: cannot read it"):
        build_config(AuthSettings(client_ca_file=tmp_path / "missing.crt"), None)


def test_certificates_chain_to_their_own_bundle_only(cluster: Cluster) -> None:
    client = BundleVerifier(parse_ca_bundle(cluster.client_ca.pem.encode(), "client CA"))
    alice = cluster.client_ca.issue("alice", ("team-a", "team-b"))
    name = client.verify(der(alice))
    assert (name.common_name, name.organizations) == ("alice", ("team-a", "team-b"))
    # kubeadm's front-proxy certificate has no subjectAltName; it still verifies against its own CA
    header = BundleVerifier(parse_ca_bundle(cluster.front_proxy_ca.pem.encode(), "front-proxy CA"))
    assert header.verify(der(cluster.front_proxy)).common_name == "front-proxy-client"
    with pytest.raises(CertificateRejected, match="not signed by front-proxy CA"):
        header.verify(der(alice))
    with pytest.raises(CertificateRejected, match="not signed by client CA"):
        client.verify(der(cluster.front_proxy))


def test_usage_time_and_garbage_are_checked(cluster: Cluster) -> None:
    verifier = BundleVerifier(parse_ca_bundle(cluster.client_ca.pem.encode(), "client CA"))
    server = cluster.client_ca.issue("web", usages=(ExtendedKeyUsageOID.SERVER_AUTH,))
    with pytest.raises(CertificateRejected, match="does not include client authentication"):
        verifier.verify(der(server))
    both = cluster.client_ca.issue("both", usages=(ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH))
    assert verifier.verify(der(both)).common_name == "both"
    with pytest.raises(CertificateRejected):
        verifier.verify(der(cluster.client_ca.issue("old", expired=True)))
    with pytest.raises(CertificateRejected, match="unreadable certificate"):
        verifier.verify(b"\x30\x03\x02\x01\x00")
    later = BundleVerifier(
        parse_ca_bundle(cluster.client_ca.pem.encode(), "client CA"),
        clock=lambda: datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=30),
    )
    with pytest.raises(CertificateRejected):
        later.verify(der(cluster.client_ca.issue("alice")))


# allowed is positional only: otherwise mypy matches a ** dict of ConfigMap keys against it too
def front_proxy(cluster: Cluster, allowed: tuple[str, ...] = ("front-proxy-client",), /, **names: str) -> FrontProxy:
    data = cluster.configmap(allowed=allowed, **names)
    config = build_config(AuthSettings(), data).request_header
    assert config is not None
    return FrontProxy(config)


def test_the_front_proxy_names_the_user_in_headers(cluster: Cluster) -> None:
    proxy = front_proxy(cluster, **{"requestheader-username-headers": '["X-Remote-User", "X-Other-User"]'})
    user = proxy.authenticate(
        der(cluster.front_proxy),
        headers(
            ("X-Remote-User", ""),
            ("x-other-user", "bob"),
            ("X-Remote-Group", "a,b"),
            ("X-Remote-Group", "c"),
            ("X-Remote-Group", ""),
            ("X-Remote-Extra-Scopes", "view"),
            ("x-remote-extra-scopes", "edit"),
            ("X-Remote-Extra-Example.com%2Fteam", "gpu"),
            ("X-Remote-Extra-Bad%ZZ", "kept"),
        ),
    )
    assert user == User(
        "bob",
        groups=("a,b", "c"),
        extra=(("bad%zz", ("kept",)), ("example.com/team", ("gpu",)), ("scopes", ("view", "edit"))),
        method="front_proxy",
    )
    assert AUTHENTICATED in user.authenticated().groups
    assert user.authenticated().authenticated() == user.authenticated()


def test_the_front_proxy_needs_its_certificate_name_and_a_user(cluster: Cluster) -> None:
    proxy = front_proxy(cluster)
    assert proxy.authenticate(None, headers(("X-Remote-User", "admin"))) is None
    assert proxy.authenticate(der(cluster.front_proxy), headers(("X-Remote-Group", "system:masters"))) is None
    with pytest.raises(CertificateRejected, match="'someone' is not an allowed front proxy"):
        proxy.authenticate(der(cluster.front_proxy_ca.issue("someone")), headers(("X-Remote-User", "admin")))
    with pytest.raises(CertificateRejected):
        proxy.authenticate(der(cluster.client_ca.issue("front-proxy-client")), headers(("X-Remote-User", "admin")))
    anyone = front_proxy(cluster, ())
    user = anyone.authenticate(der(cluster.front_proxy_ca.issue("someone")), headers(("X-Remote-User", "admin")))
    assert user is not None
    assert user.name == "admin"


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc.def", "abc.def"),
        ("bearer abc", "abc"),
        ("  Bearer abc  ", "abc"),
        ("Bearer abc extra", "abc"),
        ("Bearer ", None),
        ("Bearer", None),
        ("Basic YWRtaW46YWRtaW4=", None),
        ("", None),
    ],
)
def test_bearer_tokens_are_parsed_as_kubernetes_parses_them(header: str, token: str | None) -> None:
    assert bearer_token(header) == token


def test_a_token_review_answer_becomes_a_user_only_when_authenticated() -> None:
    status = {
        "authenticated": True,
        "user": {"username": "jane", "uid": "42", "groups": ["dev"], "extra": {"scopes": ["a", "b"], "one": "x"}},
    }
    assert user_of(status) == User("jane", "42", ("dev",), (("one", ("x",)), ("scopes", ("a", "b"))), "token")
    assert user_of({"user": {}, "error": "invalid bearer token"}) is None
    assert user_of({"authenticated": True, "user": {"username": ""}}) is None
    assert user_of({"authenticated": "true", "user": {"username": "jane"}}) is None
