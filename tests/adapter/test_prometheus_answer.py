"""Prometheus answers checked against the API's documented shape, and the JSON reader that walks them.

Every malformed answer is refused with a problem that says where the shape broke and never quotes the answer; every
well-formed one is read exactly as ``json.loads`` would read it, whatever its layout.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapter.backends.json_reader import JsonReader
from adapter.backends.prometheus_answer import (
    SERIES_BATCH_CHARS,
    WHOLE_DECODE_BYTES,
    Sample,
    Samples,
    _query_data,
    _reply,
    _whole_vector,
    names_reply,
    query_reply,
    series_reply,
)
from adapter.errors import MalformedAnswer

SECRET = "s3cr3t-label-value"


def answer(result: Any, result_type: str = "vector", **envelope: Any) -> bytes:
    body = {"status": "success", "data": {"resultType": result_type, "result": result}, **envelope}
    return json.dumps(body).encode()


def series(metric: Any = None, value: Any = None) -> dict[str, Any]:
    return {"metric": {"pod": SECRET} if metric is None else metric, "value": value or [1.8e9, "1"]}


def deep(levels: int) -> bytes:
    return (
        b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{"pod":'
        + (b"[" * levels + b"]" * levels)
        + b'},"value":[1,"1"]}]}}'
    )


MALFORMED = {
    "metric a string": (answer([series(metric="pod=a")]), "data.result[0].metric is missing or not an object"),
    "metric missing": (answer([{"value": [1, "1"]}]), "data.result[0].metric is missing or not an object"),
    "label value a list": (
        answer([series(), series({"pod": [SECRET]})]),
        "data.result[1].metric has a label value that is not a string",
    ),
    "label value a number": (answer([series({"gpu": 0})]), "data.result[0].metric has a label value"),
    "label value null": (answer([series({"gpu": None})]), "data.result[0].metric has a label value"),
    "200,000-deep nesting": (deep(200_000), "the answer is nested too deeply"),
    "item not an object": (answer([series(), SECRET]), "data.result[1] is not an object"),
    "value not a pair": (answer([series(value=[1, "1", "2"])]), "data.result[0].value is missing or not a"),
    "value a number": (answer([series(value=[1, 1])]), "data.result[0].value has a value that is not a string"),
    "timestamp a string": (answer([series(value=["1", "1"])]), "has a timestamp that is not a number"),
    "timestamp a boolean": (answer([series(value=[True, "1"])]), "has a timestamp that is not a number"),
    "timestamp past 9999": (answer([series(value=[1e300, "1"])]), "seconds from 1970 to 9999"),
    "timestamp a huge integer": (answer([series(value=[10**400, "1"])]), "seconds from 1970 to 9999"),
    "NaN literal": (b'{"status":"success","data":{"resultType":"scalar","result":[NaN,"1"]}}', "NaN is not JSON"),
    "result a string": (answer(SECRET), "data.result is not an array"),
    "result missing": (b'{"status":"success","data":{"resultType":"vector"}}', "data.result is missing"),
    "unknown result type": (answer([], "histogram"), "data.resultType is missing or not one of"),
    "data not an object": (b'{"status":"success","data":[]}', "data is not an object"),
    "data missing": (b'{"status":"success"}', "data is missing"),
    "status missing": (b'{"data":{"resultType":"vector","result":[]}}', "status is missing"),
    "status not a string": (b'{"status":1}', "status is not a string"),
    "error not a string": (b'{"status":"error","error":{"a":1}}', "error is not a string"),
    "warnings not strings": (answer([], warnings=[1]), "warnings[0] is not a string"),
    "not an object": (b"[1,2,3]", "the answer is not an object"),
    "html": (b"<html>" + SECRET.encode() + b"</html>", "the answer is not an object"),
    "empty": (b" \n", "the answer is empty"),
    "truncated": (answer([series()])[:-5], "the answer is not valid JSON"),
    "trailing text": (answer([]) + b" " + SECRET.encode(), "the answer is not valid JSON"),
    "not UTF-8": (b'{"status":"success","data":"\xff"}', "the answer is not UTF-8 text"),
    "a scalar not a pair": (answer(SECRET, "scalar"), "data.result is missing or not a [timestamp, value] pair"),
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_a_malformed_answer_names_the_problem_and_never_its_content(name: str) -> None:
    body, problem = MALFORMED[name]
    with pytest.raises(MalformedAnswer) as e:
        query_reply(body)
    assert problem in str(e.value)
    assert SECRET not in str(e.value)
    assert len(str(e.value)) < 200


@pytest.mark.parametrize("whole", [True, False], ids=["decoded whole", "read series by series"])
def test_a_vector_is_read_with_its_warnings_and_infos_and_newer_fields_ignored(whole: bool) -> None:
    body = answer(
        [series({"pod": "a", "namespace": "ml"}, [1.8e9, "1.5"]), series({}, [1800000001, "NaN"])],
        warnings=["partial"],
        infos=["PromQL info: metric might not be a counter"],
        later=[{"anything": [1, {"nested": True}]}],
    )
    if not whole:  # past the size decoded in one call
        body = body[:-1] + b',"padding":"' + b"x" * WHOLE_DECODE_BYTES + b'"}'
    reply = query_reply(body)
    assert reply.status == "success"
    assert reply.data is not None
    assert reply.data.result_type == "vector"
    assert reply.data.warnings == ("partial",)
    assert reply.data.infos == ("PromQL info: metric might not be a counter",)
    assert list(reply.data.samples) == [
        Sample({"pod": "a", "namespace": "ml"}, 1.8e9, "1.5"),
        Sample({}, 1.8e9 + 1, "NaN"),
    ]
    assert reply.data.weight > 0


def test_a_result_before_its_type_and_a_scalar_are_read_too() -> None:
    before = b'{"data":{"result":[{"metric":{"pod":"a"},"value":[1,"2"]}],"resultType":"vector"},"status":"success"}'
    reply = query_reply(before)
    assert reply.data is not None
    assert list(reply.data.samples) == [Sample({"pod": "a"}, 1.0, "2")]
    scalar = query_reply(answer([1.5, "3"], "scalar"))
    assert scalar.data is not None
    assert list(scalar.data.samples) == [Sample({}, 1.5, "3")]


def test_a_matrix_or_string_result_is_read_for_the_client_to_refuse() -> None:
    matrix = query_reply(answer([{"metric": {}, "values": [[1, "1"], [2, "2"]]}], "matrix"))
    assert matrix.data is not None
    assert (matrix.data.result_type, len(matrix.data.samples)) == ("matrix", 0)


def test_an_error_answer_keeps_its_type_and_message_and_ignores_its_data() -> None:
    reply = query_reply(b'{"status":"error","errorType":"bad_data","error":"parse error","data":"whatever"}')
    assert (reply.status, reply.error_type, reply.error, reply.data) == ("error", "bad_data", "parse error", None)


def test_label_lists_are_lists_of_strings() -> None:
    assert names_reply(b'{"status":"success","data":["a","b"]}').data == ["a", "b"]
    with pytest.raises(MalformedAnswer, match=r"data\[1\] is not a string"):
        names_reply(b'{"status":"success","data":["a",["b"]]}')
    with pytest.raises(MalformedAnswer, match="data is not an array"):
        names_reply(b'{"status":"success","data":{"a":"b"}}')


def test_a_series_list_is_read_as_names_and_the_label_names_of_their_series() -> None:
    body = json.dumps(
        {
            "status": "success",
            "data": [
                {"__name__": "gpu", "pod": "a", "namespace": "ml"},
                {"__name__": "gpu", "pod": "b", "namespace": "ml"},
                {"__name__": "gpu", "Hostname": "n1"},
                {"__name__": "up", "job": "x"},
            ],
        }
    ).encode()
    listing = series_reply(body).data
    assert listing is not None
    assert listing.entries == 4
    assert listing.shapes == {
        "gpu": frozenset({frozenset({"pod", "namespace"}), frozenset({"Hostname"})}),
        "up": frozenset({frozenset({"job"})}),
    }
    assert series_reply(b'{"status":"success","data":[]}').data == ({}, 0)
    with pytest.raises(MalformedAnswer, match=r"data\[1\] is not an object of label values"):
        series_reply(b'{"status":"success","data":[{"__name__":"a"},{"__name__":"b","pod":1}]}')
    with pytest.raises(MalformedAnswer, match="data is not an array"):
        series_reply(b'{"status":"success","data":{"__name__":"a"}}')


def _listing(data: list[dict[str, Any]], separators: tuple[str, str] = (",", ":")) -> bytes:
    return json.dumps({"status": "success", "data": data, "warnings": ["w"]}, separators=separators).encode()


def _by_hand(data: list[dict[str, Any]]) -> dict[str, frozenset[frozenset[str]]]:
    out: dict[str, set[frozenset[str]]] = {}
    for labels in data:
        out.setdefault(labels["__name__"], set()).add(frozenset(labels) - {"__name__"})
    return {name: frozenset(sets) for name, sets in out.items()}


@pytest.mark.parametrize("separators", [(",", ":"), (", ", ": ")], ids=["compact", "spaced"])
def test_a_long_series_list_is_read_in_batches_with_the_same_result(separators: tuple[str, str]) -> None:
    # several batches long; a value holding the text batches are cut at ("},{") sits where a cut would fall
    data = [{"__name__": f"m{i % 3}", "pod": f"p{i}", **({"node": "n"} if i % 5 else {})} for i in range(12000)]
    tricky = "x" * 100 + "},{" * 2000
    data[700]["note"] = tricky
    data[3000]["note"] = tricky
    body = _listing(data, separators)
    assert len(body) > 5 * SERIES_BATCH_CHARS
    reply = series_reply(body)
    assert reply.data == (_by_hand(data), 12000)
    assert reply.warnings == ("w",)


def test_a_bad_series_in_a_later_batch_is_named_by_its_index() -> None:
    data: list[dict[str, Any]] = [{"__name__": "m", "pod": f"p{i}"} for i in range(5000)]
    data[4321]["pod"] = 7
    with pytest.raises(MalformedAnswer, match=r"data\[4321\] is not an object of label values"):
        series_reply(_listing(data))
    data[4321] = ["m"]  # type: ignore[call-overload]
    with pytest.raises(MalformedAnswer, match=r"data\[4321\] is not an object of label values"):
        series_reply(_listing(data))
    text = _listing([{"__name__": "m", "pod": f"p{i}"} for i in range(5000)]).decode()
    broken = text.replace('"pod":"p4000"', '"pod":"p4000', 1)
    with pytest.raises(MalformedAnswer, match="not valid JSON"):
        series_reply(broken.encode())


def test_repeated_strings_of_a_large_answer_are_kept_once() -> None:
    body = answer([series({"namespace": "ml", "pod": f"p{i}"}) for i in range(5000)])
    assert len(body) > WHOLE_DECODE_BYTES  # read series by series, where memory matters
    reply = query_reply(body)
    assert reply.data is not None
    first, second, *_ = reply.data.samples.labels
    assert first["namespace"] is second["namespace"]
    assert next(iter(first)) is next(iter(second))


def test_samples_having_a_label_among_names() -> None:
    samples = Samples(({"pod": "a"}, {"pod": "b"}, {}, {"pod": ""}, {"pod": "a"}), (1, 2, 3, 4, 5), tuple("abcde"))
    assert [s.value for s in samples.having("pod", {"a"})] == ["a", "e"]
    assert [s.value for s in samples.having("pod", None)] == ["a", "b", "e"]
    assert [s.value for s in samples.having("node", None)] == []
    assert list(samples.named("pod", {"a"})) == [("a", 1, "a"), ("a", 5, "e")]
    assert [value for _, _, value in samples.named("pod", None)] == ["a", "b", "e"]
    assert list(samples.named("node", None)) == []
    assert [s.value for s in samples[1:3]] == ["b", "c"]
    assert samples[-1] == Sample({"pod": "a"}, 5, "e")


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20,
)


@given(JSON, st.sampled_from([None, 0, 2]), st.sampled_from([(",", ":"), (", ", ": ")]), st.integers(0, 3))
def test_the_reader_reads_what_json_loads_reads(value: Any, indent: int | None, separators: Any, depth: int) -> None:
    text = json.dumps(value, indent=indent, separators=separators)
    reader = JsonReader(f" {text}\n")
    assert reader.value(depth) == json.loads(text)
    reader.end()


def test_the_reader_refuses_what_json_loads_refuses() -> None:
    for text in ("[1,]", "{1:2}", '{"a" 1}', "[1 2]", '{"a":1,}', "[", "tru", '{"a":[1,2}'):
        with pytest.raises(MalformedAnswer, match="not valid JSON"):
            JsonReader(text).value(depth=3)
    assert sys.getrecursionlimit() < 200_000  # the deep-nesting case above relies on the decoder's recursion guard


@pytest.mark.parametrize("count", [0, 1, 3, 5000])
def test_a_small_answer_decoded_whole_equals_the_series_by_series_reading(count: int) -> None:
    result = [
        series({"namespace": "ml", "pod": f"p{i}", "gpu": str(i % 8)}, [1.8e9 + i, f"{i}.5"]) for i in range(count)
    ]
    result.append(series({}, [1.8e9, "NaN"]))
    body = answer(result)
    whole, streamed = _whole_vector(body), _reply(body, _query_data)
    assert whole is not None
    assert whole.data is not None
    assert streamed.data is not None
    assert list(whole.data[1]) == list(streamed.data[1])
    assert whole.data[0] == streamed.data[0] == "vector"


@pytest.mark.parametrize(
    "body",
    [
        b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{"a":1},"value":[1,"2"]}]}}',
        b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[true,"2"]}]}}',
        b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,2]}]}}',
        b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"2",3]}]}}',
        b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[-1,"2"]}]}}',
        b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[NaN,"2"]}]}}',
        b'{"status":"success","data":{"resultType":"vector","result":[["metric"]]}}',
        b'{"status":"success","data":{"resultType":"vector","result":{}}}',
        b'{"status":"success","data":{"resultType":"matrix","result":[]}}',
        b'{"status":"error","errorType":"bad_data","error":"x"}',
    ],
)
def test_anything_off_the_documented_shape_goes_to_the_reader_that_says_where(body: bytes) -> None:
    assert _whole_vector(body) is None
