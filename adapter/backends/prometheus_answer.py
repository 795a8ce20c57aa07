"""Prometheus's answers, read and checked: JSON text → envelope → a query result or a list of names.

Every answer is held to the shape Prometheus's HTTP API documents: an object with ``status``; on success ``data``,
for a query ``{"resultType", "result"}`` where a vector's result is a list of ``{"metric": {name: value},
"value": [seconds, "value"]}``. Anything else raises ``MalformedAnswer`` saying where the shape broke
(``data.result[3].metric is not an object``), never quoting the answer.

A large text is read with ``JsonReader`` a series or a batch of series at a time rather than by ``json.loads``
whole, which holds the GIL throughout and so stops the event loop even from a worker thread (a 48 MB answer paused
it for 0.9 s).
"""

from __future__ import annotations

import itertools
import json
import operator
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, NamedTuple, NoReturn, TypeVar, cast, overload

from adapter.backends.json_reader import JsonReader, refuse_constant
from adapter.errors import MalformedAnswer

T = TypeVar("T")

RESULT_TYPES = ("vector", "scalar", "matrix", "string")
# What a kept sample costs in memory: its label map, its float and its slots in the tuples; each label's slot in the
# map; each distinct string (and its characters). Checked with tracemalloc against vectors of 2 and 8 labels.
SAMPLE_BYTES = 170
LABEL_BYTES = 20
STRING_BYTES = 50
RESULT_BYTES = 1024  # a result however small, with its entry in a cache: an empty one is not free
_LAST_TIMESTAMP = 253402300799  # 9999-12-31T23:59:59Z: the last second a Kubernetes timestamp can show
_MISSING = object()
# Answers up to this size are decoded in one call when they are well-formed vectors (below); at most a few ms.
WHOLE_DECODE_BYTES = 256 * 1024
# A series listing is decoded this many characters at a time (JsonReader.batches): about half a millisecond each
SERIES_BATCH_CHARS = 64 * 1024
_NAME = frozenset(["__name__"])
_DICT, _LIST, _STR, _PAIR, _NUMBER = {dict}, {list}, {str}, {2}, {int, float}


class Sample(NamedTuple):
    labels: Mapping[str, str]
    timestamp: float
    value: str


class Samples(Sequence[Sample]):
    """A result's samples, kept as three flat tuples and handed out as ``Sample``s.

    A tuple of 200,000 label maps is one object to the garbage collector, where 200,000 sample tuples are 200,000
    (a tuple holding a dict is never untracked): full collections with such a result alive took 22 ms instead of
    111 ms, and during the parse the event loop's longest pause fell from 59 to 16 ms.
    """

    __slots__ = ("labels", "timestamps", "values")

    def __init__(
        self,
        labels: tuple[Mapping[str, str], ...] = (),
        timestamps: tuple[float, ...] = (),
        values: tuple[str, ...] = (),
    ) -> None:
        self.labels, self.timestamps, self.values = labels, timestamps, values

    def __len__(self) -> int:
        return len(self.values)

    @overload
    def __getitem__(self, index: int) -> Sample: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Sample]: ...

    def __getitem__(self, index: int | slice) -> Sample | Sequence[Sample]:
        if isinstance(index, slice):
            return Samples(self.labels[index], self.timestamps[index], self.values[index])
        return Sample(self.labels[index], self.timestamps[index], self.values[index])

    def __iter__(self) -> Iterator[Sample]:
        return map(Sample, self.labels, self.timestamps, self.values)

    def having(self, label: str, names: Container[str] | None) -> Iterator[Sample]:
        """The samples whose ``label`` is one of ``names`` (None: any non-empty value), in order.

        The search runs in C iterators, without a Python step per sample: 16 ms for 140,000 samples, where iterating
        them takes 40 (the provider wants a few pods out of an answer that may hold every pod in the cluster).
        """
        return map(self.__getitem__, itertools.compress(range(len(self.values)), self._wanted(label, names)))

    def named(self, label: str, names: Container[str] | None) -> Iterator[tuple[str, float, str]]:
        """(``label``'s value, timestamp, value) of the samples ``having`` finds, without building a ``Sample`` for
        each: the custom metrics path needs only these three (1,000 samples: about 1 ms less per request)."""
        found = list(map(operator.methodcaller("get", label), self.labels))
        return itertools.compress(zip(found, self.timestamps, self.values, strict=True), self._select(found, names))

    def _wanted(self, label: str, names: Container[str] | None) -> Iterator[bool]:
        return self._select(map(operator.methodcaller("get", label), self.labels), names)

    @staticmethod
    def _select(found: Iterable[str | None], names: Container[str] | None) -> Iterator[bool]:
        return map(bool, found) if names is None else map(names.__contains__, found)


@dataclass(frozen=True, slots=True, weakref_slot=True)
class QueryResult:
    result_type: str
    samples: Samples
    warnings: tuple[str, ...] = ()
    weight: int = RESULT_BYTES  # bytes of memory it holds, roughly: what caches count it as
    infos: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Reply(Generic[T]):
    """An answer's envelope; ``data`` is read only from successful answers."""

    status: str
    data: T | None = None
    error_type: str = ""
    error: str = ""
    # what the server remarks beside its data: warnings (Thanos: a store that did not answer, so the data may be
    # partial; Prometheus 2.49+: a list cut by limit) and, from newer Prometheus releases, info-level notes
    warnings: tuple[str, ...] = ()
    infos: tuple[str, ...] = ()


def query_reply(body: bytes | bytearray) -> Reply[QueryResult]:
    """The answer to ``/api/v1/query``."""
    reply = _whole_vector(body) if len(body) <= WHOLE_DECODE_BYTES else None
    if reply is None:
        reply = _reply(body, _query_data)
    result = None
    if reply.data is not None:
        result_type, samples, weight = reply.data
        result = QueryResult(result_type, samples, reply.warnings, RESULT_BYTES + weight, reply.infos)
    return Reply(reply.status, result, reply.error_type, reply.error, reply.warnings, reply.infos)


def _whole_vector(body: bytes | bytearray) -> Reply[tuple[str, Samples, int]] | None:
    """A successful vector answer decoded in one C call and checked with C iterators, without a Python step per
    series: at 1,000 series 0.9 ms where reading it series by series takes 4.9. None for anything else (an error,
    another result type, any deviation from the documented shape), which the series-by-series reader then reads
    and, where the shape is wrong, says where."""
    try:
        answer = json.loads(body, parse_constant=refuse_constant)
        data = answer["data"]
        if answer["status"] != "success" or data["resultType"] != "vector":
            return None
        result, warnings, infos = data["result"], answer.get("warnings", []), answer.get("infos", [])
        if type(result) is not list or type(warnings) is not list or type(infos) is not list:
            return None
        metrics = tuple(map(operator.itemgetter("metric"), result))
        pairs = tuple(map(operator.itemgetter("value"), result))
        if not (_types(metrics) <= _DICT and _types(pairs) <= _LIST and set(map(len, pairs)) <= _PAIR):
            return None
        timestamps, values = tuple(map(operator.itemgetter(0), pairs)), tuple(map(operator.itemgetter(1), pairs))
        label_values = itertools.chain.from_iterable(map(dict.values, metrics))
        if not (_types(values) <= _STR and _types(label_values) <= _STR and _types([*warnings, *infos]) <= _STR):
            return None
        if not _types(timestamps) <= _NUMBER or not 0 <= min(timestamps, default=0) <= max(timestamps, default=0):
            return None
        if max(timestamps, default=0) > _LAST_TIMESTAMP:
            return None
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError):
        return None
    labels = sum(map(len, metrics))
    weight = SAMPLE_BYTES * len(values) + (LABEL_BYTES + STRING_BYTES) * labels + STRING_BYTES * len(values)
    samples = Samples(metrics, tuple(map(float, timestamps)), values)
    return Reply("success", ("vector", samples, weight), warnings=tuple(warnings), infos=tuple(infos))


def _types(values: Iterable[object]) -> set[type]:
    return set(map(type, values))


def names_reply(body: bytes | bytearray) -> Reply[list[str]]:
    """The answer to ``/api/v1/labels`` or ``/api/v1/label/<name>/values``: a list of strings."""
    return _reply(body, lambda r: _strings(r, "data"))


# A series name → the sets of label names its series carry (each set once): what discovery needs of /api/v1/series.
SeriesShapes = Mapping[str, frozenset[frozenset[str]]]


class SeriesListing(NamedTuple):
    shapes: SeriesShapes
    entries: int  # series in the answer: a store that cuts a list at its limit says so only by this (VictoriaMetrics)


def series_reply(body: bytes | bytearray) -> Reply[SeriesListing]:
    """The answer to ``/api/v1/series``, reduced as it is read to each series name and the label names its series
    carry: the values, which make up most of the answer, are dropped a batch of series at a time."""
    return _reply(body, _series_shapes)


def _series_shapes(r: JsonReader) -> SeriesListing:
    found: set[tuple[str, frozenset[str]]] = set()
    count = 0
    for first, batch in r.batches("data", SERIES_BATCH_CHARS):
        # checked and reduced by C iterators; only a batch that fails the check is walked, to say where
        series = cast(list[dict[str, str]], batch)  # once the check below has passed
        if not (_types(batch) <= _DICT and _types(itertools.chain.from_iterable(map(dict.values, series))) <= _STR):
            for index, labels in enumerate(batch, first):
                if type(labels) is not dict or not all(type(v) is str for v in labels.values()):
                    _malformed(f"data[{index}] is not an object of label values")
        count += len(batch)
        names = map(dict.get, series, itertools.repeat("__name__"), itertools.repeat(""))
        found.update(zip(names, map(frozenset, series), strict=True))
    shapes: dict[str, set[frozenset[str]]] = {}
    for name, keys in found:
        if name:
            shapes.setdefault(name, set()).add(keys - _NAME)
    return SeriesListing({name: frozenset(sets) for name, sets in shapes.items()}, count)


def _reply(body: bytes | bytearray, read_data: Callable[[JsonReader], T]) -> Reply[T]:
    try:
        text = body.decode()
    except UnicodeDecodeError:
        _malformed("the answer is not UTF-8 text")
    r = JsonReader(text)
    if r.at == len(text):
        _malformed("the answer is empty")
    fields: dict[str, str] = {}
    data: T | None = None
    warnings: tuple[str, ...] = ()
    infos: tuple[str, ...] = ()
    for key in r.members("the answer"):
        if key == "data" and fields.get("status", "success") == "success":
            data = read_data(r)
        elif key in ("status", "errorType", "error"):
            fields[key] = _string(r.value(), key)
        elif key == "warnings":
            warnings = tuple(_strings(r, "warnings"))
        elif key == "infos":
            infos = tuple(_strings(r, "infos"))
        else:
            r.value(depth=2)  # whatever later versions add
    r.end()
    status = fields.get("status")
    if status not in ("success", "error"):
        _malformed("status is missing or neither success nor error")
    if status == "success" and data is None:
        _malformed("data is missing")
    return Reply(status, data, fields.get("errorType", ""), fields.get("error", ""), warnings, infos)


def _query_data(r: JsonReader) -> tuple[str, Samples, int]:
    result_type: object = None
    vector: _Vector | None = None
    result: object = _MISSING
    for key in r.members("data"):
        if key == "resultType":
            result_type = r.value()
        elif key == "result" and result_type == "vector":
            vector = _Vector.read(r)  # Prometheus sends the type first, so a vector is converted as it is read
        elif key == "result":
            result = r.value(depth=2)
        else:
            r.value(depth=2)
    if result_type not in RESULT_TYPES:
        _malformed(f"data.resultType is missing or not one of {', '.join(RESULT_TYPES)}")
    if vector is None and result is _MISSING:
        _malformed("data.result is missing")
    if result_type == "vector":
        if vector is None:
            vector = _Vector.of(result)
        return "vector", vector.samples(), vector.weight
    if result_type == "scalar":
        timestamp, value = _pair(result, "data.result")
        return "scalar", Samples(({},), (timestamp,), (value,)), SAMPLE_BYTES
    return str(result_type), Samples(), 0  # matrix and string: the client refuses them as metric queries


class _Vector:
    """A vector's samples, checked one series at a time."""

    def __init__(self) -> None:
        self.labels: list[dict[str, str]] = []
        self.timestamps: list[float] = []
        self.values: list[str] = []
        # Each distinct string once: label names repeat in every series and most values in many (namespace, model,
        # GPU index). Measured on 140,000 DCGM series: 72 MB held instead of 112, and 35 ms to free instead of 64.
        self._strings: dict[str, str] = {}
        self._label_count = 0

    @classmethod
    def read(cls, r: JsonReader) -> _Vector:
        vector = cls()
        for index in r.elements("data.result"):
            vector.add(r.value(), index)
        return vector

    @classmethod
    def of(cls, result: object) -> _Vector:
        """From a result decoded before its type was known."""
        if not isinstance(result, list):
            _malformed("data.result is not an array")
        vector = cls()
        for index, item in enumerate(result):
            vector.add(item, index)
        return vector

    def add(self, item: object, index: int) -> None:
        if type(item) is not dict:
            _malformed(f"data.result[{index}] is not an object")
        metric = item.get("metric")
        if type(metric) is not dict:
            _malformed(f"data.result[{index}].metric is missing or not an object")
        if not all(type(v) is str for v in metric.values()):
            _malformed(f"data.result[{index}].metric has a label value that is not a string")
        timestamp, value = _pair(item.get("value"), f"data.result[{index}].value")
        once, values = self._strings.setdefault, metric.values()
        self.labels.append(dict(zip(map(once, metric, metric), map(once, values, values), strict=True)))
        self.timestamps.append(timestamp)
        self.values.append(once(value, value))
        self._label_count += len(metric)

    def samples(self) -> Samples:
        return Samples(tuple(self.labels), tuple(self.timestamps), tuple(self.values))

    @property
    def weight(self) -> int:
        strings = self._strings
        return (
            SAMPLE_BYTES * len(self.values) + LABEL_BYTES * self._label_count + STRING_BYTES * len(strings)
            + sum(map(len, strings))
        )  # fmt: skip


def _pair(pair: object, where: str) -> tuple[float, str]:
    if type(pair) is not list or len(pair) != 2:
        _malformed(f"{where} is missing or not a [timestamp, value] pair")
    timestamp, value = pair
    if type(timestamp) not in (int, float) or not 0 <= timestamp <= _LAST_TIMESTAMP:
        _malformed(f"{where} has a timestamp that is not a number of seconds from 1970 to 9999")
    if type(value) is not str:
        _malformed(f"{where} has a value that is not a string")
    return float(timestamp), value


def _string(value: object, where: str) -> str:
    if type(value) is not str:
        _malformed(f"{where} is not a string")
    return value


def _strings(r: JsonReader, where: str) -> list[str]:
    return [_string(r.value(), f"{where}[{index}]") for index in r.elements(where)]


def _malformed(problem: str) -> NoReturn:
    raise MalformedAnswer(problem)
