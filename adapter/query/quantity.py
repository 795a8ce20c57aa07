"""Kubernetes quantities in canonical form, built exactly from the decimal text Prometheus sends.

Prometheus writes sample values as the shortest decimal that round-trips the float64, so converting that text
with ``Decimal`` keeps every digit Prometheus has; no float arithmetic happens here."""

from __future__ import annotations

import functools
from decimal import ROUND_HALF_UP, Context, Decimal, InvalidOperation

from adapter.errors import NotFinite, OutOfRange

# Prometheus stores float64s: a decimal of larger magnitude in an answer is no sample. It is refused before anything
# is computed from it, since an exact conversion builds an integer of that many digits (1e20000000: 28 s of CPU,
# during which the event loop, and so SIGTERM, waits).
FLOAT64_MAX = Decimal("1.7976931348623157e308")
_SUFFIXES = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
_NANO = Decimal("1e-9")
_EXPONENTS = {suffix: exponent for exponent, suffix in _SUFFIXES.items()}


def parse_sample_value(text: str) -> Decimal:
    """Prometheus's sample value text as an exact decimal; ``NotFinite`` for NaN and ±Inf."""
    try:
        value = Decimal(text)
    except InvalidOperation as e:
        raise ValueError(f"not a number: {text!r}") from e
    if not value.is_finite():
        raise NotFinite(text)
    in_range(value)
    return value


def in_range(value: Decimal) -> Decimal:
    """``value`` when a float64 can hold its magnitude; ``OutOfRange`` otherwise (a comparison of exponents first)."""
    if value.copy_abs() > FLOAT64_MAX:
        raise OutOfRange(f"{value:.3e} is beyond float64's range")
    return value


def format_quantity(value: Decimal) -> str:
    """The canonical DecimalSI form: the largest multiple-of-three exponent keeping the mantissa integral.

    Digits below a nano-unit are rounded to the nearest nano-unit. Kubernetes would round them up, but they are
    float64 noise (``0.1 + 0.2`` arrives as ``0.30000000000000004``), and the HPA's ``MilliValue()`` rounds up
    again, so rounding up here would turn that noise into a whole milli-unit. Exponents above 18 stay on the
    ``E`` suffix with a longer mantissa, so large values stay exact.
    """
    if not value.is_finite():
        raise NotFinite(str(value))
    in_range(value)
    if value.is_zero():
        return "0"
    if value.as_tuple().exponent < -9:  # type: ignore[operator]
        # a context wide enough for any value Prometheus can send: the default 28 digits cannot hold 1e19 to 1e-9
        value = value.quantize(_NANO, rounding=ROUND_HALF_UP, context=Context(prec=1000))
        if value.is_zero():
            return "0"
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    mantissa = int("".join(map(str, digits)))
    while mantissa % 10 == 0:
        mantissa //= 10
        exponent += 1
    shift = exponent % 3
    mantissa *= 10**shift
    exponent -= shift
    if exponent > 18:
        mantissa *= 10 ** (exponent - 18)
        exponent = 18
    return f"{'-' if sign else ''}{mantissa}{_SUFFIXES[exponent]}"


def quantity_value(quantity: str) -> Decimal:
    """The exact value of a quantity as ``format_quantity`` writes it (``95500m`` → 95.5); ValueError for any other
    text. What KEDA's scaler reads: the numbers the metrics APIs answer, added up without a float in between."""
    suffix = quantity[-1:] if quantity[-1:].isalpha() else ""
    mantissa = quantity.removesuffix(suffix)
    if suffix not in _EXPONENTS or not mantissa.removeprefix("-").isdigit() or not mantissa.isascii():
        raise ValueError(f"not a quantity the adapter writes: {quantity!r}")
    return Decimal(mantissa).scaleb(_EXPONENTS[suffix], context=Context(prec=1000))


@functools.lru_cache(maxsize=4096)
def sample_quantity(text: str) -> str:
    """A sample value's quantity. Remembered: values repeat across the objects of an answer and across answers (GPU
    percentages, memory sizes), and the exact conversion costs microseconds that a 10,000-pod answer multiplies."""
    return format_quantity(parse_sample_value(text))


_BINARY_SUFFIXES = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def binary_quantity(value: Decimal) -> str:
    """The canonical BinarySI form Kubernetes writes memory in: a whole number of bytes on the largest power of 1024
    that divides it (``100Mi``, ``1536``); below 1024 or with a fraction of a byte, the DecimalSI form, as
    Kubernetes falls back to it."""
    if not value.is_finite():
        raise NotFinite(str(value))
    in_range(value)
    if -1024 < value < 1024 or value != value.to_integral_value():
        return format_quantity(value)
    mantissa, power = int(value), 0
    while mantissa % 1024 == 0 and power < len(_BINARY_SUFFIXES) - 1:
        mantissa //= 1024
        power += 1
    return f"{mantissa}{_BINARY_SUFFIXES[power]}"
