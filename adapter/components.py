"""The assembled adapter: every component, built from settings, with the background work it needs (each task run by
``common/supervisor.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import aiohttp
from aiohttp import web

from adapter.backends import prometheus_auth
from adapter.backends.answer_budget import AnswerBudget
from adapter.backends.api_resources import ApiDiscovery
from adapter.backends.backend_specs import DEFAULT
from adapter.backends.kube_api import KubeMetadataAPI, KubernetesMetadataAPI
from adapter.backends.kube_cache import ObjectLister
from adapter.backends.prometheus import (
    QUERY_CACHE_BYTES,
    PrometheusAPI,
    PrometheusClient,
    QueryResult,
    make_session,
)
from adapter.backends.prometheus_backends import Backends, backend_config
from adapter.backends.rest_mapper import RestMapper
from adapter.config.rules_file import RulesFile
from adapter.provider.discovery import Discovery
from adapter.provider.provider import Provider
from adapter.provider.resource_metrics import ResourceMetrics
from adapter.self_metrics import AdapterMetrics
from adapter.settings import Settings
from adapter.single_flight import SingleFlightCache
from common.freshness import DEFAULT_TIMING, Timing
from common.heap import malloc_trim
from common.supervisor import Work, polled, start

log = logging.getLogger(__name__)

FIRST_RELIST_WAIT_SECONDS = 5.0


@dataclass
class Components:
    settings: Settings
    metrics: AdapterMetrics
    rules_file: RulesFile
    prometheus: PrometheusAPI  # the default backend's (--prometheus-url)
    discovery: Discovery
    objects: ObjectLister
    cache: SingleFlightCache[tuple[str, str], QueryResult]  # by backend and PromQL
    provider: Provider
    timing: Timing
    resource_metrics: ResourceMetrics
    rest_mapper: RestMapper
    backends: Backends
    answer_budget: AnswerBudget  # the room for answers being read, shared by every backend's client

    def background(self) -> list[Work]:
        work = [Work("discovery", self.discovery.run, self.discovery.source)]
        if self.rest_mapper.source is not None:
            work.append(Work(self.rest_mapper.source.name, self.rest_mapper.run, self.rest_mapper.source))
        work += [Work(r.source.name, r.run, r.source) for r in self.objects.reflectors.values()]
        if self.rules_file.path is not None:
            interval = self.settings.config_check_interval
            work.append(polled("discovery/rules-file", interval, self._reload_rules, self.metrics, self.timing))
        return work

    def _reload_rules(self) -> None:
        if self.rules_file.reload_if_changed():
            self.discovery.wake()

    async def start(self) -> list[asyncio.Task[None]]:
        """Start background work; wait briefly for API discovery and the first relist so the first answers are
        complete."""
        try:
            async with asyncio.timeout(FIRST_RELIST_WAIT_SECONDS):
                await self.rest_mapper.refresh()
                await self.discovery.relist()
        except TimeoutError:
            pass
        except Exception as e:  # the relist task tries again at once; a start that fails here would never retry
            log.error("the first relist failed (%s: %s); trying again in the background", type(e).__name__, e)
        return start(self.background(), self.metrics, self.timing)


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
    timing: Timing = DEFAULT_TIMING,
    clock: Callable[[], float] = time.monotonic,
) -> AsyncIterator[Components]:
    """Everything the adapter runs on; closes what it opened. ``kube_api``/``prometheus`` replace the real ones
    (``prometheus``: the default backend, the only one then); ``timing``: how long background sources may fail
    before ``/readyz`` does, and their longest back-off; ``clock``: what the ages of held answers are read from
    (``--backend-failure-hold``)."""
    metrics = metrics or AdapterMetrics()
    session: aiohttp.ClientSession | None = None
    owned_kube = kube_api is None
    # one for every backend: answers from several servers fill the same memory
    budget = AnswerBudget(settings.prometheus.max_bytes_in_flight)
    if prometheus is None:
        config, credentials = await prometheus_auth.resolve(
            settings.prometheus, settings.prometheus_auth_incluster, settings.prometheus_auth_config
        )
        session = make_session(config)  # the backends share their TLS settings, so one session serves them all
        configs = [config, *(backend_config(config, spec) for spec in settings.backends)]
        clients = {c.backend: PrometheusClient(session, c, metrics, credentials, budget) for c in configs}
        backends = Backends(clients)
        prometheus = backends[DEFAULT]
    else:
        backends = Backends.of(prometheus)
    try:
        rules_file = RulesFile(settings.config, metrics, tuple(backends))
        kube = kube_api if kube_api is not None else await connect_kubernetes(settings)
        try:
            objects = ObjectLister(kube, metrics, timing)
            # API discovery through the lister's client; a kube_api given in its place leaves the built-in mapping
            api_discovery = ApiDiscovery(kube.client) if isinstance(kube, KubernetesMetadataAPI) else None
            rest_mapper = RestMapper(api_discovery, metrics, settings.discovery_interval, timing)
            discovery = Discovery(
                rules_file,
                backends,
                metrics,
                settings.relist_interval,
                settings.max_age,
                lambda: rest_mapper.mapping,
                timing=timing,
                trim=malloc_trim(),
            )
            cache: SingleFlightCache[tuple[str, str], QueryResult] = SingleFlightCache(
                settings.cache_ttl,
                maxsize=QUERY_CACHE_BYTES,
                weigh=lambda result: result.weight,
                on_outcome=lambda outcome: metrics.cache_requests.labels(outcome).inc(),
            )
            provider = Provider(
                lambda: discovery.catalog,
                backends,
                objects,
                cache,
                metrics,
                rest_mapper.resolve,
                settings.backend_failure_hold,
                clock,
            )
            resource_metrics = ResourceMetrics(
                lambda: discovery.catalog.rules.resource_rules, backends, objects, cache, metrics
            )
            yield Components(
                settings,
                metrics,
                rules_file,
                prometheus,
                discovery,
                objects,
                cache,
                provider,
                timing,
                resource_metrics,
                rest_mapper,
                backends,
                budget,
            )
        finally:
            if kube is not None and owned_kube:
                await kube.close()
    finally:
        if session is not None:
            await session.close()


COMPONENTS = web.AppKey("components", Components)
