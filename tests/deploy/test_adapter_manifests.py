"""The adapter's Deployment, APIServices and RBAC as rendered: its command line parsed by the adapter's own parser,
the rules it reads, how it is kept available, and what it may read in the cluster."""

from __future__ import annotations

import copy
from pathlib import PurePosixPath

import pytest

from adapter.config.rules import default_rules_text, parse_rules
from adapter.errors import ConfigError
from adapter.naming.resources import BUILT_IN_RESOURCES
from adapter.settings import Settings, parse_settings
from harness.deploy import rbac
from harness.deploy.manifests import (
    BASE,
    NAMESPACE,
    ROOT,
    Obj,
    container,
    env_values,
    mount_covering,
    render,
    volume_for_mount,
)


def deployment() -> Obj:
    return render(BASE).one("Deployment", "gpuscale-adapter")


def adapter() -> Obj:
    return container(deployment(), "adapter")


def settings_of(c: Obj) -> Settings:
    return parse_settings(list(c.get("args", [])), env=env_values(c))


def test_the_command_line_is_one_the_adapter_accepts() -> None:
    c = adapter()
    assert c["command"] == ["gpuscale-adapter"]
    settings = settings_of(c)
    assert settings.ignored_flags == (), "a flag the adapter accepts but does not act on"
    assert settings.insecure_serve_http is False
    assert settings.prometheus.url.startswith("http")


def test_the_parser_check_can_fail() -> None:
    c = copy.deepcopy(adapter())
    c["args"].append("--prometheus-urll=http://x")
    with pytest.raises(ConfigError):
        settings_of(c)


def test_it_reads_the_rules_configmap_which_holds_the_built_in_rules() -> None:
    c, rendered = adapter(), render(BASE)
    config = settings_of(c).config
    assert config is not None, "the adapter would run on its built-in rules, not the ConfigMap"
    mount = mount_covering(c, str(config))
    assert mount is not None, f"nothing is mounted at {config}"
    volume = volume_for_mount(deployment(), mount)
    configmap = rendered.one("ConfigMap", volume["configMap"]["name"])
    key = str(PurePosixPath(config).relative_to(mount["mountPath"]))
    text = configmap["data"][key]
    assert text == default_rules_text() == (ROOT / "adapter" / "default-rules.yaml").read_text(), (
        "manifests/base/adapter-rules.yaml must be a copy of adapter/default-rules.yaml"
    )
    names = {r.name_as for r in parse_rules(text, key).rules}
    assert names >= {"gpu_utilization", "gpu_memory_used", "gpu_tensor_active"}


def test_the_serving_certificate_directory_is_writable() -> None:
    c = adapter()
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    cert_dir = settings_of(c).tls.cert_dir
    assert cert_dir is not None
    mount = mount_covering(c, str(cert_dir))
    assert mount is not None
    assert not mount.get("readOnly")
    assert "emptyDir" in volume_for_mount(deployment(), mount)


def test_it_serves_https_where_the_probes_and_service_look() -> None:
    c = adapter()
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"https": settings_of(c).secure_port}
    assert c["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "https", "scheme": "HTTPS"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "https", "scheme": "HTTPS"}
    service = render(BASE).one("Service", "gpuscale-adapter")
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(443, "https")]


def test_two_replicas_spread_and_never_both_disrupted() -> None:
    d = deployment()
    pod = d["spec"]["template"]["spec"]
    labels = d["spec"]["template"]["metadata"]["labels"]
    assert d["spec"]["replicas"] == 2
    assert d["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    # spread across nodes and zones, as preferences only: a one-node or zone-less cluster still runs both
    anti = pod["affinity"]["podAntiAffinity"]
    assert set(anti) == {"preferredDuringSchedulingIgnoredDuringExecution"}
    terms = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    assert [t["podAffinityTerm"]["topologyKey"] for t in terms] == ["kubernetes.io/hostname"]
    assert terms[0]["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= labels.items()
    spread = pod["topologySpreadConstraints"]
    assert [(c["topologyKey"], c["whenUnsatisfiable"]) for c in spread] == [
        ("topology.kubernetes.io/zone", "ScheduleAnyway")
    ]
    assert spread[0]["labelSelector"]["matchLabels"].items() <= labels.items()
    # the budget as the disruption controller reads it: with both replicas ready, one may go, never both
    pdb = render(BASE).one("PodDisruptionBudget", "gpuscale-adapter")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert "minAvailable" not in pdb["spec"]
    desired_healthy = d["spec"]["replicas"] - pdb["spec"]["maxUnavailable"]
    assert d["spec"]["replicas"] - desired_healthy == 1
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


def test_a_replica_leaves_the_service_before_its_port_closes() -> None:
    """Ready only once its caches are synced (``/readyz``: API discovery read, a relist run, pods, namespaces and
    nodes listed); after SIGTERM it serves on for a delay, then finishes its requests within the grace period."""
    c, pod = adapter(), deployment()["spec"]["template"]["spec"]
    settings = settings_of(c)
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert settings.shutdown_delay >= 5
    grace = pod.get("terminationGracePeriodSeconds", 30)
    assert settings.shutdown_delay + settings.prometheus.timeout < grace


def test_it_runs_as_a_user_with_nothing_extra() -> None:
    pod = deployment()["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    security = adapter()["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert not any(k in pod for k in ("hostPID", "hostNetwork", "hostIPC"))
    assert all("hostPath" not in v for v in pod["volumes"])


def test_apiservices_send_both_groups_to_the_adapter_service() -> None:
    rendered = render(BASE)
    service = rendered.one("Service", "gpuscale-adapter")
    expected = {
        "v1beta1.custom.metrics.k8s.io": ("custom.metrics.k8s.io", "v1beta1"),
        "v1beta2.custom.metrics.k8s.io": ("custom.metrics.k8s.io", "v1beta2"),
        "v1beta1.external.metrics.k8s.io": ("external.metrics.k8s.io", "v1beta1"),
    }
    services = {a["metadata"]["name"]: a["spec"] for a in rendered.all("APIService")}
    assert set(services) == set(expected)
    for name, spec in services.items():
        assert (spec["group"], spec["version"]) == expected[name]
        assert spec["service"] == {
            "name": service["metadata"]["name"],
            "namespace": service["metadata"]["namespace"],
            "port": service["spec"]["ports"][0]["port"],
        }
        assert spec["groupPriorityMinimum"] > 0
        # the aggregator either verifies the serving certificate against caBundle or is told not to
        assert bool(spec.get("insecureSkipTLSVerify")) != bool(spec.get("caBundle")), name
    custom = [services["v1beta1.custom.metrics.k8s.io"], services["v1beta2.custom.metrics.k8s.io"]]
    assert custom[1]["versionPriority"] > custom[0]["versionPriority"]


def test_rbac_covers_what_the_adapter_reads_and_delegates() -> None:
    rendered = render(BASE)
    account = deployment()["spec"]["template"]["spec"]["serviceAccountName"]
    assert rendered.one("ServiceAccount", account)["metadata"]["namespace"] == NAMESPACE
    for info in BUILT_IN_RESOURCES:  # the resources of every cluster's built-in groups
        gr = info.group_resource
        for verb in ("get", "list", "watch"):
            assert rbac.allowed(rendered, account, NAMESPACE, verb, gr.group, gr.resource, None), f"{verb} {gr}"
    assert rbac.bound_system_roles(rendered, account, NAMESPACE) == {
        rbac.Binding("ClusterRole", "system:auth-delegator", None),
        rbac.Binding("Role", "extension-apiserver-authentication-reader", "kube-system"),
    }
    # read-only: no rule grants anything but reading
    assert {v for r in rbac.rules_of(rendered, account, NAMESPACE) for v in r["verbs"]} == {"get", "list", "watch"}


def test_the_hpa_controller_may_read_the_metrics_apis() -> None:
    rendered = render(BASE)
    for group in ("custom.metrics.k8s.io", "external.metrics.k8s.io"):
        assert rbac.allowed(rendered, "horizontal-pod-autoscaler", "kube-system", "get", group, "pods", None)


def test_the_only_object_outside_the_namespace_is_the_kube_system_binding() -> None:
    outside = [
        (o["kind"], o["metadata"]["name"], o["metadata"]["namespace"])
        for o in render(BASE).objects
        if o["metadata"].get("namespace") not in (None, NAMESPACE)
    ]
    assert outside == [("RoleBinding", "gpuscale-adapter-auth-reader", "kube-system")]
