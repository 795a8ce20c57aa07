"""The Kubernetes API as delegated authentication and authorization use it, behind the small ``AuthAPI`` protocol:
ConfigMap ``kube-system/extension-apiserver-authentication`` (LIST and WATCH by name), TokenReview and
SubjectAccessReview (POST).

A TokenReview's answer echoes the token back (``spec.token``), and an API server's error message may quote the
request, so neither an answer's body nor its message is ever put into an exception or a log line: errors carry the
HTTP status and the Status ``reason`` only.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, Required, TypedDict

import aiohttp

from adapter.backends.kube_client import KubeClient, status_reason
from adapter.errors import KubernetesError, ReviewError

# where kube-apiserver publishes the client CAs for extension API servers (docs/adapter.md#security)
CONFIGMAP_NAMESPACE, CONFIGMAP_NAME = "kube-system", "extension-apiserver-authentication"
CONFIGMAP = f"ConfigMap {CONFIGMAP_NAMESPACE}/{CONFIGMAP_NAME}"
TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
_CONFIGMAPS = f"/api/v1/namespaces/{CONFIGMAP_NAMESPACE}/configmaps"
_BY_NAME = ("fieldSelector", f"metadata.name={CONFIGMAP_NAME}")


class TokenReviewSpec(TypedDict):
    token: str


class TokenReview(TypedDict):
    apiVersion: Literal["authentication.k8s.io/v1"]
    kind: Literal["TokenReview"]
    spec: TokenReviewSpec


class ResourceAttributes(TypedDict, total=False):
    namespace: str
    verb: str
    group: str
    version: str
    resource: str
    subresource: str
    name: str


class NonResourceAttributes(TypedDict):
    path: str
    verb: str


class AccessReviewSpec(TypedDict, total=False):
    user: Required[str]
    uid: str
    groups: list[str]
    extra: dict[str, list[str]]
    resourceAttributes: ResourceAttributes
    nonResourceAttributes: NonResourceAttributes


class SubjectAccessReview(TypedDict):
    apiVersion: Literal["authorization.k8s.io/v1"]
    kind: Literal["SubjectAccessReview"]
    spec: AccessReviewSpec


Review = TokenReview | SubjectAccessReview


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

    async def review(self, path: str, body: Review) -> Mapping[str, Any]:
        """POST a review; its ``status``. Raises ``ReviewError`` (never holding the body) when none came back."""
        ...

    async def close(self) -> None: ...


def _data(obj: Mapping[str, Any]) -> dict[str, str]:
    data = obj.get("data") or {}
    if not isinstance(data, dict):
        raise KubernetesError(f"{CONFIGMAP}: data is not a map")
    return {str(k): str(v) for k, v in data.items()}


class KubernetesAuthAPI:
    """``AuthAPI`` over the adapter's Kubernetes client."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client

    @classmethod
    async def connect(cls, kubeconfig: Path | None, review_seconds: float = 10.0) -> KubernetesAuthAPI:
        return cls(await KubeClient.connect(kubeconfig, review_seconds))

    async def close(self) -> None:
        await self.client.close()

    async def review(self, path: str, body: Review) -> Mapping[str, Any]:
        kind = body["kind"]
        try:
            code, payload = await self.client.send("POST", path, [], body)
        except TimeoutError as e:
            raise ReviewError(f"{kind}: no answer from the Kubernetes API within {self.client.timeout:g}s") from e
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
            code, payload = await self.client.send("GET", _CONFIGMAPS, [_BY_NAME])
        except TimeoutError as e:
            raise KubernetesError(f"reading the {CONFIGMAP}: no answer within {self.client.timeout:g}s") from e
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
        try:
            listed = json.loads(payload)
            items = listed.get("items") or []
            rv = str((listed.get("metadata") or {}).get("resourceVersion", ""))
            return ConfigMapState(_data(items[0]) if items else None, rv)
        except (ValueError, AttributeError, TypeError) as e:
            raise KubernetesError(f"reading the {CONFIGMAP}: not a ConfigMap list") from e

    async def watch_configmap(self, resource_version: str, timeout_seconds: int) -> AsyncIterator[ConfigMapState]:
        what = f"watching the {CONFIGMAP}"
        async for event in self.client.watch(_CONFIGMAPS, [_BY_NAME], what, resource_version, timeout_seconds):
            yield _event(event)


def _event(event: Mapping[str, Any]) -> ConfigMapState:
    kind, obj = event["type"], event["object"]
    rv = str((obj.get("metadata") or {}).get("resourceVersion", ""))
    if kind == "BOOKMARK":
        return ConfigMapState(None, rv, changed=False)
    return ConfigMapState(None if kind == "DELETED" else _data(obj), rv)
