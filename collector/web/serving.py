"""What the web configuration file asks of the HTTP server, kept current while it runs.

exporter-toolkit reads the file again for every request and every TLS handshake, and the certificate files with it.
Here every request and every new connection looks whether the file, or a file it names, changed
(``common/watched_file.py``: a few ``stat`` calls) and loads them again only then; new connections get the new TLS
settings whole (``tls_per_connection.py``). Unlike exporter-toolkit, which answers 500 while the file is broken,
a file that no longer loads leaves the last good configuration serving, logged once per change. Whether the server
speaks HTTP or HTTPS is chosen at start, as there: a change between the two is refused until a restart.

Each request then goes through what exporter-toolkit's handler does, in its order: the rate limit (429), the
configured headers, basic authentication (401 with ``WWW-Authenticate: Basic``). ``client_allowed_sans``, which Go
checks during the handshake, is checked here before them (403): Python's ``ssl`` has no hook there.
"""

from __future__ import annotations

import functools
import logging
import ssl
from dataclasses import dataclass
from pathlib import Path

from collector.errors import ConfigError
from collector.web.basic_auth import PasswordCheck, credentials
from collector.web.config import WebConfig, load_web_config
from collector.web.messages import Answer, Request, Response, text
from collector.web.rate_limit import TokenBucket
from collector.web.tls import ServerTLS, server_tls, subject_alt_names
from collector.web.tls_per_connection import PerConnectionContext
from common.watched_file import WatchedFiles

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Loaded:
    config: WebConfig
    tls: ServerTLS | None
    watched: tuple[WatchedFiles, WatchedFiles]  # the file, then the files it names, each looked at before reading

    def changed(self) -> bool:
        return any([w.changed() for w in self.watched])  # a list: every stamp is brought up to date

    def describe(self) -> str:
        c = self.config
        parts = ["plain HTTP"]
        if c.tls:
            parts = [f"HTTPS ({c.tls.min_version}-{c.tls.max_version}, client certificates: "
                     f"{c.tls.client_auth_type})"]  # fmt: skip
        if c.users:
            parts.append(f"basic auth for {len(c.users)} user(s)")
        if c.rate_limit:
            parts.append(f"at most one request per {c.rate_limit.interval:g} s, {c.rate_limit.burst} at once")
        return ", ".join(parts)

    def notes(self) -> tuple[str, ...]:
        c = self.config
        out = list(self.tls.notes) if self.tls else []
        if c.tls_keys:
            out.append(f"tls_server_config sets {', '.join(c.tls_keys)} but no certificate: served over plain HTTP, "
                       "as exporter-toolkit does")  # fmt: skip
        return tuple(out)


def load(path: Path) -> Loaded:
    """The file and what it names, read now; ``ConfigError`` names the file, the key and the problem."""
    own = WatchedFiles(path)
    config = load_web_config(path)
    named = WatchedFiles(*(config.tls.files if config.tls else ()))
    tls = server_tls(config.tls, f"web config file {path}") if config.tls else None
    return Loaded(config, tls, (own, named))


class WebServing:
    def __init__(self, path: Path, passwords: PasswordCheck | None = None) -> None:
        """Loads the file; ``ConfigError`` when it cannot be used."""
        self.path = path
        self._loaded = load(path)
        self._passwords = passwords or PasswordCheck()
        self._bucket = self._new_bucket(None)
        log.info("web config file %s: %s", path, self._loaded.describe())
        if self._loaded.tls:
            log.info("HTTP/1.1 is served, also where http_server_config.http2 is true: the server has no HTTP/2, and "
                     "clients that offer it, as Prometheus does, agree on HTTP/1.1 through ALPN")  # fmt: skip
        for note in self._loaded.notes():
            log.warning("web config file %s: %s", path, note)

    @property
    def ssl_context(self) -> ssl.SSLContext | None:
        """For the listening socket: None for plain HTTP."""
        return PerConnectionContext(self._tls_context) if self._loaded.tls else None

    def current(self) -> Loaded:
        if self._loaded.changed():
            self._reload()
        return self._loaded

    def _tls_context(self) -> ssl.SSLContext:
        tls = self.current().tls
        assert tls is not None, "HTTPS was chosen at start and a reload cannot turn it off"
        return tls.context

    def _reload(self) -> None:
        try:
            loaded = load(self.path)
        except ConfigError as e:
            log.error("%s; the configuration in use stays", e)
            return
        if (loaded.tls is None) != (self._loaded.tls is None):
            log.error("web config file %s: %s TLS; switching between HTTP and HTTPS needs a restart, the "
                      "configuration in use stays", self.path, "removes" if loaded.tls is None else "adds")  # fmt: skip
            return
        before, self._loaded = self._loaded, loaded
        self._bucket = self._new_bucket(self._bucket)
        log.info("web config file %s reloaded: %s", self.path, loaded.describe())
        for note in set(loaded.notes()) - set(before.notes()):
            log.warning("web config file %s: %s", self.path, note)

    def _new_bucket(self, bucket: TokenBucket | None) -> TokenBucket | None:
        limit = self._loaded.config.rate_limit
        if limit is None:
            return None
        return bucket if bucket is not None and bucket.limit == limit else TokenBucket(limit)

    async def check(self, request: Request, page: Answer) -> Response:
        """What every request passes through before its page (``collector/server.py``)."""
        config = self.current().config
        if config.tls and config.tls.client_allowed_sans is not None:
            refusal = _san_refusal(request, config.tls.client_allowed_sans)
            if refusal:
                return _error(403, refusal, ())
        if self._bucket is not None and not self._bucket.allow():
            return _error(429, "Too Many Requests", ())
        if config.users:
            given = credentials(request.header("Authorization"))
            if given is None or not await self._passwords.allows(config.users, *given):
                return _error(401, "Unauthorized", (*config.headers, ("WWW-Authenticate", "Basic")))
        response = await page(request)
        response.add(config.headers)
        return response


def _error(status: int, message: str, headers: tuple[tuple[str, str], ...]) -> Response:
    """As Go's ``http.Error`` answers."""
    response = text(status, message + "\n")
    response.add((*headers, ("X-Content-Type-Options", "nosniff")))
    return response


def _san_refusal(request: Request, allowed: tuple[str, ...]) -> str:
    """Why the client's certificate is refused, or "" when one of its names is allowed."""
    ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
    der = ssl_object.getpeercert(binary_form=True) if ssl_object else None
    if not der:
        return "a client certificate is required: client_allowed_sans is set"
    if set(_names(der)) & set(allowed):
        return ""
    return "the client certificate has none of the subject alternative names in client_allowed_sans"


@functools.lru_cache(maxsize=64)
def _names(der: bytes) -> tuple[str, ...]:
    return tuple(subject_alt_names(der))
