"""The authentication configuration in force: CA files from flags, re-read when they change, and ConfigMap
``kube-system/extension-apiserver-authentication``, listed then watched so a rotated CA takes effect without a
restart.

Until the ConfigMap has been read (when it is needed), nothing is authenticated: requests get 503 and ``/readyz``
says why. A change that does not parse keeps the configuration in force, and is logged and counted. Every change
that does parse is handed to ``on_change`` (the TLS handshake's trusted CAs follow it).

The ConfigMap and the CA files are sources (``common/freshness.py``): once either has been failing (the ConfigMap
cannot be read, the file checks stopped) for longer than its bound, ``/readyz`` fails and ``..._auth_config_loaded``
is 0, since a CA removed meanwhile would still be trusted.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

from adapter.backends.auth_api import CONFIGMAP, AuthAPI, ConfigMapState
from adapter.errors import ConfigError, ResourceExpired
from adapter.security.auth_config import AuthenticationConfig, AuthSettings, build_config
from adapter.self_metrics import AdapterMetrics
from common.freshness import DEFAULT_TIMING, Timing
from common.list_watch import Restart, list_watch
from common.supervisor import Work, polled
from common.watched_file import WatchedFiles

log = logging.getLogger(__name__)

WATCH_TIMEOUT_SECONDS = 300


class AuthConfigSource:
    def __init__(
        self,
        settings: AuthSettings,
        api: AuthAPI | None,
        metrics: AdapterMetrics,
        on_change: Callable[[AuthenticationConfig], None] = lambda _: None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        jitter: Callable[[], float] = random.random,
        timing: Timing = DEFAULT_TIMING,
    ) -> None:
        self.settings = settings
        self.api = api
        self.metrics = metrics
        self.on_change = on_change
        self.sleep = sleep
        self.jitter = jitter
        self.timing = timing
        self.config: AuthenticationConfig | None = None
        self.error: str | None = None
        self._configmap: Mapping[str, str] | None = None
        self._files = WatchedFiles(settings.client_ca_file, settings.requestheader_client_ca_file)
        self.configmap_source = (
            metrics.sources.add("authentication/configmap", timing.bound()) if settings.needs_configmap else None
        )
        metrics.auth_config_loaded.set_function(self._in_force)
        if not settings.needs_configmap:
            # flags alone: a file that cannot be read stops the start (ConfigError), as a bad flag does
            self._use(build_config(settings, None))

    @property
    def loaded(self) -> bool:
        return self.config is not None

    def _in_force(self) -> float:
        stale = any(s.stale() for s in self.metrics.sources if s.check == "authentication")
        return float(self.loaded and not stale)

    def _use(self, config: AuthenticationConfig) -> None:
        first = self.config is None
        self.config = config
        self.error = None
        if not first:
            self.metrics.auth_config_reloads.labels("success").inc()
        sources = ", ".join(b.source for b in config.bundles) or "no client CA at all: bearer tokens only"
        log.info("authentication configuration %s: %s", "loaded" if first else "reloaded", sources)
        self.on_change(config)

    def _refresh(self) -> None:
        try:
            config = build_config(self.settings, self._configmap)
        except ConfigError as e:
            self.error = str(e)
            self.metrics.auth_config_reloads.labels("error").inc()
            kept = "keeping the configuration in force" if self.config else "nothing is authenticated until fixed"
            log.error("authentication configuration refused, %s: %s", kept, e)
            return
        if config != self.config:
            self._use(config)

    def check_files(self) -> None:
        """Re-read the flags' CA files when they changed (a mounted Secret is swapped, not edited)."""
        if self._files.changed() and (self.loaded or not self.settings.needs_configmap):
            self._refresh()

    def _apply(self, state: ConfigMapState) -> None:
        if not state.changed:
            return
        if state.data is None:
            log.warning(
                "%s does not exist: client certificates from the cluster's CAs are not accepted, only the CAs of "
                "flags and bearer tokens",
                CONFIGMAP,
            )
        self._configmap = state.data
        self._refresh()

    async def watch_configmap(self) -> None:
        """Read, then watch, forever (``common/list_watch.py``): a 410 reads again, errors back off."""
        api, source = self.api, self.configmap_source
        assert api is not None
        assert source is not None

        async def read() -> str:
            state = await api.read_configmap()
            source.succeeded()
            self._apply(state)
            return state.resource_version

        async def watch(version: str) -> AsyncIterator[str]:
            async for state in api.watch_configmap(version, WATCH_TIMEOUT_SECONDS):
                self._apply(state)
                yield state.resource_version

        def restarted(why: Restart, error: BaseException | None) -> None:
            if why != "error":
                return
            if not self.loaded:
                self.error = f"{CONFIGMAP} not read yet: {error}"
            source.failed(str(error) or type(error).__name__)
            log.warning("%s: %s; retrying after a back-off", CONFIGMAP, error)

        await list_watch(
            read, watch, ResourceExpired.caused, restarted, self.timing.max_backoff, self.sleep, jitter=self.jitter
        )

    def background(self, check_interval: float) -> list[Work]:
        """The ConfigMap's watch, when it is needed; a look at the CA files every ``check_interval``, when given."""
        work = []
        if self.configmap_source is not None:
            work.append(Work(self.configmap_source.name, self.watch_configmap, self.configmap_source))
        if self.settings.client_ca_file or self.settings.requestheader_client_ca_file:
            files = polled("authentication/ca-files", check_interval, self.check_files, self.metrics, self.timing)
            work.append(files)
        return work
