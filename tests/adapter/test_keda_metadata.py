"""A KEDA trigger's scalerMetadata, read strictly: every key, its default and each way it can be wrong."""

from __future__ import annotations

from decimal import Decimal

import pytest

from adapter.errors import BadRequest
from adapter.keda.metadata import MetricType, ScalerQuery, parse_metadata
from adapter.keda.scaler import whole
from adapter.query.selectors import parse_selector

BASE = {"metricName": "gpu_utilization", "targetValue": "60"}


def test_the_two_required_keys_alone_ask_for_the_pods_sum_with_activation_0() -> None:
    assert parse_metadata(BASE) == ScalerQuery(
        "gpu_utilization", MetricType.PODS, parse_selector(""), Decimal(60), Decimal(0)
    )


def test_every_key() -> None:
    query = parse_metadata(
        {
            **BASE,
            "metricType": "external",
            "labelSelector": "app=trainer,tier in (a,b)",
            "targetValue": "2.5",
            "activationValue": "-0.5",
        }
    )
    assert query.metric_type is MetricType.EXTERNAL
    assert str(query.label_selector) == "app=trainer,tier in (a,b)"
    assert (query.target, query.activation) == (Decimal("2.5"), Decimal("-0.5"))


def test_kedas_own_keys_of_the_trigger_are_accepted_and_not_read() -> None:
    keda = {"scalerAddress": "gpuscale-adapter.gpu-system.svc:9443", "enableTLS": "true", "unsafeSsl": "false"}
    assert parse_metadata({**BASE, **keda}) == parse_metadata(BASE)


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ({"targetValue": "60"}, "scalerMetadata: metricName is required"),
        ({**BASE, "metricName": ""}, "scalerMetadata: metricName is required"),
        ({"metricName": "gpu_utilization"}, "scalerMetadata: targetValue is required"),
        ({**BASE, "metricType": "Pods"}, "scalerMetadata: metricType 'Pods' is not pods or external"),
        ({**BASE, "metricType": "Value"}, "scalerMetadata: metricType 'Value' is not pods or external"),
        ({**BASE, "labelSelector": "app in (a"}, "unable to parse scalerMetadata labelSelector 'app in (a'"),
        ({**BASE, "labelSelector": "a=b=c"}, "unable to parse scalerMetadata labelSelector 'a=b=c'"),
        ({**BASE, "targetValue": "sixty"}, "scalerMetadata: targetValue 'sixty' is not a number"),
        ({**BASE, "targetValue": "60m"}, "scalerMetadata: targetValue '60m' is not a number"),
        ({**BASE, "targetValue": "NaN"}, "scalerMetadata: targetValue 'NaN' is not a number"),
        ({**BASE, "targetValue": "Infinity"}, "scalerMetadata: targetValue 'Infinity' is not a number"),
        ({**BASE, "targetValue": " 60"}, "scalerMetadata: targetValue ' 60' is not a number"),
        ({**BASE, "targetValue": "1e400"}, "scalerMetadata: targetValue '1e400' is beyond float64's range"),
        ({**BASE, "targetValue": "0"}, "targetValue '0' must be from 0.001 to"),
        ({**BASE, "targetValue": "-5"}, "targetValue '-5' must be from 0.001 to"),
        ({**BASE, "targetValue": "0.0009"}, "targetValue '0.0009' must be from 0.001 to"),
        ({**BASE, "activationValue": ""}, "scalerMetadata: activationValue '' is not a number"),
        ({**BASE, "activationValue": "1,5"}, "scalerMetadata: activationValue '1,5' is not a number"),
        ({**BASE, "activationValue": "-1e999"}, "scalerMetadata: activationValue '-1e999' is beyond float64's range"),
        # no key reads another namespace, and a misspelt key is not silently left out
        ({**BASE, "namespace": "serving"}, "scalerMetadata: unknown key 'namespace' (known keys: activationValue"),
        ({**BASE, "targetvalue": "5"}, "scalerMetadata: unknown key 'targetvalue'"),
        ({**BASE, "metricNameFromEnv": "X"}, "scalerMetadata: unknown key 'metricNameFromEnv'"),
    ],
)
def test_a_missing_or_bad_key_is_refused_naming_it(metadata: dict[str, str], message: str) -> None:
    with pytest.raises(BadRequest) as e:
        parse_metadata(metadata)
    assert message in str(e.value)


def test_the_same_question_over_http() -> None:
    pods = parse_metadata({**BASE, "labelSelector": "app=trainer"})
    assert pods.path("ml") == (
        "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/*/gpu_utilization?labelSelector=app%3Dtrainer"
    )
    external = parse_metadata({**BASE, "metricType": "external", "metricName": "a/b"})
    assert external.path("ml") == "/apis/external.metrics.k8s.io/v1beta1/namespaces/ml/a%2Fb"


@pytest.mark.parametrize(
    ("number", "integer"),
    [
        ("0", 0),
        ("0.4", 1),  # a demand above zero never reads as none on a KEDA that reads the integer
        ("2.5", 3),
        ("60", 60),
        ("-0.4", 0),
        ("-2.5", -2),
        ("1e30", 2**63 - 1),
        ("-1e30", -(2**63)),
    ],
)
def test_the_deprecated_integer_fields_are_the_ceiling_within_int64(number: str, integer: int) -> None:
    assert whole(Decimal(number)) == integer


@pytest.mark.parametrize("key", ["targetValue", "activationValue"])
@pytest.mark.parametrize(
    "text",
    [
        "1" * 65,  # a number all the same: the length is refused before any pattern reads the value
        "1" * 30_000 + "x",  # the red team's: 18 s of the event loop in the pattern this bound now guards
        "0." + "0" * 70 + "1",
    ],
    ids=["number", "digits-and-x", "zeros"],
)
def test_a_number_longer_than_64_characters_is_refused_for_its_length(key: str, text: str) -> None:
    with pytest.raises(BadRequest) as e:
        parse_metadata({**BASE, key: text})
    message = str(e.value)
    assert message == (
        f"scalerMetadata: {key} {text[:32]!r}... ({len(text)} characters) is longer than the 64 characters it may "
        "have: write a large or a small number with an exponent, as 1e30"
    )


@pytest.mark.parametrize("text", ["1" * 63 + "x", "1" * 32 + "." + "1" * 30 + "x", "." + "1" * 62 + "e"])
def test_a_number_at_the_bound_that_is_not_one_is_refused_as_not_a_number(text: str) -> None:
    with pytest.raises(BadRequest, match=r"targetValue '.*' is not a number"):
        parse_metadata({**BASE, "targetValue": text})


@pytest.mark.parametrize("text", ["1" * 64, "0." + "0" * 60 + "12", "-" + "9" * 15 + "." + "9" * 47, "+.5E-3"])
def test_a_number_at_the_bound_is_read(text: str) -> None:
    assert parse_metadata({**BASE, "activationValue": text}).activation == Decimal(text)


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ({**BASE, "metricName": "m" * 254}, "scalerMetadata: metricName 'mmmm"),
        ({**BASE, "labelSelector": "a=b," * 1024 + "c"}, "scalerMetadata: labelSelector 'a=b,a=b,"),
        ({**BASE, "metricType": "p" * 60_000}, "scalerMetadata: metricType 'pppp"),
        ({**BASE, "k" * 60_000: "1"}, "scalerMetadata: unknown key 'kkkk"),
        # within the selector's bound, its parser's errors quote cuts too
        ({**BASE, "labelSelector": "a=b," * 1000 + "(c"}, "unable to parse scalerMetadata labelSelector 'a=b,"),
        ({**BASE, "labelSelector": "a" * 4000}, "invalid label key 'aaaa"),
        ({**BASE, "labelSelector": "a=" + "b" * 4000}, "invalid label value 'bbbb"),
    ],
    ids=["metricName", "labelSelector", "metricType", "key", "selector-syntax", "selector-key", "selector-value"],
)
def test_every_error_quotes_at_most_a_cut_of_a_long_value(metadata: dict[str, str], message: str) -> None:
    with pytest.raises(BadRequest) as e:
        parse_metadata(metadata)
    assert message in str(e.value)
    assert len(str(e.value)) < 400, str(e.value)
