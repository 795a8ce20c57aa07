"""Every kustomization renders with a real ``kubectl kustomize``, with no warning, and every object it makes
validates against the Kubernetes schemas (strict) or, for the Prometheus Operator's kinds, against schemas/."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest

from harness.deploy.manifests import (
    BASE,
    COMPONENTS,
    KUSTOMIZATIONS,
    MANIFESTS,
    OVERLAYS,
    container,
    label,
    render,
    render_uncached,
)
from harness.deploy.validation import K8S_VERSIONS, problems


def test_the_overlays_the_issue_asks_for_exist() -> None:
    assert {d.name for d in OVERLAYS} >= {"prometheus-operator", "shared-gpus"}
    assert {d.name for d in COMPONENTS} >= {"prometheus-operator", "shared-gpus"}


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=label)
def test_renders_without_warnings(directory: Path) -> None:
    rendered = render(directory)
    assert rendered.objects
    assert rendered.stderr == ""


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=label)
def test_every_object_validates(directory: Path, version: str) -> None:
    found = [p for obj in render(directory).objects for p in problems(obj, version)]
    assert found == []


def test_the_components_combine(tmp_path: Path) -> None:
    """A user's own kustomization with both components: the Operator objects and hostPID together."""
    here = tmp_path / "mine"
    here.mkdir()

    def rel(p: Path) -> str:
        return os.path.relpath(p, here)  # kustomize refuses absolute paths

    components = "".join(f"  - {rel(MANIFESTS / 'components' / c)}\n" for c in ("prometheus-operator", "shared-gpus"))
    (here / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources:\n  - {rel(BASE)}\ncomponents:\n{components}"
    )
    rendered = render_uncached(here)
    assert rendered.stderr == ""
    assert rendered.one("DaemonSet", "gpuscale-collector")["spec"]["template"]["spec"]["hostPID"] is True
    assert len(rendered.all("ServiceMonitor")) == 2
    assert len(rendered.all("PrometheusRule")) == 1
    for version in K8S_VERSIONS:
        assert [p for obj in rendered.objects for p in problems(obj, version)] == []


# The validation itself must be able to fail: the same objects with one mistake each.


def test_validation_refuses_an_unknown_field() -> None:
    daemonset = copy.deepcopy(render(BASE).one("DaemonSet", "gpuscale-collector"))
    container(daemonset, "collector")["imagePullPolicyy"] = "Always"
    assert any("imagePullPolicyy" in p for p in problems(daemonset, K8S_VERSIONS[-1]))


def test_validation_refuses_a_wrong_type() -> None:
    deployment = copy.deepcopy(render(BASE).one("Deployment", "gpuscale-adapter"))
    deployment["spec"]["replicas"] = "two"
    assert problems(deployment, K8S_VERSIONS[0])


def test_validation_refuses_an_unknown_servicemonitor_field() -> None:
    monitor = copy.deepcopy(
        render(MANIFESTS / "overlays" / "prometheus-operator").one("ServiceMonitor", "gpuscale-collector")
    )
    endpoint = monitor["spec"]["endpoints"][0]
    endpoint["honorlabels"] = endpoint.pop("honorLabels")
    assert any("honorlabels" in p for p in problems(monitor, K8S_VERSIONS[0]))


def test_validation_refuses_a_prometheusrule_without_expr() -> None:
    rule = copy.deepcopy(render(MANIFESTS / "overlays" / "prometheus-operator").one("PrometheusRule", "gpuscale"))
    del rule["spec"]["groups"][0]["rules"][0]["expr"]
    assert any("expr" in p for p in problems(rule, K8S_VERSIONS[0]))


def test_a_kind_without_a_schema_is_a_problem_not_a_skip() -> None:
    route = {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": "gpuscale-adapter", "namespace": "gpuscale"},
        "spec": {},
    }
    assert problems(route, K8S_VERSIONS[0])


def test_validation_refuses_an_unknown_scaledobject_field() -> None:
    scaled = copy.deepcopy(render(MANIFESTS / "examples" / "keda").one("ScaledObject", "chat"))
    scaled["spec"]["minReplicas"] = scaled["spec"].pop("minReplicaCount")  # the HPA's name, not KEDA's
    assert any("minReplicas" in p for p in problems(scaled, K8S_VERSIONS[0]))


def test_validation_refuses_a_wrong_scaledobject_type() -> None:
    scaled = copy.deepcopy(render(MANIFESTS / "examples" / "keda").one("ScaledObject", "chat"))
    scaled["spec"]["triggers"][0]["metadata"]["targetValue"] = 5  # KEDA's metadata is a map of strings
    assert any("targetValue" in p for p in problems(scaled, K8S_VERSIONS[0]))


def test_validation_refuses_an_unknown_triggerauthentication_field() -> None:
    auth = copy.deepcopy(
        render(MANIFESTS / "examples" / "keda").one("ClusterTriggerAuthentication", "gpuscale-adapter")
    )
    auth["spec"]["secretTargetRef"][0]["secretKey"] = auth["spec"]["secretTargetRef"][0].pop("key")
    assert any("secretKey" in p for p in problems(auth, K8S_VERSIONS[0]))
    # the namespaced kind takes the same spec, and needs a namespace
    auth = copy.deepcopy(
        render(MANIFESTS / "examples" / "keda").one("ClusterTriggerAuthentication", "gpuscale-adapter")
    )
    auth["kind"] = "TriggerAuthentication"
    assert any("namespace" in p for p in problems(auth, K8S_VERSIONS[0]))
    auth["metadata"]["namespace"] = "llm"
    assert problems(auth, K8S_VERSIONS[0]) == []


def test_validation_refuses_a_wrong_triggerauthentication_type() -> None:
    auth = copy.deepcopy(
        render(MANIFESTS / "examples" / "keda").one("ClusterTriggerAuthentication", "gpuscale-adapter")
    )
    auth["spec"]["secretTargetRef"] = auth["spec"]["secretTargetRef"][0]  # one entry, not a list of them
    assert any("secretTargetRef" in p for p in problems(auth, K8S_VERSIONS[0]))
