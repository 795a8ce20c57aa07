"""Rules' regular expressions read as prometheus-adapter's Go regexp reads them (RE2), and ``name.as`` expanded as Go's
``Regexp.ExpandString`` expands it. The expected names in the expansion table were produced by Go's regexp package
(FindStringSubmatchIndex, then ExpandString) for the same pattern, template and series."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from adapter.config.rules import parse_rules
from adapter.errors import ConfigError
from adapter.query.go_regexp import GoRegexp
from adapter.query.promql import parse_series_selector
from harness.adapter.in_process import Adapter, settings_for
from harness.kube.api import FakeKubeAPIServer
from harness.stores.prometheus import Prometheus


def rule(filters: str = "[]", matches: str = "", name_as: str = "") -> str:
    name = f"name: {{matches: '{matches}', as: '{name_as}'}}" if matches or name_as else ""
    return f"""
rules:
- seriesQuery: '{{__name__=~".+",pod!=""}}'
  seriesFilters: {filters}
  resources: {{template: <<.Resource>>}}
  {name}
"""


@pytest.mark.parametrize(
    ("pattern", "series", "matches"),
    [
        # a POSIX class inside a bracket expression; Python's re read it as the set "[:alph" then "]"
        ("^[[:alpha:]]+_[[:digit:]]+$", "temp_42", True),
        ("^[[:alpha:]]+$", "temp_42", False),
        ("^[[:^digit:]]+$", "gpu_util", True),
        # Unicode classes, one letter and long forms
        (r"^\pL+$", "gpuütil", True),
        (r"^\pL+$", "gpu_util", False),
        (r"^\p{Greek}+_total$", "λειτουργία_total", True),
        (r"\PL", "abc", False),
        # \z is the end of the text only (Go has no \Z)
        (r"_total\z", "http_total", True),
        (r"_total\z", "http_total_x", False),
        # flags: (?U) makes repetitions lazy, (?i) ignores case
        (r"(?U)^a+$", "aaa", True),
        (r"(?i)^dcgm_", "DCGM_FI_DEV_GPU_UTIL", True),
        # unanchored, as Go's MatchString
        ("GPU", "DCGM_FI_DEV_GPU_UTIL", True),
    ],
)
def test_series_filters_match_as_go_regexp(pattern: str, series: str, matches: bool) -> None:
    positive = parse_rules(rule(filters=f"[{{is: '{pattern}'}}]"), "cfg").rules[0]
    negative = parse_rules(rule(filters=f"[{{isNot: '{pattern}'}}]"), "cfg").rules[0]
    assert positive.accepts(series) is matches
    assert negative.accepts(series) is not matches


@pytest.mark.parametrize(
    ("pattern", "template", "series", "expected"),
    [
        ("^(.*)_total$", "$1", "http_total", "http"),
        ("^(.*)_total$", "${1}_per_second", "http_total", "http_per_second"),
        ("^(.*)_total$", "$1_per_second", "http_total", ""),  # the name is "1_per_second": no such group
        ("^(?P<base>.*)_total$", "$base", "http_total", "http"),
        ("^(?P<base>.*)_total$", "${base}x", "http_total", "httpx"),
        (".*", "$0", "anything", "anything"),
        ("^(a)$", "$$1 $2 ${nope}", "a", "$1  "),
        ("^(a)$", "$01", "a", ""),  # a leading zero makes it a name, not a number
        ("^(a)$", "${01}", "a", ""),
        ("^(a)$", "$ $- ${ ${} ${1 $", "a", "$ $- ${ ${} ${1 $"),  # a $ that starts no name stays
        ("^(a)(b)?$", "[$2]", "a", "[]"),  # an unmatched group is empty
        ("^(a)$", "$1é", "a", ""),  # names run over Unicode letters
        ("^(a)$", "${1}é", "a", "aé"),
        ("^(a)$", "$1000000000", "a", ""),
        (r"^gpu_(\pL+)$", "$1", "gpu_ütil", "ütil"),
        (r"^(\pL+)_\d+\z", "$1", "temp_12", "temp"),
        ("(?U)^(.+)_(.+)$", "${1}/${2}", "a_b_c", "a/b_c"),  # lazy: the first group is as short as it can be
        ("^(.+)_(.+)$", "${1}/${2}", "a_b_c", "a_b/c"),
        ("^([[:alpha:]]+)_([[:digit:]]+)$", "${2}_$1", "abc_42", "42_abc"),
        ("(a|ab)(c|bcd)(d*)", "$1-$2-$3", "abcd", "a-bcd-"),  # leftmost-first, not leftmost-longest
    ],
)
def test_name_as_expands_as_go(pattern: str, template: str, series: str, expected: str) -> None:
    assert GoRegexp(pattern).expand(template, series) == expected
    configured = parse_rules(rule(matches=pattern.replace("'", "''"), name_as=template), "cfg").rules[0]
    # an empty result is no name: the series is not served, as prometheus-adapter skips it
    assert configured.api_name(series) == expected
    assert configured.accepts(series)


@pytest.mark.parametrize(("pattern", "series"), [("[[:alpha:]]", "123"), (r"a\z", "ba\n"), ("^gpu$", "gpus")])
def test_no_match_gives_no_name(pattern: str, series: str) -> None:
    configured = parse_rules(rule(matches=pattern, name_as="$0"), "cfg").rules[0]
    assert configured.api_name(series) is None
    assert not configured.accepts(series)  # a given name.matches also filters, as in prometheus-adapter


def test_default_as_counts_groups_as_go() -> None:
    assert parse_rules(rule(matches="^(?U)(.+)_total$"), "cfg").rules[0].name_as == "$1"
    assert parse_rules(rule(matches=r"^\pL+$"), "cfg").rules[0].name_as == "$0"
    with pytest.raises(ConfigError, match=r"has several capture groups, so name\.as is required"):
        parse_rules(rule(matches="^(a)(b)$"), "cfg")


@pytest.mark.parametrize(
    ("filters", "matches", "where", "pattern", "why"),
    [
        ("[{is: 'a('}]", "", "rules[0].seriesFilters[0]", "'a('", "missing ): a("),
        ("[{is: x}, {isNot: '(?<=a)b'}]", "", "rules[0].seriesFilters[1]", "'(?<=a)b'", "invalid perl operator"),
        ("[]", r"\8", "rules[0].name.matches", r"'\\8'", "invalid escape sequence"),
        ("[]", "a{1001}", "rules[0].name.matches", "'a{1001}'", "invalid repetition size"),
    ],
)
def test_an_invalid_pattern_names_the_rule_and_the_pattern(
    filters: str, matches: str, where: str, pattern: str, why: str, capfd: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_rules(rule(filters=filters, matches=matches, name_as="x" if matches else ""), "config.yaml")
    message = str(raised.value)
    assert message.startswith(f"config.yaml: {where}: invalid regular expression {pattern} (RE2 syntax")
    assert why in message
    # RE2 would print the error to stderr too; the ConfigError is the one report
    assert capfd.readouterr().err == ""


@pytest.mark.parametrize(
    ("selector", "valid"),
    [
        ('{__name__=~"[[:alpha:]]*"}', False),  # matches the empty string: Prometheus refuses such a selector
        ('{__name__=~"[[:alpha:]]+"}', True),
        (r'{__name__=~"\\pL*"}', False),
        (r'{__name__=~"\\pL+"}', True),
    ],
)
def test_series_query_regexes_are_read_as_prometheus_reads_them(selector: str, valid: bool) -> None:
    if valid:
        assert parse_series_selector(selector).matchers[0][2].endswith("+")
    else:
        with pytest.raises(ValueError, match="does not match the empty string"):
            parse_series_selector(selector)


CONFIG = r"""
rules:
- seriesQuery: '{__name__=~"DCGM_FI_[[:upper:]]+_.+",namespace!="",pod!=""}'
  seriesFilters:
  - is: '^DCGM_FI_[[:upper:]]+_'
  - isNot: 'PROF\pL*_PIPE'
  resources: {template: <<.Resource>>}
  name: {matches: '(?U)^DCGM_FI_(.+)_(.+)\z', as: '${2}_${1}'}
  metricsQuery: 'sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)'
"""


async def test_a_served_rule_with_re2_constructs(
    kube: FakeKubeAPIServer, prometheus: Prometheus, make_adapter: Callable[..., Awaitable[Adapter]], tmp_path: Path
) -> None:
    """Discovery against the real Prometheus: the POSIX class selects the DCGM series (under Python's re it selected
    none), \\pL drops the tensor-pipe series, and (?U) makes the first group the shortest."""
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    adapter = await make_adapter(settings_for(prometheus.url, kube.kubeconfig(tmp_path / "kubeconfig"), config=config))
    body = await adapter.get("/apis/custom.metrics.k8s.io/v1beta2")
    names = {r["name"] for r in body["resources"]}
    assert {name.partition("/")[2] for name in names} == {"GPU_UTIL_DEV", "FB_USED_DEV"}
    assert {f"{r}/{m}" for r in ("pods", "namespaces") for m in ("GPU_UTIL_DEV", "FB_USED_DEV")} <= names
    value = await adapter.get("/apis/custom.metrics.k8s.io/v1beta2/namespaces/ml/pods/trainer-0/GPU_UTIL_DEV")
    assert value["items"][0]["describedObject"]["name"] == "trainer-0"
