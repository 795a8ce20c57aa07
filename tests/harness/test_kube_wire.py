"""The stand-ins' own Kubernetes wire pieces (harness/kube/wire.py), against the examples of the Kubernetes docs."""

from decimal import Decimal

import pytest

from harness.kube.wire import LabelSelector, SelectorError, parse_quantity, representation, status_body

LABELS = {"environment": "production", "tier": "frontend", "partition": "customerA", "replicas": "3"}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("", True),  # the empty selector selects everything
        ("environment = production", True),
        ("environment==production", True),
        ("tier != frontend", False),
        ("tier!=backend", True),
        ("environment=production,tier!=frontend", False),  # comma is AND
        ("environment in (production, qa)", True),
        ("tier notin (frontend, backend)", False),
        ("partition", True),  # exists
        ("!partition", False),
        ("!missing", True),
        ("missing!=x", True),  # != and notin also select objects without the key
        ("missing notin (a)", True),
        ("missing in (a)", False),
        ("replicas>2", True),
        ("replicas<3", False),
        ("environment>2", False),  # not an integer: never greater
        ("example.com/team=", False),  # prefixed key, empty value
    ],
)
def test_selectors_from_the_labels_and_selectors_page(selector: str, matches: bool) -> None:
    assert LabelSelector(selector).matches(LABELS) is matches


@pytest.mark.parametrize("bad", ["environment in production", "=production", "tier ~ frontend", "a=b,,", "x>y"])
def test_malformed_selectors_are_refused(bad: str) -> None:
    with pytest.raises(SelectorError):
        LabelSelector(bad)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("128974848", Decimal(128974848)),
        ("129e6", Decimal(129000000)),
        ("129M", Decimal(129000000)),
        ("123Mi", Decimal(128974848)),
        ("95500m", Decimal("95.5")),
        ("100u", Decimal("0.0001")),
        ("1k", Decimal(1000)),
        ("-5n", Decimal("-0.000000005")),
        ("1.5Gi", Decimal(1610612736)),
        ("2E", Decimal(2 * 10**18)),
    ],
)
def test_quantities_from_the_quantity_page(text: str, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("bad", ["", "1x", "m", "1.2.3", "1 k"])
def test_malformed_quantities_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="quantity"):
        parse_quantity(bad)


def test_a_status_is_what_the_api_server_sends() -> None:
    assert status_body(410, "Expired", "too old") == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "too old",
        "reason": "Expired",
        "code": 410,
    }


META = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
META_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"


@pytest.mark.parametrize(
    ("accept", "kind", "served"),
    [
        (None, "PartialObjectMetadata", ""),  # no Accept: the object
        ("application/json", "PartialObjectMetadataList", ""),
        (f"{META},application/json", "PartialObjectMetadata", "PartialObjectMetadata"),  # client-go's metadata watch
        (f"{META_LIST},application/json", "PartialObjectMetadataList", "PartialObjectMetadataList"),
        (f"{META},application/json", "PartialObjectMetadataList", ""),  # a list asked as one object: the fallback
        (META_LIST, "PartialObjectMetadata", None),  # and without one, nothing: 406
        ("application/json; as=PartialObjectMetadata; g=meta.k8s.io; v=v1", "PartialObjectMetadata",
         "PartialObjectMetadata"),  # spaces after the semicolons
        ("application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,*/*",
         "PartialObjectMetadata", ""),  # protobuf is not served here
        ("application/yaml", "PartialObjectMetadata", None),
    ],
)  # fmt: skip
def test_the_representation_an_accept_header_asks_for(accept: str | None, kind: str, served: str | None) -> None:
    assert representation(accept, kind) == served
