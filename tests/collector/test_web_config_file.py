"""The web configuration file read as exporter-toolkit reads it: its own test files' cases (web/testdata of
prometheus/exporter-toolkit v0.16), each error naming the file and the key; the TLS settings built from it; the
password check and the rate limit."""

import asyncio
import base64
import ssl
from pathlib import Path

import bcrypt
import pytest
import trustme

from collector.errors import ConfigError
from collector.web.basic_auth import FAKE_HASH, PasswordCheck, credentials
from collector.web.config import RateLimit, WebConfig, parse_web_config
from collector.web.rate_limit import TokenBucket
from collector.web.tls import ServerTLS, server_tls, subject_alt_names

HASH = "$2y$10$mDwo.lAisC94iLAyP81MCesa29IzH37oigHC/42V2pdJlUprsJPze"  # exporter-toolkit's docs/web-config.yml
TLS = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"


def parse(text: str, directory: Path = Path("/etc/web")) -> WebConfig:
    return parse_web_config(text, directory / "web.yml")


def test_an_empty_file_serves_plain_http_without_auth() -> None:
    config = parse_web_config("", Path("web.yml"))
    assert (config.tls, config.users, config.headers, config.rate_limit) == (None, {}, (), None)


def test_the_defaults_and_paths_relative_to_the_file() -> None:
    config = parse_web_config(TLS + "  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: /abs/ca.pem\n",
                              Path("/etc/web/web.yml"))  # fmt: skip
    assert config.tls is not None
    assert (config.tls.cert_file, config.tls.key_file) == (Path("/etc/web/server.crt"), Path("/etc/web/server.key"))
    assert config.tls.client_ca_file == Path("/abs/ca.pem")
    assert (config.tls.min_version, config.tls.max_version) == ("TLS12", "TLS13")
    assert config.tls.prefer_server_cipher_suites is True
    assert config.http2 is True


def test_headers_users_ciphers_curves_and_rate_limit_as_exporter_toolkit_accepts_them() -> None:
    config = parse_web_config(
        TLS + "  client_auth_type: RequireClientCert\n"
        "  cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_AES_128_GCM_SHA256]\n"
        "  curve_preferences: [CurveP521, X25519]\n  min_version: TLS10\n  max_version: TLS12\n"
        "  prefer_server_cipher_suites: false\n  client_allowed_sans: [one, two]\n"
        "http_server_config:\n  http2: false\n  headers:\n    X-Frame-Options: deny\n    X-XSS-Protection: 1\n"
        "    Content-Security-Policy: \"default-src 'self'\"\n    Strict-Transport-Security: ''\n"
        f"basic_auth_users:\n  alice: {HASH}\n  123: {HASH}\n"
        'rate_limit:\n  interval: "1s"\n  burst: 20\n',
        Path("web.yml"),
    )
    assert config.tls is not None
    assert config.tls.client_auth_type == "RequireAnyClientCert"  # the older spelling
    assert config.tls.cipher_suites == ("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "TLS_AES_128_GCM_SHA256")
    assert config.tls.curve_preferences == ("CurveP521", "X25519")
    assert (config.tls.min_version, config.tls.max_version) == ("TLS10", "TLS12")
    assert config.tls.prefer_server_cipher_suites is False
    assert config.tls.client_allowed_sans == ("one", "two")
    assert config.http2 is False
    # a number fills a string with its text, as Go's yaml does; a blank header is left unset
    assert config.headers == (("X-Frame-Options", "deny"), ("X-XSS-Protection", "1"),
                              ("Content-Security-Policy", "default-src 'self'"))  # fmt: skip
    assert config.users == {"alice": HASH, "123": HASH}
    assert config.rate_limit == RateLimit(1.0, 20)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("hWkNKCp3fvIx3jKnsaBI\nTuEjdwNS8A2vYdFbiKqr\n", "the top level (line 1): expected a mapping, got 'hWkNKCp3f"),
        ("tls_server_config:\n  cert_filse: server.crt\n",
         "tls_server_config.cert_filse (line 2): unknown key; valid keys are cert, key, client_ca, cert_file"),
        ("tls_config: {}\n", "tls_config (line 1): unknown key"),
        ('tls_server_config:\n  cert_file: ""\n  key_file: server.key\n', "missing one of cert or cert_file"),
        ('tls_server_config:\n  cert: ""\n  key_file: server.key\n', "missing one of cert or cert_file"),
        ('tls_server_config:\n  cert_file: server.crt\n  key_file: ""\n', "missing one of key or key_file"),
        ('tls_server_config:\n  cert_file: ""\n  key_file: ""\n  client_auth_type: "x"\n',
         "tls_server_config.client_auth_type (line 4): 'x' is not one of NoClientCert, RequestClientCert"),
        (TLS + "  client_ca_file: /dev/null\n",
         "client CAs are given without a client_auth_type that asks for certificates"),
        (TLS + "  client_auth_type: VerifyClientCertIfGiven\n  cipher_suites:\n"
         "  - TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA2048\n",
         "tls_server_config.cipher_suites[0] (line 6): unknown cipher 'TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA2048'"),
        (TLS + "  cipher_suites: [TLS_RSA_WITH_AES_128_CBC_SHA]\n", "unknown cipher 'TLS_RSA_WITH_AES_128_CBC_SHA'"),
        (TLS + "  curve_preferences:\n    - CurveP257\n", "tls_server_config.curve_preferences[0] (line 5): unknown "
         "curve 'CurveP257'; known: CurveP256, CurveP384, CurveP521, X25519"),
        (TLS + "  min_version: TLS111\n", "tls_server_config.min_version (line 4): unknown TLS version 'TLS111'"),
        (TLS + "  min_version: TLS13\n  max_version: TLS12\n", "min_version TLS13 is above max_version TLS12"),
        (TLS + "  client_allowed_sans: [one]\n", "tls_server_config.client_allowed_sans (line 4): needs a "
         "client_auth_type that asks for certificates"),
        (TLS + "  prefer_server_cipher_suites: sometimes\n", "prefer_server_cipher_suites (line 4): expected true or "
         "false, got 'sometimes'"),
        (TLS + "  cert_file: other.crt\n", "tls_server_config.cert_file (line 4): given twice"),
        ("http_server_config:\n  headers:\n    Content-Type: foo\n", "http_server_config.headers.Content-Type (line "
         "3): this header cannot be set; these can: Strict-Transport-Security, X-Content-Type-Options"),
        ("http_server_config:\n  headers:\n    X-Frame-Options: foo\n",
         "http_server_config.headers.X-Frame-Options (line 3): 'foo' is not one of deny, sameorigin"),
        ("http_server_config:\n  headers:\n    X-Content-Type-Options: sniff\n", "'sniff' is not one of nosniff"),
        ("http_server_config:\n  headers:\n    Content-Security-Policy: \"a\\nb\"\n",
         "http_server_config.headers.Content-Security-Policy (line 3): a header value is printable ASCII"),
        ("http_server_config:\n  headers:\n    Strict-Transport-Security: caf\u00e9\n",
         "Strict-Transport-Security (line 3): a header value is printable ASCII, spaces and tabs"),
        ("http_server_config:\n  http2: [true]\n", "http_server_config.http2 (line 2): expected true or false, got a "
         "list"),
        ("basic_auth_users:\n  john: doe\n", "basic_auth_users.john (line 2): not a bcrypt hash"),
        ("basic_auth_users: [john]\n", "basic_auth_users (line 1): expected a mapping, got a list"),
        (f"basic_auth_users:\n  john: {HASH}\n  john: {HASH}\n", "basic_auth_users.john (line 3): given twice"),
        ("rate_limit:\n  interval: 1s\n  burst: 0\n", "rate_limit.burst (line 3): must be at least 1"),
        ("rate_limit:\n  interval: soon\n  burst: 1\n", "rate_limit.interval (line 2): 'soon' is not a duration"),
        ("rate_limit:\n  interval: -1s\n  burst: 1\n", "rate_limit.interval (line 2): '-1s' is negative"),
        ("tls_server_config: [\n", "not valid YAML"),
    ],
)  # fmt: skip
def test_a_file_exporter_toolkit_refuses_is_refused_naming_the_file_and_the_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse(text)
    assert str(caught.value).startswith("web config file /etc/web/web.yml: ")
    assert message in str(caught.value)


def test_a_password_written_where_its_hash_belongs_is_not_repeated_in_the_error() -> None:
    with pytest.raises(ConfigError) as caught:
        parse("basic_auth_users:\n  john: hunter2-plaintext\n")
    assert "hunter2" not in str(caught.value)


def test_tls_keys_without_a_certificate_leave_plain_http_and_are_named() -> None:
    config = parse("tls_server_config:\n  min_version: TLS13\n")
    assert config.tls is None
    assert config.tls_keys == ("min_version",)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    server = ca.issue_cert("localhost", "127.0.0.1")
    server.cert_chain_pems[0].write_to_path(str(directory / "server.crt"))
    server.private_key_pem.write_to_path(str(directory / "server.key"))
    trustme.CA().issue_cert("other").private_key_pem.write_to_path(str(directory / "other.key"))
    (directory / "garbage.pem").write_text("not a certificate\n")
    return directory


def tls_of(text: str, directory: Path) -> ServerTLS:
    config = parse_web_config(text, directory / "web.yml")
    assert config.tls is not None
    return server_tls(config.tls, f"web config file {directory / 'web.yml'}")


def test_the_context_follows_the_file(pki: Path) -> None:
    built = tls_of(TLS + "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.pem\n"
                   "  min_version: TLS13\n  prefer_server_cipher_suites: false\n", pki)  # fmt: skip
    ctx = built.context
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_3
    assert ctx.maximum_version == ssl.TLSVersion.TLSv1_3
    assert not ctx.options & ssl.OP_CIPHER_SERVER_PREFERENCE
    assert len(ctx.get_ca_certs()) == 1  # ca.pem, not the system's
    assert built.notes == ()


def test_cipher_suites_are_go_s_list_by_default_and_the_file_s_when_given(pki: Path) -> None:
    default = tls_of(TLS, pki).context
    tls12 = {c["name"] for c in default.get_ciphers() if c["protocol"] == "TLSv1.2"}
    assert tls12 == {
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        "ECDHE-RSA-AES128-GCM-SHA256",
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        "ECDHE-RSA-AES256-GCM-SHA384",
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        "ECDHE-RSA-CHACHA20-POLY1305",
    }
    chosen = tls_of(TLS + "  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384]\n", pki)
    assert [c["name"] for c in chosen.context.get_ciphers() if c["protocol"] == "TLSv1.2"] == [
        "ECDHE-ECDSA-AES256-GCM-SHA384"
    ]


def test_what_python_s_ssl_does_otherwise_is_said(pki: Path) -> None:
    notes = tls_of(
        TLS + "  client_auth_type: RequestClientCert\n  client_ca_file: ca.pem\n"
        "  curve_preferences: [CurveP384, X25519]\n  cipher_suites: [TLS_AES_128_GCM_SHA256, "
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256]\n",
        pki,
    ).notes
    assert notes == (
        "cipher_suites: TLS 1.3 suites are not chosen by the server (nor are they in Go); the client and OpenSSL "
        "agree on one of the three",
        "curve_preferences: Python's ssl sets one curve, so only CurveP384 is offered, not X25519",
        "client_auth_type RequestClientCert acts as VerifyClientCertIfGiven: Python's ssl verifies every client "
        "certificate it asks for, so one that the client CAs did not sign is refused",
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: missing.pem\n",
         "tls_server_config.client_ca_file {d}/missing.pem: cannot be read: No such file or directory"),
        ("  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: garbage.pem\n",
         "tls_server_config.client_ca_file {d}/garbage.pem: holds no PEM certificate"),
    ],
)  # fmt: skip
def test_unusable_client_cas_are_refused(pki: Path, extra: str, message: str) -> None:
    with pytest.raises(ConfigError, match="^web config file .*: " + message.format(d=pki)):
        tls_of(TLS + extra, pki)


def test_a_missing_certificate_or_a_key_of_another_certificate_is_refused(pki: Path) -> None:
    with pytest.raises(ConfigError, match=f"tls_server_config.cert_file {pki}/none.crt: cannot be read"):
        tls_of("tls_server_config:\n  cert_file: none.crt\n  key_file: server.key\n", pki)
    with pytest.raises(ConfigError, match=f"cert_file {pki}/server.crt and key_file {pki}/other.key: not a "
                       "certificate and its key"):  # fmt: skip
        tls_of("tls_server_config:\n  cert_file: server.crt\n  key_file: other.key\n", pki)


def test_a_certificate_and_key_inline(pki: Path) -> None:
    cert = "\n".join("    " + line for line in (pki / "server.crt").read_text().splitlines())
    key = "\n".join("    " + line for line in (pki / "server.key").read_text().splitlines())
    built = tls_of(f"tls_server_config:\n  cert: |\n{cert}\n  key: |\n{key}\n", pki)
    assert built.context.verify_mode == ssl.CERT_NONE


def test_subject_alt_names_as_go_writes_them() -> None:
    leaf = trustme.CA().issue_cert("one.example", "prometheus@example.com", "10.0.0.1", "::1")
    der = ssl.PEM_cert_to_DER_cert(leaf.cert_chain_pems[0].bytes().decode())
    assert sorted(subject_alt_names(der)) == ["10.0.0.1", "::1", "one.example", "prometheus@example.com"]


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("Basic " + base64.b64encode(b"alice:pa:ss").decode(), (b"alice", b"pa:ss")),
        ("basic " + base64.b64encode(b"alice:").decode(), (b"alice", b"")),
        ("Basic " + base64.b64encode(b"no-colon").decode(), None),
        ("Basic not*base64", None),
        ("Bearer abc", None),
        ("Basic", None),
        (None, None),
    ],
)
def test_credentials_are_read_as_go_reads_them(header: str | None, expected: tuple[bytes, bytes] | None) -> None:
    assert credentials(header) == expected


def test_a_verdict_is_remembered_for_the_user_hash_and_password_together() -> None:
    calls: list[tuple[bytes, bytes]] = []

    def matches(password: bytes, hashed: bytes) -> bool:
        calls.append((password, hashed))
        return password == b"right"

    check = PasswordCheck(matches)

    async def run() -> list[bool]:
        users = {"alice": HASH}
        return [
            await check.allows(users, b"alice", b"right"),
            await check.allows(users, b"alice", b"right"),
            await check.allows(users, b"alice", b"wrong"),
            await check.allows(users, b"alice", b"wrong"),
            await check.allows({"alice": FAKE_HASH}, b"alice", b"right"),  # a new hash: checked again
            await check.allows(users, b"mallory", b"right"),  # an unknown user costs a check all the same
        ]

    assert asyncio.run(run()) == [True, True, False, False, True, False]
    assert calls == [(b"right", HASH.encode()), (b"wrong", HASH.encode()), (b"right", FAKE_HASH.encode()),
                     (b"right", FAKE_HASH.encode())]  # fmt: skip


def test_real_bcrypt_and_passwords_longer_than_72_bytes_as_go_reads_them() -> None:
    hashed = bcrypt.hashpw(b"p" * 72, bcrypt.gensalt(4)).decode()
    check = PasswordCheck()

    async def run() -> list[bool]:
        users = {"alice": hashed}
        return [await check.allows(users, b"alice", p) for p in (b"p" * 72, b"p" * 80, b"p" * 71)]

    assert asyncio.run(run()) == [True, True, False]


def test_the_token_bucket_allows_a_burst_then_one_per_interval() -> None:
    now = [0.0]
    bucket = TokenBucket(RateLimit(interval=2.0, burst=3), clock=lambda: now[0])
    assert [bucket.allow() for _ in range(4)] == [True, True, True, False]
    now[0] = 1.0
    assert bucket.allow() is False
    now[0] = 2.0
    assert [bucket.allow(), bucket.allow()] == [True, False]
    now[0] = 100.0
    assert [bucket.allow() for _ in range(4)] == [True, True, True, False]
