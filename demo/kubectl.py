"""What a user types to see what the HPA sees, run with the real ``kubectl``, and its answer printed whole, as kubectl
prints it: a shortened answer would not be what the user sees when typing the same command."""

from __future__ import annotations

import asyncio
from pathlib import Path

import yaml


def user_command(path: str) -> str:
    return f"kubectl get --raw '{path}'"


def kubeconfig(path: Path, server: str) -> Path:
    """A kubeconfig whose cluster is the adapter itself: what the API server's aggregation layer would proxy to."""
    cluster = {"name": "adapter", "cluster": {"server": server}}
    context = {"name": "adapter", "context": {"cluster": "adapter", "user": "demo"}}
    config = {"apiVersion": "v1", "kind": "Config", "clusters": [cluster], "contexts": [context],
              "users": [{"name": "demo", "user": {}}], "current-context": "adapter"}  # fmt: skip
    path.write_text(yaml.safe_dump(config))
    return path


async def get_raw(kubectl: str, config: Path, path: str, within: float = 20.0) -> str:
    """``kubectl get --raw path``'s output; RuntimeError with its message when it fails."""
    process = await asyncio.create_subprocess_exec(
        kubectl, "--kubeconfig", str(config), "get", "--raw", path,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(process.communicate(), within)
    except TimeoutError:
        raise RuntimeError(f"kubectl did not answer within {within:g} s") from None
    finally:
        if process.returncode is None:  # timed out, or Ctrl-C
            process.kill()
            await process.wait()
    if process.returncode != 0:
        raise RuntimeError(f"kubectl failed: {err.decode(errors='replace').strip()[:300]}")
    return out.decode()


def block(command: str, answer: str, note: str = "") -> str:
    """What the run prints: ``$ command``, the answer as kubectl wrote it (one line of JSON), and ``note`` if any."""
    return "\n".join([f"$ {command}", answer.rstrip("\n"), *([note] if note else [])])
