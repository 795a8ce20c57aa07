"""The collector's DaemonSet as rendered: its command line parsed by the collector's own parser, what it mounts and
where it runs, its RBAC, and what the shared-gpus component changes."""

from __future__ import annotations

import copy
from pathlib import Path, PurePosixPath

import pytest

from collector.settings import Settings, build_parser, parse_settings
from harness.deploy import rbac
from harness.deploy.manifests import (
    BASE,
    MANIFESTS,
    NAMESPACE,
    Obj,
    container,
    env_values,
    mount_covering,
    render,
    volume_for_mount,
)

SHARED = MANIFESTS / "overlays" / "shared-gpus"


def daemonset(directory: Path = BASE) -> Obj:
    return render(directory).one("DaemonSet", "gpuscale-collector")


def collector(directory: Path = BASE) -> Obj:
    return container(daemonset(directory), "collector")


def settings_of(c: Obj) -> Settings:
    """What the collector would run with: its args and plain env, NODE_NAME standing in for the downward API."""
    env = {**env_values(c), "NODE_NAME": "gpu-node-1"}
    try:
        return parse_settings(list(c.get("args", [])), env=env)
    except SystemExit as e:  # argparse reports a bad flag by exiting
        raise AssertionError(f"gpuscale-collector refuses {c.get('args')} / {env}") from e


@pytest.mark.parametrize("directory", [BASE, SHARED], ids=["base", "shared-gpus"])
def test_the_command_line_is_one_the_collector_accepts(directory: Path) -> None:
    c = collector(directory)
    assert c["command"] == ["gpuscale-collector"]
    known = {s for a in build_parser()._actions for s in a.option_strings}
    for arg in c["args"]:
        assert arg.partition("=")[0] in known, f"{arg} is not a flag of gpuscale-collector"
    settings = settings_of(c)
    assert settings.ignored == (), "a flag the collector accepts but ignores"
    assert settings.kubernetes is True
    assert settings.simulate_gpus == 0
    assert settings.fallback_simulated_gpus == 0
    assert settings.simulate_spec is None


def test_the_parser_check_can_fail() -> None:
    c = copy.deepcopy(collector())
    c["args"].append("--collect-intervall=500")
    with pytest.raises(AssertionError, match="refuses"):
        settings_of(c)


def test_it_listens_on_the_port_the_pod_and_service_name() -> None:
    c = collector()
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"metrics": settings_of(c).port}
    service = render(BASE).one("Service", "gpuscale-collector")
    assert [p["targetPort"] for p in service["spec"]["ports"]] == ["metrics"]
    # a collector whose NVML is down stays scraped: its self-metrics say why
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["clusterIP"] == "None"


def test_node_name_comes_from_the_downward_api() -> None:
    env = {e["name"]: e for e in collector()["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}


def test_the_pod_resources_socket_is_mounted_read_only_from_the_host() -> None:
    c = collector()
    socket = settings_of(c).pod_resources_socket
    mount = mount_covering(c, socket)
    assert mount is not None, f"nothing is mounted where the collector looks for {socket}"
    assert mount["readOnly"] is True
    volume = volume_for_mount(daemonset(), mount)
    host = PurePosixPath(volume["hostPath"]["path"]) / PurePosixPath(socket).relative_to(mount["mountPath"])
    assert str(host) == "/var/lib/kubelet/pod-resources/kubelet.sock"


def test_the_nvidia_toolkit_is_asked_for_nvml_only() -> None:
    env = env_values(collector())
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    # no GPU is taken from the device plugin
    assert "nvidia.com/gpu" not in str(collector()["resources"])


def test_probes_use_the_collectors_endpoints() -> None:
    c = collector()
    assert c["readinessProbe"]["httpGet"] == {"path": "/health", "port": "metrics"}
    # /health answers 503 without NVML, which a restart cannot fix: liveness only asks that the server answers
    assert c["livenessProbe"]["httpGet"] == {"path": "/metrics", "port": "metrics"}


def test_it_runs_on_gpu_nodes_despite_their_taints() -> None:
    spec = daemonset()["spec"]["template"]["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    keys = {e["key"] for t in terms for e in t["matchExpressions"]}
    assert "nvidia.com/gpu.present" in keys
    assert all(
        e["key"] != "nvidia.com/gpu.present" or e["values"] == ["true"] for t in terms for e in t["matchExpressions"]
    )
    assert {"key": "nvidia.com/gpu", "operator": "Exists"} in spec["tolerations"]


def test_the_base_uses_no_host_pid_and_only_root_with_no_capabilities() -> None:
    spec = daemonset()["spec"]["template"]["spec"]
    assert not spec.get("hostPID")
    assert not spec.get("hostNetwork")
    security = collector()["securityContext"]
    assert security["runAsUser"] == 0
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["privileged"] is False
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    host_paths = [v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v]
    assert host_paths == ["/var/lib/kubelet/pod-resources"]


def test_shared_gpus_adds_host_pid_and_the_host_proc_and_nothing_else() -> None:
    shared, base = daemonset(SHARED), daemonset()
    spec = shared["spec"]["template"]["spec"]
    assert spec["hostPID"] is True
    c = collector(SHARED)
    proc_root = settings_of(c).proc_root
    mount = mount_covering(c, proc_root)
    assert mount is not None
    assert mount["mountPath"] == proc_root
    assert mount["readOnly"] is True
    assert volume_for_mount(shared, mount)["hostPath"]["path"] == "/proc"
    # take the additions away and the base remains
    stripped = copy.deepcopy(shared)
    stripped_spec = stripped["spec"]["template"]["spec"]
    del stripped_spec["hostPID"]
    stripped_spec["volumes"] = [v for v in stripped_spec["volumes"] if v["name"] != mount["name"]]
    sc = container(stripped, "collector")
    sc["volumeMounts"] = [m for m in sc["volumeMounts"] if m["name"] != mount["name"]]
    sc["env"] = [e for e in sc["env"] if e["name"] != "GPUSCALE_COLLECTOR_PROC_ROOT"]
    assert stripped == base


def test_rbac_reads_pods_and_resource_slices_and_nothing_else() -> None:
    rendered = render(BASE)
    account = daemonset()["spec"]["template"]["spec"]["serviceAccountName"]
    assert rendered.one("ServiceAccount", account)["metadata"]["namespace"] == NAMESPACE
    for verb in ("get", "list", "watch"):
        assert rbac.allowed(rendered, account, NAMESPACE, verb, "", "pods", None), verb
    for verb in ("list", "watch"):  # --kubernetes-enable-dra: which GPU a DRA device is
        assert rbac.allowed(rendered, account, NAMESPACE, verb, "resource.k8s.io", "resourceslices", None), verb
    assert rbac.rules_of(rendered, account, NAMESPACE) == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"], "verbs": ["list", "watch"]},
    ]
    assert rbac.bound_system_roles(rendered, account, NAMESPACE) == set()
