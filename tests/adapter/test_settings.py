import ssl
from pathlib import Path

import pytest

from adapter.errors import ConfigError
from adapter.settings import Settings, parse_duration, parse_settings

# --prometheus-url is required; tests about other settings give it through the environment
BASE = {"GPUSCALE_ADAPTER_PROMETHEUS_URL": "http://localhost:9090"}


def test_defaults_are_the_documented_ones() -> None:
    s = parse_settings(["--prometheus-url=http://localhost:9090"], env=BASE)
    assert s == Settings()  # the dataclass defaults are the flags' defaults
    assert s.prometheus.url == "http://localhost:9090"
    assert s.prometheus.verb == "GET"
    assert s.prometheus.timeout == 10.0
    assert s.prometheus.max_answer_bytes == 32 * 1024 * 1024
    assert s.prometheus.max_bytes_in_flight == 48 * 1024 * 1024
    assert s.relist_interval == 60.0
    assert s.max_age == 60.0
    assert s.cache_ttl == 0.25
    assert s.backend_failure_hold == 0.0  # a 503 at once while Prometheus fails, as before the flag
    assert s.secure_port == 6443
    assert s.config is None
    assert not s.insecure_serve_http


def test_prometheus_adapter_deployment_arguments_are_accepted_unchanged() -> None:
    # the argument list of prometheus-adapter's own manifests and Helm chart
    argv = [
        "--cert-dir=/var/run/serving-cert",
        "--config=/etc/adapter/config.yaml",
        "--logtostderr=true",
        "--metrics-relist-interval=1m",
        "--prometheus-url=http://prometheus-k8s.monitoring.svc:9090/",
        "--secure-port=6443",
        "--tls-cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        "--v=4",
        "--prometheus-header=X-Scope-OrgID=tenant-1",
        "--prometheus-header",
        "X-Extra=a=b",
        "--prometheus-verb=POST",
        "--prometheus-token-file=/var/run/secrets/token",
        "--prometheus-ca-file=/etc/ca.crt",
        "--prometheus-client-tls-cert-file=/etc/c.crt",
        "--prometheus-client-tls-key-file=/etc/c.key",
        "--lister-kubeconfig=/etc/kubeconfig",
        "--tls-cert-file=/etc/tls.crt",
        "--tls-private-key-file=/etc/tls.key",
        "--requestheader-client-ca-file=/etc/front-proxy-ca.crt",
        "--authentication-tolerate-lookup-failure",
        "--audit-log-path=-",
    ]
    s = parse_settings(argv, env=BASE)
    assert s.tls.cert_dir == Path("/var/run/serving-cert")
    assert s.config == Path("/etc/adapter/config.yaml")
    assert s.relist_interval == 60
    assert s.prometheus.url == "http://prometheus-k8s.monitoring.svc:9090/"
    assert s.prometheus.headers == (("X-Scope-OrgID", "tenant-1"), ("X-Extra", "a=b"))
    assert s.prometheus.verb == "POST"
    assert s.prometheus.token_file == Path("/var/run/secrets/token")
    assert s.prometheus.client_key_file == Path("/etc/c.key")
    assert s.verbosity == 4
    assert s.lister_kubeconfig == Path("/etc/kubeconfig")
    assert s.tls.key_file == Path("/etc/tls.key")
    assert s.auth.requestheader_client_ca_file == Path("/etc/front-proxy-ca.crt")
    assert s.tls.cipher_suites == ("ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-ECDSA-AES128-GCM-SHA256")
    assert s.ignored_flags == (
        "--logtostderr",
        "--authentication-tolerate-lookup-failure",
        "--audit-log-path",
    )


def test_every_flag_has_an_environment_variable_and_the_flag_wins() -> None:
    env = {
        "GPUSCALE_ADAPTER_PROMETHEUS_URL": "https://thanos:10902",
        "GPUSCALE_ADAPTER_METRICS_RELIST_INTERVAL": "30s",
        "GPUSCALE_ADAPTER_METRICS_CACHE_TTL": "0s",
        "GPUSCALE_ADAPTER_SECURE_PORT": "8443",
        "GPUSCALE_ADAPTER_INSECURE_SERVE_HTTP": "true",
        "GPUSCALE_ADAPTER_INSECURE_DISABLE_AUTH": "true",
        "GPUSCALE_ADAPTER_PROMETHEUS_HEADER": "A=1\nB=2",
        "GPUSCALE_ADAPTER_V": "2",
    }
    s = parse_settings(["--secure-port=9443"], env=env)
    assert s.prometheus.url == "https://thanos:10902"
    assert s.relist_interval == 30
    assert s.max_age == 30
    assert s.cache_ttl == 0
    assert s.secure_port == 9443
    assert s.insecure_serve_http
    assert s.insecure_disable_auth
    assert s.prometheus.headers == (("A", "1"), ("B", "2"))
    assert s.verbosity == 2


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (
            ["--secure-port=70000"],
            "--secure-port (or GPUSCALE_ADAPTER_SECURE_PORT): 70000 is outside the valid range 0 to 65535",
        ),
        (
            ["--secure-port=http"],
            "--secure-port (or GPUSCALE_ADAPTER_SECURE_PORT): 'http' is not a whole number from 0 to 65535",
        ),
        (["--metrics-relist-interval=0s"], "outside the valid range 1s to 24h"),
        (["--metrics-relist-interval=10"], "is not a duration like 30s"),
        (
            ["--metrics-relist-interval=1m", "--metrics-max-age=30s"],
            "--metrics-max-age (or GPUSCALE_ADAPTER_METRICS_MAX_AGE): 30s is outside the valid range "
            "the relist interval to 720h",
        ),
        (["--metrics-cache-ttl=1h"], "outside the valid range 0s to 10m"),
        (
            ["--backend-failure-hold=25h"],
            "--backend-failure-hold (or GPUSCALE_ADAPTER_BACKEND_FAILURE_HOLD): 25h is outside",
        ),
        (["--backend-failure-hold=5"], "is not a duration like 30s"),
        (["--prometheus-timeout=10ms"], "outside the valid range 100ms to 5m"),
        (["--prometheus-verb=PUT"], "'PUT' is not one of GET, POST"),
        (["--prometheus-max-answer-bytes=2Gi"], "2Gi is outside the valid range 64Ki to 1Gi"),
        (["--prometheus-max-answer-bytes=1000"], "1000 is outside the valid range 64Ki to 1Gi"),
        (["--prometheus-max-answer-bytes=32MB"], "'32MB' is not a number of bytes"),
        (["--prometheus-max-bytes-in-flight=1000"], "1000 is outside the valid range 64Ki to 64Gi, or 0"),
        (["--prometheus-max-bytes-in-flight=65Gi"], "65Gi is outside the valid range 64Ki to 64Gi, or 0"),
        (["--prometheus-url=prometheus:9090"], "is not an http:// or https:// URL"),
        (["--prometheus-header=NoEquals"], "is not Key=Value"),
        (["--prometheus-client-tls-cert-file=/c"], "needs --prometheus-client-tls-key-file too"),
        (["--tls-private-key-file=/k"], "needs --tls-private-key-file too"),
        (
            ["--prometheus-auth-incluster", "--prometheus-auth-config=/k"],
            "cannot be used with --prometheus-auth-incluster",
        ),
        (["--insecure-serve-http=maybe"], "is not a boolean"),
        (["--insecure-serve-http"], "add --insecure-disable-auth to serve every caller"),
        (
            ["--insecure-disable-auth", "--requestheader-allowed-names=front-proxy-client"],
            "turns authentication off, yet --requestheader-allowed-names is given",
        ),
        (["--insecure-disable-auth", "--client-ca-file=/ca.pem"], "yet --client-ca-file is given"),
        (["--authentication-token-webhook-cache-ttl=2h"], "outside the valid range 0s to 1h"),
        (["--authorization-always-allow-paths=healthz"], "'healthz' is not a path"),
        (["--authorization-always-allow-paths=/a*b"], "'/a*b' is not a path"),
        (
            ["--tls-min-version=VersionTLS14"],
            "'VersionTLS14' is not one of VersionTLS10, VersionTLS11, VersionTLS12, VersionTLS13",
        ),
        (
            ["--tls-cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,ECDHE-RSA-AES128-GCM-SHA256"],
            "--tls-cipher-suites (or GPUSCALE_ADAPTER_TLS_CIPHER_SUITES): cipher suite ECDHE-RSA-AES128-GCM-SHA256 is "
            "not supported or does not exist",
        ),
        (["--v=-1"], "outside the valid range 0 to 2147483647"),
        (["--no-such-flag=1"], "unknown flag or argument: --no-such-flag=1"),
        (["stray"], "unknown flag or argument: stray"),
        (["--prometheus-url"], "expected one argument"),
    ],
)
def test_invalid_values_are_rejected_naming_the_flag_and_range(argv: list[str], fragment: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_settings(argv, env=BASE)
    assert fragment in str(e.value)


def test_authentication_and_authorization_flags_as_kubernetes_api_servers_take_them() -> None:
    s = parse_settings(
        [
            "--authentication-kubeconfig=/etc/authn",
            "--authorization-kubeconfig=/etc/authz",
            "--authentication-skip-lookup",
            "--authentication-token-webhook-cache-ttl=30s",
            "--authorization-webhook-cache-authorized-ttl=1m",
            "--authorization-webhook-cache-unauthorized-ttl=0s",
            "--authorization-always-allow-paths=/healthz,/metrics",
            "--authorization-always-allow-paths=/debug/*",
            "--client-ca-file=/etc/ca.crt",
            "--requestheader-client-ca-file=/etc/front-proxy-ca.crt",
            "--requestheader-allowed-names=front-proxy-client,aggregator",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group,X-Other-Group",
            "--requestheader-extra-headers-prefix=",
            "--tls-min-version=VersionTLS13",
        ],
        env=BASE,
    )
    a = s.auth
    assert (a.authentication_kubeconfig, a.authorization_kubeconfig) == (Path("/etc/authn"), Path("/etc/authz"))
    assert a.skip_lookup
    assert (a.token_cache_ttl, a.authorized_ttl, a.unauthorized_ttl) == (30, 60, 0)
    assert a.always_allow_paths == ("/healthz", "/metrics", "/debug/*")
    assert (a.client_ca_file, a.requestheader_client_ca_file) == (Path("/etc/ca.crt"), Path("/etc/front-proxy-ca.crt"))
    assert a.requestheader_allowed_names == ("front-proxy-client", "aggregator")
    assert a.requestheader_group_headers == ("X-Remote-Group", "X-Other-Group")
    assert a.requestheader_extra_headers_prefix == ()
    assert s.tls.min_version == ssl.TLSVersion.TLSv1_3
    assert not s.insecure_disable_auth
    assert s.ignored_flags == ()


def test_authentication_defaults_are_kubernetes_ones_and_on() -> None:
    s = parse_settings([], env=BASE)
    assert not s.insecure_disable_auth
    assert s.tls.min_version == ssl.TLSVersion.TLSv1_2
    assert s.auth.token_cache_ttl == s.auth.authorized_ttl == s.auth.unauthorized_ttl == 10
    assert s.auth.always_allow_paths == ("/healthz", "/readyz", "/livez")
    assert s.auth.requestheader_username_headers == ("X-Remote-User",)
    assert s.auth.requestheader_allowed_names == ()
    assert s.auth.needs_configmap
    both_files = parse_settings(["--client-ca-file=/a", "--requestheader-client-ca-file=/b"], env=BASE)
    assert not both_files.auth.needs_configmap
    assert not parse_settings(["--authentication-skip-lookup"], env=BASE).auth.needs_configmap
    from_env = parse_settings([], env={**BASE, "GPUSCALE_ADAPTER_REQUESTHEADER_ALLOWED_NAMES": "a, b"})
    assert from_env.auth.requestheader_allowed_names == ("a", "b")


def test_invalid_environment_values_name_the_variable() -> None:
    with pytest.raises(ConfigError, match="GPUSCALE_ADAPTER_METRICS_CACHE_TTL"):
        parse_settings([], env={**BASE, "GPUSCALE_ADAPTER_METRICS_CACHE_TTL": "forever"})


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0", 0), ("1s", 1), ("1m30s", 90), ("1.5h", 5400), ("500ms", 0.5), ("2h45m", 9900), ("100us", 0.0001)],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


def test_short_verbosity_flag_works_as_in_klog() -> None:
    assert parse_settings(["-v=6"], env=BASE).verbosity == 6


def test_a_missing_prometheus_url_is_caught_at_start() -> None:
    with pytest.raises(ConfigError, match=r"--prometheus-url \(or GPUSCALE_ADAPTER_PROMETHEUS_URL\): is required"):
        parse_settings(["--insecure-serve-http", "--insecure-disable-auth"], env={})


@pytest.mark.parametrize(
    ("text", "value"), [("65536", 65536), ("64Ki", 65536), ("32Mi", 33554432), ("1Gi", 1073741824), ("100Ki", 102400)]
)
def test_answer_sizes_in_bytes_or_binary_units(text: str, value: int) -> None:
    settings = parse_settings([f"--prometheus-max-answer-bytes={text}"], env=BASE)
    assert settings.prometheus.max_answer_bytes == value


@pytest.mark.parametrize(("text", "value"), [("0", 0), ("64Ki", 65536), ("96Mi", 100663296), ("64Gi", 64 * 1024**3)])
def test_bytes_in_flight_in_bytes_or_binary_units_or_0_for_no_bound(text: str, value: int) -> None:
    settings = parse_settings([], env={**BASE, "GPUSCALE_ADAPTER_PROMETHEUS_MAX_BYTES_IN_FLIGHT": text})
    assert settings.prometheus.max_bytes_in_flight == value


def test_the_backend_failure_hold_is_read_from_the_flag_or_the_environment() -> None:
    assert parse_settings(["--backend-failure-hold=5m"], env=BASE).backend_failure_hold == 300.0
    env = {**BASE, "GPUSCALE_ADAPTER_BACKEND_FAILURE_HOLD": "90s"}
    assert parse_settings([], env=env).backend_failure_hold == 90.0
