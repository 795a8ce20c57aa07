"""Several backends, partial responses and listing limits as configured: the flags, the rules' ``backend`` key, a
named backend's connection, and how remarks beside an answer are logged (pure: no server)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from adapter.backends.backend_specs import DEFAULT, BackendSpec
from adapter.backends.prometheus import PrometheusConfig
from adapter.backends.prometheus_backends import backend_config
from adapter.backends.prometheus_warnings import Remarks
from adapter.config.rules import parse_rules
from adapter.config.rules_file import RulesFile
from adapter.errors import ConfigError
from adapter.self_metrics import AdapterMetrics
from adapter.settings import parse_settings

URL = "--prometheus-url=http://thanos-query.monitoring.svc:9090"


def test_backends_partial_responses_and_the_series_limit_are_read_from_flags_and_the_environment() -> None:
    s = parse_settings(
        [
            URL,
            "--prometheus-partial-response=false",
            "--prometheus-series-limit=500",
            "--prometheus-backend=tenant-b=https://mimir.example:8080/prometheus,header=X-Scope-OrgID=b|c,"
            "partial-response=true",
            "--prometheus-backend=vm=http://vmselect:8481/select/0/prometheus",
        ],
        env={},
    )
    assert (s.prometheus.partial_response, s.prometheus.series_limit) == (False, 500)
    assert s.backends == (
        BackendSpec("tenant-b", "https://mimir.example:8080/prometheus", (("X-Scope-OrgID", "b|c"),), True),
        BackendSpec("vm", "http://vmselect:8481/select/0/prometheus"),
    )
    env = parse_settings(
        [URL],
        env={"GPUSCALE_ADAPTER_PROMETHEUS_BACKEND": "a=http://a:9090\nb=http://b:9090,header=X=1\n"},
    )
    assert [b.name for b in env.backends] == ["a", "b"]
    default = parse_settings([URL], env={})
    assert (default.prometheus.partial_response, default.prometheus.series_limit, default.backends) == (None, 30000, ())


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("http://b:9090", "is not NAME=URL"),
        ("Tenant_B=http://b:9090", "'Tenant_B' is not a backend name"),
        ("default=http://b:9090", "'default' names the --prometheus-url server"),
        ("b=", "the backend 'b' has no URL"),
        ("b=b:9090", "'b:9090' is not an http:// or https:// URL"),
        ("b=http://b:9090,tenant=x", "'tenant=x' is not an option (header=, partial-response=)"),
        ("b=http://b:9090/x?a=1,2", "'2' is not an option"),
        ("b=http://b:9090,header=X-Scope-OrgID", "'X-Scope-OrgID' is not Key=Value"),
        ("b=http://b:9090,partial-response=sometimes", "'sometimes' is not a boolean"),
    ],
)
def test_a_wrong_backend_is_refused_naming_the_flag_and_the_mistake(value: str, problem: str) -> None:
    with pytest.raises(ConfigError, match="--prometheus-backend") as e:
        parse_settings([URL, f"--prometheus-backend={value}"], env={})
    assert problem in str(e.value)


def test_a_backend_given_twice_and_bad_limits_are_refused() -> None:
    with pytest.raises(ConfigError, match="the backend 'b' is given twice"):
        parse_settings([URL, "--prometheus-backend=b=http://b:1", "--prometheus-backend=b=http://b:2"], env={})
    with pytest.raises(ConfigError, match=r"--prometheus-series-limit .*-1 is outside the valid range 0 to"):
        parse_settings([URL, "--prometheus-series-limit=-1"], env={})
    with pytest.raises(ConfigError, match=r"--prometheus-partial-response .*'partly' is not a boolean"):
        parse_settings([URL, "--prometheus-partial-response=partly"], env={})


def test_a_named_backend_takes_the_flags_connection_with_its_own_url_headers_and_partial_response() -> None:
    flags = PrometheusConfig(
        url="http://a:9090",
        headers=(("x-scope-orgid", "a"), ("X-Team", "gpu")),
        partial_response=False,
        series_limit=7,
        timeout=3.0,
    )
    b = backend_config(flags, BackendSpec("b", "http://b:9090", (("X-Scope-OrgID", "b"),), None))
    assert (b.backend, b.url, b.timeout, b.series_limit, b.partial_response) == ("b", "http://b:9090", 3.0, 7, False)
    assert b.headers == (("X-Team", "gpu"), ("X-Scope-OrgID", "b"))  # replaced whatever its case
    c = backend_config(flags, BackendSpec("c", "http://c:9090", (), True))
    assert c.headers == flags.headers
    assert c.partial_response is True
    assert flags.backend == DEFAULT


RULES = """
rules:
- seriesQuery: 'DCGM_FI_DEV_GPU_UTIL{namespace!="",pod!=""}'
  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
  metricsQuery: 'avg by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>})'
- seriesQuery: 'requests_in_flight{namespace!="",pod!=""}'
  backend: tenant-b
  resources: {overrides: {namespace: {resource: namespace}, pod: {resource: pod}}}
  metricsQuery: 'sum by (<<.GroupBy>>) (<<.Series>>{<<.LabelMatchers>>})'
externalRules:
- seriesQuery: 'backlog{namespace!=""}'
  backend: tenant-b
  metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>})'
resourceRules:
  backend: kubelets
  cpu: {containerQuery: 'sum(rate(c[1m])) by (<<.GroupBy>>)', nodeQuery: 'sum(rate(n[1m])) by (<<.GroupBy>>)',
        resources: {overrides: {node: {resource: node}, namespace: {resource: namespace}, pod: {resource: pod}}},
        containerLabel: container}
  memory: {containerQuery: 'sum(m) by (<<.GroupBy>>)', nodeQuery: 'sum(n) by (<<.GroupBy>>)',
        resources: {overrides: {node: {resource: node}, namespace: {resource: namespace}, pod: {resource: pod}}},
        containerLabel: container}
"""


def test_each_rule_names_its_backend_and_a_rule_without_one_uses_the_default() -> None:
    rules = parse_rules(RULES, "cfg")
    assert [r.backend for r in rules.rules] == [DEFAULT, "tenant-b"]
    assert [r.backend for r in rules.external_rules] == ["tenant-b"]
    assert rules.resource_rules is not None
    assert rules.resource_rules.backend == "kubelets"
    rules.check_backends({DEFAULT, "tenant-b", "kubelets"})
    with pytest.raises(ConfigError) as e:
        rules.check_backends({DEFAULT, "kubelets"})
    assert str(e.value) == (
        "cfg: rules[1].backend: 'tenant-b' is not a backend; the backends are default, kubelets ('default' is "
        "--prometheus-url's, the others come from --prometheus-backend)"
    )
    with pytest.raises(ConfigError, match=r"cfg: resourceRules\.backend: 'kubelets' is not a backend"):
        rules.check_backends({DEFAULT, "tenant-b"})


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        ("backend: 3", "cfg: rules[0].backend: expected a string, got a number (3)"),
        ("backend: ''", "cfg: rules[0].backend is empty"),
        ("backends: b", "cfg: rules[0]: unknown key 'backends' (known keys: backend, labelValueReplacements"),
    ],
)
def test_a_wrong_backend_key_is_refused_naming_the_rule(key: str, problem: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_rules(f"rules:\n- seriesQuery: 'x'\n  {key}\n", "cfg")
    assert problem in str(e.value)


def test_rules_naming_an_unknown_backend_stop_the_start_and_are_refused_on_reload(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(RULES)
    with pytest.raises(ConfigError, match="'tenant-b' is not a backend"):
        RulesFile(path, AdapterMetrics())
    metrics = AdapterMetrics()
    rules_file = RulesFile(path, metrics, (DEFAULT, "tenant-b", "kubelets"))
    before = rules_file.rules
    path.write_text(RULES.replace("backend: tenant-b", "backend: tenant-c"))
    assert not rules_file.reload()
    assert rules_file.rules is before
    assert "'tenant-c' is not a backend" in (rules_file.last_error or "")
    assert metrics.registry.get_sample_value("gpuscale_adapter_config_last_reload_successful") == 0


def test_remarks_are_counted_each_time_and_logged_once_a_minute_per_distinct_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [1000.0]
    metrics = AdapterMetrics()
    remarks = Remarks("tenant-b", "Prometheus backend tenant-b", metrics, clock=lambda: now[0])
    down = "receive series from Addr: store-1:10901 MinTime: {} MaxTime: {}: rpc error: code = Unavailable"
    caplog.set_level(logging.INFO, logger="adapter.backends.prometheus_warnings")
    for i in range(3):  # the time range differs each time: the same store down all the same
        remarks.note("query", "/api/v1/query", "sum(x)", [down.format(1733200000000 + i, 1733203600000 + i)], [])
    remarks.note("query", "/api/v1/query", "sum(x)", [down.replace("store-1", "store-2")], ["PromQL info: x"])
    logged = [r.getMessage() for r in caplog.records]
    assert logged == [
        "Prometheus backend tenant-b /api/v1/query for sum(x) warned, so the answer may be incomplete: "
        + down.format(1733200000000, 1733203600000),
        "Prometheus backend tenant-b /api/v1/query for sum(x) warned, so the answer may be incomplete: "
        + down.replace("store-1", "store-2"),
        "Prometheus backend tenant-b /api/v1/query for sum(x) noted: PromQL info: x",
    ]
    assert [r.levelname for r in caplog.records] == ["WARNING", "WARNING", "INFO"]
    count = metrics.registry.get_sample_value
    labels = {"backend": "tenant-b", "endpoint": "query"}
    assert count("gpuscale_adapter_prometheus_warnings_total", {**labels, "kind": "warning"}) == 4
    assert count("gpuscale_adapter_prometheus_warnings_total", {**labels, "kind": "info"}) == 1
    now[0] += 61
    caplog.clear()
    later = down.format(1733200060000, 1733203660000)
    remarks.note("query", "/api/v1/query", "sum(x)", [later], [])
    assert [r.getMessage() for r in caplog.records] == [
        "Prometheus backend tenant-b /api/v1/query for sum(x) warned, so the answer may be incomplete: "
        + later
        + " (2 more like it in the last 60 s not logged)"
    ]
