"""A trigger's value, asked of the provider that answers the HTTP metrics APIs: the same request objects, so the
query cache, the single flight and the answer memo are shared, and a value equals what the HTTP API answers to the
same question (``ScalerQuery.path``)."""

from __future__ import annotations

from decimal import Context, Decimal

from adapter.api.paths import CustomRequest, ExternalRequest
from adapter.errors import NotFound
from adapter.keda.metadata import CUSTOM_VERSION, EXTERNAL_VERSION, MetricType, ScalerQuery
from adapter.naming.resources import PODS
from adapter.provider.provider import Provider
from adapter.query.quantity import quantity_value
from adapter.query.selectors import Selector

# room for every digit of a sum of float64s written to the nano-unit (10^308 down to 10^-9): the sum is exact
_EXACT = Context(prec=400)


async def value(provider: Provider, namespace: str, query: ScalerQuery) -> Decimal:
    """The sum of the items the HTTP API answers: over the matching pods (``pods``), or over the external metric's
    series, as the HPA sums an External metric. ``NotFound`` when there are none: the HPA gets no metric then and
    does not scale, and a zero in its place would let KEDA take a workload whose series are missing (a scrape that
    fails) down to zero replicas."""
    try:
        if query.metric_type is MetricType.PODS:
            pods = PODS.group_resource
            request = CustomRequest(
                CUSTOM_VERSION, pods, namespace, None, query.metric, query.label_selector, Selector()
            )
            quantities = [item.value for item in await provider.custom(request)]
        else:
            external = ExternalRequest(EXTERNAL_VERSION, namespace, query.metric, query.label_selector)
            quantities = [item.value for item in await provider.external(external)]
    except NotFound as e:
        raise NotFound(f"{e} (the same question over HTTP: {query.path(namespace)})") from e
    if not quantities:
        what = "no pod" if query.metric_type is MetricType.PODS else "no series"
        matching = f" matching {query.label_selector}" if query.label_selector else ""
        raise NotFound(
            f"{what}{matching} in namespace {namespace} has a value of {query.metric} (the same question over "
            f"HTTP: {query.path(namespace)})"
        )
    total = Decimal(0)
    for quantity in quantities:
        total = _EXACT.add(total, quantity_value(quantity))
    return total
