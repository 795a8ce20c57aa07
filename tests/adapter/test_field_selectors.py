"""Field selectors as the API server parses them for metrics.k8s.io: terms, operators, escapes, the two fields every
object has, and errors that name what is wrong."""

from __future__ import annotations

import pytest

from adapter.errors import BadRequest
from adapter.query.field_selectors import FieldSelector, parse_field_selector

POD = {"metadata.name": "trainer-0", "metadata.namespace": "ml"}
NODE = {"metadata.name": "node-a"}  # a node has no namespace field: it reads as ""


@pytest.mark.parametrize(
    ("text", "pod", "node"),
    [
        ("", True, True),
        ("metadata.name=trainer-0", True, False),
        ("metadata.name==trainer-0", True, False),
        ("metadata.name!=trainer-0", False, True),
        ("metadata.namespace=ml", True, False),
        ("metadata.namespace=", False, True),
        ("metadata.namespace!=ml,metadata.name=node-a", False, True),
        ("metadata.namespace=ml,metadata.name=other", False, False),
        ("metadata.name=trainer-0,", True, False),  # empty terms are skipped
        ("metadata.name=a\\,b", False, False),
    ],
)
def test_selects_as_the_api_server(text: str, pod: bool, node: bool) -> None:
    selector = parse_field_selector(text)
    assert selector.matches(POD) is pod
    assert selector.matches(NODE) is node


def test_escapes_are_unescaped_in_values() -> None:
    assert parse_field_selector("metadata.name=a\\,b\\=c\\\\d") == FieldSelector((("metadata.name", True, "a,b=c\\d"),))
    assert parse_field_selector("metadata.name=a\\,b").matches({"metadata.name": "a,b"})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "spec.nodeName=node-a",
            '"spec.nodeName" is not a known field selector: only "metadata.name", "metadata.namespace"',
        ),
        ("metadata.name", "can't understand 'metadata.name'"),
        ("metadata.name=a\\x", "invalid escape sequence \\x"),
        ("metadata.name=a=b", "unescaped character '='"),
        ("metadata.name=a\\", "unfinished escape"),
    ],
)
def test_mistakes_are_a_bad_request_that_says_why(text: str, message: str) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_field_selector(text)
    assert message in str(caught.value)
