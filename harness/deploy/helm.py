"""A real Helm (v4, installed by scripts/ensure-helm) run on the charts under charts/, and what it renders."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from harness.deploy.manifests import ROOT, Rendered, venv_tool

CHARTS = ROOT / "charts"
# The labels that Helm charts put on every object by convention and the kustomize manifests cannot have: which
# release installed an object and from which chart version.
HELM_LABELS = frozenset(
    {"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version"}
)


def helm() -> str:
    # scripts/ensure-helm puts it beside the venv's python, which make test runs
    return venv_tool("helm", "run scripts/ensure-helm (make test does)")


@dataclass(frozen=True)
class Done:
    """What a helm command answered: its exit code and both streams, for the tests to read errors from."""

    returncode: int
    stdout: str
    stderr: str


def run(*args: str, timeout: float = 120) -> Done:
    done = subprocess.run([helm(), *args], capture_output=True, text=True, timeout=timeout, check=False)
    return Done(done.returncode, done.stdout, done.stderr)


def values_args(values: Sequence[Path] = (), settings: Sequence[str] = ()) -> list[str]:
    args: list[str] = []
    for file in values:
        args += ["--values", str(file)]
    for setting in settings:
        args += ["--set", setting]
    return args


def template_done(
    chart: Path,
    values: Sequence[Path] = (),
    settings: Sequence[str] = (),
    release: str = "gpuscale",
    namespace: str = "gpuscale",
) -> Done:
    """``helm template`` of ``chart``, failing or not: the schema's and the templates' errors are in stderr."""
    return run("template", release, str(chart), "--namespace", namespace, *values_args(values, settings))


def template(
    chart: Path,
    values: Sequence[Path] = (),
    settings: Sequence[str] = (),
    release: str = "gpuscale",
    namespace: str = "gpuscale",
) -> Rendered:
    """The objects ``helm template`` renders; an assertion naming Helm's error when it fails."""
    done = template_done(chart, values, settings, release, namespace)
    assert done.returncode == 0, f"helm template {chart.name} failed: {done.stderr}"
    return Rendered(tuple(o for o in yaml.safe_load_all(done.stdout) if o), done.stderr)


def install_dry_run(
    chart: Path,
    release: str,
    namespace: str,
    values: Sequence[Path] = (),
    settings: Sequence[str] = (),
    dry_run: Sequence[str] = ("--dry-run=client",),
) -> Done:
    """``helm install`` with ``dry_run`` (offline by default): what an install prints, NOTES and MANIFEST included,
    without installing (``helm template`` leaves NOTES.txt out)."""
    return run("install", release, str(chart), *dry_run, "--namespace", namespace, *values_args(values, settings))


def _section(done: Done, heading: str) -> str:
    assert done.returncode == 0, f"helm install --dry-run failed: {done.stderr}"
    head, found, text = done.stdout.partition(f"\n{heading}:\n")
    assert found, f"helm printed no {heading}: {head[-500:]}"
    return text


def notes(done: Done) -> str:
    """The NOTES an install printed."""
    return _section(done, "NOTES")


def manifest(done: Done) -> Rendered:
    """The objects an install would make: its MANIFEST, up to its NOTES."""
    text = _section(done, "MANIFEST").partition("\nNOTES:\n")[0]
    return Rendered(tuple(o for o in yaml.safe_load_all(text) if o), done.stderr)


def lint(chart: Path, values: Sequence[Path] = ()) -> Done:
    return run("lint", "--strict", str(chart), *values_args(values))


def package(chart: Path, destination: Path) -> Done:
    return run("package", str(chart), "--destination", str(destination))


def key_paths(values: Mapping[str, Any], free_form: frozenset[str] = frozenset(), prefix: str = "") -> set[str]:
    """Every key of a values tree as a dotted path (lists and their items are leaves); the maps under ``free_form``
    paths are values, not keys."""
    paths: set[str] = set()
    for key, value in values.items():
        path = f"{prefix}{key}"
        paths.add(path)
        if isinstance(value, Mapping) and path not in free_form:
            paths |= key_paths(value, free_form, f"{path}.")
    return paths
