"""Against each real store (Prometheus, VictoriaMetrics): a label value the adapter puts into PromQL only ever
matches itself.

An exporter serves one series per adversarial label value (quotes, backslashes, regex metacharacters, newlines,
unicode); the store scrapes them; every matcher the adapter builds, for one value or a set of values, must select
exactly those series. MetricsQL parses strings and regexes on its own (and turns a regex of alternatives into a set
of exact matches), so it gets the same values.
"""

import random
import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapter.errors import BadRequest
from adapter.query.promql import matcher, names_matcher, selector_matchers
from adapter.query.selectors import parse_selector
from harness.stores.exporter import Exporter
from harness.stores.kinds import STORES, run_store
from harness.stores.prometheus import Prometheus

ALPHABET = [*list('"\\|.*+?()[]{}^$=~!,\n\t '), "a", "b", "é", "日", "\u2028"]
FIXED = ['we"ird', "back\\slash", "pipe|x", "pipe", "x", "brace}", "dot.*", "new\nline", "a.b", "aXb", ".*", "",
         "\\", "\\\\", '"', "a|b|c", "(a)", "[ab]", "^a$", "a{1,2}"]  # fmt: skip
_rng = random.Random(20261202)
RANDOM = ["".join(_rng.choice(ALPHABET) for _ in range(_rng.randint(1, 8))) for _ in range(150)]
VALUES = sorted(set(FIXED + RANDOM) - {""})


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@pytest.fixture(scope="module", params=STORES)
def prometheus(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    page = "".join(f'fuzz_series{{pod="{_escape(v)}"}} {i}\n' for i, v in enumerate(VALUES))
    kind: str = request.param
    with Exporter(page) as exporter, run_store(kind, tmp_path_factory.mktemp(kind), [exporter.target]) as prom:
        prom.wait_for("count(fuzz_series)")
        prom.wait_for(f"count(fuzz_series) == {len(VALUES)}")
        # every series found by its own value too: a store may count a new series before its label index answers
        deadline = time.monotonic() + 30
        while missing := [v for v in VALUES if selected(prom, matcher("pod", "=", v)) != {v}]:
            assert time.monotonic() < deadline, f"{kind} never selected {missing[:3]!r} by value"
            time.sleep(0.5)
        yield prom


def selected(prom: Prometheus, selector: str) -> set[str]:
    return {r["metric"]["pod"] for r in prom.query(f"fuzz_series{{{selector}}}")}


@pytest.mark.prometheus
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sets(st.sampled_from(VALUES), min_size=1, max_size=6))
def test_a_set_of_names_matches_exactly_those_names(prometheus: Prometheus, names: set[str]) -> None:
    assert selected(prometheus, names_matcher("pod", names)) == names


@pytest.mark.prometheus
def test_every_single_value_matches_only_itself(prometheus: Prometheus) -> None:
    for value in VALUES:
        assert selected(prometheus, matcher("pod", "=", value)) == {value}, repr(value)
        assert value not in selected(prometheus, matcher("pod", "!=", value))


@pytest.mark.prometheus
def test_label_selector_values_from_a_request_match_only_themselves(prometheus: Prometheus) -> None:
    # values that the Kubernetes selector grammar itself allows (it has no quoting), put through the same path
    # the adapter uses for metricLabelSelector
    checked = 0
    for value in VALUES:
        try:
            selector = parse_selector(f"pod={value}")
        except BadRequest:
            continue  # a value Kubernetes label selectors do not allow is refused before it nears PromQL
        if selector.requirements[0].values != (value,):
            continue  # the grammar read it as another selector ("pod= " is pod="", "pod==" is pod=="")
        checked += 1
        (m,) = selector_matchers(selector)
        assert selected(prometheus, m) == {value}
        (m,) = selector_matchers(parse_selector(f"pod in ({value},nosuch)"))
        assert selected(prometheus, m) == {value}
    assert checked >= 5  # "a.b", "aXb", "x", "pipe", "a" ... reach Prometheus
