"""What holds across the rendered objects: images and commands that exist in the package, Services and
ServiceMonitors that find their pods, the dashboard ConfigMap, and the example HPA."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

from adapter.config.rules import default_rules_text, parse_rules
from adapter.naming.resources import BUILT_IN, PODS
from harness.deploy.manifests import (
    BASE,
    EXAMPLES,
    KUSTOMIZATIONS,
    MANIFESTS,
    NAMESPACE,
    ROOT,
    Obj,
    containers,
    label,
    render,
)

OPERATOR = MANIFESTS / "overlays" / "prometheus-operator"
WORKLOADS = ("Deployment", "DaemonSet")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
IMAGE = f"ghcr.io/gpuscale/gpuscale:{PYPROJECT['version']}"


def workloads(directory: Path) -> list[Obj]:
    rendered = render(directory)
    return [o for kind in WORKLOADS for o in rendered.all(kind)]


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=label)
def test_gpuscale_containers_run_a_console_script_of_this_version(directory: Path) -> None:
    for workload in workloads(directory):
        for c in containers(workload):
            if not c["image"].startswith("ghcr.io/gpuscale/"):
                continue  # the example's stand-in workload
            assert c["image"] == IMAGE
            assert c["command"][0] in PYPROJECT["scripts"], f"{c['command'][0]} is not a console script"


def test_both_components_run_from_the_one_image() -> None:
    images = {c["image"] for w in workloads(BASE) for c in containers(w)}
    commands = {c["command"][0] for w in workloads(BASE) for c in containers(w)}
    assert images == {IMAGE}
    assert commands == {"gpuscale-collector", "gpuscale-adapter"}


def test_every_container_requests_cpu_and_memory_and_caps_memory() -> None:
    for workload in workloads(BASE):
        for c in containers(workload):
            assert set(c["resources"]["requests"]) == {"cpu", "memory"}, workload["metadata"]["name"]
            assert "memory" in c["resources"]["limits"]


def test_no_container_is_privileged_or_keeps_a_capability() -> None:
    for workload in workloads(BASE):
        for c in containers(workload):
            security = c["securityContext"]
            assert not security.get("privileged")
            assert security["allowPrivilegeEscalation"] is False
            assert security["readOnlyRootFilesystem"] is True
            assert security["capabilities"] == {"drop": ["ALL"]}


def test_each_service_selects_one_workload_and_a_port_it_has() -> None:
    rendered = render(BASE)
    for service in rendered.all("Service"):
        selector = service["spec"]["selector"]
        matched = [
            w for w in workloads(BASE) if selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert len(matched) == 1, service["metadata"]["name"]
        names = {p["name"] for c in containers(matched[0]) for p in c.get("ports", [])}
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= names


def test_service_monitors_find_the_services_and_keep_the_jobs_the_rules_name() -> None:
    rendered = render(OPERATOR)
    rules_jobs = set(re.findall(r'job="([^"]+)"', (MANIFESTS / "prometheus" / "gpuscale-rules.yaml").read_text()))
    jobs = set()
    for monitor in rendered.all("ServiceMonitor"):
        spec = monitor["spec"]
        assert NAMESPACE in spec["namespaceSelector"]["matchNames"]
        services = [
            s
            for s in rendered.all("Service")
            if spec["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
        ]
        assert len(services) == 1, monitor["metadata"]["name"]
        service = services[0]
        port_names = {p["name"] for p in service["spec"]["ports"]}
        assert {e["port"] for e in spec["endpoints"]} <= port_names
        assert "jobLabel" not in spec  # so the job is the Service's name
        jobs.add(service["metadata"]["name"])
        for endpoint in spec["endpoints"]:
            for relabel in endpoint.get("relabelings", []):
                re.compile(relabel.get("regex", "(.*)"))
    assert jobs == rules_jobs == {"gpuscale-collector", "gpuscale-adapter"}
    collector = rendered.one("ServiceMonitor", "gpuscale-collector")["spec"]["endpoints"][0]
    assert collector["honorLabels"] is True
    adapter = rendered.one("ServiceMonitor", "gpuscale-adapter")["spec"]["endpoints"][0]
    assert adapter["scheme"] == "https"


def test_the_dashboard_configmap_carries_the_dashboard_file() -> None:
    configmap = render(OPERATOR).one("ConfigMap", "gpuscale-grafana-dashboard")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    data = configmap["data"]["gpuscale-gpus.json"]
    assert json.loads(data) == json.loads((MANIFESTS / "dashboards" / "gpuscale-gpus.json").read_text())


EXAMPLE_METRICS = {
    "gpu-hpa": [
        {
            "type": "Pods",
            "pods": {"metric": {"name": "gpu_utilization"}, "target": {"type": "AverageValue", "averageValue": "70"}},
        }
    ],
    "inference-hpa": [
        {
            "type": "External",
            "external": {
                "metric": {"name": "inference_demand"},
                "target": {"type": "AverageValue", "averageValue": "5"},
            },
        }
    ],
    "inference-capacity-hpa": [
        {
            "type": "External",
            "external": {"metric": {"name": "inference_capacity_demand"}, "target": {"type": "Value", "value": "80"}},
        },
        {
            "type": "External",
            "external": {
                "metric": {"name": "inference_activity"},
                "target": {"type": "AverageValue", "averageValue": "1"},
            },
        },
    ],
}


# the examples with an HPA of their own; the keda example's Deployments are scaled by ScaledObjects
HPA_EXAMPLES = [d for d in EXAMPLES if (d / "hpa.yaml").exists()]


def test_every_hpa_example_has_its_expected_metrics() -> None:
    assert [d.name for d in HPA_EXAMPLES] == sorted(EXAMPLE_METRICS)


@pytest.mark.parametrize("directory", HPA_EXAMPLES, ids=label)
def test_the_example_hpa_scales_its_deployment_on_a_metric_the_adapter_serves(directory: Path) -> None:
    rendered = render(directory)
    hpas = rendered.all("HorizontalPodAutoscaler")
    assert [h["apiVersion"] for h in hpas] == ["autoscaling/v2"]
    spec = hpas[0]["spec"]
    target = rendered.one(spec["scaleTargetRef"]["kind"], spec["scaleTargetRef"]["name"])
    assert target["apiVersion"] == spec["scaleTargetRef"]["apiVersion"]
    assert target["metadata"]["namespace"] == hpas[0]["metadata"]["namespace"]
    limits = [c["resources"]["limits"] for c in containers(target)]
    assert any("nvidia.com/gpu" in lim for lim in limits), "the example workload holds no GPU"
    assert spec["metrics"] == EXAMPLE_METRICS[directory.name]
    rules = parse_rules(default_rules_text(), "built-in")
    served = {
        "Pods": {r.name_as for r in rules.rules if r.label_for(PODS, BUILT_IN)},
        "External": {r.name_as for r in rules.external_rules},
    }
    for metric in spec["metrics"]:
        kind = metric["type"]
        assert metric[kind.lower()]["metric"]["name"] in served[kind]
    # scale to zero (HPAScaleToZero) takes an Object or External metric: at zero replicas no pod has a value
    if spec.get("minReplicas", 1) == 0:
        assert {m["type"] for m in spec["metrics"]} <= {"Object", "External"}


def test_the_inference_example_is_scraped_as_the_inference_rules_expect() -> None:
    template = render(MANIFESTS / "examples" / "inference-hpa").one("Deployment", "chat")["spec"]["template"]
    assert template["metadata"]["labels"]["gpuscale.io/inference-engine"] == "true"
    ports = {p["name"] for c in template["spec"]["containers"] for p in c["ports"]}
    assert "metrics" in ports
