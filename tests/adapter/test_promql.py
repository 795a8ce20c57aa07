import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapter.errors import BadRequest
from adapter.query.promql import (
    SeriesSelector,
    alternation,
    duration_seconds,
    matcher,
    names_matcher,
    parse_series_selector,
    quote,
    regex_escape,
    selector_matchers,
    window_seconds,
)
from adapter.query.selectors import parse_selector

TRICKY = ['a"b', "a\\b", "a|b", ".*", "a}b", "line\nbreak", "tab\there", "x{1,2}", "^$", "(a)", "[ab]", "a+?", "é"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("plain", '"plain"'),
        ('a"b', '"a\\"b"'),
        ("a\\b", '"a\\\\b"'),
        ("a\nb", '"a\\nb"'),
        ("a\rb\tc", '"a\\rb\\tc"'),
        ("\x00", '"\\u0000"'),
        ("a}b", '"a}b"'),
        ("é", '"é"'),
    ],
)
def test_quote(value: str, expected: str) -> None:
    assert quote(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("trainer-0", "trainer-0"),
        ("a.b", "a\\.b"),
        (".*", "\\.\\*"),
        ("a|b", "a\\|b"),
        ("(x)[y]{z}", "\\(x\\)\\[y\\]\\{z\\}"),
        ("^a$", "\\^a\\$"),
        ("a+b?", "a\\+b\\?"),
        ("a\\b", "a\\\\b"),
    ],
)
def test_regex_escape(value: str, expected: str) -> None:
    assert regex_escape(value) == expected


def _unquote(literal: str) -> str:
    """What PromQL's lexer makes of a double-quoted literal (Go's strconv.Unquote for the escapes we emit)."""
    return literal[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")


@pytest.mark.parametrize("value", TRICKY)
def test_regex_alternation_matches_only_the_names(value: str) -> None:
    names = [value, "plain", "other"]
    pattern = _unquote(quote(alternation(names)))
    # Prometheus anchors regex matchers: a value matches only if the whole of it matches
    for name in names:
        assert re.fullmatch(pattern, name, re.DOTALL)
    for impostor in ["", "x" + value, value + "x", "plainother", "plain|other", "a", "ab"]:
        if impostor not in names:
            assert not re.fullmatch(pattern, impostor, re.DOTALL), impostor


@given(st.lists(st.text(min_size=1), min_size=1, max_size=5), st.text())
def test_any_values_match_only_themselves(names: list[str], probe: str) -> None:
    pattern = _unquote(quote(alternation(names)))
    assert bool(re.fullmatch(pattern, probe, re.DOTALL)) == (probe in names)


@given(st.text())
def test_quote_round_trips(value: str) -> None:
    assert _unquote(quote(value)) == value


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (["p"], 'pod="p"'),
        (["b", "a", "b"], 'pod=~"a|b"'),
        (["a.b", "c"], 'pod=~"a\\\\.b|c"'),
        (['x"y'], 'pod="x\\"y"'),
        (['x"y', "z"], 'pod=~"x\\"y|z"'),
    ],
)
def test_names_matcher(names: list[str], expected: str) -> None:
    assert names_matcher("pod", names) == expected


def test_matcher_refuses_invalid_label_names() -> None:
    with pytest.raises(ValueError, match="invalid Prometheus label name"):
        matcher('pod"}', "=", "x")


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("", []),
        ("a=b", ['a="b"']),
        ("a==b", ['a="b"']),
        ("a!=b", ['a!="b"']),
        ("a in (x)", ['a="x"']),
        ("a in (x,y.z)", ['a=~"x|y\\\\.z"']),
        ("a notin (x)", ['a!="x"']),
        ("a notin (x,y)", ['a!~"x|y"']),
        ("a", ['a!=""']),
        ("!a", ['a=""']),
        ("a=,b", ['a=""', 'b!=""']),
    ],
)
def test_selector_matchers(selector: str, expected: list[str]) -> None:
    assert selector_matchers(parse_selector(selector)) == expected


@pytest.mark.parametrize(
    ("selector", "fragment"),
    [("a>1", "no PromQL equivalent"), ("app.kubernetes.io/name=x", "not a valid Prometheus label name")],
)
def test_selector_matchers_refuse_what_promql_cannot_say(selector: str, fragment: str) -> None:
    with pytest.raises(BadRequest, match=fragment):
        selector_matchers(parse_selector(selector))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("up", SeriesSelector("up", ())),
        ("up{}", SeriesSelector("up", ())),
        (
            '{__name__=~"^container_.*",container!="POD"}',
            SeriesSelector(None, (("__name__", "=~", "^container_.*"), ("container", "!=", "POD"))),
        ),
        (
            "DCGM_FI_DEV_GPU_UTIL{pod!='',namespace!=\"\"}",
            SeriesSelector("DCGM_FI_DEV_GPU_UTIL", (("pod", "!=", ""), ("namespace", "!=", ""))),
        ),
        ('x{a=`raw\\`, b="q\\"}"}', SeriesSelector("x", (("a", "=", "raw\\"), ("b", "=", 'q"}')))),
        ("x{a='1',}", SeriesSelector("x", (("a", "=", "1"),))),
        ('  ns:rule:rate5m { job = "a" } ', SeriesSelector("ns:rule:rate5m", (("job", "=", "a"),))),
    ],
)
def test_parse_series_selector(text: str, expected: SeriesSelector) -> None:
    assert parse_series_selector(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "selects nothing"),
        ("{}", "selects nothing"),
        ('{pod=""}', "does not match the empty string"),
        ('{pod=~".*"}', "does not match the empty string"),
        ("up{a=b}", "malformed matcher"),
        ('up{a="b" c="d"}', "expected ','"),
        ('up{a="b"', "must be a metric name"),
        ("sum(up)", "unexpected character '('"),
        ('up{a~"b"}', "unexpected character"),
    ],
)
def test_parse_series_selector_errors(text: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=re.escape(fragment)):
        parse_series_selector(text)


@pytest.mark.parametrize(
    ("text", "literal"),
    [
        ("up", "up"),
        ('{__name__="up",a="b"}', "up"),
        ('{__name__=~"up|down"}', None),
        ('x{__name__="y"}', "x"),
    ],
)
def test_literal_name(text: str, literal: str | None) -> None:
    assert parse_series_selector(text).literal_name() == literal


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("up", ("up",)),
        ('{__name__="up",a="b"}', ("up",)),
        (
            '{__name__=~"vllm:num_requests_waiting|tgi_queue_size",pod!=""}',
            ("vllm:num_requests_waiting", "tgi_queue_size"),
        ),
        ('{__name__=~"up|up"}', ("up",)),
        ('{__name__=~"DCGM_.*"}', ()),  # a pattern, not names
        ('{__name__=~"up|do.n"}', ()),
        ('{__name__=~"up|",a="b"}', ()),  # the empty alternative is no name
        ('{pod!=""}', ()),
    ],
)
def test_literal_names(text: str, names: tuple[str, ...]) -> None:
    assert parse_series_selector(text).literal_names() == names


def test_a_selector_pinned_to_one_of_its_names_keeps_its_other_matchers() -> None:
    selector = parse_series_selector('{__name__=~"a|b",pod!="",exported_pod=""}')
    assert str(selector.pinned_to("b")) == '{__name__="b",pod!="",exported_pod=""}'


def test_a_selector_is_written_back_with_its_matchers_escaped() -> None:
    selector = parse_series_selector('{__name__=~"DCGM_.*",pod!=""}')
    assert str(SeriesSelector(None, (*selector.matchers, ("__name__", "=", "x")))) == (
        '{__name__=~"DCGM_.*",pod!="",__name__="x"}'
    )
    assert str(SeriesSelector("up", (("a", "=", 'q"'),))) == 'up{a="q\\""}'


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("1m", 60), ("1m30s", 90), ("2h", 7200), ("100ms", 0.1), ("1d", 86400), ("1w", 604800)],
)
def test_duration_seconds(text: str, seconds: float) -> None:
    assert duration_seconds(text) == seconds


@pytest.mark.parametrize("text", ["", "1", "m", "1x", "1.5m", "-1m"])
def test_duration_seconds_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="not a Prometheus duration"):
        duration_seconds(text)


@pytest.mark.parametrize(
    ("query", "window"),
    [
        ('avg by (pod) (x{pod="a"})', None),
        ("sum(rate(x[2m])) by (pod)", 120),
        ("sum(rate(x[30s])) / sum(avg_over_time(y[5m]))", 300),
        ("max_over_time(x[10m:1m])", 600),
        ('x{a="[1m]"}', 60),
    ],
)
def test_window_seconds(query: str, window: int | None) -> None:
    assert window_seconds(query) == window
