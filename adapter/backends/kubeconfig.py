"""A kubeconfig read by the Kubernetes client library (kubernetes_asyncio's loader: contexts, tokens and token files,
exec plugins, client certificates, auth providers), without leaving its secrets on disk.

The loader writes inline certificate data (``certificate-authority-data``, ``client-key-data``, an exec plugin's
``clientKeyData``) to temporary files, which it removes only when the interpreter exits normally: after a SIGKILL or
an OOM kill they would stay. Here those files go to a private directory (mode 0700) that is removed as soon as the
``with`` block that uses them ends: a caller builds what reads the files (an ``SSLContext``) inside the block. The
loader remembers the files it wrote by content; entries whose file is gone are dropped before each load, so that it
writes them again instead of naming files that no longer exist.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import yaml


class KubeconfigError(ValueError):
    """The kubeconfig cannot be used; the message names the file and why, never a credential."""


def _why(error: Exception) -> str:
    if isinstance(error, AssertionError):  # the loader asserts that the current context and its cluster exist
        return "its current context, or that context's cluster, is not in the file"
    return str(error) or type(error).__name__


def _check_readable(path: Path) -> None:
    # the loader takes a missing file for an empty configuration, and fails later with a less clear message
    try:
        path.read_bytes()
    except OSError as e:
        raise KubeconfigError(f"kubeconfig {path}: cannot read it: {e.strerror}") from e


def _forget_removed(written: dict[str, str]) -> None:
    """Drop the loader's entries (content → the file it wrote it to) whose file is gone."""
    for content, name in list(written.items()):
        if not os.path.exists(name):
            del written[content]


@asynccontextmanager
async def loaded(path: Path) -> AsyncIterator[tuple[Any, Any]]:
    """(kubernetes_asyncio ``Configuration``, its ``KubeConfigLoader``) for ``path``'s current context. The
    configuration's certificate files exist only inside the block."""
    from kubernetes_asyncio import client, config
    from kubernetes_asyncio.config import kube_config

    _check_readable(path)
    _forget_removed(kube_config._temp_files)
    with tempfile.TemporaryDirectory(prefix="gpuscale-kubeconfig-") as scratch:
        configuration = client.Configuration()
        try:
            loader = await config.load_kube_config(
                config_file=str(path),
                client_configuration=configuration,
                persist_config=False,  # never write refreshed tokens back into the user's file
                temp_file_path=scratch,
            )
        except (
            config.ConfigException, OSError, ValueError, KeyError, TypeError, AttributeError, AssertionError,
            yaml.YAMLError,
        ) as e:  # fmt: skip
            raise KubeconfigError(f"kubeconfig {path}: {_why(e)}") from e
        yield configuration, loader
