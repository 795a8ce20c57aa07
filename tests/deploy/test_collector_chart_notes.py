"""What the collector's chart does not honour as given is named at install (helm install's notes), the arguments it
names are those the collector itself ignores, and the values schema refuses unknown keys and wrong types by name."""

from __future__ import annotations

import re

import pytest

from collector.settings import FLAGS
from harness.deploy.collector_chart import (
    CHART,
    collector,
    collector_settings,
    example,
    install_dry_run,
    noted,
    render,
)
from harness.deploy.helm import notes, template_done

NOTED = {
    "dcgm-exporter-every-key": [
        "ignored: arguments -d,",
        "ignored: image.repository nvcr.io/nvidia/k8s/dcgm-exporter and image.tag,",
        "ignored: mapPodsMetrics,",
        "note: securityContext.capabilities.add SYS_ADMIN",
    ],
    "dcgm-exporter-overrides": ["replaced: arguments -f /etc/dcgm-exporter/dcp-metrics-included.csv,"],
    "dcgm-exporter-configmap": [
        "ignored: arguments --kubernetes-gpu-id-type,",
        "ignored: extraEnv DCGM_EXPORTER_LISTEN,",
        "ignored: extraEnv DCGM_EXPORTER_KUBERNETES,",
        "ignored: image.tag 3.3.9-3.6.1-ubuntu22.04,",
        "note: tlsServerConfig.clientAuthType RequireAndVerifyClientCert",
    ],
    "gpuscale-kube-prometheus-stack": [],
}


@pytest.mark.parametrize("name", NOTED)
def test_helm_install_names_what_is_not_honoured(name: str) -> None:
    lines = noted(notes(install_dry_run([example(name)])))
    assert len(lines) == len(NOTED[name]), lines
    for start in NOTED[name]:
        assert any(line.startswith(start) for line in lines), f"{start!r} not in {lines}"


@pytest.mark.parametrize("name", NOTED)
def test_the_arguments_named_ignored_are_those_the_collector_ignores(name: str) -> None:
    lines = noted(notes(install_dry_run([example(name)])))
    named = {m.group(1) for line in lines if (m := re.match(r"ignored: arguments (\S+),", line))}
    flags = {n: f"--{f.long}" for f in FLAGS.flags.values() for n in f.names}
    assert {flags[n] for n in named} == set(collector_settings(collector(render([example(name)]))).ignored)


def test_the_charts_list_of_ignored_flags_is_the_collectors() -> None:
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    [listed] = re.findall(r"\$ignoredFlags := list ([^}]*?) -}}", helpers)
    assert set(re.findall(r'"([^"]+)"', listed)) == {n for f in FLAGS.flags.values() if f.ignored for n in f.names}


def test_default_values_note_nothing() -> None:
    text = notes(install_dry_run())
    assert "port-forward daemonset/gpuscale-collector 9400" in text
    assert noted(text) == []


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("service.port=metrics", "/service/port"),
        ("serviceMonitor.intervall=15s", "'intervall'"),
        ("kubernetes.enablePodLabel=true", "'enablePodLabel'"),
        ("hostPid=true", "'hostPid'"),
        ("tlsServerConfig.clientAuthType=RequireCert", "/tlsServerConfig/clientAuthType"),
        ("debugDump.retention=forever", "/debugDump/retention"),
        ("arguments=-k", "/arguments"),
    ],
)
def test_the_schema_refuses_by_name(setting: str, named: str) -> None:
    done = template_done(CHART, settings=[setting])
    assert done.returncode != 0
    assert named in done.stderr, done.stderr


def test_a_service_monitor_without_a_service_is_named_not_rendered() -> None:
    settings = ["service.enable=false", "serviceMonitor.enabled=true"]
    assert {o["kind"] for o in render(settings=settings).objects} & {"Service", "ServiceMonitor"} == set()
    assert any(
        line.startswith("ignored: serviceMonitor.enabled,") for line in noted(notes(install_dry_run(settings=settings)))
    )
