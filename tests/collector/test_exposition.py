import math

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from collector.exposition import Family, format_value, render_openmetrics, render_text

TRICKY = 'a "quoted" \\ back\nslash'
FAMILIES = [
    Family(
        "DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", ((((("gpu", "0"), ("modelName", TRICKY)), 95.0),))
    ),
    Family(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy\nwith a newline \\ and backslash.",
        (((("gpu", "0"),), 123456789.0), ((("gpu", "1"),), 5.0)),
    ),
    Family("gpuscale_collector_errors_total", "counter", "Errors.", (((("kind", "GpuIsLost"),), 2.0),)),
    Family("gpuscale_collector_up", "gauge", "Up.", (((), 1.0),)),
]


def test_text_format_keeps_dcgm_counter_names_and_parses() -> None:
    text = render_text(FAMILIES).decode()
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n" in text
    assert 'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0"} 123456789\n' in text
    parsed = {f.name: f for f in parse_text(text)}
    # prometheus_client's reader renames counter samples to *_total on its side; what Prometheus itself stores
    # under the bare name is checked by the scrape test against a real server.
    energy = parsed["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
    assert energy.type == "counter"
    assert [(s.labels, s.value) for s in energy.samples] == [({"gpu": "0"}, 123456789.0), ({"gpu": "1"}, 5.0)]
    assert energy.documentation == "Total energy\nwith a newline \\ and backslash."
    util = parsed["DCGM_FI_DEV_GPU_UTIL"]
    assert util.samples[0].labels == {"gpu": "0", "modelName": TRICKY}
    assert parsed["gpuscale_collector_errors"].samples[0].name == "gpuscale_collector_errors_total"


def test_openmetrics_types_bare_counters_as_unknown_and_ends_with_eof() -> None:
    text = render_openmetrics(FAMILIES).decode()
    assert text.endswith("# EOF\n")
    # the strict parser: raises on any violation
    parsed = {f.name: f for f in parse_openmetrics(text)}  # type: ignore[no-untyped-call]
    assert parsed["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].type == "unknown"
    assert parsed["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].samples[0].value == 123456789.0
    assert parsed["gpuscale_collector_errors"].type == "counter"
    assert parsed["DCGM_FI_DEV_GPU_UTIL"].samples[0].labels["modelName"] == TRICKY


@pytest.mark.parametrize(
    ("value", "text"),
    [(95.0, "95"), (0.9159, "0.9159"), (1e20, "1e+20"), (-3.0, "-3"), (math.inf, "+Inf"), (-math.inf, "-Inf"),
     (math.nan, "NaN"), (2.0**53, "9007199254740992.0"), (7, "7")],
)  # fmt: skip
def test_values_are_written_exactly(value: float, text: str) -> None:
    assert format_value(value) == text
    if not math.isnan(value):
        assert float(text) == value


def test_a_lone_surrogate_in_a_label_or_help_text_costs_that_character_not_the_page() -> None:
    # a pod label from the Kubernetes API's JSON ("\ud800") or a ConfigMap's help text can hold one
    sample = ((("team", "ml\ud800"),), 5.0)
    family = Family("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization \udc80 (in %)", (sample,))
    text = render_text([family]).decode("utf-8")  # strict: the page is valid UTF-8
    [parsed] = parse_text(text)
    assert parsed.documentation == "GPU utilization ? (in %)"
    assert [(s.labels, s.value) for s in parsed.samples] == [({"team": "ml?"}, 5.0)]
    [om] = parse_openmetrics(render_openmetrics([family]).decode("utf-8"))  # type: ignore[no-untyped-call]
    assert om.samples[0].labels == {"team": "ml?"}
