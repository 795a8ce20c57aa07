"""The shipped Prometheus files (rules, their unit tests, the scrape jobs) and a real promtool to check them."""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from harness.deploy.manifests import MANIFESTS, NAMESPACE
from harness.stores.prometheus import prometheus_binary

RULES_DIR = MANIFESTS / "prometheus"
RULES = RULES_DIR / "gpuscale-rules.yaml"
RULE_TESTS = RULES_DIR / "gpuscale-rules.test.yaml"
SCRAPE = RULES_DIR / "scrape-configs.yaml"


def promtool(*args: str, cwd: Path = RULES_DIR) -> subprocess.CompletedProcess[str]:
    path = shutil.which("promtool") or str(Path(prometheus_binary()).with_name("promtool"))
    return subprocess.run([path, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def rule_groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load(RULES.read_text())["groups"]
    return groups


def rules() -> list[dict[str, Any]]:
    return [r for g in rule_groups() for r in g["rules"]]


def scrape_jobs() -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = yaml.safe_load(SCRAPE.read_text())["scrape_configs"]
    return jobs


def offline_scrape_config(discovered: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """scrape-configs.yaml with Kubernetes discovery replaced by static targets carrying the labels it would set.

    Debian's Prometheus (the one here) is built without Kubernetes service discovery, so promtool cannot parse
    kubernetes_sd_configs; everything else (relabeling, TLS, authorization) it checks as written."""
    config: dict[str, Any] = copy.deepcopy(yaml.safe_load(SCRAPE.read_text()))
    for job in config["scrape_configs"]:
        sd = job.pop("kubernetes_sd_configs")
        assert [s["role"] for s in sd] == ["pod"]
        # gpuscale's own pods in its namespace; the inference engines wherever they run
        assert [s.get("namespaces", {}).get("names") for s in sd] in ([[NAMESPACE]], [None])
        job["static_configs"] = discovered.get(job["job_name"], [])
    return config


def discovered_pod(target: str, namespace: str, pod: str, node: str, app: str, engine: bool) -> dict[str, Any]:
    """A static target with the labels Kubernetes discovery (role: pod) gives the pod's port named metrics."""
    labels = {
        "__meta_kubernetes_namespace": namespace,
        "__meta_kubernetes_pod_name": pod,
        "__meta_kubernetes_pod_node_name": node,
        "__meta_kubernetes_pod_container_port_name": "metrics",
        "__meta_kubernetes_pod_label_app_kubernetes_io_name": app,
    }
    if engine:
        labels["__meta_kubernetes_pod_label_gpuscale_io_inference_engine"] = "true"
    return {"targets": [target], "labels": labels}
