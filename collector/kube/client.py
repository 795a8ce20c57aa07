"""The collector's Kubernetes API client, for the pod and ResourceSlice watches and the counters ConfigMap."""

from __future__ import annotations

import os
from typing import Any

from collector.errors import ConfigError

KUBE_CONFIG_DEFAULT = "~/.kube/config"  # where kubectl and the client library look when nothing names a kubeconfig


def _default_kubeconfig_exists() -> bool:
    return os.path.exists(os.path.expanduser(KUBE_CONFIG_DEFAULT))


async def api_client(kubeconfig: str | None) -> Any:
    """A client with a configuration of its own: in a pod the service account unless a kubeconfig is named, else
    the kubeconfig (``--kubeconfig`` or ``$KUBECONFIG``). kubernetes_asyncio is imported here, not at start: a
    collector without Kubernetes features never loads it (it is the largest part of the collector's memory)."""
    from kubernetes_asyncio import client, config
    from kubernetes_asyncio.config.config_exception import ConfigException

    configuration = client.Configuration()
    in_cluster = kubeconfig is None and "KUBERNETES_SERVICE_HOST" in os.environ
    named = kubeconfig or os.environ.get("KUBECONFIG")
    if not in_cluster and not named and not _default_kubeconfig_exists():
        # said here, once per try, instead of by the library's own warning beside ours
        raise ConfigError(
            f"no Kubernetes API configuration: not in a pod, no --kubeconfig, $KUBECONFIG unset and no "
            f"{KUBE_CONFIG_DEFAULT}"
        )
    try:
        if in_cluster:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            await config.load_kube_config(config_file=named, client_configuration=configuration)
    except (ConfigException, OSError) as e:
        raise ConfigError(
            f"no Kubernetes API configuration ({e}); in a pod the service account is used, elsewhere "
            "--kubeconfig or $KUBECONFIG"
        ) from None
    return client.ApiClient(configuration=configuration)
