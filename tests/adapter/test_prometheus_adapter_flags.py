"""Every flag prometheus-adapter v0.12.0 takes is taken here, acted on or accepted with the reason the start-up log
gives. The list is read from its sources: cmd/adapter/adapter.go (its own flags and component-base's logs.AddFlags),
custom-metrics-apiserver v1.30.0 pkg/cmd/builder.go, and k8s.io/apiserver v0.30.0 pkg/server/options (serving,
authentication, authorization, audit, features); klog's own flags are those versions before v0.11 took."""

from __future__ import annotations

import pytest

from adapter.flags import FLAGS
from adapter.settings import parse_settings

BASE = {"GPUSCALE_ADAPTER_PROMETHEUS_URL": "http://localhost:9090"}

OWN = [
    ["--prometheus-url=https://prometheus.monitoring.svc:9090/"],
    ["--prometheus-auth-incluster"],
    ["--prometheus-auth-config=/etc/prometheus/kubeconfig"],
    ["--prometheus-ca-file=/etc/prometheus/ca.crt"],
    ["--prometheus-client-tls-cert-file=/etc/c.crt", "--prometheus-client-tls-key-file=/etc/c.key"],
    ["--prometheus-token-file=/var/run/secrets/token"],
    ["--prometheus-header=X-Scope-OrgID=tenant-1"],
    ["--prometheus-verb=POST"],
    ["--config=/etc/adapter/config.yaml"],
    ["--metrics-relist-interval=1m"],
    ["--metrics-relist-interval=1m", "--metrics-max-age=5m"],
    ["--disable-http2"],
    ["--disable-http2=true"],
]
LOGS = [["--v=4"], ["-v=4"], ["--v", "10"], ["--v=12"], ["--vmodule=provider=6"], ["--log-flush-frequency=5s"]]
ADAPTER_BASE = [
    ["--lister-kubeconfig=/etc/kubeconfig"],
    ["--discovery-interval=10m"],
    ["--client-qps=20"],
    ["--client-burst=30"],
]
SERVING = [
    ["--bind-address=0.0.0.0"],
    ["--secure-port=6443"],
    ["--cert-dir=/var/run/serving-cert"],
    ["--tls-cert-file=/etc/tls.crt", "--tls-private-key-file=/etc/tls.key"],
    ["--tls-cipher-suites=TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305,TLS_RSA_WITH_AES_256_CBC_SHA,TLS_AES_128_GCM_SHA256"],
    ["--tls-min-version=VersionTLS12"],
    ["--tls-sni-cert-key=/etc/a.crt,/etc/a.key:adapter.example.com"],
    ["--http2-max-streams-per-connection=1000"],
    ["--permit-port-sharing"],
    ["--permit-address-sharing=false"],
]
AUTHENTICATION = [
    ["--requestheader-username-headers=X-Remote-User"],
    ["--requestheader-group-headers=X-Remote-Group"],
    ["--requestheader-extra-headers-prefix=X-Remote-Extra-"],
    ["--requestheader-client-ca-file=/etc/front-proxy-ca.crt"],
    ["--requestheader-allowed-names=front-proxy-client"],
    ["--client-ca-file=/etc/ca.crt"],
    ["--authentication-kubeconfig=/etc/kubeconfig"],
    ["--authentication-token-webhook-cache-ttl=10s"],
    ["--authentication-skip-lookup"],
    ["--authentication-tolerate-lookup-failure"],
]
AUTHORIZATION = [
    ["--authorization-kubeconfig=/etc/kubeconfig"],
    ["--authorization-webhook-cache-authorized-ttl=10s"],
    ["--authorization-webhook-cache-unauthorized-ttl=10s"],
    ["--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics"],
]
_BATCH = [
    "mode=batch", "batch-buffer-size=10000", "batch-max-size=400", "batch-max-wait=30s", "batch-throttle-enable",
    "batch-throttle-qps=10", "batch-throttle-burst=15", "truncate-enabled", "truncate-max-batch-size=10485760",
    "truncate-max-event-size=102400",
]  # fmt: skip
AUDIT = [
    ["--audit-policy-file=/etc/audit/policy.yaml"],
    *([f"--audit-log-{o}"] for o in ("path=-", "maxage=7", "maxbackup=3", "maxsize=100", "format=json")),
    *([f"--audit-log-{o}"] for o in ("version=audit.k8s.io/v1", "compress")),
    *([f"--audit-webhook-{o}"] for o in ("config-file=/etc/audit/webhook", "initial-backoff=10s")),
    *([f"--audit-webhook-{o}"] for o in ("batch-initial-backoff=10s", "version=audit.k8s.io/v1")),
    *([f"--audit-{backend}-{o}"] for backend in ("log", "webhook") for o in _BATCH),
]
FEATURES = [
    ["--profiling=false"],
    ["--contention-profiling"],
    ["--debug-socket-path=/tmp/debug.sock"],
    ["--enable-priority-and-fairness=false"],
]
KLOG = [
    ["--logtostderr=true"],
    ["--alsologtostderr"],
    ["--log_dir=/tmp"],
    ["--log-dir=/tmp"],
    ["--log_file=/tmp/adapter.log"],
    ["--log_file_max_size=1800"],
    ["--stderrthreshold=2"],
    ["--one_output"],
    ["--skip_headers"],
    ["--skip_log_headers"],
    ["--add_dir_header"],
    ["--log_backtrace_at=provider.go:42"],
]
EVERY = OWN + LOGS + ADAPTER_BASE + SERVING + AUTHENTICATION + AUTHORIZATION + AUDIT + FEATURES + KLOG


@pytest.mark.parametrize("argv", EVERY, ids=[a[0].partition("=")[0] for a in EVERY])
def test_every_prometheus_adapter_flag_is_taken(argv: list[str]) -> None:
    settings = parse_settings(argv, env=BASE)
    name = argv[0].partition("=")[0]
    flag = next(f for f in FLAGS.flags.values() if name in f.names)
    if flag.ignored:
        assert settings.ignored_flags == (f"--{flag.long}",)
    else:
        assert settings.ignored_flags == ()


def test_each_flag_not_acted_on_says_why() -> None:
    reasons = {f.long: f.ignored for f in FLAGS.flags.values() if f.ignored}
    assert "tls-cipher-suites" not in reasons  # acted on: tests/adapter/test_tls_cipher_suites.py
    assert reasons["disable-http2"] == "this adapter serves HTTP/1.1 only, so HTTP/2 is always off"
    for long, reason in reasons.items():
        assert len(reason) > 20, long
        assert reason != "accepted for compatibility, not acted on", long
