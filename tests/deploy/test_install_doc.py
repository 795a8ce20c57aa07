"""docs/install.md stays true: its kustomizations render and validate, the flags they set are the adapter's, the
paths it tells users to `kubectl get --raw` are paths the adapter serves, and the files it names exist."""

from __future__ import annotations

import base64
import re
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import trustme
import yaml

from adapter.api.paths import parse_metrics_path
from adapter.errors import AdapterError
from adapter.settings import parse_settings
from harness.deploy.manifests import MANIFESTS, ROOT, Rendered, container, env_values, mount_covering, render_uncached
from harness.deploy.validation import K8S_VERSIONS, problems

DOC = ROOT / "docs" / "install.md"
TEXT = DOC.read_text()
YAML_BLOCKS = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", TEXT, re.S)]


def block(predicate: Any) -> dict[str, Any]:
    found = [b for b in YAML_BLOCKS if isinstance(b, dict) and predicate(b)]
    assert len(found) == 1
    return found[0]


def users_kustomization() -> dict[str, Any]:
    return block(lambda b: b.get("kind") == "Kustomization")


def render_as_user(tmp_path: Path, kustomization: dict[str, Any]) -> Rendered:
    """Render a kustomization from the guide where the guide puts it: next to a checkout named gpuscale/."""
    (tmp_path / "gpuscale").symlink_to(ROOT)
    mine = tmp_path / "my-cluster"
    mine.mkdir()
    (mine / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    rendered = render_uncached(mine)
    assert rendered.stderr == ""
    for version in K8S_VERSIONS:
        assert [p for o in rendered.objects for p in problems(o, version)] == []
    return rendered


def test_the_users_kustomization_renders_with_their_image_and_prometheus(tmp_path: Path) -> None:
    rendered = render_as_user(tmp_path, users_kustomization())
    adapter = container(rendered.one("Deployment", "gpuscale-adapter"), "adapter")
    assert adapter["image"] == "registry.example.com/gpuscale:0.1.0"
    settings = parse_settings(adapter["args"], env=env_values(adapter))
    assert settings.prometheus.url == "http://kube-prometheus-stack-prometheus.monitoring.svc:9090"
    assert settings.config is not None  # the patch replaced the URL, not another flag
    collector = container(rendered.one("DaemonSet", "gpuscale-collector"), "collector")
    assert collector["image"] == "registry.example.com/gpuscale:0.1.0"
    assert len(rendered.all("ServiceMonitor")) == 2


def test_the_serving_certificate_patches_give_a_verified_setup(tmp_path: Path) -> None:
    cert_patches = block(lambda b: list(b) == ["patches"] and "tls-cert-file" in str(b))["patches"]
    ca = trustme.CA()
    for patch in cert_patches:
        patch["patch"] = patch["patch"].replace(
            "<base64 of the CA certificate>", base64.b64encode(ca.cert_pem.bytes()).decode()
        )
    kustomization = users_kustomization()
    kustomization["patches"] = kustomization["patches"] + cert_patches
    rendered = render_as_user(tmp_path, kustomization)
    for apiservice in rendered.all("APIService"):
        assert "insecureSkipTLSVerify" not in apiservice["spec"]
        assert base64.b64decode(apiservice["spec"]["caBundle"]) == ca.cert_pem.bytes()
    deployment = rendered.one("Deployment", "gpuscale-adapter")
    adapter = container(deployment, "adapter")
    settings = parse_settings(adapter["args"], env=env_values(adapter))
    assert settings.tls.cert_file is not None
    assert settings.tls.key_file is not None
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    for path in (settings.tls.cert_file, settings.tls.key_file):
        mount = mount_covering(adapter, str(path))
        assert mount is not None, f"{path} is not mounted"
        key = str(PurePosixPath(path).relative_to(mount["mountPath"]))
        assert volumes[mount["name"]]["secret"]["secretName"] == "gpuscale-adapter-serving-cert"
        assert key in ("tls.crt", "tls.key")


def test_the_replicas_snippet_scales_the_adapter_and_the_budget_still_takes_one(tmp_path: Path) -> None:
    snippet = block(lambda b: list(b) == ["replicas"])
    rendered = render_as_user(tmp_path, {**users_kustomization(), **snippet})
    count = snippet["replicas"][0]["count"]
    assert count > 2
    assert rendered.one("Deployment", "gpuscale-adapter")["spec"]["replicas"] == count
    assert rendered.one("PodDisruptionBudget", "gpuscale-adapter")["spec"]["maxUnavailable"] == 1


def test_the_hpa_snippet_is_the_examples() -> None:
    snippet = block(lambda b: list(b) == ["metrics"])
    hpa = yaml.safe_load((MANIFESTS / "examples" / "gpu-hpa" / "hpa.yaml").read_text())
    assert snippet["metrics"] == hpa["spec"]["metrics"]


RAW_PATHS = re.findall(r"kubectl get --raw '?(/apis/[^' \n]+)'?", TEXT)


def test_the_guide_asks_the_api_in_several_forms() -> None:
    assert len(RAW_PATHS) >= 6


@pytest.mark.parametrize("raw", RAW_PATHS)
def test_every_raw_path_is_one_the_adapter_serves(raw: str) -> None:
    path, _, query = raw.partition("?")
    params = dict(p.split("=", 1) for p in query.split("&") if p)
    params = {k: v.replace("%3D", "=") for k, v in params.items()}
    parse_metrics_path(path, params)  # raises NotFound or BadRequest for a path the APIs do not have


def test_named_files_exist() -> None:
    for link in re.findall(r"\]\(([^)#:]+)\)", TEXT):
        assert (DOC.parent / link).exists(), link
    for path in re.findall(r"`((?:manifests|gpuscale/manifests)/[^`* ]+)`", TEXT):
        assert (ROOT / path.removeprefix("gpuscale/")).exists(), path


def test_a_path_the_adapter_does_not_serve_is_refused() -> None:
    with pytest.raises(AdapterError):
        parse_metrics_path("/apis/custom.metrics.k8s.io/v1beta3/namespaces/ml/pods/*/gpu_utilization", {})
