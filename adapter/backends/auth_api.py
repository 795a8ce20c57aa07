"""The Kubernetes API as delegated authentication and authorization use it, behind the small ``AuthAPI`` protocol:
ConfigMap ``kube-system/extension-apiserver-authentication`` (LIST and WATCH by name), TokenReview and
SubjectAccessReview (POST).

A TokenReview's answer echoes the token back (``spec.token``), and an API server's error message may quote the
request, so neither an answer's body nor its message is ever put into an exception or a log line: errors carry the
HTTP status and the Status ``reason`` only.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import aiohttp

from adapter.backends.kube_api import new_api_client, status_reason, watch_stream
from adapter.config.flags import CONFIGMAP, CONFIGMAP_NAME, CONFIGMAP_NAMESPACE
from adapter.errors import KubernetesError, ReviewError

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
_CONFIGMAPS = f"/api/v1/namespaces/{CONFIGMAP_NAMESPACE}/configmaps"
_BY_NAME = ("fieldSelector", f"metadata.name={CONFIGMAP_NAME}")


@dataclass(frozen=True)
class ConfigMapState:
    """The ConfigMap's ``data`` (None when it does not exist) as of ``resource_version``; a watch bookmark only
    moves the version on (``changed`` False)."""

    data: Mapping[str, str] | None
    resource_version: str
    changed: bool = True


class AuthAPI(Protocol):
    async def read_configmap(self) -> ConfigMapState: ...

    def watch_configmap(self, resource_version: str, timeout_seconds: int) -> AsyncIterator[ConfigMapState]:
        """Each change after ``resource_version``; raises ``ResourceExpired`` when that version is gone (410)."""
        ...

    async def review(self, path: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """POST a review; its ``status``. Raises ``ReviewError`` (never holding the body) when none came back."""
        ...

    async def close(self) -> None: ...


def _data(obj: Any) -> dict[str, str]:
    data = obj.get("data") or {}
    return {str(k): str(v) for k, v in data.items()}


class KubernetesAuthAPI:
    """``AuthAPI`` over kubernetes_asyncio's configured ``ApiClient``."""

    def __init__(self, api_client: Any, timeout: float = 10.0) -> None:
        self.api_client = api_client
        self.timeout = timeout

    @classmethod
    async def connect(cls, kubeconfig: Path | None, review_seconds: float = 10.0) -> KubernetesAuthAPI:
        return cls(await new_api_client(kubeconfig), review_seconds)

    async def close(self) -> None:
        await self.api_client.close()

    async def _fetch(self, method: str, path: str, params: list[tuple[str, str]], body: Any) -> tuple[int, bytes]:
        """One request answered in full within the timeout: (HTTP status, body)."""
        async with asyncio.timeout(self.timeout):
            resp = await self._call(method, path, params, body, self.timeout)
            try:
                return int(resp.status), await resp.read()
            finally:
                resp.release()

    async def _call(self, method: str, path: str, params: list[tuple[str, str]], body: Any, limit: Any) -> Any:
        return await self.api_client.call_api(
            path,
            method,
            query_params=params,
            header_params={"Accept": "application/json", "Content-Type": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=limit,
        )

    async def review(self, path: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        kind = body.get("kind", "review")
        try:
            code, payload = await self._fetch("POST", path, [], dict(body))
        except TimeoutError as e:
            raise ReviewError(f"{kind}: no answer from the Kubernetes API within {self.timeout:g}s") from e
        except (aiohttp.ClientError, OSError) as e:
            raise ReviewError(f"{kind}: the Kubernetes API is unreachable: {e}") from e
        if code not in (200, 201):
            raise ReviewError(f"{kind}: the Kubernetes API answered {status_reason(code, payload)}")
        try:
            status = json.loads(payload).get("status")
        except (ValueError, AttributeError):
            status = None
        if not isinstance(status, dict):
            raise ReviewError(f"{kind}: the Kubernetes API answered without a status")
        return status

    async def read_configmap(self) -> ConfigMapState:
        try:
            code, payload = await self._fetch("GET", _CONFIGMAPS, [_BY_NAME], None)
        except TimeoutError as e:
            raise KubernetesError(f"reading the {CONFIGMAP}: no answer within {self.timeout:g}s") from e
        except (aiohttp.ClientError, OSError) as e:
            raise KubernetesError(f"reading the {CONFIGMAP}: {e}") from e
        if code == 403:
            raise KubernetesError(
                f"reading the {CONFIGMAP}: forbidden; bind the Role extension-apiserver-authentication-reader in "
                f"{CONFIGMAP_NAMESPACE} to the adapter's service account"
            )
        if code != 200:
            raise KubernetesError(
                f"reading the {CONFIGMAP}: the Kubernetes API answered {status_reason(code, payload)}"
            )
        listed = json.loads(payload)
        items = listed.get("items") or []
        rv = str((listed.get("metadata") or {}).get("resourceVersion", ""))
        return ConfigMapState(_data(items[0]) if items else None, rv)

    async def watch_configmap(self, resource_version: str, timeout_seconds: int) -> AsyncIterator[ConfigMapState]:
        params = [
            _BY_NAME,
            ("watch", "true"),
            ("resourceVersion", resource_version),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", str(timeout_seconds)),
        ]
        limit = aiohttp.ClientTimeout(total=None, sock_connect=self.timeout, sock_read=timeout_seconds + 30)
        events = watch_stream(
            lambda: self._call("GET", _CONFIGMAPS, params, None, limit), f"watching the {CONFIGMAP}", resource_version
        )
        async for event in events:
            yield _event(event)


def _event(event: Mapping[str, Any]) -> ConfigMapState:
    kind, obj = event.get("type"), event.get("object") or {}
    rv = str((obj.get("metadata") or {}).get("resourceVersion", ""))
    if kind == "BOOKMARK":
        return ConfigMapState(None, rv, changed=False)
    return ConfigMapState(None if kind == "DELETED" else _data(obj), rv)
