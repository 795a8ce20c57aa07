"""Basic authentication against ``basic_auth_users``' bcrypt hashes, as exporter-toolkit checks it.

bcrypt is slow on purpose (65 ms a check at cost 10 here, ``bcrypt.checkpw`` timed), so, as exporter-toolkit
does, a verdict is remembered for the user, the hash and the password together (a changed hash is a new key) and only
one bcrypt runs at a time; here it runs off the event loop, which keeps serving meanwhile. The key is a SHA-256 of the
three, so that no password is kept in memory. An unknown user is checked against a fixed hash all the same, so that
the time taken does not say which users exist.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
from collections.abc import Callable, Mapping

import bcrypt
from cachetools import LRUCache

# exporter-toolkit's bcrypt hash of "fakepassword"
FAKE_HASH = "$2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi"
CACHE_SIZE = 100  # exporter-toolkit's
# Go's bcrypt reads only the first 72 bytes of a password; the bcrypt library refuses longer ones instead
BCRYPT_MAX_BYTES = 72


def credentials(authorization: str | None) -> tuple[bytes, bytes] | None:
    """(user, password) from an ``Authorization: Basic`` header, as Go's ``Request.BasicAuth`` reads it."""
    prefix = "basic "
    if authorization is None or authorization[: len(prefix)].lower() != prefix:
        return None
    try:
        decoded = base64.b64decode(authorization[len(prefix) :].encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        return None
    user, sep, password = decoded.partition(b":")
    return (user, password) if sep else None


def _bcrypt_matches(password: bytes, hashed: bytes) -> bool:
    try:
        return bcrypt.checkpw(password[:BCRYPT_MAX_BYTES], hashed)
    except ValueError:
        return False


class PasswordCheck:
    def __init__(self, matches: Callable[[bytes, bytes], bool] = _bcrypt_matches, size: int = CACHE_SIZE) -> None:
        self._matches = matches
        self._verdicts: LRUCache[bytes, bool] = LRUCache(size)
        self._one_at_a_time = asyncio.Lock()

    async def allows(self, users: Mapping[str, str], user: bytes, password: bytes) -> bool:
        hashed = users.get(user.decode("utf-8", "surrogateescape"))
        known = hashed is not None
        hashed_bytes = (hashed or FAKE_HASH).encode()
        key = hashlib.sha256(b"\0".join((b"%d" % len(user), user, hashed_bytes, password))).digest()
        verdict = self._verdicts.get(key)
        if verdict is None:
            async with self._one_at_a_time:
                verdict = await asyncio.to_thread(self._matches, password, hashed_bytes)
            self._verdicts[key] = verdict
        return known and verdict
