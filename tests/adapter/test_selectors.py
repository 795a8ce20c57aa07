import pytest

from adapter.errors import BadRequest
from adapter.query.selectors import Op, Requirement, parse_selector

R = Requirement


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ()),
        ("   ", ()),
        ("a=b", (R("a", Op.EQUALS, ("b",)),)),
        ("a==b", (R("a", Op.DOUBLE_EQUALS, ("b",)),)),
        ("a!=b", (R("a", Op.NOT_EQUALS, ("b",)),)),
        ("a=", (R("a", Op.EQUALS, ("",)),)),
        ("a!=,b", (R("a", Op.NOT_EQUALS, ("",)), R("b", Op.EXISTS))),
        ("a", (R("a", Op.EXISTS),)),
        ("!a", (R("a", Op.DOES_NOT_EXIST),)),
        (" ! a ", (R("a", Op.DOES_NOT_EXIST),)),
        ("a in (x, y,z)", (R("a", Op.IN, ("x", "y", "z")),)),
        ("a in (z,x,x)", (R("a", Op.IN, ("x", "z")),)),
        ("a notin (x)", (R("a", Op.NOT_IN, ("x",)),)),
        ("a in (,x)", (R("a", Op.IN, ("", "x")),)),
        ("a>5", (R("a", Op.GREATER_THAN, ("5",)),)),
        ("a < -3", (R("a", Op.LESS_THAN, ("-3",)),)),
        (
            "app=trainer,tier!=web,env in (prod,stage),!canary,gpu",
            (
                R("app", Op.EQUALS, ("trainer",)),
                R("tier", Op.NOT_EQUALS, ("web",)),
                R("env", Op.IN, ("prod", "stage")),
                R("canary", Op.DOES_NOT_EXIST),
                R("gpu", Op.EXISTS),
            ),
        ),
        ("app.kubernetes.io/name=x", (R("app.kubernetes.io/name", Op.EQUALS, ("x",)),)),
        ("in=notin", (R("in", Op.EQUALS, ("notin",)),)) if False else ("x=in-a", (R("x", Op.EQUALS, ("in-a",)),)),
        ("a=A_b.c-9", (R("a", Op.EQUALS, ("A_b.c-9",)),)),
    ],
)
def test_parse(text: str, expected: tuple[Requirement, ...]) -> None:
    assert parse_selector(text).requirements == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("a=b,", "found the end after 'a=b,', expected a label key or value"),
        (",a=b", "found ','"),
        ("a in x", "found 'x' after 'a in', expected '('"),
        ("a in ()", "can't be empty"),
        ("a in (x", "found the end after 'a in (x', expected ',' or ')'"),
        ("a=b=c", "found '=' after 'a=b', expected ',' or the end"),
        ("app===", "found '=' after 'app==', expected ',' or the end"),
        ('a="quoted"', "invalid label value"),
        ("a=b|c", "invalid label value"),
        ("a=.*", "invalid label value"),
        ("a=x}", "invalid label value"),
        ("a=" + "x" * 64, "63 characters"),
        ("-a=b", "invalid label key"),
        ("Bad_Prefix.io/a=b", "prefix must be a DNS subdomain"),
        ("/a=b", "prefix must be a DNS subdomain"),
        ("a>x", "must be an integer"),
        ("!a=b", "found '=' after '!a', expected ',' or the end"),
        ("a b", "expected"),
        ("in=x", "found 'in'"),
    ],
)
def test_parse_errors_name_the_problem(text: str, fragment: str) -> None:
    with pytest.raises(BadRequest) as e:
        parse_selector(text, "labelSelector")
    assert fragment in str(e.value)
    assert "labelSelector" in str(e.value)


LABELS = {"app": "trainer", "env": "prod", "replicas": "3", "empty": ""}


@pytest.mark.parametrize(
    ("text", "matches"),
    [
        ("", True),
        ("app=trainer", True),
        ("app==trainer", True),
        ("app=other", False),
        ("app!=other", True),
        ("app!=trainer", False),
        ("missing!=x", True),
        ("missing=x", False),
        ("app in (a,trainer)", True),
        ("app in (a,b)", False),
        ("app notin (a,b)", True),
        ("app notin (trainer)", False),
        ("missing notin (a)", True),
        ("app", True),
        ("missing", False),
        ("!missing", True),
        ("!app", False),
        ("empty", True),
        ("empty=", True),
        ("replicas>2", True),
        ("replicas>3", False),
        ("replicas<4", True),
        ("app>1", False),
        ("missing<4", False),
        ("app=trainer,env=prod", True),
        ("app=trainer,env=dev", False),
    ],
)
def test_matches(text: str, matches: bool) -> None:
    assert parse_selector(text).matches(LABELS) is matches


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", None),
        ("app=x", {"matchLabels": {"app": "x"}}),
        (
            "app=x,app=y",
            {
                "matchLabels": {"app": "x"},
                "matchExpressions": [{"key": "app", "operator": "In", "values": ["y"]}],
            },
        ),
        (
            "a in (1,2),b notin (3),c,!d,e!=f",
            {
                "matchExpressions": [
                    {"key": "a", "operator": "In", "values": ["1", "2"]},
                    {"key": "b", "operator": "NotIn", "values": ["3"]},
                    {"key": "c", "operator": "Exists"},
                    {"key": "d", "operator": "DoesNotExist"},
                    {"key": "e", "operator": "NotIn", "values": ["f"]},
                ]
            },
        ),
    ],
)
def test_to_label_selector(text: str, expected: object) -> None:
    assert parse_selector(text).to_label_selector() == expected


@pytest.mark.parametrize("text", ["a=b", "a!=b", "a in (x,y)", "a notin (x)", "a", "!a", "a>3", "a=b,!c,d in (e)"])
def test_string_form_parses_back(text: str) -> None:
    selector = parse_selector(text)
    assert parse_selector(str(selector)) == selector
