"""metrics.k8s.io answers from ``resourceRules``: pods and nodes → CPU and memory queries → usage per object.

As prometheus-adapter (``pkg/resourceprovider``) does: the pods a request covers come from the Kubernetes API
(labelSelector, fieldSelector), grouped by namespace; each namespace gets one CPU and one memory query over its pods
(the containerQuery grouped by pod and container), nodes one of each (the nodeQuery). A pod is answered only when
both queries returned something for it; a container with only one of the two gets 0 for the other. A node takes the
first sample of each. The timestamp is the earliest of the samples used; negative values become 0.

Unlike prometheus-adapter: a NaN or infinite value leaves its pod or node out (logged and counted; prometheus-adapter
reports 0, which an HPA would read as an idle pod), values keep nano-unit precision instead of being truncated to
milli-units, and when every query of a request fails the request fails with the backend's error instead of answering
an empty list.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from cachetools import TTLCache

from adapter.api.paths import NO_SUCH_PATH
from adapter.api.resource_objects import ContainerUsage, NodeUsage, PodUsage, Usage
from adapter.backends.kube_api import ObjectMeta
from adapter.backends.kube_cache import ObjectLister
from adapter.backends.prometheus import PrometheusAPI, QueryResult, Sample
from adapter.backends.prometheus_backends import Backends
from adapter.config.resource_rules import ResourceRules
from adapter.errors import AdapterError, NotConfigured, NotFound
from adapter.naming import resources
from adapter.provider.queries import node_resource_query, pod_resource_query
from adapter.query.field_selectors import FieldSelector
from adapter.query.quantity import FLOAT64_MAX
from adapter.query.selectors import Selector
from adapter.self_metrics import AdapterMetrics
from adapter.single_flight import SingleFlightCache

log = logging.getLogger(__name__)

PARALLEL_NAMESPACES = 8  # namespaces queried at once for a request across namespaces (two queries each)
_DROP_LOG_EVERY = 60.0
_ZERO = Decimal(0)


@dataclass(slots=True)
class _Values:
    """One resource's values for an object: per container (pods) or the object's own (nodes, under ""), and the
    earliest of their timestamps."""

    by_container: dict[str, Decimal]
    earliest: float


class ResourceMetrics:
    def __init__(
        self,
        rules: Callable[[], ResourceRules | None],
        prometheus: PrometheusAPI | Backends,
        objects: ObjectLister,
        cache: SingleFlightCache[tuple[str, str], QueryResult],
        metrics: AdapterMetrics,
    ) -> None:
        """``cache``: query results by backend and PromQL."""
        self._rules = rules
        self.backends = Backends.of(prometheus)
        self.objects = objects
        self.cache = cache
        self.metrics = metrics
        self._dropped_logged: TTLCache[str, bool] = TTLCache(10_000, _DROP_LOG_EVERY)  # logged once a minute each

    def rules(self) -> ResourceRules:
        """The rules, or NotFound: without ``resourceRules`` metrics.k8s.io is not served at all."""
        rules = self._rules()
        if rules is None:
            raise NotFound(NO_SUCH_PATH)
        return rules

    async def nodes(self, selector: Selector, fields: FieldSelector, name: str | None = None) -> list[NodeUsage]:
        rules = self.rules()
        nodes = await self._select(resources.NODES, None, selector, fields, name, "node")
        if not nodes:
            return []
        names = {n.name for n in nodes}
        cpu, memory = await asyncio.gather(
            self._query(rules.backend, node_resource_query(rules.cpu, sorted(names))),
            self._query(rules.backend, node_resource_query(rules.memory, sorted(names))),
        )
        cpu_values = _by_object(rules.cpu.label(resources.NODES), cpu, names, None)
        memory_values = _by_object(rules.memory.label(resources.NODES), memory, names, None)
        found = []
        for node in nodes:
            c, m = cpu_values.get(node.name), memory_values.get(node.name)
            if c is None or m is None:
                log.debug("no CPU or memory for node %s; left out", node.name)
                continue
            usage = self._usage(c.by_container[""], m.by_container[""], node)
            if usage is not None:
                found.append(NodeUsage(node, min(c.earliest, m.earliest), usage))
        if name is not None and not found:
            raise NotFound(f'nodemetrics.metrics.k8s.io "{name}" not found')
        return found

    async def pods(
        self, namespace: str | None, selector: Selector, fields: FieldSelector, name: str | None = None
    ) -> list[PodUsage]:
        rules = self.rules()
        pods = await self._select(resources.PODS, namespace, selector, fields, name, "pods")
        by_namespace = {ns: list(group) for ns, group in itertools.groupby(pods, lambda p: p.namespace or "")}
        limit = asyncio.Semaphore(PARALLEL_NAMESPACES)

        async def both(ns: str, names: list[str]) -> tuple[QueryResult, QueryResult]:
            async with limit:
                return await asyncio.gather(
                    self._query(rules.backend, pod_resource_query(rules.cpu, ns, names)),
                    self._query(rules.backend, pod_resource_query(rules.memory, ns, names)),
                )

        answers = await asyncio.gather(
            *(both(ns, [p.name for p in group]) for ns, group in by_namespace.items()), return_exceptions=True
        )
        found: list[PodUsage] = []
        failures: list[BaseException] = []
        for (ns, group), answer in zip(by_namespace.items(), answers, strict=True):
            if isinstance(answer, BaseException):
                if not isinstance(answer, AdapterError):
                    raise answer
                log.warning("metrics.k8s.io: pods of namespace %s left out: %s", ns, answer)
                failures.append(answer)
                continue
            found += self._pods(rules, group, *answer)
        if failures and len(failures) == len(by_namespace):
            raise failures[0]
        if name is not None and not found:
            raise NotFound(f'podmetrics.metrics.k8s.io "{namespace}/{name}" not found')
        return found

    async def _select(
        self,
        info: resources.ResourceInfo,
        namespace: str | None,
        selector: Selector,
        fields: FieldSelector,
        name: str | None,
        what: str,
    ) -> list[ObjectMeta]:
        """The objects a request covers; NotFound (named as the API server's listers name it) for a single object
        that does not exist."""
        listed = await self.objects.objects(info, namespace, selector)
        if listed is None:
            raise NotConfigured(
                "metrics.k8s.io lists pods and nodes from the Kubernetes API, and this adapter runs without one "
                "(give it --lister-kubeconfig, or run it in a cluster)"
            )
        if name is not None:
            listed = [o for o in listed if o.name == name]
            if not listed:
                raise NotFound(f'{what} "{name}" not found')
        return [o for o in listed if fields.matches(_fields(o))]

    async def _query(self, backend: str, promql: str) -> QueryResult:
        result, _ = await self.cache.get((backend, promql), functools.partial(self.backends[backend].query, promql))
        return result

    def _pods(
        self, rules: ResourceRules, pods: Sequence[ObjectMeta], cpu: QueryResult, memory: QueryResult
    ) -> Iterable[PodUsage]:
        names = {p.name for p in pods}
        cpu_values = _by_object(rules.cpu.label(resources.PODS), cpu, names, rules.cpu.container_label)
        memory_values = _by_object(rules.memory.label(resources.PODS), memory, names, rules.memory.container_label)
        for pod in pods:
            c, m = cpu_values.get(pod.name), memory_values.get(pod.name)
            if c is None or m is None:
                log.debug("no CPU or memory for pod %s/%s; left out", pod.namespace, pod.name)
                continue
            containers = []
            for container in sorted(c.by_container.keys() | m.by_container.keys()):
                usage = self._usage(c.by_container.get(container, _ZERO), m.by_container.get(container, _ZERO), pod)
                if usage is None:
                    break
                containers.append(ContainerUsage(container, usage))
            else:
                yield PodUsage(pod, min(c.earliest, m.earliest), tuple(containers))

    def _usage(self, cpu: Decimal, memory: Decimal, obj: ObjectMeta) -> Usage | None:
        """The quantities (a negative value is 0), or None when either is NaN or infinite: the object is left out."""
        for value in (cpu, memory):
            if not value.is_finite():
                self._drop(obj, value)
                return None
        return Usage(max(cpu, _ZERO), max(memory, _ZERO))

    def _drop(self, obj: ObjectMeta, value: Decimal) -> None:
        reason = "nan" if value.is_nan() else "inf"
        self.metrics.dropped_samples.labels(reason).inc()
        where = f"{obj.namespace}/{obj.name}" if obj.namespace else obj.name
        if where not in self._dropped_logged:
            self._dropped_logged[where] = True
            log.warning("metrics.k8s.io: %s left out: its usage is %s, not a finite number", where, value)


def _by_object(label: str, result: QueryResult, names: set[str], container_label: str | None) -> Mapping[str, _Values]:
    """Each object's values in ``result``: per container (the ``container_label`` value), or the first sample's
    (nodes: ``container_label`` None)."""
    out: dict[str, _Values] = {}
    for sample in result.samples.having(label, names):
        name = sample.labels[label]
        container = sample.labels.get(container_label, "") if container_label is not None else ""
        values = out.get(name)
        if values is None:
            values = out[name] = _Values({}, sample.timestamp)
        elif container_label is None or container in values.by_container:
            continue  # only a node's first sample counts, and a container's first
        values.by_container[container] = _value(sample)
        values.earliest = min(values.earliest, sample.timestamp)
    return out


def _value(sample: Sample) -> Decimal:
    """The sample's exact value; NaN and ±Inf stay so, to be refused when the object is answered, and so does a
    magnitude beyond float64's, as infinite (no sum is made of it: it would overflow the decimal context)."""
    try:
        value = Decimal(sample.value)
    except InvalidOperation:
        return Decimal("NaN")
    if value.is_finite() and value.copy_abs() > FLOAT64_MAX:
        return Decimal("-Infinity" if value < 0 else "Infinity")
    return value


def _fields(obj: ObjectMeta) -> dict[str, str]:
    fields = {"metadata.name": obj.name}
    if obj.namespace is not None:
        fields["metadata.namespace"] = obj.namespace
    return fields
