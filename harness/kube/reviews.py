"""TokenReview and SubjectAccessReview as kube-apiserver answers them, with tokens and RBAC-like grants set by a test.

What it reproduces, because the adapter's authentication and authorization depend on it:
- ``POST /apis/authentication.k8s.io/v1/tokenreviews`` answers 201 with the review echoed back (``spec.token``
  included, as the real server does) and a ``status``: ``authenticated``, ``user`` for a known token; no
  ``authenticated`` field and an ``error`` for an unknown one;
- ``POST /apis/authorization.k8s.io/v1/subjectaccessreviews`` answers 201 with ``status.allowed`` (and ``reason``);
  a spec without user and groups, or without exactly one of ``resourceAttributes``/``nonResourceAttributes``, is a
  422 ``Invalid`` Status; a body that is not the right kind is a 400;
- grants match as RBAC rules do: ``*`` wildcards, ``resource/subresource`` names, paths with a trailing ``*``;
- failures on request: the next ``failures`` reviews answer 500, and every review waits ``delay`` seconds first.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from harness.kube.wire import status_body

AUTHENTICATION = "authentication.k8s.io/v1"
AUTHORIZATION = "authorization.k8s.io/v1"


@dataclass(frozen=True)
class ReviewUser:
    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Grant:
    """One RBAC-like rule bound to a user or a group: resource attributes, or a non-resource path."""

    user: str | None = None
    group: str | None = None
    verbs: tuple[str, ...] = ("*",)
    api_groups: tuple[str, ...] = ("*",)
    resources: tuple[str, ...] = ("*",)
    namespace: str | None = None
    paths: tuple[str, ...] = ()

    def binds(self, spec: dict[str, Any]) -> bool:
        return (self.user is not None and spec.get("user") == self.user) or (
            self.group is not None and self.group in (spec.get("groups") or [])
        )

    def allows(self, spec: dict[str, Any]) -> bool:
        if not self.binds(spec):
            return False
        if "nonResourceAttributes" in spec:
            attrs = spec["nonResourceAttributes"]
            return _any(self.verbs, attrs.get("verb", "")) and any(
                p == attrs.get("path") or (p.endswith("*") and attrs.get("path", "").startswith(p[:-1]))
                for p in self.paths
            )
        if self.paths:
            return False
        attrs = spec["resourceAttributes"]
        resource = attrs.get("resource", "")
        if attrs.get("subresource"):
            resource += "/" + attrs["subresource"]
        return (
            _any(self.verbs, attrs.get("verb", ""))
            and _any(self.api_groups, attrs.get("group", ""))
            and any(r in ("*", resource) or (r.endswith("/*") and resource.startswith(r[:-1])) for r in self.resources)
            and self.namespace in (None, attrs.get("namespace", ""))
        )


def _any(allowed: tuple[str, ...], value: str) -> bool:
    return "*" in allowed or value in allowed


def _status(code: int, reason: str, message: str) -> web.Response:
    return web.json_response(status_body(code, reason, message), status=code)


class Reviews:
    def __init__(self) -> None:
        self.tokens: dict[str, ReviewUser] = {}
        self.grants: list[Grant] = []
        self.delay = 0.0
        self.failures = 0
        self.token_reviews = 0
        self.access_reviews: list[dict[str, Any]] = []

    def grant(self, **rule: Any) -> None:
        self.grants.append(Grant(**rule))

    async def _body(self, request: web.Request, api_version: str, kind: str) -> dict[str, Any] | web.Response:
        try:
            body = json.loads(await request.read())
        except ValueError:
            return _status(400, "BadRequest", "the body of the request was in an unknown format")
        if not isinstance(body, dict) or body.get("apiVersion") != api_version or body.get("kind") != kind:
            return _status(400, "BadRequest", f"the body must be a {kind} of {api_version}")
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.failures:
            self.failures -= 1
            return _status(500, "InternalError", "Internal error occurred: etcdserver: request timed out")
        return body

    async def token_review(self, request: web.Request) -> web.Response:
        body = await self._body(request, AUTHENTICATION, "TokenReview")
        if isinstance(body, web.Response):
            return body
        token = (body.get("spec") or {}).get("token")
        if not token:
            return _status(
                422, "Invalid", 'TokenReview.authentication.k8s.io "" is invalid: spec.token: Required value'
            )
        self.token_reviews += 1
        user = self.tokens.get(token)
        status: dict[str, Any]
        if user is None:
            status = {"user": {}, "error": "[invalid bearer token, token lookup failed]"}
        else:
            info: dict[str, Any] = {"username": user.username, "uid": user.uid, "groups": list(user.groups)}
            if user.extra:
                info["extra"] = user.extra
            status = {"authenticated": True, "user": info, "audiences": ["https://kubernetes.default.svc"]}
        return web.json_response({**body, "metadata": {"creationTimestamp": None}, "status": status}, status=201)

    async def access_review(self, request: web.Request) -> web.Response:
        body = await self._body(request, AUTHORIZATION, "SubjectAccessReview")
        if isinstance(body, web.Response):
            return body
        spec = body.get("spec") or {}
        if not spec.get("user") and not spec.get("groups"):
            return _status(422, "Invalid", "spec.user: Invalid value: at least one of user or group must be specified")
        if ("resourceAttributes" in spec) == ("nonResourceAttributes" in spec):
            return _status(
                422, "Invalid", "spec.resourceAttributes: exactly one of nonResourceAttributes or resourceAttributes"
            )
        self.access_reviews.append(spec)
        grant = next((g for g in self.grants if g.allows(spec)), None)
        status: dict[str, Any] = {"allowed": grant is not None}
        if grant is not None:
            status["reason"] = f"RBAC: allowed by a grant to {grant.user or grant.group}"
        return web.json_response({**body, "metadata": {"creationTimestamp": None}, "status": status}, status=201)
