"""The Dockerfile without Docker (no engine here): every path it copies exists and is in the build context, the
commands it and the manifests run are the package's console scripts, it ends as a non-root user, and the wheel its
build stage makes builds from exactly the files the build context holds."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from harness.deploy.dockerfile import DockerIgnore, parse
from harness.deploy.manifests import BASE, ROOT, containers, render

DOCKERFILE = parse(ROOT / "Dockerfile")
IGNORE = DockerIgnore.read(ROOT / ".dockerignore")
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def context_files() -> list[str]:
    """The repository's files (committed or not, but not git-ignored) that the build context would hold."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    return [f for f in listed if (ROOT / f).is_file() and IGNORE.in_context(f)]


def copy_sources() -> list[str]:
    return [
        src.rstrip("/")
        for stage in DOCKERFILE.stages
        for copy in stage.all("COPY")
        if "from" not in copy.flags
        for src in copy.args[:-1]
    ]


def test_two_slim_python_stages() -> None:
    build, runtime = DOCKERFILE.stages
    assert build.name == "build"
    for stage in (build, runtime):
        assert stage.image.startswith("python:"), stage.image
        assert stage.image.endswith("-slim"), stage.image
    python = tuple(int(n) for n in runtime.image.removeprefix("python:").removesuffix("-slim").split("."))
    minimum = tuple(int(n) for n in PROJECT["requires-python"].removeprefix(">=").split("."))
    assert python >= minimum
    # the runtime stage takes only the wheels from the build stage
    mounts = [i.flags["mount"] for i in runtime.all("RUN") if "mount" in i.flags]
    assert mounts == ["type=bind,from=build,source=/wheels,target=/wheels"]
    assert not runtime.all("COPY")


def test_every_copied_path_exists_and_is_in_the_build_context() -> None:
    sources = copy_sources()
    assert set(sources) >= {"pyproject.toml", "README.md", "collector", "adapter"}
    for source in sources:
        assert (ROOT / source).exists(), f"COPY {source}: no such path"
        assert IGNORE.in_context(source), f"COPY {source}: .dockerignore leaves it out of the build context"


def test_the_build_context_is_the_package_sources_only() -> None:
    files = context_files()
    sources = copy_sources()
    assert all(any(f == s or f.startswith(s + "/") for s in sources) for f in files)
    for package in PROJECT["scripts"].values():
        module = package.partition(":")[0].replace(".", "/") + ".py"
        assert module in files, f"{module} is not in the build context"
    assert "collector/counters/default-counters.csv" in files
    assert "adapter/default-rules.yaml" in files
    assert not [f for f in files if f.startswith(("tests/", ".venv/", ".git/")) or "__pycache__" in f]
    # the demo's stand-ins (a fake API server with a fixed token, a fake kubelet) must never ship
    assert not [f for f in files if f.startswith("demo/")]


def test_the_dockerignore_reading_can_leave_files_out() -> None:
    assert not IGNORE.in_context("tests/deploy/test_dockerfile.py")
    assert not IGNORE.in_context("collector/__pycache__/cli.cpython-311.pyc")
    assert not IGNORE.in_context("Makefile")
    assert IGNORE.in_context("collector/pods/kubelet_list.py")


def test_it_ends_as_the_unprivileged_user_the_adapter_runs_as() -> None:
    runtime = DOCKERFILE.stages[-1]
    user = runtime.all("USER")[-1].args[0]
    uid, _, gid = user.partition(":")
    # numeric, so that the kubelet can check runAsNonRoot without reading the image's /etc/passwd
    assert uid.isdigit()
    assert gid.isdigit()
    assert int(uid) != 0
    assert int(gid) != 0
    adapter = render(BASE).one("Deployment", "gpuscale-adapter")
    assert adapter["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == int(uid)


def test_the_entry_point_and_the_manifests_commands_are_console_scripts() -> None:
    runtime = DOCKERFILE.stages[-1]
    [entrypoint] = runtime.all("ENTRYPOINT")
    assert entrypoint.args == ["gpuscale"]
    assert PROJECT["scripts"]["gpuscale"] == "image.entrypoint:main"
    # no CMD: a container given no arguments runs the entry point alone (the collector, as dcgm-exporter's does)
    assert not runtime.all("CMD")
    # prometheus-adapter's binary, for a spec that names it as its command
    links = [i.args for i in runtime.all("RUN") if i.args[:2] == ["ln", "-s"]]
    assert links == [["ln", "-s", "$(command -v gpuscale-adapter)", "/adapter"]]
    used = {
        c["command"][0]
        for w in (*render(BASE).all("Deployment"), *render(BASE).all("DaemonSet"))
        for c in containers(w)
    }
    assert used <= set(PROJECT["scripts"])


def test_the_standard_library_is_compiled_once_in_the_image() -> None:
    """python:*-slim deletes the standard library's bytecode and the image forbids writing it back
    (PYTHONDONTWRITEBYTECODE, a non-root user): without this step every start compiles each module it imports."""
    runtime = DOCKERFILE.stages[-1]
    env = {k: v for i in runtime.all("ENV") for k, _, v in (a.partition("=") for a in i.args)}
    assert env.get("PYTHONDONTWRITEBYTECODE") == "1"
    runs = runtime.all("RUN")
    [compile_step] = [i for i in runs if i.args[:3] == ["python", "-m", "compileall"]]
    assert any("sysconfig.get_path(stdlib)" in a for a in compile_step.args), compile_step.args
    # once the packages are in, and while the build still runs as root
    [install] = [i for i in runs if i.args[:4] == ["python", "-m", "pip", "install"]]
    assert install.line < compile_step.line < runtime.all("USER")[-1].line


def test_exposed_ports_are_the_ones_the_manifests_use() -> None:
    exposed = {int(p) for i in DOCKERFILE.stages[-1].all("EXPOSE") for p in i.args}
    used = {
        p["containerPort"]
        for w in (*render(BASE).all("Deployment"), *render(BASE).all("DaemonSet"))
        for c in containers(w)
        for p in c["ports"]
    }
    assert exposed == used


def test_the_wheel_builds_from_the_build_context(tmp_path: Path) -> None:
    """The build stage's `pip wheel .`, for gpuscale itself, on a copy of exactly the build context.

    With build isolation, as in the image: pip fetches the build backend pyproject.toml asks for (setuptools from
    PyPI, which `make setup` needs too); a fresh virtualenv's own setuptools may be too old to build a wheel."""
    context = tmp_path / "context"
    for name in context_files():
        (context / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, context / name)
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(out), "."],
        cwd=context,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    [wheel] = out.glob("gpuscale-*.whl")
    assert wheel.name.startswith(f"gpuscale-{PROJECT['version']}-")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        entry_points = next(z.read(n).decode() for n in names if n.endswith(".dist-info/entry_points.txt"))
    for script, target in PROJECT["scripts"].items():
        assert f"{script} = {target}" in entry_points
    for data in (
        "collector/counters/default-counters.csv",
        "adapter/default-rules.yaml",
        "collector/pods/kubelet_list.py",
    ):
        assert data in names, f"{data} is missing from the wheel"
    not_shipped = ("demo/", "harness/", "tests/", "bench/")
    assert not [n for n in names if n.startswith(not_shipped)], "stand-ins are in the wheel"
