"""The keda overlay and example as rendered: the adapter serves KEDA's scaler where the Service and the examples'
scalerAddress say, checks client certificates against the CA the Secret volume mounts, and leaves
external.metrics.k8s.io to KEDA; the example ScaledObjects ask questions the adapter's own metadata parser accepts,
for metrics its built-in rules serve, with KEDA's TLS parameter names, and no HPA of their own beside them."""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath

import yaml

from adapter.config.rules import default_rules_text, parse_rules
from adapter.keda.metadata import MetricType, parse_metadata
from adapter.naming.resources import BUILT_IN, PODS
from adapter.settings import Settings, parse_settings
from harness.deploy.manifests import (
    BASE,
    MANIFESTS,
    NAMESPACE,
    ROOT,
    Obj,
    container,
    env_values,
    mount_covering,
    render,
    render_uncached,
    volume_for_mount,
)
from harness.deploy.validation import K8S_VERSIONS, problems

OVERLAY = MANIFESTS / "overlays" / "keda"
EXAMPLE = MANIFESTS / "examples" / "keda"
CLIENT_CA_SECRET = "gpuscale-adapter-keda-client-ca"
# the authentication parameters of KEDA's external scaler (pkg/scalers/external_scaler.go, order=authParams)
KEDA_TLS_PARAMETERS = {"caCert", "tlsClientCert", "tlsClientKey"}


def deployment() -> Obj:
    return render(OVERLAY).one("Deployment", "gpuscale-adapter")


def settings() -> Settings:
    c = container(deployment(), "adapter")
    return parse_settings(list(c["args"]), env=env_values(c))


def scaled_objects() -> list[Obj]:
    found = render(EXAMPLE).all("ScaledObject")
    assert {o["metadata"]["name"] for o in found} == {"chat", "trainer"}
    return found


def kinds_and_names(objects: tuple[Obj, ...]) -> set[tuple[str, str]]:
    return {(o["kind"], o["metadata"]["name"]) for o in objects}


def test_the_overlay_renders_without_warnings() -> None:
    rendered = render(OVERLAY)
    assert rendered.objects
    assert rendered.stderr == ""


def test_external_metrics_are_left_to_keda_and_custom_metrics_stay() -> None:
    names = {a["metadata"]["name"] for a in render(OVERLAY).all("APIService")}
    assert names == {"v1beta1.custom.metrics.k8s.io", "v1beta2.custom.metrics.k8s.io"}
    # and only that: everything else the base makes is still there
    removed = kinds_and_names(render(BASE).objects) - kinds_and_names(render(OVERLAY).objects)
    assert removed == {("APIService", "v1beta1.external.metrics.k8s.io")}


def test_the_scaler_listens_on_the_keda_port_and_checks_the_mounted_client_ca() -> None:
    s = settings()
    assert s.ignored_flags == ()
    assert s.insecure_serve_http is False  # TLS, with the serving certificate, as client certificates need
    assert s.keda.address is not None
    port = int(s.keda.address.rpartition(":")[2])
    c = container(deployment(), "adapter")
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"https": s.secure_port, "keda": port}
    ca = s.keda.client_ca_file
    assert ca is not None
    mount = mount_covering(c, str(ca))
    assert mount is not None, f"nothing is mounted at {ca}"
    assert mount.get("readOnly") is True
    volume = volume_for_mount(deployment(), mount)
    assert volume["secret"]["secretName"] == CLIENT_CA_SECRET
    key = str(PurePosixPath(ca).relative_to(mount["mountPath"]))
    assert [(i["key"], i["path"]) for i in volume["secret"]["items"]] == [("ca.crt", key)]
    # of that CA's certificates, only the one docs/keda.md issues KEDA
    assert s.keda.client_allowed_names == ("keda-operator",)


def test_the_service_sends_port_keda_to_the_containers_keda_port() -> None:
    ports = {p["name"]: p for p in render(OVERLAY).one("Service", "gpuscale-adapter")["spec"]["ports"]}
    assert set(ports) == {"https", "keda"}
    assert ports["keda"]["targetPort"] == "keda"
    assert ports["keda"]["protocol"] == "TCP"
    assert ports["https"]["port"] == 443  # the APIServices' port is untouched


def test_every_trigger_names_the_service_and_its_keda_port() -> None:
    service = render(OVERLAY).one("Service", "gpuscale-adapter")
    port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "keda")
    address = f"{service['metadata']['name']}.{NAMESPACE}.svc:{port}"
    for scaled in scaled_objects():
        for trigger in scaled["spec"]["triggers"]:
            assert trigger["type"] in ("external", "external-push")
            assert trigger["metadata"]["scalerAddress"] == address


def test_every_trigger_is_a_question_the_adapter_accepts_for_a_metric_its_rules_serve() -> None:
    rules = parse_rules(default_rules_text(), "built-in")
    served = {
        MetricType.PODS: {r.name_as for r in rules.rules if r.label_for(PODS, BUILT_IN)},
        MetricType.EXTERNAL: {r.name_as for r in rules.external_rules},
    }
    asked = {}
    for scaled in scaled_objects():
        for trigger in scaled["spec"]["triggers"]:
            query = parse_metadata(trigger["metadata"])  # BadRequest for an unknown key or a wrong value
            assert query.metric in served[query.metric_type], query
            # a sum over pods or a namespace total: KEDA's AverageValue divides it by the target (docs/keda.md)
            assert trigger.get("metricType", "AverageValue") == "AverageValue"
            asked[scaled["metadata"]["name"]] = query
    assert (asked["chat"].metric, asked["chat"].metric_type) == ("inference_demand", MetricType.EXTERNAL)
    assert (asked["trainer"].metric, asked["trainer"].metric_type) == ("gpu_utilization", MetricType.PODS)
    assert str(asked["trainer"].label_selector) == "app=trainer"


def test_a_workload_scaled_to_zero_wakes_on_a_signal_from_outside_its_pods() -> None:
    for scaled in scaled_objects():
        spec = scaled["spec"]
        if spec.get("minReplicaCount", 0) == 0:
            # at zero replicas there are no pods, so a pods trigger has no value to wake on
            queries = [parse_metadata(t["metadata"]) for t in spec["triggers"]]
            assert any(q.metric_type is MetricType.EXTERNAL for q in queries), scaled["metadata"]["name"]
            assert "external-push" in {t["type"] for t in spec["triggers"]}


def test_the_triggers_authenticate_with_keda_tls_parameters() -> None:
    rendered = render(EXAMPLE)
    for scaled in scaled_objects():
        for trigger in scaled["spec"]["triggers"]:
            ref = trigger["authenticationRef"]
            auth = rendered.one(ref["kind"], ref["name"])
            refs = auth["spec"]["secretTargetRef"]
            assert {r["parameter"] for r in refs} == KEDA_TLS_PARAMETERS
            # one Secret, as cert-manager writes a Certificate's: ca.crt, tls.crt, tls.key
            assert {(r["parameter"], r["key"]) for r in refs} == {
                ("caCert", "ca.crt"),
                ("tlsClientCert", "tls.crt"),
                ("tlsClientKey", "tls.key"),
            }
            assert len({r["name"] for r in refs}) == 1
            # KEDA's client key reads any namespace through the scaler: kept in KEDA's namespace, not the workloads'
            assert auth["kind"] == "ClusterTriggerAuthentication"


def test_every_scaled_object_targets_a_deployment_of_the_example_that_no_hpa_targets() -> None:
    rendered = render(EXAMPLE)
    assert rendered.stderr == ""
    hpa_targets = {
        (h["metadata"]["namespace"], h["spec"]["scaleTargetRef"]["kind"], h["spec"]["scaleTargetRef"]["name"])
        for h in rendered.all("HorizontalPodAutoscaler")
    }
    for scaled in scaled_objects():
        ref, namespace = scaled["spec"]["scaleTargetRef"], scaled["metadata"]["namespace"]
        target = rendered.one(ref["kind"], ref["name"])
        assert target["metadata"]["namespace"] == namespace
        assert target["apiVersion"] == ref["apiVersion"]
        assert (namespace, ref["kind"], ref["name"]) not in hpa_targets
    assert hpa_targets == set()


def test_the_documented_network_policy_patch_admits_keda_to_the_keda_port(tmp_path: Path) -> None:
    """docs/keda.md's patch for clusters with both the network-policy and keda components."""
    doc = (ROOT / "docs" / "keda.md").read_text()
    [patches] = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(patches:.*?)```", doc, re.S)]
    here = tmp_path / "mine"
    here.mkdir()
    components = [os.path.relpath(MANIFESTS / "components" / c, here) for c in ("network-policy", "keda")]
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(BASE, here)],
        "components": components,
        **patches,
    }
    (here / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    rendered = render_uncached(here)
    assert rendered.stderr == ""
    for version in K8S_VERSIONS:
        assert [p for o in rendered.objects for p in problems(o, version)] == []
    ingress = rendered.one("NetworkPolicy", "gpuscale-adapter")["spec"]["ingress"]
    keda = [rule for rule in ingress if any(p["port"] == "keda" for p in rule["ports"])]
    assert [rule["ports"] for rule in keda] == [[{"port": "keda", "protocol": "TCP"}]]
    assert keda[0]["from"][0]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "keda"}}
    named = {p["name"] for p in container(rendered.one("Deployment", "gpuscale-adapter"), "adapter")["ports"]}
    assert "keda" in named


def test_the_documented_capacity_triggers_are_a_scaled_object_keda_and_the_scaler_accept() -> None:
    """docs/keda.md's triggers for replicas that take a minute to load, and the same policy as the HPA example."""
    doc = (ROOT / "docs" / "keda.md").read_text()
    [spec] = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(  minReplicaCount: 0\n.*?)```", doc, re.S)]
    scaled = {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "chat", "namespace": "llm"},
        "spec": {"scaleTargetRef": {"name": "chat"}, **spec},
    }
    for version in K8S_VERSIONS:
        assert problems(scaled, version) == []
    served = {r.name_as for r in parse_rules(default_rules_text(), "built-in").external_rules}
    hpa = render(MANIFESTS / "examples" / "inference-capacity-hpa").one("HorizontalPodAutoscaler", "chat")["spec"]
    as_hpa = []
    for trigger in spec["triggers"]:
        metadata = {k: v for k, v in trigger["metadata"].items() if k != "scalerAddress"}
        query = parse_metadata(metadata)
        assert (query.metric_type, query.metric in served) == (MetricType.EXTERNAL, True)
        kind = trigger.get("metricType", "AverageValue")
        key = "value" if kind == "Value" else "averageValue"
        as_hpa.append({"type": "External", "external": {"metric": {"name": query.metric},
                                                        "target": {"type": kind, key: str(query.target)}}})  # fmt: skip
    assert as_hpa == hpa["metrics"]
    assert spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"] == hpa["behavior"]
