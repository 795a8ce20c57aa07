"""Who a request comes from, as Kubernetes' ``user.Info`` describes a caller."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

AUTHENTICATED = "system:authenticated"
MASTERS = "system:masters"


@dataclass(frozen=True)
class User:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    # (key, values) pairs, sorted by key, so a user can key a cache
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()
    method: str = ""

    def authenticated(self) -> User:
        """With ``system:authenticated``, which Kubernetes adds to every authenticated user before authorizing."""
        if AUTHENTICATED in self.groups:
            return self
        return User(self.name, self.uid, (*self.groups, AUTHENTICATED), self.extra, self.method)


def extra_of(mapping: Mapping[str, Iterable[str]]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    return tuple(sorted((str(k), tuple(str(v) for v in values)) for k, values in mapping.items()))
