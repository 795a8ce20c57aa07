from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapter.backends.prometheus import Sample
from adapter.errors import NotFinite, OutOfRange
from adapter.provider.resource_metrics import _value as usage_value
from adapter.query.quantity import (
    binary_quantity,
    format_quantity,
    parse_sample_value,
    quantity_value,
    sample_quantity,
)
from harness.kube.wire import parse_quantity  # independent of the adapter: round trips check one against the other


@pytest.mark.parametrize(
    ("sample", "expected"),
    [
        # the examples the contract names
        ("1.5", "1500m"),
        ("10", "10"),
        ("1000", "1k"),
        ("1500", "1500"),
        ("0.0001", "100u"),
        # a utilization item's value (95.5 %) and other everyday GPU readings
        ("95.5", "95500m"),
        ("0", "0"),
        ("-0", "0"),
        ("100", "100"),
        ("0.928", "928m"),
        ("0.5", "500m"),
        ("81920", "81920"),
        ("1", "1"),
        ("1e3", "1k"),
        ("1000000", "1M"),
        ("2500000000", "2500M"),
        ("1e+21", "1000E"),
        ("12345678901234567000", "12345678901234567k"),
        ("9223372036854775807000", "9223372036854775807k"),
        ("-1.5", "-1500m"),
        ("-2000", "-2k"),
        ("0.000000001", "1n"),
        ("0.0000000015", "2n"),
        ("-0.0000000015", "-2n"),
        ("0.0000000014", "1n"),
        ("1e-12", "0"),
        # float noise below a nano-unit must not reach the HPA, whose MilliValue() rounds up
        ("0.30000000000000004", "300m"),
        ("0.1", "100m"),
        ("123.456", "123456m"),
        ("1.000", "1"),
    ],
)
def test_format_quantity(sample: str, expected: str) -> None:
    assert format_quantity(parse_sample_value(sample)) == expected


@pytest.mark.parametrize("sample", ["NaN", "+Inf", "-Inf", "nan", "inf"])
def test_not_finite_values_have_no_quantity(sample: str) -> None:
    with pytest.raises(NotFinite):
        parse_sample_value(sample)


# No Prometheus stores these (its samples are float64s); a broken or hostile server may send them. Each is refused
# before any digit is computed: converting 1e20000000 exactly took 28 s of CPU, 1e999999999 never ended.
BEYOND_FLOAT64 = ["1e400", "-1e400", "1.8e308", "1" + "0" * 400, "1e20000000", "-1e20000000", "1e999999999"]


@pytest.mark.parametrize("sample", BEYOND_FLOAT64)
def test_values_beyond_float64_are_infinite_and_have_no_quantity(sample: str) -> None:
    with pytest.raises(OutOfRange, match="beyond float64's range"):
        sample_quantity(sample)
    with pytest.raises(NotFinite):  # so every caller that drops NaN and infinities drops these too
        parse_sample_value(sample)
    for quantity in (format_quantity, binary_quantity):
        with pytest.raises(OutOfRange):
            quantity(Decimal(sample))
    # metrics.k8s.io sums a container's samples: an infinity, not a number too large for the decimal context
    assert usage_value(Sample({}, 1.0, sample)) == Decimal("-Infinity" if sample.startswith("-") else "Infinity")


def test_the_largest_float64_and_the_smallest_still_have_exact_quantities() -> None:
    assert sample_quantity("1.7976931348623157e308") == "17976931348623157" + "0" * 274 + "E"  # x 10^18
    assert sample_quantity("-1.7976931348623157e308").startswith("-17976931348623157")
    assert sample_quantity("5e-324") == "0"
    assert sample_quantity("1e-999999999") == "0"  # below a nano-unit: rounded to 0, cheaply


def test_garbage_is_not_a_sample() -> None:
    with pytest.raises(ValueError, match="not a number"):
        parse_sample_value("12abc")


@given(st.decimals(allow_nan=False, allow_infinity=False, places=9, min_value=-(10**30), max_value=10**30))
def test_round_trip_is_exact_to_the_nano(value: Decimal) -> None:
    text = format_quantity(value)
    assert parse_quantity(text) == value
    mantissa = text.rstrip("numkMGTPE")
    assert "." not in mantissa
    assert "e" not in mantissa


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_any_prometheus_float_text_formats(value: float) -> None:
    # Prometheus sends repr-like shortest text; the quantity never loses a digit of it above the nano.
    text = format_quantity(parse_sample_value(repr(value)))
    assert abs(parse_quantity(text) - Decimal(repr(value))) <= Decimal("0.5e-9")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        # Kubernetes' canonical BinarySI: whole bytes on the largest power of 1024 that divides them
        ("104857600", "100Mi"),
        ("1074266112", "1049088Ki"),
        ("8589934592", "8Gi"),
        ("1536", "1536"),
        ("123456789", "123456789"),
        ("1024", "1Ki"),
        # below 1024 or with a fraction of a byte: DecimalSI, as Kubernetes falls back
        ("512", "512"),
        ("0", "0"),
        ("0.5", "500m"),
        ("1234.5", "1234500m"),
        (str(2**70), "1024Ei"),
    ],
)
def test_binary_quantity(value: str, expected: str) -> None:
    assert binary_quantity(Decimal(value)) == expected
    assert parse_quantity(expected) == Decimal(value)


def test_binary_quantity_refuses_what_is_not_finite() -> None:
    with pytest.raises(NotFinite):
        binary_quantity(Decimal("NaN"))


@given(st.integers(min_value=0, max_value=2**80))
def test_binary_quantity_round_trips_whole_bytes(value: int) -> None:
    assert parse_quantity(binary_quantity(Decimal(value))) == value


@given(st.decimals(allow_nan=False, allow_infinity=False, places=9, min_value=-(10**30), max_value=10**30))
def test_quantity_value_reads_back_exactly_what_format_quantity_wrote(value: Decimal) -> None:
    assert quantity_value(format_quantity(value)) == value == parse_quantity(format_quantity(value))


@pytest.mark.parametrize("text", ["", "m", "-", "1.5", "1e3", "1Ki", "1x", "--1", " 1", "1 ", "١٢"])
def test_quantity_value_refuses_what_format_quantity_never_writes(text: str) -> None:
    with pytest.raises(ValueError, match="not a quantity"):
        quantity_value(text)
