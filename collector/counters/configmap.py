"""``-m <namespace>:<name>``: the counters from a ConfigMap's ``metrics`` key, read through the Kubernetes API.

As dcgm-exporter does, the ConfigMap is read with a GET (its Helm chart grants ``get`` on that one ConfigMap and
nothing more, so a watch would be refused) and the process does not start when the first read fails: a forbidden,
missing or malformed ConfigMap is a configuration error, said once, before any series is served. Unlike
dcgm-exporter, it is read again every ``--configmap-refresh`` and on SIGHUP, and a change is applied between two
collections; a later failure keeps the previous counters and is reported once per distinct error.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from collector.counters import file as counters
from collector.counters.file import Counters
from collector.errors import ConfigError, KubeApiError, KubeUnreachable
from collector.kube.client import KubeClient
from collector.kube.config import KubeAccess
from common.freshness import Freshness

log = logging.getLogger(__name__)

KEY = "metrics"  # the data key dcgm-exporter reads
_TIMEOUT = 10.0  # seconds for one GET
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


@dataclass(frozen=True)
class ConfigMapRef:
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}:{self.name}"


def parse_configmap_ref(text: str) -> ConfigMapRef | None:
    """``<namespace>:<name>``; ``none`` (dcgm-exporter's default) or empty: no ConfigMap."""
    text = text.strip()
    if text in ("", "none"):
        return None
    parts = text.split(":")
    if len(parts) != 2:
        raise ValueError(f"expected <namespace>:<name> (or none), got {text!r}")
    namespace, name = parts
    if not _DNS_LABEL.fullmatch(namespace):
        raise ValueError(f"{namespace!r} is not a namespace name (lowercase letters, digits and '-', at most 63)")
    if not _DNS_SUBDOMAIN.fullmatch(name):
        raise ValueError(f"{name!r} is not a ConfigMap name (lowercase letters, digits, '-' and '.')")
    return ConfigMapRef(namespace, name)


class ConfigMapCounters:
    """A ``CountersSource`` (``counters/source.py``) over one ConfigMap."""

    def __init__(
        self,
        ref: ConfigMapRef,
        access: KubeAccess,
        refresh: float,
        clock: Callable[[], float] = time.monotonic,
        source: Freshness | None = None,
    ) -> None:
        """``refresh``: seconds between reads after the first (0: only when ``request_refresh`` is called);
        ``source`` hears of each read that worked and each failure (``/health`` fails past its bound)."""
        self.source = source
        self.ref = ref
        self.description = f"ConfigMap {ref} key {KEY!r}"
        self._access = access
        self._refresh = refresh
        self._clock = clock
        self._text = ""
        self._error: str | None = None
        self._changed = False
        self._requested = threading.Event()  # set from a signal handler or another thread

    # -- the collection's side (its thread) --------------------------------------------------------------------

    def load(self) -> Counters:
        if self._error is not None:
            raise ConfigError(self._error)
        return counters.parse(self._text, self.description)

    def changed(self) -> bool:
        changed, self._changed = self._changed, False
        return changed

    def request_refresh(self) -> None:
        self._requested.set()

    # -- reading -------------------------------------------------------------------------------------------------

    def read_first(self) -> None:
        """The first read, before the collection starts (no event loop runs yet); ``ConfigError`` says why not."""

        async def once() -> str:
            client = KubeClient(self._access.config())
            try:
                return await self.read(client)
            finally:
                await client.close()

        self._text = asyncio.run(once())
        log.info("counters from %s", self.description)

    async def read(self, client: KubeClient) -> str:
        """The ``metrics`` text of the ConfigMap now; ``ConfigError`` names the ConfigMap and what went wrong."""
        what = f"ConfigMap {self.ref.namespace}/{self.ref.name} (-m)"
        try:
            raw = await client.get(f"/api/v1/namespaces/{self.ref.namespace}/configmaps/{self.ref.name}", {}, _TIMEOUT)
            body = json.loads(raw)
        except KubeApiError as e:
            raise ConfigError(f"{what}: {_refusal(e, self.ref)}") from None
        except KubeUnreachable as e:
            raise ConfigError(f"{what}: the Kubernetes API did not answer ({e})") from None
        except ConfigError as e:  # credentials or certificates that cannot be used
            raise ConfigError(f"{what}: {e}") from None
        except ValueError:
            raise ConfigError(f"{what}: the Kubernetes API answered something that is not JSON") from None
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, dict) or not isinstance(data.get(KEY), str):
            keys = ", ".join(sorted(data)) if isinstance(data, dict) and data else "none"
            raise ConfigError(
                f"{what} has no {KEY!r} key (its keys: {keys}); put the counters CSV under data.{KEY}, as "
                "dcgm-exporter reads it"
            )
        return str(data[KEY])

    async def run(self) -> None:
        """Read again every ``refresh`` seconds and on request, until cancelled."""
        client: KubeClient | None = None
        last = self._clock()
        try:
            while True:
                await asyncio.sleep(0.2)
                due = self._refresh > 0 and self._clock() - last >= self._refresh
                if not (due or self._requested.is_set()):
                    continue
                self._requested.clear()
                last = self._clock()
                try:
                    if client is None:
                        client = KubeClient(self._access.config())
                    self._apply(await self.read(client), None)
                except ConfigError as e:
                    self._apply(None, str(e))
                    if self.source is not None:
                        self.source.failed(str(e))
                else:
                    if self.source is not None:
                        self.source.succeeded()
        finally:
            if client is not None:
                await client.close()

    def _apply(self, text: str | None, error: str | None) -> None:
        """Mark a change when the text or the error is new; the same failure again is not news."""
        if error is not None:
            if error != self._error:
                self._error, self._changed = error, True
        elif text != self._text or self._error is not None:
            self._text, self._error, self._changed = text or "", None, True


def _refusal(error: KubeApiError, ref: ConfigMapRef) -> str:
    """What an API error answer means for reading this ConfigMap, with the API server's own message."""
    status, said = error.status, f": {error.message}" if error.message else ""
    if status == 403:
        return (
            f"reading it is forbidden (403{said}); the collector's service account needs 'get' on configmaps "
            f"(resourceNames: [{ref.name}]) in namespace {ref.namespace}, through a Role and a RoleBinding"
        )
    if status == 404:
        return f"it does not exist (404{said})"
    if status == 401:
        return f"the API server did not accept the collector's credentials (401{said})"
    return f"the API server answered {status} {error.reason}{said}"
