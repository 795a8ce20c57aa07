"""Bearer tokens, checked by the Kubernetes API with a TokenReview and remembered briefly.

The cache is keyed by an HMAC of the token under a key made at start, so the adapter's memory never holds a token
after its review; nothing here logs, raises or counts anything that contains one.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from collections.abc import Mapping
from typing import Any

from adapter.backends.auth_api import TOKEN_REVIEWS, AuthAPI, TokenReview
from adapter.security.identity import User, extra_of
from adapter.single_flight import SingleFlightCache

log = logging.getLogger(__name__)


def bearer_token(authorization: str) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, parsed as Kubernetes parses it."""
    parts = authorization.strip().split(" ", 2)
    if len(parts) < 2 or parts[0].lower() != "bearer" or not parts[1]:
        return None
    return parts[1]


def user_of(status: Mapping[str, Any]) -> User | None:
    if status.get("authenticated") is not True:
        return None
    info = status.get("user") or {}
    name = info.get("username")
    if not isinstance(name, str) or not name:
        return None
    extra = info.get("extra") or {}
    return User(
        name,
        uid=str(info.get("uid") or ""),
        groups=tuple(str(g) for g in info.get("groups") or []),
        extra=extra_of({k: v if isinstance(v, list) else [v] for k, v in extra.items()}),
        method="token",
    )


class TokenReviewer:
    def __init__(self, api: AuthAPI, ttl: float) -> None:
        self.api = api
        self._key = secrets.token_bytes(32)
        self._cache: SingleFlightCache[bytes, User | None] = SingleFlightCache(ttl)

    async def authenticate(self, token: str) -> tuple[User | None, bool]:
        """The user the token belongs to (None: not a valid token), and whether the answer was cached.

        Raises ``ReviewError`` when the Kubernetes API gave no answer.
        """
        key = hmac.new(self._key, token.encode(), hashlib.sha256).digest()

        async def review() -> User | None:
            body: TokenReview = {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "spec": {"token": token},
            }
            status = await self.api.review(TOKEN_REVIEWS, body)
            user = user_of(status)
            if user is None and status.get("error"):
                # the error says what failed (expired, unknown signer); a webhook behind the API server could quote
                # the token, so it is cut out before the line is logged
                log.debug("TokenReview refused a token: %s", str(status["error"]).replace(token, "<token>")[:200])
            return user

        user, outcome = await self._cache.get(key, review)
        return user, outcome == "hit"
