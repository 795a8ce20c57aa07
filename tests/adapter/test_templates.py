import pytest

from adapter.errors import TemplateError
from adapter.naming.templates import Struct, Template, compile_template

ARGS = Struct(
    Series="DCGM_FI_DEV_GPU_UTIL",
    LabelMatchers='namespace="ml",pod=~"a|b"',
    GroupBy="pod",
    GroupBySlice=["pod", "container"],
    LabelValuesByName={"pod": "a|b", "namespace": "ml"},
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("plain text", "plain text"),
        ("", ""),
        (
            "sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)",
            'sum(DCGM_FI_DEV_GPU_UTIL{namespace="ml",pod=~"a|b"}) by (pod)',
        ),
        ("<<.GroupBySlice>>", "[pod container]"),
        ("<<.LabelValuesByName>>", "map[namespace:ml pod:a|b]"),
        ('<<index .LabelValuesByName "pod">>', "a|b"),
        ('<<index .LabelValuesByName "absent">>', ""),
        ("<<.LabelValuesByName.namespace>>", "ml"),
        ("<<index .GroupBySlice 1>>", "container"),
        ("<<len .GroupBySlice>>", "2"),
        ("<<range .GroupBySlice>>[<<.>>]<<end>>", "[pod][container]"),
        ("<<range $i, $l := .GroupBySlice>><<if $i>>,<<end>><<$l>><<end>>", "pod,container"),
        ("<<range $k, $v := .LabelValuesByName>><<$k>>=<<$v>>;<<end>>", "namespace=ml;pod=a|b;"),
        ("<<range $l := .GroupBySlice>><<$l>> <<end>>", "pod container "),
        ("<<range .Nothing>>x<<else>>empty<<end>>", None),
        ('<<if eq .GroupBy "pod">>P<<else if eq .GroupBy "x">>X<<else>>N<<end>>', "P"),
        ('<<if eq .GroupBy "node">>P<<else>>N<<end>>', "N"),
        ("<<if not .GroupBy>>none<<else>>some<<end>>", "some"),
        ("<<with .GroupBy>>by (<<.>>)<<end>>", "by (pod)"),
        (
            "<<$s := .Series>><<range .GroupBySlice>><<$s>>.<<.>> <<end>>",
            "DCGM_FI_DEV_GPU_UTIL.pod DCGM_FI_DEV_GPU_UTIL.container ",
        ),
        ("<<$x := 1>><<$x = 2>><<$x>>", "2"),
        ("<<range .GroupBySlice>><<$.Series>><<end>>", "DCGM_FI_DEV_GPU_UTILDCGM_FI_DEV_GPU_UTIL"),
        ('<<printf "%s{%s}" .Series .LabelMatchers>>', 'DCGM_FI_DEV_GPU_UTIL{namespace="ml",pod=~"a|b"}'),
        ("<<printf `%q` .GroupBy>>", '"pod"'),
        ('<<.GroupBy | printf "by (%s)">>', "by (pod)"),
        ('<<print "a" 1 true>>', "a1true"),
        ("<<(index .GroupBySlice 0)>>", "pod"),
        ("a\n  <<- .GroupBy ->>  \nb", "apodb"),
        ("x<</* a comment */>>y", "xy"),
        ('<<"a>>b">>', "a>>b"),
        ('<<and .GroupBy .Series>>|<<or "" .Series>>', "DCGM_FI_DEV_GPU_UTIL|DCGM_FI_DEV_GPU_UTIL"),
    ],
)
def test_render(text: str, expected: str | None) -> None:
    if expected is None:
        with pytest.raises(TemplateError, match="no such field"):
            Template(text).render(ARGS)
    else:
        assert Template(text).render(ARGS) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("<<.Series", "unclosed action"),
        ("<<if .GroupBy>>x", "missing <<end>>"),
        ("x<<end>>", "unexpected <<end>>"),
        ('<<join .GroupBySlice ",">>', 'function "join" not defined'),
        ("<<.Series .GroupBy>>", "can't give arguments to a non-function"),
        ("<<>>", "missing value"),
        ("<<.Series |>>", "missing command"),
        ("<<(.Series>>", "unclosed '('"),
        ("<<range .X>>a<<else>>b<<else>>c<<end>>", "missing <<end>>"),
        ("<</* open>>", "unclosed comment"),
        ("<<.Series ; x>>", "unexpected"),
        ("<<$a, $b := .GroupBySlice>>", "bad variable declaration"),
    ],
)
def test_compile_errors(text: str, fragment: str) -> None:
    with pytest.raises(TemplateError, match=_escape(fragment)):
        Template(text)


def _escape(fragment: str) -> str:
    import re

    return re.escape(fragment)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("<<.Serie>>", "can't evaluate field Serie"),
        ("<<$undefined>>", "undefined variable: $undefined"),
        ("<<index .GroupBySlice 5>>", "out of range"),
        ("<<range .Series>><<end>>", "can't iterate"),
    ],
)
def test_render_errors(text: str, fragment: str) -> None:
    with pytest.raises(TemplateError, match=_escape(fragment)):
        Template(text).render(ARGS)


def test_compile_template_checks_fields_at_load_and_names_the_place() -> None:
    with pytest.raises(TemplateError, match=r"rules\[3\].metricsQuery: can't evaluate field LabelMatcher"):
        compile_template("sum(<<.Series>>{<<.LabelMatcher>>})", "rules[3].metricsQuery", ARGS)


def test_the_parser_accepts_exactly_the_functions_the_renderer_has() -> None:
    from adapter.naming import template_parser, templates

    assert set(templates._FUNCS) == template_parser.FUNCTIONS
