"""A KEDA trigger's ``metadata``, as the external scaler receives it in ``ScaledObjectRef.scalerMetadata``, parsed
strictly into ``ScalerQuery``: every problem is a ``BadRequest`` (gRPC's INVALID_ARGUMENT) that names the key.

No key names a namespace: the question is always asked in the ScaledObject's own namespace, which KEDA sets from
the object itself. KEDA sends every key of the trigger's metadata, its own among them (``scalerAddress``,
``enableTLS``, ``unsafeSsl``); those are accepted and not read, any other unknown key is an error, so that a typo
(``targetvalue``) or an attempt at another namespace (``namespace: other``) is refused rather than ignored.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from enum import Enum

from adapter.api.paths import CUSTOM_GROUP, EXTERNAL_GROUP
from adapter.errors import BadRequest, NotFinite, quoted
from adapter.query.quantity import in_range
from adapter.query.selectors import Selector, parse_selector


class MetricType(Enum):
    PODS = "pods"  # the sum over the namespace's pods that match labelSelector of the custom metrics API's values
    EXTERNAL = "external"  # the external metrics API's value, its items summed as the HPA sums them


KEYS = ("metricName", "metricType", "labelSelector", "targetValue", "activationValue")
KEDA_KEYS = ("scalerAddress", "enableTLS", "unsafeSsl")  # the external trigger's own keys, which KEDA passes on
# KEDA hands the target to the HPA in thousandths (int64(target * 1000) milli-units): a smaller one would be 0, a
# larger one than LARGEST overflow
SMALLEST_TARGET = Decimal("0.001")
LARGEST = Decimal(2**63 - 1) / 1000
# Every value is bounded before it is parsed, and every error quotes at most a cut of it (``quoted``): KEDA passes a
# trigger's metadata on unchanged, so whoever may create a ScaledObject writes these strings, up to the 64 KiB a
# call may carry. A number: float64's longest shortest form is 24 characters (-2.2250738585072014e-308), a target
# in KEDA's int64 thousandths 23; 64 leaves room for zeros written out (0.000000000001) and refuses the rest before
# any pattern sees it (30,000 digits and an "x" held the event loop 18 s in the pattern this one replaces).
NUMBER_CHARACTERS = 64
# a metric's name: the longest name a Kubernetes object may have; the names rules give are far shorter
METRIC_NAME_CHARACTERS = 253
# a selector: 4 KiB is a dozen requirements on the longest keys (317 characters) and values (63), with sets; its
# parser is linear, this bounds the PromQL an external metric's selector becomes
SELECTOR_CHARACTERS = 4096
# one way to read each number (the integer part, then the fraction, then the exponent): no two ways to split the
# digits, so a failed match is linear, not the quadratic search of the ambiguous ``[0-9]+\.?[0-9]*``
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
# the versions a trigger's question is asked in, as the HPA asks it: the provider's answer memo is keyed by the
# request, version included, so the scaler and the HTTP API share answers
CUSTOM_VERSION = "v1beta2"
EXTERNAL_VERSION = "v1beta1"
# a namespace's name (an RFC 1123 label), as the scaler and ``explain`` both take it
NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


@dataclass(frozen=True)
class ScalerQuery:
    """What one trigger asks: a metric, whose values over what, the target per replica and the activation level."""

    metric: str
    metric_type: MetricType
    label_selector: Selector
    target: Decimal
    activation: Decimal

    def path(self, namespace: str) -> str:
        """The same question over HTTP, as ``gpuscale-adapter explain`` takes it."""
        metric = urllib.parse.quote(self.metric, safe="")
        if self.metric_type is MetricType.PODS:
            path = f"/apis/{CUSTOM_GROUP}/{CUSTOM_VERSION}/namespaces/{namespace}/pods/*/{metric}"
        else:
            path = f"/apis/{EXTERNAL_GROUP}/{EXTERNAL_VERSION}/namespaces/{namespace}/{metric}"
        selector = str(self.label_selector)
        return f"{path}?labelSelector={urllib.parse.quote(selector, safe='')}" if selector else path


def _number(metadata: Mapping[str, str], key: str, default: str | None) -> Decimal:
    text = metadata.get(key, default)
    if text is None:
        raise BadRequest(f"scalerMetadata: {key} is required")
    _bounded(key, text, NUMBER_CHARACTERS, "write a large or a small number with an exponent, as 1e30")
    if not _NUMBER.fullmatch(text):
        raise BadRequest(f"scalerMetadata: {key} {text!r} is not a number")
    try:
        return in_range(Decimal(text))
    except (NotFinite, ArithmeticError):  # ArithmeticError: an exponent beyond what a Decimal compares
        raise BadRequest(f"scalerMetadata: {key} {text!r} is beyond float64's range") from None


def _bounded(key: str, text: str, most: int, hint: str = "") -> None:
    """``BadRequest`` for a value longer than ``most`` characters, quoting only a cut of it."""
    if len(text) > most:
        raise BadRequest(
            f"scalerMetadata: {key} {quoted(text)} is longer than the {most} characters it may have"
            + (f": {hint}" if hint else "")
        )


def parse_metadata(metadata: Mapping[str, str]) -> ScalerQuery:
    """The trigger's metadata as a query; ``BadRequest`` naming the first key that is missing, unknown or wrong."""
    unknown = sorted(set(metadata) - set(KEYS) - set(KEDA_KEYS))
    if unknown:
        raise BadRequest(
            f"scalerMetadata: unknown key {quoted(unknown[0])} (known keys: {', '.join(sorted(KEYS))}; KEDA's own, "
            f"not read: {', '.join(KEDA_KEYS)})"
        )
    metric = metadata.get("metricName", "")
    if not metric:
        raise BadRequest("scalerMetadata: metricName is required: a metric the adapter serves")
    _bounded("metricName", metric, METRIC_NAME_CHARACTERS)
    kind = metadata.get("metricType", MetricType.PODS.value)
    try:
        metric_type = MetricType(kind)
    except ValueError:
        raise BadRequest(f"scalerMetadata: metricType {quoted(kind)} is not pods or external") from None
    selector_text = metadata.get("labelSelector", "")
    _bounded("labelSelector", selector_text, SELECTOR_CHARACTERS)
    selector = parse_selector(selector_text, "scalerMetadata labelSelector")
    target = _number(metadata, "targetValue", None)
    if not SMALLEST_TARGET <= target <= LARGEST:
        raise BadRequest(
            f"scalerMetadata: targetValue {metadata['targetValue']!r} must be from {SMALLEST_TARGET} to {LARGEST}: "
            "KEDA hands the HPA its target in thousandths, as an int64"
        )
    activation = _number(metadata, "activationValue", "0")
    return ScalerQuery(metric, metric_type, selector, target, activation)


# ``gpuscale-adapter explain keda/NAMESPACE?metricName=...``: a trigger's question, its metadata as the query
SCALER_REQUEST = "keda/"


def scaler_request_path(path: str, query: Mapping[str, str]) -> str | None:
    """The HTTP question a scaler request written as ``keda/NAMESPACE`` with the trigger's metadata as ``query``
    asks, for ``explain``; None when ``path`` is not one. ``BadRequest`` as the scaler would answer it."""
    rest = path.lstrip("/")
    if not rest.startswith(SCALER_REQUEST):
        return None
    namespace = rest.removeprefix(SCALER_REQUEST).rstrip("/")
    if not NAMESPACE.fullmatch(namespace):
        raise BadRequest(f"{path!r}: a scaler request is keda/NAMESPACE?metricName=...&targetValue=..., the "
                         "ScaledObject's namespace followed by its trigger's metadata")  # fmt: skip
    return parse_metadata(query).path(namespace)
