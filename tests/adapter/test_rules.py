from pathlib import Path

import pytest

from adapter.config.rules import DEFAULT_METRICS_QUERY, load_rules, parse_rules
from adapter.errors import ConfigError
from adapter.naming import resources
from adapter.naming.resources import BUILT_IN, GroupResource, ResourceInfo, RestMapping
from adapter.naming.templates import Struct

# A configuration in prometheus-adapter's format using every key it knows, as users write them.
FULL_CONFIG = """
rules:
- seriesQuery: '{__name__=~"^container_.*",container!="POD",namespace!="",pod!=""}'
  seriesFilters:
  - isNot: "^container_.*_seconds_total$"
  resources:
    overrides:
      namespace: {resource: "namespace"}
      pod: {resource: "pod"}
  name:
    matches: "^container_(.*)_total$"
  metricsQuery: sum(rate(<<.Series>>{<<.LabelMatchers>>}[2m])) by (<<.GroupBy>>)
- seriesQuery: '{__name__=~"^.*_queue_length$",kube_namespace!=""}'
  seriesFilters: []
  resources:
    template: "kube_<<.Group>>_<<.Resource>>"
    overrides:
      kube_namespace: {resource: namespaces}
  name: {matches: "^(.*)_queue_(.*)$", as: "${1}_${2}"}
  metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'
  labelValueReplacements:
  - {find: "#", replace: "_"}
- seriesQuery: 'http_requests_total{namespace!="",service!=""}'
  resources:
    template: <<.Resource>>
  name: {matches: "^http_requests_total$", as: "requests_per_second"}
  metricsQuery: |
    sum(rate(<<.Series>>{<<.LabelMatchers>>}[1m])) by (<<range $i, $l := .GroupBySlice>><<if $i>>,<<end>><<$l>><<end>>)
externalRules:
- seriesQuery: '{__name__="queue_consumer_lag",name!=""}'
  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (name)
  resources:
    overrides: { namespace: {resource: "namespace"} }
- seriesQuery: '{__name__="queue_depth",topic!=""}'
  metricsQuery: sum(<<.Series>>{<<.LabelMatchers>>}) by (name)
  resources:
    namespaced: false
resourceRules:
  cpu:
    containerQuery: sum(rate(container_cpu_usage_seconds_total{<<.LabelMatchers>>}[1m])) by (<<.GroupBy>>)
    nodeQuery: sum(rate(container_cpu_usage_seconds_total{<<.LabelMatchers>>, id='/'}[1m])) by (<<.GroupBy>>)
    resources:
      overrides:
        node: {resource: node}
    containerLabel: container
  memory:
    containerQuery: sum(container_memory_working_set_bytes{<<.LabelMatchers>>}) by (<<.GroupBy>>)
    nodeQuery: sum(container_memory_working_set_bytes{<<.LabelMatchers>>,id='/'}) by (<<.GroupBy>>)
    resources:
      template: <<.Resource>>
    containerLabel: container
  window: 1m
"""


def test_full_prometheus_adapter_config_loads() -> None:
    rules = parse_rules(FULL_CONFIG, "config.yaml")
    assert len(rules.rules) == 3
    assert len(rules.external_rules) == 2
    cadvisor, queue, http = rules.rules
    assert cadvisor.accepts("container_network_receive_bytes_total")
    assert not cadvisor.accepts("container_cpu_usage_seconds_total")  # seriesFilters isNot
    assert not cadvisor.accepts("container_memory_usage_bytes")  # the name.matches implicit filter
    assert cadvisor.api_name("container_network_receive_bytes_total") == "network_receive_bytes"
    assert queue.api_name("worker_queue_length") == "worker_length"
    assert queue.resource_for_label("kube_apps_deployment", BUILT_IN) == BUILT_IN.lookup("deployments", "apps")
    assert queue.resource_for_label("kube__pod", BUILT_IN) == resources.PODS
    assert queue.resource_for_label("kube_namespace", BUILT_IN) == resources.NAMESPACES
    assert queue.resource_for_label("kube_apps_gizmo", BUILT_IN) is None
    assert queue.replacements == (("#", "_"),)
    assert http.resource_for_label("service", BUILT_IN) == BUILT_IN.lookup("services")
    assert http.resource_for_label("container", BUILT_IN) is None
    assert http.label_for(BUILT_IN.lookup("deployments", "apps"), BUILT_IN) == "deployment"  # type: ignore[arg-type]
    assert http.namespace_label == "namespace"
    assert rules.external_rules[0].namespaced
    assert not rules.external_rules[1].namespaced


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("rulez: []", "cfg: unknown key 'rulez'"),
        ("rules:\n- seriesQuery: up\n  seriesQuerry: x", "rules[0]: unknown key 'seriesQuerry'"),
        ("rules:\n- seriesQuery: up\n  resources: {overides: {}}", "rules[0].resources: unknown key 'overides'"),
        (
            "rules:\n- seriesQuery: up\n  resources: {overrides: {pod: {resource: pod, kind: Pod}}}",
            "rules[0].resources.overrides.pod: unknown key 'kind'",
        ),
        ("rules:\n- seriesQuery: up\n  name: {match: x}", "rules[0].name: unknown key 'match'"),
        (
            "rules:\n- seriesQuery: up\n  seriesFilters: [{matches: x}]",
            "rules[0].seriesFilters[0]: unknown key 'matches'",
        ),
        ("externalRules:\n- seriesQuery: up\n  metricQuery: x", "externalRules[0]: unknown key 'metricQuery'"),
        ("resourceRules: {cpu: {containerQueries: x}}", "resourceRules.cpu: unknown key 'containerQueries'"),
        ("rules:\n- name: {as: x}", "rules[0]: seriesQuery is required"),
        ("rules:\n- seriesQuery: 'sum(up)'", "rules[0].seriesQuery: unexpected character"),
        ("rules:\n- seriesQuery: up\n  seriesFilters: [{is: a, isNot: b}]", "exactly one of 'is' and 'isNot'"),
        ("rules:\n- seriesQuery: up\n  seriesFilters: [{is: '(unclosed'}]", "invalid regular expression"),
        ("rules:\n- seriesQuery: up\n  name: {matches: '(a)(b)'}", "several capture groups, so name.as is required"),
        (
            "rules:\n- seriesQuery: up\n  metricsQuery: '<<.Serie>>'",
            "rules[0].metricsQuery: can't evaluate field Serie",
        ),
        ("rules:\n- seriesQuery: up\n  metricsQuery: '<<if .Series>>'", "rules[0].metricsQuery: missing <<end>>"),
        (
            "rules:\n- seriesQuery: up\n  resources: {template: '<<.Kind>>'}",
            "resources.template: can't evaluate field Kind",
        ),
        (
            "rules:\n- seriesQuery: up\n  resources: {namespaced: maybe}",
            "resources.namespaced: expected true or false, got a string ('maybe')",
        ),
        ("rules: {seriesQuery: up}", "cfg: rules: expected a list, got a mapping"),
        ("rules:\n- seriesQuery: 5", "rules[0].seriesQuery: expected a string, got a number (5)"),
        ("rules:\n- seriesQuery: up\n  seriesQuery: down", "duplicate key 'seriesQuery' at line 3"),
        ("rules: [", "not valid YAML"),
        ("- a\n- b", "cfg: expected a mapping (of externalRules, resourceRules, rules), got a list"),
        ("just text", "cfg: expected a mapping (of externalRules, resourceRules, rules), got a string ('just text')"),
    ],
)
def test_config_errors_name_the_key_and_place(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_rules(text, "cfg")
    assert fragment in str(e.value)


def test_empty_file_has_no_rules() -> None:
    rules = parse_rules("", "empty.yaml")
    assert rules.rules == ()
    assert rules.external_rules == ()


def test_missing_metrics_query_gets_the_default(caplog: pytest.LogCaptureFixture) -> None:
    rule = parse_rules("rules:\n- seriesQuery: up{pod!=''}", "cfg").rules[0]
    assert rule.metrics_query.text == DEFAULT_METRICS_QUERY
    assert "no metricsQuery" in caplog.text


def test_an_override_resolves_once_the_rest_mapping_knows_its_resource() -> None:
    rule = parse_rules(
        "rules:\n- seriesQuery: up\n  resources: {overrides: {r: {group: argoproj.io, resource: rollout}}}", "cfg"
    ).rules[0]
    assert rule.resource_for_label("r", BUILT_IN) is None
    rollouts = ResourceInfo(GroupResource("rollouts", "argoproj.io"), "rollout", "Rollout", "v1alpha1", True)
    installed = RestMapping([*BUILT_IN, rollouts])
    assert rule.resource_for_label("r", installed) == rollouts
    assert rule.label_for(rollouts, installed) == "r"


GPU_METRICS = {"gpu_utilization", "gpu_memory_used", "gpu_engine_active", "gpu_sm_active", "gpu_tensor_active",
               "gpu_dram_active"}  # fmt: skip
INFERENCE_METRICS = {"inference_requests_waiting", "inference_requests_running", "inference_kv_cache_usage",
                     "inference_time_to_first_token_seconds", "inference_queue_time_seconds",
                     "inference_inter_token_latency_seconds"}  # fmt: skip
# in front of the engines: llm-d's endpoint picker and Dynamo's frontend, for pods and namespaces (not nodes)
GATEWAY_METRICS = {"inference_pool_saturation", "inference_gateway_requests_running", "inference_stale_endpoints",
                   "inference_frontend_time_to_first_token_seconds",
                   "inference_frontend_time_to_first_token_p95_seconds",
                   "inference_frontend_inter_token_latency_seconds",
                   "inference_frontend_inter_token_latency_p95_seconds"}  # fmt: skip


def test_default_rules_declare_the_gpu_and_inference_metrics() -> None:
    """Every built-in rule pins its series names, so each metric is listed before any relist, for every resource."""
    rules = load_rules(None)
    declared: dict[tuple[str, str], list[str]] = {}
    for rule in rules.rules:
        found = rule.declared(BUILT_IN)
        assert found, rule.where
        for series, name, pairs in found:
            for _, info in pairs:
                declared.setdefault((name, str(info.group_resource)), []).append(series)
    names = GPU_METRICS | INFERENCE_METRICS
    assert {name for name, _ in declared} == names | GATEWAY_METRICS
    for name in names:
        for resource in ("pods", "namespaces", "nodes"):
            assert (name, resource) in declared
    for name in GATEWAY_METRICS:
        assert {resource for n, resource in declared if n == name} == {"pods", "namespaces"}, name
    # each vLLM and SGLang name also as prometheus_client writes it to Prometheus 2.x, a colon made "_"
    assert set(declared["inference_requests_waiting", "pods"]) == {
        "vllm:num_requests_waiting", "vllm_num_requests_waiting", "sglang:num_queue_reqs", "sglang_num_queue_reqs",
        "tgi_queue_size", "nv_inference_pending_request_count",
    }  # fmt: skip
    external = {name for r in rules.external_rules for _, name, _ in r.declared(BUILT_IN)}
    scaling = {"inference_demand", "inference_request_rate", "inference_capacity_demand", "inference_activity",
               "inference_capacity_forecast"}  # fmt: skip
    assert external == names | GATEWAY_METRICS | scaling


def test_default_pod_rules_accept_both_label_spellings() -> None:
    # gpu_utilization's rules over the collector's series, after the two over recorded series
    rules = [r for r in load_rules(None).rules if str(r.series_query).startswith("DCGM_FI_DEV_GPU_UTIL{")]
    plain, exported, nodes = rules
    assert plain.resource_for_label("pod", BUILT_IN) == resources.PODS
    assert exported.resource_for_label("exported_pod", BUILT_IN) == resources.PODS
    assert exported.namespace_label == "exported_namespace"
    assert nodes.resource_for_label("Hostname", BUILT_IN) == resources.NODES


def test_load_rules_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(FULL_CONFIG)
    rules = load_rules(path)
    assert rules.source == str(path)
    with pytest.raises(ConfigError, match="cannot read the rules file"):
        load_rules(tmp_path / "absent.yaml")


def test_metrics_query_renders_with_the_template_args() -> None:
    rule = parse_rules(FULL_CONFIG, "cfg").rules[2]
    text = rule.metrics_query.render(
        Struct(
            Series="http_requests_total",
            LabelMatchers='namespace="ml"',
            GroupBy="service",
            GroupBySlice=["service", "namespace"],
            LabelValuesByName={},
        )
    )
    assert text.strip() == 'sum(rate(http_requests_total{namespace="ml"}[1m])) by (service,namespace)'


def test_a_yaml_error_names_the_file_and_the_line() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_rules("rules:\n- seriesQuery: up\n   name: {as: x}\n", "/etc/adapter/config.yaml")
    message = str(raised.value)
    assert message.startswith("/etc/adapter/config.yaml: not valid YAML: ")
    assert 'in "/etc/adapter/config.yaml", line 3, column' in message
    assert "<unicode string>" not in message
