"""The kubelet's List answer read from the wire, against the protobuf library reading the same bytes.

The library (with the stubs generated from the kubelet's api.proto, as the stand-in kubelet serves them) is the
oracle: whatever bytes it accepts, the collector's reader must accept and read to the same values; bytes it refuses
the reader may refuse, and refuses only with ``WireError``. The encoder below writes unknown fields by hand, from
the encoding's specification, so that nothing of the reader is borrowed to check it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent import futures
from contextlib import suppress
from pathlib import Path

import grpc
import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.errors import PodResourcesError
from collector.pods import kubelet_list
from collector.pods.kubelet_list import Claim, ClaimDevice, Container, Devices, Pod
from collector.pods.pod_resources import PodResourcesClient
from collector.pods.protowire import WireError
from harness.node.podresources import api_pb2


def read_by_library(response: api_pb2.ListPodResourcesResponse) -> list[Pod]:
    """What the collector needs of an answer, as the library read it."""
    return [
        Pod(
            pod.name,
            pod.namespace,
            tuple(
                Container(
                    c.name,
                    tuple(Devices(d.resource_name, tuple(d.device_ids)) for d in c.devices),
                    tuple(
                        Claim(
                            r.claim_name,
                            r.claim_namespace,
                            tuple(ClaimDevice(x.driver_name, x.pool_name, x.device_name) for x in r.claim_resources),
                        )
                        for r in c.dynamic_resources
                    ),
                )
                for c in pod.containers
            ),
        )
        for pod in response.pod_resources
    ]


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def key(number: int, kind: int) -> bytes:
    return varint(number << 3 | kind)


def length_delimited(number: int, payload: bytes) -> bytes:
    return key(number, 2) + varint(len(payload)) + payload


names = st.text(max_size=10)
numbers = st.integers(-(2**63), 2**63 - 1)
# field numbers no message of the API uses; a group holds unknown fields of its own
unknown_numbers = st.integers(6, 2**29 - 1)


@st.composite
def unknown_fields(draw: st.DrawFn, depth: int = 0) -> bytes:
    out = b""
    for _ in range(draw(st.integers(0, 3))):
        number = draw(unknown_numbers)
        kind = draw(st.sampled_from([0, 1, 2, 5] + ([3] if depth < 2 else [])))
        if kind == 0:
            out += key(number, 0) + varint(draw(st.integers(0, 2**64 - 1)))
        elif kind in (1, 5):
            width = 8 if kind == 1 else 4
            out += key(number, kind) + draw(st.binary(min_size=width, max_size=width))
        elif kind == 2:
            out += length_delimited(number, draw(st.binary(max_size=12)))
        else:
            out += key(number, 3) + draw(unknown_fields(depth + 1)) + key(number, 4)
    return out


@st.composite
def answers(draw: st.DrawFn) -> bytes:
    """A ListPodResourcesResponse with every field of the API set somewhere, and unknown fields in every pod and
    container and at the top, as a newer kubelet would send them."""
    response = b""
    for _ in range(draw(st.integers(0, 3))):
        pod = api_pb2.PodResources(name=draw(names), namespace=draw(names))
        containers = b""
        for _ in range(draw(st.integers(0, 3))):
            c = api_pb2.ContainerResources(name=draw(names))
            c.cpu_ids.extend(draw(st.lists(numbers, max_size=3)))
            for _ in range(draw(st.integers(0, 2))):
                memory = c.memory.add(memory_type=draw(names), size=draw(st.integers(0, 2**64 - 1)))
                memory.topology.nodes.add(ID=draw(numbers))
            for _ in range(draw(st.integers(0, 3))):
                devices = c.devices.add(resource_name=draw(names), device_ids=draw(st.lists(names, max_size=3)))
                devices.topology.nodes.add(ID=draw(numbers))
            for _ in range(draw(st.integers(0, 2))):
                claim = c.dynamic_resources.add(
                    class_name=draw(names), claim_name=draw(names), claim_namespace=draw(names)
                )
                for _ in range(draw(st.integers(0, 2))):
                    resource = claim.claim_resources.add(
                        driver_name=draw(names), pool_name=draw(names), device_name=draw(names)
                    )
                    resource.cdi_devices.add(name=draw(names))
                    if draw(st.booleans()):
                        resource.share_id = draw(names)
            containers += length_delimited(3, c.SerializeToString() + draw(unknown_fields()))
        response += length_delimited(1, pod.SerializeToString() + containers + draw(unknown_fields()))
    return response + draw(unknown_fields())


@settings(max_examples=300, deadline=None)
@given(answers())
def test_every_answer_reads_as_the_library_reads_it(answer: bytes) -> None:
    expected = read_by_library(api_pb2.ListPodResourcesResponse.FromString(answer))
    assert kubelet_list.parse(answer) == expected


@st.composite
def damaged(draw: st.DrawFn) -> bytes:
    answer = bytearray(draw(answers()))
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(answer)))
        how = draw(st.sampled_from(["cut", "flip", "insert", "delete"]))
        if how == "cut":
            del answer[at:]
        elif how == "flip" and at < len(answer):
            answer[at] = draw(st.integers(0, 255))
        elif how == "insert":
            answer[at:at] = draw(st.binary(min_size=1, max_size=4))
        else:
            del answer[at : at + draw(st.integers(1, 4))]
    return bytes(answer)


@settings(max_examples=1000, deadline=None)
@given(damaged())
def test_damaged_answers_are_read_as_the_library_reads_them_or_refused_by_name(answer: bytes) -> None:
    try:
        by_library = read_by_library(api_pb2.ListPodResourcesResponse.FromString(answer))
    except DecodeError:
        by_library = None
    if by_library is None:  # refused by the library: read or refused here, but refused only as WireError
        with suppress(WireError):
            kubelet_list.parse(answer)
    else:
        assert kubelet_list.parse(answer) == by_library


def test_a_field_sent_as_another_wire_type_is_skipped_and_the_last_value_of_a_string_wins() -> None:
    pod = key(1, 0) + varint(5) + length_delimited(1, b"first") + length_delimited(2, b"ml") + length_delimited(1, b"a")
    answer = length_delimited(1, pod)
    assert api_pb2.ListPodResourcesResponse.FromString(answer).pod_resources[0].name == "a"
    assert kubelet_list.parse(answer) == [Pod("a", "ml", ())]


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (key(1, 2) + varint(10) + b"abc", "field 1 needs 10 bytes at byte 2; 3 are left"),
        (key(0, 0) + b"\x01", "field number 0"),
        (key(7, 6) + b"\x01", "wire type 6, which does not exist"),
        (key(7, 0) + b"\xff" * 10 + b"\x01", "a varint longer than 10 bytes"),
        (key(7, 3) + key(8, 0) + b"\x05", "group 7 is never closed"),
        (key(7, 3) + key(8, 4), "group 7 closed as 8"),
        (key(7, 4), "field 7 closes a group that was never opened"),
        (
            length_delimited(1, length_delimited(3, length_delimited(2, length_delimited(2, b"ok") + key(9, 2)))),
            "pod_resources[0].containers[0].devices[0]: a varint cut short",
        ),
        (
            length_delimited(1, length_delimited(3, length_delimited(2, length_delimited(2, b"\xff")))),
            "pod_resources[0].containers[0].devices[0].device_ids[0]: not UTF-8",
        ),
        (
            length_delimited(1, length_delimited(3, length_delimited(5, length_delimited(4, key(2, 2) + b"\x09")))),
            "pod_resources[0].containers[0].dynamic_resources[0].claim_resources[0]: field 2 needs 9 bytes",
        ),
    ],
)
def test_bytes_that_are_not_an_answer_say_what_and_where(answer: bytes, words: str) -> None:
    with pytest.raises(DecodeError):
        api_pb2.ListPodResourcesResponse.FromString(answer)
    with pytest.raises(WireError) as info:
        kubelet_list.parse(answer)
    assert words in str(info.value)


def test_the_request_is_the_empty_message() -> None:
    assert api_pb2.ListPodResourcesRequest().SerializeToString() == kubelet_list.REQUEST


@pytest.fixture
def raw_kubelet(tmp_path: Path) -> Iterator[tuple[str, list[bytes]]]:
    """A real gRPC server whose List answers exactly the bytes a test puts in the list."""
    answers: list[bytes] = []
    socket_path = str(tmp_path / "kubelet.sock")
    handler = grpc.method_handlers_generic_handler(
        "v1.PodResourcesLister", {"List": grpc.unary_unary_rpc_method_handler(lambda request, context: answers[-1])}
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=[handler])
    server.add_insecure_port(f"unix://{socket_path}")
    server.start()
    yield socket_path, answers
    server.stop(grace=None).wait()


def test_a_kubelet_answer_that_is_not_a_message_is_data_loss_naming_where(raw_kubelet: tuple[str, list[bytes]]) -> None:
    socket_path, answers = raw_kubelet
    devices = length_delimited(1, b"nvidia.com/gpu") + length_delimited(2, b"GPU-8265e87e-95f8-2238-161a-22c2ab522eda")
    pod = length_delimited(1, b"trainer") + length_delimited(2, b"ml")
    container = length_delimited(1, b"main") + length_delimited(2, devices)
    answers.append(length_delimited(1, pod + length_delimited(3, container)))
    [assignment] = asyncio.run(PodResourcesClient(socket_path).fetch())
    assert (assignment.owner.namespace, assignment.owner.pod, assignment.owner.container) == ("ml", "trainer", "main")
    answers.append(length_delimited(1, pod + length_delimited(3, length_delimited(2, devices[:-3]))))
    with pytest.raises(PodResourcesError) as info:
        asyncio.run(PodResourcesClient(socket_path).fetch())
    assert info.value.kind == "DATA_LOSS"
    assert "not a ListPodResourcesResponse: pod_resources[0].containers[0].devices[0]: field 2 needs" in str(info.value)
