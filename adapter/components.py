"""The assembled adapter: every component, built from settings, with the background work it needs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from adapter.api.discovery import Discovery
from adapter.api.provider import Provider
from adapter.backends import prometheus_auth
from adapter.backends.kube_api import KubeMetadataAPI, KubernetesMetadataAPI
from adapter.backends.kube_cache import ObjectLister
from adapter.backends.prometheus import PrometheusAPI, PrometheusClient, QueryResult, make_session
from adapter.config.rules_file import RulesFile
from adapter.config.settings import Settings
from adapter.self_metrics import AdapterMetrics
from adapter.single_flight import SingleFlightCache

log = logging.getLogger(__name__)

FIRST_RELIST_WAIT_SECONDS = 5.0


@dataclass
class Components:
    settings: Settings
    metrics: AdapterMetrics
    rules_file: RulesFile
    prometheus: PrometheusAPI
    discovery: Discovery
    objects: ObjectLister
    cache: SingleFlightCache[str, QueryResult]
    provider: Provider

    def background(self, relist_first: bool = True) -> list[Coroutine[Any, Any, None]]:
        reflectors = (r.run() for r in self.objects.reflectors.values())
        return [self.discovery.run(relist_first), self._watch_rules(), *reflectors]

    async def _watch_rules(self) -> None:
        while True:
            await asyncio.sleep(self.settings.config_check_interval)
            if self.rules_file.reload_if_changed():
                self.discovery.wake()

    async def start(self) -> list[asyncio.Task[None]]:
        """Start background work; wait briefly for the first relist so the first answers are complete."""
        relisted = False
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.discovery.relist(), FIRST_RELIST_WAIT_SECONDS)
            relisted = True
        return [asyncio.create_task(c) for c in self.background(relist_first=not relisted)]


async def connect_kubernetes(settings: Settings) -> KubeMetadataAPI | None:
    if settings.lister_kubeconfig is not None:
        return await KubernetesMetadataAPI.connect(settings.lister_kubeconfig)
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return await KubernetesMetadataAPI.connect(None)
    log.warning("no --lister-kubeconfig and not in a cluster: wildcard requests cannot filter by labelSelector")
    return None


@contextlib.asynccontextmanager
async def components(
    settings: Settings,
    metrics: AdapterMetrics | None = None,
    kube_api: KubeMetadataAPI | None = None,
    prometheus: PrometheusAPI | None = None,
) -> AsyncIterator[Components]:
    """Everything the adapter runs on; closes what it opened. ``kube_api``/``prometheus`` replace the real ones."""
    metrics = metrics or AdapterMetrics()
    rules_file = RulesFile(settings.config, metrics)
    session: aiohttp.ClientSession | None = None
    owned_kube = kube_api is None
    if prometheus is None:
        config = prometheus_auth.resolve(settings)
        session = make_session(config)
        prometheus = PrometheusClient(session, config, metrics)
    try:
        kube = kube_api if kube_api is not None else await connect_kubernetes(settings)
        try:
            objects = ObjectLister(kube, metrics)
            discovery = Discovery(rules_file, prometheus, metrics, settings.relist_interval, settings.max_age)
            cache: SingleFlightCache[str, QueryResult] = SingleFlightCache(
                settings.cache_ttl, on_outcome=lambda outcome: metrics.cache_requests.labels(outcome).inc()
            )
            provider = Provider(lambda: discovery.catalog, prometheus, objects, cache, metrics)
            yield Components(settings, metrics, rules_file, prometheus, discovery, objects, cache, provider)
        finally:
            if kube is not None and owned_kube:
                await kube.close()
    finally:
        if session is not None:
            await session.close()


COMPONENTS = web.AppKey("components", Components)
