"""Delegated authorization: a SubjectAccessReview per distinct (user, request attributes), cached briefly.

As in Kubernetes' delegating authorizer, members of ``system:masters`` are allowed without a review, an answer that
neither allows nor denies is a denial, and a review that cannot be made refuses the request (``ReviewError``, 503):
never allowed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import cast

from adapter.backends.auth_api import ACCESS_REVIEWS, AccessReviewSpec, AuthAPI, ResourceAttributes, SubjectAccessReview
from adapter.security.identity import MASTERS, User
from adapter.security.request_info import RequestAttributes
from adapter.single_flight import SingleFlightCache

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""
    source: str = "review"


def review_body(user: User, attrs: RequestAttributes) -> SubjectAccessReview:
    """The SubjectAccessReview, empty fields left out as Kubernetes' own client leaves them out."""
    spec: AccessReviewSpec = {"user": user.name}
    if user.uid:
        spec["uid"] = user.uid
    if user.groups:
        spec["groups"] = list(user.groups)
    if user.extra:
        spec["extra"] = {k: list(v) for k, v in user.extra}
    if attrs.resource_request:
        fields: ResourceAttributes = {
            "namespace": attrs.namespace,
            "verb": attrs.verb,
            "group": attrs.group,
            "version": attrs.version,
            "resource": attrs.resource,
            "subresource": attrs.subresource,
            "name": attrs.name,
        }
        spec["resourceAttributes"] = cast(ResourceAttributes, {k: v for k, v in fields.items() if v})
    else:
        spec["nonResourceAttributes"] = {"path": attrs.path, "verb": attrs.verb}
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}


def forbidden_message(user: User, attrs: RequestAttributes, reason: str) -> str:
    """Kubernetes' wording, so a 403 here reads like one from kube-apiserver."""
    if not attrs.resource_request:
        message = f'forbidden: User "{user.name}" cannot {attrs.verb} path "{attrs.path}"'
    else:
        resource = attrs.resource + (f"/{attrs.subresource}" if attrs.subresource else "")
        where = f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
        subject = f'{resource}.{attrs.group} "{attrs.name}"' if attrs.name else f"{resource}.{attrs.group}"
        message = (
            f'{subject} is forbidden: User "{user.name}" cannot {attrs.verb} resource "{resource}" '
            f'in API group "{attrs.group}" {where}'
        )
    return f"{message}: {reason}" if reason else message


class Authorizer:
    def __init__(self, api: AuthAPI, allowed_ttl: float, denied_ttl: float) -> None:
        self.api = api
        self._cache: SingleFlightCache[tuple[User, RequestAttributes], Decision] = SingleFlightCache(
            lambda d: allowed_ttl if d.allowed else denied_ttl
        )

    async def authorize(self, user: User, attrs: RequestAttributes) -> Decision:
        if MASTERS in user.groups:
            return Decision(True, "", "masters")
        # how the user was authenticated does not change what it may do
        key = (User(user.name, user.uid, user.groups, user.extra), attrs)

        async def review() -> Decision:
            status = await self.api.review(ACCESS_REVIEWS, review_body(user, attrs))
            reason = str(status.get("reason") or "")
            if status.get("evaluationError"):
                log.info("SubjectAccessReview for %s: evaluation error: %s", user.name, status["evaluationError"])
            allowed = status.get("allowed") is True and status.get("denied") is not True
            return Decision(allowed, reason)

        decision, outcome = await self._cache.get(key, review)
        return Decision(decision.allowed, decision.reason, "cache") if outcome == "hit" else decision
