"""The collector's chart as its tests read it: its example values files, what it renders without Helm's own labels,
the notes a client-side install prints, and its package."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Sequence
from pathlib import Path

from collector.settings import Settings, parse_settings
from harness.deploy import helm
from harness.deploy.manifests import NAMESPACE, Obj, Rendered, container, env_values

CHART = helm.CHARTS / "gpuscale-collector"
EXAMPLES = sorted((CHART / "examples").glob("*.yaml"))
# the release name the manifests' objects are named after (and their namespace, NAMESPACE)
RELEASE = "gpuscale"


def without_helm_labels(obj: Obj) -> Obj:
    """``obj`` without Helm's labels on the object itself: kustomize has no release to name, so they are the only
    difference the chart's objects may have from manifests/."""
    out = copy.deepcopy(obj)
    labels = out["metadata"].get("labels", {})
    for name in helm.HELM_LABELS:
        labels.pop(name, None)
    return out


def by_kind_and_name(rendered: Rendered) -> dict[tuple[str, str], Obj]:
    found: dict[tuple[str, str], Obj] = {}
    for obj in rendered.objects:
        key = (obj["kind"], obj["metadata"]["name"])
        assert key not in found, f"{key} rendered twice"
        found[key] = obj
    return found


def render(values: Sequence[Path] = (), settings: Sequence[str] = (), release: str = RELEASE) -> Rendered:
    return helm.template(CHART, values, settings, release=release, namespace=NAMESPACE)


def install_dry_run(values: Sequence[Path] = (), settings: Sequence[str] = (), release: str = RELEASE) -> helm.Done:
    return helm.install_dry_run(CHART, release, NAMESPACE, values, settings)


def collector_settings(container: Obj) -> Settings:
    """What the collector in ``container`` runs with, by its own parser: the arguments and the plain environment
    variables, NODE_NAME standing in for the downward API."""
    env = {**env_values(container), "NODE_NAME": "gpu-node-1"}
    try:
        return parse_settings(list(container.get("args", [])), env=env)
    except SystemExit as e:  # argparse reports a bad flag by exiting
        raise AssertionError(f"gpuscale-collector refuses {container.get('args')} / {env}") from e


# Keys of the chart's values whose maps are the user's own names (labels, Kubernetes objects, probe timings) or
# their own small settings, listed in the README as one key.
FREE_FORM_VALUES = frozenset(
    {
        "podLabels", "podAnnotations", "podSecurityContext", "securityContext", "resources", "nodeSelector",
        "affinity", "rollingUpdate", "serviceAccount.annotations", "service.annotations",
        "serviceMonitor.additionalLabels", "serviceMonitor.tlsConfig", "basicAuth.users",
        "prometheusRule.additionalLabels", "grafanaDashboard.labels", "grafanaDashboard.annotations",
    }
)  # fmt: skip


def leaves(paths: Iterable[str]) -> set[str]:
    """The paths that no other path extends (``image.tag``, not ``image``)."""
    given = set(paths)
    return {p for p in given if not any(q.startswith(f"{p}.") for q in given)}


def example(name: str) -> Path:
    """An example values file by its name without ``.yaml``."""
    path = CHART / "examples" / f"{name}.yaml"
    assert path in EXAMPLES, f"no example {name}"
    return path


def daemonset(rendered: Rendered) -> Obj:
    [found] = rendered.all("DaemonSet")
    return found


def collector(rendered: Rendered) -> Obj:
    return container(daemonset(rendered), "collector")


def noted(notes_text: str) -> list[str]:
    """The lines of the notes' list of values not honoured as given."""
    return [line.strip()[2:] for line in notes_text.splitlines() if line.startswith("  - ")]
