"""dcgm-exporter's chart values in the collector's chart: values files written for NVIDIA's chart render, the
collector's own parser reads from the rendered container what they asked for, its files are where it looks, the
secrets and scrape settings are consistent (test_collector_chart_notes.py: what is named at install)."""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import Any

import bcrypt
import pytest
import yaml

from collector.counters.file import parse as parse_counters
from collector.web.config import parse_web_config
from harness.deploy import rbac
from harness.deploy.collector_chart import (
    CHART,
    EXAMPLES,
    collector,
    collector_settings,
    daemonset,
    render,
)
from harness.deploy.dcgm_exporter_values import ALL_KEYS, FREE_FORM
from harness.deploy.helm import key_paths
from harness.deploy.manifests import NAMESPACE, Rendered, mount_covering, volume_for_mount

EXAMPLE = {p.stem: p for p in EXAMPLES}
# What the collector must run with for each example values file: Settings fields, as its parser gives them.
EXPECTED: dict[str, dict[str, Any]] = {
    "dcgm-exporter-every-key": {
        "kubernetes": True,
        "port": 9400,
        "collectors": "/etc/dcgm-exporter/default-counters.csv",
        "interval": 5.0,
        "pod_labels": True,
        "pod_uid": True,
        "dra": True,
        "dump_enabled": True,
        "dump_directory": "/var/log/dcgm-exporter-debug",
        "dump_retention": 48,
        "dump_compression": False,
        "resource_names": ("example.com/gpu",),
        "ignored": ("--devices",),
    },
    "dcgm-exporter-overrides": {
        "kubernetes": True,
        "port": 9400,
        "collectors": "/etc/dcgm-exporter/dcp-metrics-included.csv",
        "interval": 1.0,
        "pod_labels": True,
        "ignored": (),
    },
    "dcgm-exporter-configmap": {
        "kubernetes": True,
        "port": 9500,
        "interval": 10.0,
        "ignored": ("--kubernetes-gpu-id-type",),
    },
    "gpuscale-kube-prometheus-stack": {"kubernetes": True, "port": 9400, "proc_root": "/host/proc", "ignored": ()},
}
# the pod label allow-lists the examples ask for, as the collector compiles them
ALLOWLISTS = {
    "dcgm-exporter-every-key": ["^app$", r"^app\.kubernetes\.io/.*"],
    "dcgm-exporter-overrides": ["^app$", "^team$"],
}


def values_of(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(EXAMPLE[name].read_text())
    return loaded


def rendered(name: str) -> Rendered:
    return render([EXAMPLE[name]])


def test_the_examples_are_the_expected_ones() -> None:
    assert sorted(EXAMPLE) == sorted(EXPECTED)


def test_one_example_sets_every_key_of_dcgm_exporters_chart() -> None:
    given = key_paths(values_of("dcgm-exporter-every-key"), FREE_FORM)
    assert set(ALL_KEYS) - given == set()


def test_the_schema_declares_every_key_of_dcgm_exporters_chart() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    for key in ALL_KEYS:
        node = schema
        for part in key.split("."):
            if "$ref" in node:  # "#/definitions/<name>"
                node = schema["definitions"][node["$ref"].rpartition("/")[2]]
            assert part in node.get("properties", {}), f"values.schema.json has no {key}"
            node = node["properties"][part]


@pytest.mark.parametrize("name", EXPECTED)
def test_the_collector_runs_with_what_the_values_ask_for(name: str) -> None:
    c = collector(rendered(name))
    assert c["command"] == ["gpuscale-collector"]
    settings = collector_settings(c)
    got = {field: getattr(settings, field) for field in EXPECTED[name]}
    assert got == EXPECTED[name]
    assert [p.pattern for p in settings.pod_label_allowlist] == ALLOWLISTS.get(name, [])


def test_m_reads_the_counters_configmap_the_chart_makes_and_may_read_it() -> None:
    r = rendered("dcgm-exporter-configmap")
    settings = collector_settings(collector(r))
    assert settings.configmap is not None
    assert (settings.configmap.namespace, settings.configmap.name) == (NAMESPACE, "exporter-metrics-config-map")
    configmap = r.one("ConfigMap", "exporter-metrics-config-map")
    assert configmap["metadata"]["namespace"] == NAMESPACE
    assert configmap["data"]["metrics"] == values_of("dcgm-exporter-configmap")["customMetrics"]
    account = daemonset(r)["spec"]["template"]["spec"]["serviceAccountName"]
    assert account == "gpu-metrics"  # serviceAccount.create: false, name given
    assert rbac.allowed(r, account, NAMESPACE, "get", "", "configmaps", NAMESPACE)
    [role] = r.all("Role")
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["exporter-metrics-config-map"],
            "verbs": ["get"],
        }
    ]
    assert r.all("ClusterRole") == []  # kubernetes.rbac.create: false
    assert r.all("ServiceAccount") == []


@pytest.mark.parametrize("name", EXPECTED)
def test_the_pod_and_service_reach_the_port_the_collector_listens_on(name: str) -> None:
    r = rendered(name)
    c = collector(r)
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"metrics": collector_settings(c).port}
    for probe in (c["readinessProbe"], c["livenessProbe"]):
        assert (probe.get("httpGet") or probe["tcpSocket"])["port"] == "metrics"
    [service] = r.all("Service")
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["metrics"]


@pytest.mark.parametrize("name", [n for n in EXPECTED if EXPECTED[n].get("collectors")])
def test_the_counters_file_is_mounted_from_the_counters_configmap(name: str) -> None:
    r = rendered(name)
    c = collector(r)
    path = collector_settings(c).collectors
    assert path is not None
    mount = mount_covering(c, path)
    assert mount is not None, f"nothing is mounted at {path}"
    volume = volume_for_mount(daemonset(r), mount)
    configmap = r.one("ConfigMap", volume["configMap"]["name"])
    [item] = [i for i in volume["configMap"]["items"] if i["path"] == PurePosixPath(path).name]
    counters = parse_counters(configmap["data"][item["key"]], path)
    assert counters.counters
    assert counters.warnings == ()
    # subPath mounts never see a ConfigMap update: a changed file rolls the pods instead
    assert "checksum/counters" in daemonset(r)["spec"]["template"]["metadata"]["annotations"]


def test_custom_metrics_alone_is_mounted_where_the_collector_reads_it() -> None:
    r = render(settings=["customMetrics=DCGM_FI_DEV_GPU_UTIL\\, gauge\\, GPU utilization (in %).\n"])
    c = collector(r)
    path = collector_settings(c).collectors
    assert path == "/etc/dcgm-exporter/default-counters.csv"
    configmap = r.one("ConfigMap", "exporter-metrics-config-map")
    assert parse_counters(configmap["data"]["metrics"], path).fields == {"DCGM_FI_DEV_GPU_UTIL"}
    assert mount_covering(c, path) is not None


def test_the_web_config_is_one_the_collector_accepts_with_every_user() -> None:
    r = rendered("dcgm-exporter-every-key")
    c = collector(r)
    path = collector_settings(c).web_config_file
    assert path is not None
    mount = mount_covering(c, path)
    assert mount is not None
    secret = r.one("Secret", volume_for_mount(daemonset(r), mount)["secret"]["secretName"])
    config = parse_web_config(secret["stringData"][PurePosixPath(path).name], Path(path))
    assert config.tls is not None
    assert config.tls.cert_file is not None
    tls_mount = mount_covering(c, str(config.tls.cert_file))
    assert tls_mount is not None
    tls = r.one("Secret", volume_for_mount(daemonset(r), tls_mount)["secret"]["secretName"])
    assert {config.tls.cert_file.name, config.tls.key_file.name if config.tls.key_file else ""} <= tls["data"].keys()
    users = values_of("dcgm-exporter-every-key")["basicAuth"]["users"]
    assert config.users is not None
    assert config.users.keys() == users.keys()
    for user, password in users.items():
        assert bcrypt.checkpw(password.encode(), config.users[user].encode()), user
    # the probes cannot give a password: they check that the port answers
    assert "tcpSocket" in c["readinessProbe"]


def test_prometheus_scrapes_with_tls_and_the_first_user() -> None:
    r = rendered("dcgm-exporter-every-key")
    [monitor] = r.all("ServiceMonitor")
    [endpoint] = monitor["spec"]["endpoints"]
    assert endpoint["scheme"] == "https"
    credentials = r.one("Secret", endpoint["basicAuth"]["username"]["name"])
    assert credentials["stringData"] == {"username": "oncall", "password": "another-password"}
    assert monitor["metadata"]["labels"]["release"] == "prometheus"  # additionalLabels win over the chart's default
    # the release is named otherwise, so the job the shipped alerts name is set explicitly, before the user's own
    relabels = endpoint["relabelings"]
    assert {"targetLabel": "job", "replacement": "gpuscale-collector"} in relabels
    assert relabels[-1]["targetLabel"] == "nodename"
    assert endpoint["honorLabels"] is False


def test_tls_alone_keeps_http_probes_over_https() -> None:
    c = collector(render(settings=["tlsServerConfig.enabled=true"]))
    assert c["readinessProbe"]["httpGet"] == {"path": "/health", "port": "metrics", "scheme": "HTTPS"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/metrics", "port": "metrics", "scheme": "HTTPS"}


def test_kube_prometheus_stacks_release_label_is_set_by_default() -> None:
    r = render(settings=["serviceMonitor.enabled=true", "prometheusRule.enabled=true"])
    for kind in ("ServiceMonitor", "PrometheusRule"):
        [obj] = r.all(kind)
        assert obj["metadata"]["labels"]["release"] == "kube-prometheus-stack", kind


def test_the_dashboard_goes_where_grafanas_sidecar_looks() -> None:
    r = rendered("gpuscale-kube-prometheus-stack")
    dashboard = r.one("ConfigMap", "gpuscale-grafana-dashboard")
    assert dashboard["metadata"]["namespace"] == "monitoring"
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["metadata"]["annotations"] == {"grafana_folder": "GPUs"}
    assert json.loads(dashboard["data"]["gpuscale-gpus.json"])["panels"]
    for kind in ("ServiceMonitor", "PrometheusRule"):
        [obj] = r.all(kind)
        assert obj["metadata"]["labels"]["release"] == "prometheus", kind


def test_an_address_in_the_arguments_moves_the_container_port() -> None:
    c = collector(render(settings=["arguments={-a,:9500}"]))
    assert collector_settings(c).port == 9500
    assert c["ports"][0]["containerPort"] == 9500
