"""The collector's Kubernetes API client, for the pod and ResourceSlice watches and the counters ConfigMap."""

from __future__ import annotations

import os
from typing import Any

from collector.errors import ConfigError


async def api_client(kubeconfig: str | None) -> Any:
    """A client with a configuration of its own: in a pod the service account unless a kubeconfig is named, else
    the kubeconfig (``--kubeconfig`` or ``$KUBECONFIG``). kubernetes_asyncio is imported here, not at start: a
    collector without Kubernetes features never loads it (it is the largest part of the collector's memory)."""
    from kubernetes_asyncio import client, config
    from kubernetes_asyncio.config.config_exception import ConfigException

    configuration = client.Configuration()
    try:
        if kubeconfig is None and "KUBERNETES_SERVICE_HOST" in os.environ:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            await config.load_kube_config(
                config_file=kubeconfig or os.environ.get("KUBECONFIG"), client_configuration=configuration
            )
    except (ConfigException, OSError) as e:
        raise ConfigError(
            f"no Kubernetes API configuration ({e}); in a pod the service account is used, elsewhere "
            "--kubeconfig or $KUBECONFIG"
        ) from None
    return client.ApiClient(configuration=configuration)
