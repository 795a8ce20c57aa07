"""The NetworkPolicies of manifests/components/network-policy select the pods the base runs and admit their ports by
the names the containers give them, so that a rename in the base cannot leave a policy that admits nothing."""

from __future__ import annotations

import pytest

from harness.deploy.manifests import MANIFESTS, Obj, containers, render

OVERLAY = MANIFESTS / "overlays" / "network-policy"


def workload(kind: str, name: str) -> Obj:
    return render(OVERLAY).one(kind, name)


@pytest.mark.parametrize(
    ("policy", "kind", "port"),
    [("gpuscale-adapter", "Deployment", "https"), ("gpuscale-collector", "DaemonSet", "metrics")],
)
def test_a_policy_selects_its_pods_and_admits_their_named_port(policy: str, kind: str, port: str) -> None:
    spec = render(OVERLAY).one("NetworkPolicy", policy)["spec"]
    pods = workload(kind, policy)["spec"]["template"]["metadata"]["labels"]
    assert spec["podSelector"]["matchLabels"].items() <= pods.items()
    assert spec["policyTypes"] == ["Ingress"]  # what the pods reach (the API, Prometheus, the kubelet) stays open
    named = {p["name"] for c in containers(workload(kind, policy)) for p in c.get("ports", [])}
    for rule in spec["ingress"]:
        assert [p["port"] for p in rule["ports"]] == [port]
        assert port in named


def test_only_prometheus_reaches_the_collectors_and_the_api_servers_and_prometheus_the_adapter() -> None:
    collector = render(OVERLAY).one("NetworkPolicy", "gpuscale-collector")["spec"]["ingress"]
    prometheus = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
    }
    assert [rule["from"] for rule in collector] == [[prometheus]]
    adapter = render(OVERLAY).one("NetworkPolicy", "gpuscale-adapter")["spec"]["ingress"]
    assert [peer["ipBlock"]["cidr"] for peer in adapter[0]["from"]] == ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"]
    assert adapter[1]["from"] == [prometheus]
