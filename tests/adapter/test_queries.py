import pytest

from adapter.config.rules import load_rules, parse_rules
from adapter.errors import BadRequest
from adapter.naming import resources
from adapter.provider.queries import custom_query, external_query
from adapter.query.selectors import parse_selector

DEFAULT = load_rules(None)
# rules[0] and [1] read the recorded series (manifests/prometheus/gpuscale-rules.yaml)
POD_RULE, EXPORTED_RULE, NODE_RULE = DEFAULT.rules[2], DEFAULT.rules[3], DEFAULT.rules[4]
S = parse_selector

CONFIG = parse_rules(
    """
rules:
- seriesQuery: 'http_requests_total{namespace!="",pod!=""}'
  resources: {template: "<<.Resource>>"}
  metricsQuery: 'sum(rate(<<.Series>>{<<.LabelMatchers>>}[2m])) by (<<.GroupBy>>)'
- seriesQuery: 'x{namespace!="",pod!=""}'
  resources: {template: "<<.Resource>>"}
  metricsQuery: 'sum(<<.Series>>{pod=~"<<index .LabelValuesByName "pod">>"}) by (<<.GroupBySlice>>)'
externalRules:
- seriesQuery: '{__name__="queue_depth",queue!=""}'
  resources: {overrides: {namespace: {resource: namespace}}}
  metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>}) by (queue)'
- seriesQuery: '{__name__="queue_depth",queue!=""}'
  resources: {overrides: {namespace: {resource: namespace}}, namespaced: false}
  metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>})'
- seriesQuery: '{__name__="tagged",tag!=""}'
  resources: {namespaced: false}
  labelValueReplacements: [{find: "_", replace: "#"}]
  metricsQuery: 'sum(<<.Series>>{tag=~"<<index .LabelValuesByName "tag">>"})'
- seriesQuery: '{__name__="queue_depth",queue!=""}'
  metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>})'
""",
    "cfg",
)
GPU = "DCGM_FI_DEV_GPU_UTIL"
# the built-in GPU rules read only a GPU exporter's job: any other pod could write these labels
JOB = 'job=~"gpuscale-collector|(nvidia-)?dcgm-exporter"'


@pytest.mark.parametrize(
    ("rule", "series", "info", "namespace", "names", "selector", "expected"),
    [
        (
            POD_RULE,
            GPU,
            resources.PODS,
            "ml",
            ["trainer-0"],
            "",
            f'avg by (pod) ({GPU}{{namespace="ml",pod="trainer-0",{JOB},exported_pod=""}})',
        ),
        (
            POD_RULE,
            GPU,
            resources.PODS,
            "ml",
            ["b", "a", "a.b"],
            "",
            f'avg by (pod) ({GPU}{{namespace="ml",pod=~"a|a\\\\.b|b",{JOB},exported_pod=""}})',
        ),
        (
            POD_RULE,
            GPU,
            resources.PODS,
            "ml",
            ["p"],
            "gpu in (0,1),!mig",
            f'avg by (pod) ({GPU}{{gpu=~"0|1",mig="",namespace="ml",pod="p",{JOB},exported_pod=""}})',
        ),
        (
            POD_RULE,
            GPU,
            resources.PODS,
            "ml",
            None,
            "",
            f'avg by (pod) ({GPU}{{namespace="ml",pod!="",{JOB},exported_pod=""}})',
        ),
        (
            POD_RULE,
            GPU,
            resources.NAMESPACES,
            None,
            ["ml"],
            "",
            f'avg by (namespace) ({GPU}{{namespace="ml",{JOB},exported_pod=""}})',
        ),
        (
            EXPORTED_RULE,
            GPU,
            resources.PODS,
            "serving",
            ["infer-0"],
            "",
            f'avg by (exported_pod) ({GPU}{{exported_namespace="serving",exported_pod="infer-0",{JOB}}})',
        ),
        (
            NODE_RULE,
            GPU,
            resources.NODES,
            None,
            ["node-a", "node-b"],
            "",
            f'avg by (Hostname) (max by (Hostname, gpu, UUID) ({GPU}{{Hostname=~"node-a|node-b",{JOB}}}))',
        ),
        # values that try to escape their quotes or widen a regex only ever match themselves
        (
            POD_RULE,
            GPU,
            resources.PODS,
            'm"l',
            ['x"}) or vector(1) #'],
            "",
            f'avg by (pod) ({GPU}{{namespace="m\\"l",pod="x\\"}}) or vector(1) #",{JOB},exported_pod=""}})',
        ),
        (
            POD_RULE,
            GPU,
            resources.PODS,
            "ml",
            [".*", "a|b", "c\nd"],
            "",
            f'avg by (pod) ({GPU}{{namespace="ml",pod=~"\\\\.\\\\*|a\\\\|b|c\\nd",{JOB},exported_pod=""}})',
        ),
        (
            CONFIG.rules[0],
            "http_requests_total",
            resources.PODS,
            "ml",
            ["p1", "p2"],
            "",
            'sum(rate(http_requests_total{namespace="ml",pod=~"p1|p2"}[2m])) by (pod)',
        ),
        (CONFIG.rules[1], "x", resources.PODS, "ml", ["a.b", "c"], "", 'sum(x{pod=~"a\\\\.b|c"}) by ([pod])'),
    ],
)
def test_custom_query(
    rule: object,
    series: str,
    info: resources.ResourceInfo,
    namespace: str | None,
    names: list[str] | None,
    selector: str,
    expected: str,
) -> None:
    label = rule.label_for(info, resources.BUILT_IN)  # type: ignore[attr-defined]
    assert custom_query(rule, series, label, info, namespace, names, S(selector)) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("rule", "namespace", "selector", "expected"),
    [
        (CONFIG.external_rules[0], "ml", "queue=jobs", 'sum(queue_depth{queue="jobs",namespace="ml"}) by (queue)'),
        (CONFIG.external_rules[0], "ml", "", 'sum(queue_depth{namespace="ml"}) by (queue)'),
        (CONFIG.external_rules[1], "ml", "queue in (a,b)", 'sum(queue_depth{queue=~"a|b"})'),
        (CONFIG.external_rules[1], "ml", "", "sum(queue_depth{})"),
        (CONFIG.external_rules[2], "ml", "tag=a_b", 'sum(tagged{tag=~"a#b"})'),
        # no namespace mapping: scoped through the `namespace` label all the same
        (CONFIG.external_rules[3], "ml", "", 'sum(queue_depth{namespace="ml"})'),
        (CONFIG.external_rules[3], "ml", "namespace=other", 'sum(queue_depth{namespace="other",namespace="ml"})'),
        (
            DEFAULT.external_rules[0],
            "ml",
            "Hostname=node-a",
            f'avg({GPU}{{Hostname="node-a",namespace="ml",{JOB},exported_namespace=""}})',
        ),
        (
            DEFAULT.external_rules[1],
            "ml",
            "Hostname=node-a",
            f'avg({GPU}{{Hostname="node-a",exported_namespace="ml",{JOB}}})',
        ),
    ],
)
def test_external_query(rule: object, namespace: str, selector: str, expected: str) -> None:
    series = "DCGM_FI_DEV_GPU_UTIL" if rule in DEFAULT.external_rules else rule.series_query.literal_name()  # type: ignore[attr-defined]
    assert external_query(rule, series, namespace, S(selector)) == expected  # type: ignore[arg-type]


def test_selector_operators_promql_cannot_express_are_bad_requests() -> None:
    with pytest.raises(BadRequest, match="no PromQL equivalent"):
        custom_query(POD_RULE, GPU, "pod", resources.PODS, "ml", ["p"], S("gpu>1"))


def test_a_rule_names_no_label_for_a_resource_it_does_not_map() -> None:
    # discovery gives such a rule no metric for nodes, so no query is ever built for it
    assert POD_RULE.label_for(resources.NODES, resources.BUILT_IN) is None
    assert NODE_RULE.label_for(resources.NODES, resources.BUILT_IN) == "Hostname"
