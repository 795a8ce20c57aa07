"""Property tests: any input to the parsers and builders either works or fails with the project's own error.

Run with more examples: ``HYPOTHESIS_PROFILE=thorough pytest tests/reliability``.
"""

import contextlib
import os
from decimal import Decimal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapter.api.paths import parse_metrics_path
from adapter.config.rules import parse_rules
from adapter.errors import AdapterError, RequestError
from adapter.query.quantity import format_quantity
from adapter.query.selectors import parse_selector
from collector.counters import file as counters
from collector.errors import ConfigError as CollectorConfigError
from collector.exposition import Family, render_openmetrics, render_text
from collector.pods.device_ids import parse_device_id
from harness.kube.wire import parse_quantity

settings.register_profile("thorough", max_examples=5000, deadline=None)
settings.register_profile("default", max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# Characters that matter to the grammars under test, plus anything at all.
GRAMMAR = st.sampled_from([*list("=!,() \t\n\\\"'|.*{}[]$^+?/%:;#-_aZ09"), "in", "notin", "%2A", "%2F", "%0A", "::"])
TEXT = st.one_of(st.text(), st.lists(GRAMMAR, max_size=40).map("".join))


@given(TEXT)
def test_label_selectors_parse_or_fail_as_bad_requests(text: str) -> None:
    try:
        selector = parse_selector(text)
    except RequestError:
        return
    # whatever parses must match consistently, whatever the labels
    assert isinstance(selector.matches({"a": "b"}), bool)


@given(TEXT, TEXT, TEXT)
def test_metric_paths_parse_or_fail_as_not_found_or_bad_request(path: str, label: str, metric_label: str) -> None:
    for prefix in ("/apis/custom.metrics.k8s.io/v1beta2/", "/apis/external.metrics.k8s.io/v1beta1/", "/"):
        with contextlib.suppress(RequestError):
            parse_metrics_path(prefix + path, {"labelSelector": label, "metricLabelSelector": metric_label})


@given(st.decimals(allow_nan=False, allow_infinity=False, min_value=Decimal("-1e30"), max_value=Decimal("1e30")))
def test_quantities_round_trip(value: Decimal) -> None:
    text = format_quantity(value)
    back = parse_quantity(text)
    # exact down to the nano-unit; digits below it are float64 noise and rounded to the nearest nano-unit
    assert abs(back - value) <= Decimal("0.5e-9")
    assert format_quantity(back) == text  # canonical: formatting a parsed quantity gives the same text


@given(TEXT)
def test_counters_files_parse_or_fail_with_a_config_error(text: str) -> None:
    try:
        parsed = counters.parse(text, "fuzz.csv")
    except CollectorConfigError as e:
        message = str(e)
    else:
        assert parsed.counters
        return
    assert message.startswith("fuzz.csv")  # the error names the file (and the line, where there is one)


@given(TEXT)
def test_rules_files_parse_or_fail_with_a_config_error(text: str) -> None:
    with contextlib.suppress(AdapterError):
        parse_rules(text, "fuzz.yaml")


@given(st.dictionaries(st.sampled_from(["rules", "externalRules", "resourceRules", "seriesQuery", "name", "x"]),
                       st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                                    lambda inner: st.lists(inner, max_size=3)
                                    | st.dictionaries(st.text(max_size=12), inner, max_size=3),
                                    max_leaves=10),
                       max_size=4))  # fmt: skip
def test_rules_files_with_any_structure(data: dict[str, object]) -> None:
    import yaml

    with contextlib.suppress(AdapterError):
        parse_rules(yaml.safe_dump(data), "fuzz.yaml")


@given(TEXT)
def test_device_ids_parse_or_are_unknown(text: str) -> None:
    ref = parse_device_id(text)
    if ref is not None:
        assert sum(x is not None for x in (ref.gpu_uuid, ref.mig_uuid, ref.minor, ref.index)) == 1


@given(st.lists(st.tuples(st.text(), st.floats(allow_nan=False)), min_size=1, max_size=5, unique_by=lambda s: s[0]))
def test_any_label_value_survives_both_exposition_formats(samples: list[tuple[str, float]]) -> None:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om
    from prometheus_client.parser import text_string_to_metric_families as parse_text

    family = Family("DCGM_FI_DEV_GPU_UTIL", "gauge", "help\n\\", tuple(((("pod", v),), x) for v, x in samples))
    for parse, render in ((parse_text, render_text), (parse_om, render_openmetrics)):
        (parsed,) = list(parse(render([family]).decode()))
        assert [(s.labels["pod"], s.value) for s in parsed.samples] == [(v, x) for v, x in samples]
