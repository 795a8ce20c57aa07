"""The adapter's one Kubernetes API client: kubernetes_asyncio's configured ``ApiClient`` (kubeconfig or in-cluster
service account: authentication and TLS) for the transport, answers read as plain JSON, and one reader of watch
streams. The object lister (``kube_api.py``) and the authentication backend (``auth_api.py``) are built on it.

An API server's error message may quote the request, and a TokenReview's answer echoes the token, so errors here
carry the HTTP status and the Status ``reason`` only, never a body.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp.http_exceptions import HttpProcessingError

from adapter.backends.kubeconfig import loaded
from adapter.errors import ConfigError, KubernetesError, ResourceExpired

Params = list[tuple[str, str]]


def status_reason(status: int, body: bytes) -> str:
    """ "HTTP 403 Forbidden": the code and the Status ``reason``, never its message (which may quote the request)."""
    try:
        reason = json.loads(body).get("reason") or ""
    except (ValueError, AttributeError):
        reason = ""
    return f"HTTP {status}" + (f" {reason}" if reason else "")


async def _api_client(kubeconfig: Path | None) -> Any:
    from kubernetes_asyncio import client, config

    try:
        if kubeconfig is not None:
            async with loaded(kubeconfig) as (configuration, _):
                return client.ApiClient(configuration)  # its TLS context reads the certificate files now
        configuration = client.Configuration()
        load_incluster: Any = config.load_incluster_config
        load_incluster(client_configuration=configuration)
        return client.ApiClient(configuration)
    except (config.ConfigException, OSError, ValueError, KeyError) as e:
        # the kubeconfig or the service account is wrong, not the API server: a configuration error (exit 2)
        raise ConfigError(f"cannot configure the Kubernetes client: {e}") from e


class KubeClient:
    def __init__(self, api_client: Any, timeout: float) -> None:
        """``timeout``: the most one request may take, its answer read in full (watches excepted)."""
        self.api_client = api_client
        self.timeout = timeout

    @classmethod
    async def connect(cls, kubeconfig: Path | None, request_seconds: float) -> KubeClient:
        """From a kubeconfig file, or the pod's service account when ``kubeconfig`` is None."""
        return cls(await _api_client(kubeconfig), request_seconds)

    async def close(self) -> None:
        await self.api_client.close()

    async def _open(self, method: str, path: str, params: Params, body: Any, accept: str, limit: Any) -> Any:
        return await self.api_client.call_api(
            path,
            method,
            query_params=params,
            header_params={"Accept": accept, "Content-Type": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=limit,
        )

    async def send(
        self, method: str, path: str, params: Params, body: Mapping[str, Any] | None = None, accept: str = ""
    ) -> tuple[int, bytes]:
        """One request answered in full within the timeout: (HTTP status, body). Raises ``TimeoutError``,
        ``aiohttp.ClientError`` or ``OSError``, for the caller to say what could not be done."""
        async with asyncio.timeout(self.timeout):
            resp = await self._open(
                method, path, params, dict(body) if body else None, accept or "application/json", self.timeout
            )
            try:
                return int(resp.status), await resp.read()
            finally:
                resp.release()

    async def watch(
        self, path: str, params: Params, what: str, resource_version: str, timeout_seconds: int, accept: str = ""
    ) -> AsyncIterator[dict[str, Any]]:
        """The decoded events of one watch from ``resource_version``. 410 (as the answer or as an ERROR event)
        raises ``ResourceExpired``; any other failure, a line that is not a JSON object included, raises
        ``KubernetesError`` naming ``what``."""
        params = [
            *params,
            ("watch", "true"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(timeout_seconds)),
        ]
        limit = aiohttp.ClientTimeout(total=None, sock_connect=self.timeout, sock_read=timeout_seconds + 30)
        try:
            # kube-apiserver sends a watch's head at once; one that does not come is a hung server or proxy, which
            # must not leave the copy stale, unreported, until the read timeout (minutes) ends it
            async with asyncio.timeout(self.timeout):
                resp = await self._open("GET", path, params, None, accept or "application/json", limit)
        except TimeoutError as e:
            raise KubernetesError(f"{what}: no answer within {self.timeout:g}s") from e
        except (aiohttp.ClientError, OSError) as e:
            raise KubernetesError(f"{what}: {e}") from e
        try:
            if resp.status == 410:
                raise ResourceExpired(f"{what} from {resource_version}: 410 Gone")
            if resp.status != 200:
                raise KubernetesError(f"{what} answered {status_reason(resp.status, await resp.read())}")
            async for line in resp.content:
                if line.strip():
                    yield _event(line, what)
        except (aiohttp.ClientError, TimeoutError) as e:
            raise KubernetesError(f"{what}: {e}") from e
        except HttpProcessingError as e:  # LineTooLong: an event over aiohttp's line limit (its text quotes the line)
            raise KubernetesError(f"{what}: {type(e).__name__}") from e
        finally:
            resp.release()


def _event(line: bytes, what: str) -> dict[str, Any]:
    try:
        event = json.loads(line)
    except ValueError:
        event = None
    if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
        raise KubernetesError(f"{what}: a watch event that is not a JSON object with an object")
    if event.get("type") == "ERROR":  # as client-go's reflector treats them
        obj = event["object"]
        message = f"{what}: error {obj.get('code')} {obj.get('reason', '')}"
        raise ResourceExpired(message) if obj.get("code") == 410 else KubernetesError(message)
    return event
