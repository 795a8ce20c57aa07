"""The adapter's chart (charts/gpuscale-adapter) as Helm renders it and installs it, what the adapter it deploys
would read (its command line, its rules), and its objects made comparable with the kustomize manifests'."""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from adapter.settings import Settings, parse_settings
from harness.deploy import helm
from harness.deploy.manifests import (
    NAMESPACE,
    Obj,
    Rendered,
    container,
    env_values,
    mount_covering,
    volume_for_mount,
)

CHART = helm.CHARTS / "gpuscale-adapter"
EXAMPLES = sorted((CHART / "examples").glob("*.yaml"))
# The release name docs/install.md installs the chart as: with it every object has the kustomize base's name.
RELEASE = "gpuscale-adapter"
_HASH_SUFFIX = re.compile(r"^(.+-rules)-[a-z0-9]{10}$")

# Every key of prometheus-community's prometheus-adapter chart (5.3.0's values.yaml, including the keys it reads but
# leaves commented out: rules.resource, service.clusterIP, dnsPolicy), and psp and runAsUser of its earlier releases.
PROMETHEUS_ADAPTER_KEYS = (
    "affinity", "topologySpreadConstraints", "nameOverride", "fullnameOverride",
    "image.repository", "image.tag", "image.pullPolicy", "image.pullSecrets",
    "logLevel", "metricsRelistInterval", "listenPort", "nodeSelector", "priorityClassName", "namespaceOverride",
    "customAnnotations", "customLabels", "prometheus.url", "prometheus.port", "prometheus.path", "replicas",
    "podSecurityContext", "securityContext",
    "rbac.create", "rbac.useAuthReaderClusterRole", "rbac.externalMetrics.resources", "rbac.customMetrics.resources",
    "automountServiceAccountToken",
    "serviceAccount.create", "serviceAccount.name", "serviceAccount.annotations",
    "serviceAccount.automountServiceAccountToken",
    "dnsConfig", "dnsPolicy", "resources", "livenessProbe", "readinessProbe", "startupProbe",
    "rules.default", "rules.custom", "rules.existing", "rules.external", "rules.resource",
    "service.annotations", "service.port", "service.type", "service.clusterIP", "service.ipDualStack.enabled",
    "service.ipDualStack.ipFamilies", "service.ipDualStack.ipFamilyPolicy",
    "tls.enable", "tls.ca", "tls.key", "tls.certificate",
    "env", "extraArguments", "extraContainers", "extraVolumes", "extraVolumeMounts", "tolerations",
    "podLabels", "podAnnotations", "deploymentAnnotations", "hostNetwork.enabled", "strategy",
    "podDisruptionBudget.enabled", "podDisruptionBudget.minAvailable", "podDisruptionBudget.maxUnavailable",
    "podDisruptionBudget.unhealthyPodEvictionPolicy",
    "certManager.enabled", "certManager.caCertDuration", "certManager.certDuration",
    "certManager.caCertRevisionHistoryLimit", "certManager.certRevisionHistoryLimit",
    "extraManifests", "revisionHistoryLimit", "psp.create", "psp.annotations", "runAsUser",
)  # fmt: skip


def template(
    values: Sequence[Path] = (), settings: Sequence[str] = (), namespace: str = NAMESPACE, release: str = RELEASE
) -> Rendered:
    return helm.template(CHART, values, settings, release, namespace)


def template_done(values: Sequence[Path] = (), settings: Sequence[str] = ()) -> helm.Done:
    return helm.template_done(CHART, values, settings, RELEASE, NAMESPACE)


def install_dry_run(
    values: Sequence[Path] = (),
    settings: Sequence[str] = (),
    namespace: str = NAMESPACE,
    kubeconfig: Path | None = None,
) -> helm.Done:
    """``helm install --dry-run``: offline (``client``), or against the cluster of ``kubeconfig`` (``server``), where
    the chart's ``lookup`` reads what the cluster holds. OpenAPI validation is left to harness.deploy.validation."""
    where = ["--dry-run=client"] if kubeconfig is None else ["--dry-run=server", "--kubeconfig", str(kubeconfig)]
    dry_run = [*where, "--disable-openapi-validation"]
    return helm.install_dry_run(CHART, RELEASE, namespace, values, settings, dry_run)


def notes(values: Sequence[Path] = (), settings: Sequence[str] = (), namespace: str = NAMESPACE) -> str:
    return helm.notes(install_dry_run(values, settings, namespace))


def ignored(notes_text: str) -> dict[str, str]:
    """The values the notes say have no effect: ``ignored: <key> because <why>`` lines, by key."""
    lines = re.findall(r"^ignored: (.+?) because (.+)$", notes_text, re.M)
    return {key: why for key, why in lines}


@dataclass(frozen=True)
class AdapterView:
    """The adapter as its Deployment runs it: its container, its flags parsed by its own parser, its rules file."""

    deployment: Obj
    container: Obj
    settings: Settings
    rules_configmap: str
    rules_key: str


def adapter_view(rendered: Rendered) -> AdapterView:
    deployments = rendered.all("Deployment")
    assert len(deployments) == 1, "the chart makes one Deployment"
    deployment = deployments[0]
    c = container(deployment, "adapter")
    settings = parse_settings(list(c.get("args", [])), env=env_values(c))
    assert settings.config is not None, "the adapter would run on its built-in rules, not the ConfigMap"
    mount = mount_covering(c, str(settings.config))
    assert mount is not None, f"nothing is mounted at {settings.config}"
    volume = volume_for_mount(deployment, mount)
    key = str(PurePosixPath(settings.config).relative_to(mount["mountPath"]))
    return AdapterView(deployment, c, settings, volume["configMap"]["name"], key)


def rules_text(rendered: Rendered) -> str:
    """The rules file the adapter reads: the key of the ConfigMap its --config points into."""
    view = adapter_view(rendered)
    return str(rendered.one("ConfigMap", view.rules_configmap)["data"][view.rules_key])


def adapter_objects(rendered: Rendered) -> dict[tuple[str, str], Obj]:
    """The objects of the adapter (labelled component adapter), by kind and name."""
    return {
        (o["kind"], o["metadata"]["name"]): o
        for o in rendered.objects
        if o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "adapter"
    }


def _drop_helm_labels(value: Any) -> None:
    if isinstance(value, dict):
        for key in helm.HELM_LABELS & value.keys():
            del value[key]
        for v in value.values():
            _drop_helm_labels(v)
    elif isinstance(value, list):
        for v in value:
            _drop_helm_labels(v)


def _unhashed(name: str) -> str:
    match = _HASH_SUFFIX.match(name)
    return match.group(1) if match else name


def comparable(obj: Obj) -> Obj:
    """``obj`` without what only says how it was made: Helm's standard labels (in selectors too, where the chart adds
    the release so that two releases never select each other's pods) and the hash suffix of the rules ConfigMap's
    name (kustomize's configMapGenerator and the chart each hash the rules their own way)."""
    out = copy.deepcopy(obj)
    _drop_helm_labels(out)
    if out["kind"] == "ConfigMap":
        out["metadata"]["name"] = _unhashed(out["metadata"]["name"])
    if out["kind"] == "Deployment":
        for volume in out["spec"]["template"]["spec"].get("volumes", []):
            if "configMap" in volume:
                volume["configMap"]["name"] = _unhashed(volume["configMap"]["name"])
    return out
