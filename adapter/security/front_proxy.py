"""Request-header authentication: a front proxy (the aggregation layer) that proves itself with a client certificate
names the user in headers, exactly as Kubernetes' generic API servers accept it.

The certificate must chain to the request-header CA and, when ``requestheader-allowed-names`` is not empty, carry
one of those names as its common name. Then the first non-empty username header names the user; every value of every
group header is a group (values are not split on commas); each header starting with an extra prefix (any case) adds
its values under the rest of its name, lower-cased and percent-decoded. Without such a certificate the headers mean
nothing: anyone can send them.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping

from multidict import CIMultiDictProxy

from adapter.errors import CertificateRejected
from adapter.security.auth_config import RequestHeaderConfig
from adapter.security.client_certs import BundleVerifier
from adapter.security.identity import User, extra_of


def _text(value: str) -> str:
    """A header value as valid Unicode: aiohttp keeps bytes that are not UTF-8 as lone surrogates, which no JSON
    answer or review can carry; they become U+FFFD, as Kubernetes' JSON encoding turns invalid UTF-8 into it."""
    try:
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeEncodeError:  # a surrogate that is no escaped byte
        return value.encode("utf-8", "replace").decode("utf-8")


def _username(headers: CIMultiDictProxy[str], names: tuple[str, ...]) -> str:
    for name in names:
        value = headers.get(name, "")
        if value:
            return _text(value)
    return ""


def _groups(headers: CIMultiDictProxy[str], names: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(_text(v) for name in names for v in headers.getall(name, []) if v)


def _extra_key(encoded: str) -> str:
    # header names cannot hold every character a key may, so keys arrive percent-encoded; a key that does not
    # decode is kept as sent, as Kubernetes keeps it
    try:
        return urllib.parse.unquote(encoded, errors="strict")
    except UnicodeDecodeError:
        return encoded


def _extra(headers: CIMultiDictProxy[str], prefixes: tuple[str, ...]) -> Mapping[str, list[str]]:
    extra: dict[str, list[str]] = {}
    lowered = [p.lower() for p in prefixes if p]
    for name, value in headers.items():
        for prefix in lowered:
            if name.lower().startswith(prefix):
                extra.setdefault(_text(_extra_key(name[len(prefix) :].lower())), []).append(_text(value))
    return extra


class FrontProxy:
    def __init__(self, config: RequestHeaderConfig) -> None:
        self.config = config
        self.verifier = BundleVerifier(config.ca)

    def authenticate(self, der: bytes | None, headers: CIMultiDictProxy[str]) -> User | None:
        """The user the front proxy names; None when the request does not come through it with a user.

        Raises ``CertificateRejected`` for a certificate that is not the front proxy's.
        """
        if der is None:
            return None
        name = self.verifier.verify(der)
        allowed = self.config.allowed_names
        if allowed and name.common_name not in allowed:
            raise CertificateRejected(f"the certificate's name {name.common_name!r} is not an allowed front proxy")
        user = _username(headers, self.config.username_headers)
        if not user:
            return None
        return User(
            user,
            groups=_groups(headers, self.config.group_headers),
            extra=extra_of(_extra(headers, self.config.extra_prefixes)),
            method="front_proxy",
        )
