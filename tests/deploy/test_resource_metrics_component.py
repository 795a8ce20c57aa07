"""The optional resource-metrics component (manifests/components/resource-metrics): the APIServices
v1.metrics.k8s.io and v1beta1.metrics.k8s.io send the group to the adapter's Service, v1 preferred, the adapter reads
a rules file that is the base's plus prometheus-adapter's own resourceRules, it may list the pods and nodes its
answers cover, and view/edit/admin may read the group. The base alone serves no metrics.k8s.io."""

from __future__ import annotations

from pathlib import PurePosixPath

import yaml

from adapter.api.paths import RESOURCE_GROUP, VERSIONS
from adapter.config.rules import parse_rules
from adapter.settings import parse_settings
from harness.deploy import rbac
from harness.deploy.manifests import (
    BASE,
    MANIFESTS,
    NAMESPACE,
    ROOT,
    container,
    env_values,
    mount_covering,
    render,
    volume_for_mount,
)

COMPONENT = MANIFESTS / "components" / "resource-metrics"
OVERLAY = MANIFESTS / "overlays" / "resource-metrics"
PROMETHEUS_ADAPTER_CONFIG = ROOT / "tests" / "adapter" / "resource_configs" / "prometheus-adapter.yaml"


def rules_text_read_by_the_adapter() -> str:
    rendered = render(OVERLAY)
    deployment = rendered.one("Deployment", "gpuscale-adapter")
    adapter = container(deployment, "adapter")
    config = parse_settings(list(adapter.get("args", [])), env=env_values(adapter)).config
    assert config is not None
    mount = mount_covering(adapter, str(config))
    assert mount is not None
    configmap = rendered.one("ConfigMap", volume_for_mount(deployment, mount)["configMap"]["name"])
    return str(configmap["data"][str(PurePosixPath(config).relative_to(mount["mountPath"]))])


def test_the_adapter_reads_the_base_rules_plus_prometheus_adapters_resource_rules() -> None:
    text = rules_text_read_by_the_adapter()
    base = (BASE / "adapter-rules.yaml").read_text()
    assert text.startswith(base), "the component's adapter-rules.yaml must start with a copy of the base's"
    assert (
        yaml.safe_load(text)["resourceRules"] == yaml.safe_load(PROMETHEUS_ADAPTER_CONFIG.read_text())["resourceRules"]
    )
    rules, base_rules = parse_rules(text, "rules.yaml"), parse_rules(base, "rules.yaml")
    assert [r.name_as for r in rules.rules] == [r.name_as for r in base_rules.rules]
    assert rules.resource_rules is not None
    assert base_rules.resource_rules is None


def test_the_apiservices_send_both_versions_to_the_adapter_v1_preferred() -> None:
    rendered = render(OVERLAY)
    service = rendered.one("Service", "gpuscale-adapter")
    specs = {}
    for version in VERSIONS[RESOURCE_GROUP]:
        spec = specs[version] = rendered.one("APIService", f"{version}.metrics.k8s.io")["spec"]
        assert (spec["group"], spec["version"]) == ("metrics.k8s.io", version)
        assert spec["service"] == {
            "name": service["metadata"]["name"],
            "namespace": service["metadata"]["namespace"],
            "port": service["spec"]["ports"][0]["port"],
        }
        assert bool(spec.get("insecureSkipTLSVerify")) != bool(spec.get("caBundle"))
    # kube-aggregator lists a group's versions by versionPriority, the highest first and preferred (equal priorities
    # would fall back to GA above beta); the adapter's own discovery prefers the same one
    by_priority = sorted(specs, key=lambda v: specs[v]["versionPriority"], reverse=True)
    assert by_priority == list(VERSIONS[RESOURCE_GROUP]) == ["v1", "v1beta1"]
    assert len({s["groupPriorityMinimum"] for s in specs.values()}) == 1
    assert not {a["metadata"]["name"] for a in render(BASE).all("APIService")} & {
        "v1.metrics.k8s.io",
        "v1beta1.metrics.k8s.io",
    }


def test_the_adapter_may_list_pods_and_nodes_and_users_may_read_the_group() -> None:
    rendered = render(OVERLAY)
    account = rendered.one("Deployment", "gpuscale-adapter")["spec"]["template"]["spec"]["serviceAccountName"]
    for resource in ("pods", "nodes"):
        for verb in ("list", "watch"):
            assert rbac.allowed(rendered, account, NAMESPACE, verb, "", resource, None)
    reader = rendered.one("ClusterRole", "gpuscale-aggregated-metrics-reader")
    labels = reader["metadata"]["labels"]
    for role in ("view", "edit", "admin"):
        assert labels[f"rbac.authorization.k8s.io/aggregate-to-{role}"] == "true"
    assert reader["rules"] == [
        {"apiGroups": ["metrics.k8s.io"], "resources": ["pods", "nodes"], "verbs": ["get", "list", "watch"]}
    ]
    # the only new object outside the namespace is cluster-wide, not in another namespace
    base = {(o["kind"], o["metadata"]["name"]) for o in render(BASE).objects}
    added = [o for o in rendered.objects if (o["kind"], o["metadata"]["name"]) not in base]
    assert sorted((o["kind"], o["metadata"]["name"]) for o in added if o["kind"] != "ConfigMap") == [
        ("APIService", "v1.metrics.k8s.io"),
        ("APIService", "v1beta1.metrics.k8s.io"),
        ("ClusterRole", "gpuscale-aggregated-metrics-reader"),
    ]
