"""The protobuf wire format, read by hand.

The collector reads one protobuf message, the kubelet's ``List`` answer, and the protobuf library cost 3.2 MB of
resident memory for it (its C extension and the generated module; docs/collector-bench.md). The format is small
(https://protobuf.dev/programming-guides/encoding/): a message is a run of fields, each a varint key (field number
<< 3 | wire type) and a value: a varint (type 0), 8 bytes (1), a varint length and that many bytes (2: strings,
bytes, embedded messages and packed numbers) or 4 bytes (5). Types 3 and 4 open and close a proto2 group, which a
reader that does not know the field skips whole.

Every field the collector reads is length-delimited (a string or an embedded message), so one call gives a message's
length-delimited values by field number and skips the rest. That behaves on the wire as the library does: a field
not read, or sent with another wire type, is skipped; bytes that are not a message raise ``WireError``, saying what
and where. One-byte keys and lengths, nearly all of them, take a path of their own: the answer is read every second.
"""

from __future__ import annotations

VARINT, I64, LEN, GROUP_START, GROUP_END, I32 = 0, 1, 2, 3, 4, 5
MAX_FIELD_NUMBER = (1 << 29) - 1
MAX_DEPTH = 100  # the library's recursion limit, here for nested groups

Fields = dict[int, list[memoryview]]


class WireError(ValueError):
    """Bytes that are not a protobuf message: what is wrong, and where, when a reader of embedded messages says."""

    def __init__(self, detail: str, where: str = "") -> None:
        super().__init__(f"{where}: {detail}" if where else detail)
        self.detail = detail
        self.where = where

    def within(self, field: str) -> WireError:
        """The same error seen one message further out, where the failing message is the value of ``field``."""
        return WireError(self.detail, f"{field}.{self.where}" if self.where else field)


def length_delimited(data: bytes | memoryview) -> Fields:
    """Each length-delimited value of one message, by field number, in order; every other field skipped."""
    view = memoryview(data)
    found: Fields = {}
    at, end = 0, len(view)
    while at < end:
        start = at
        key = view[at]
        at += 1
        if key >= 0x80:
            key, at = _varint(view, start)
        number, kind = key >> 3, key & 7
        if not 0 < number <= MAX_FIELD_NUMBER:
            raise WireError(f"field number {number} at byte {start}: numbers run from 1 to {MAX_FIELD_NUMBER}")
        if kind == LEN:
            stop = at + 1 + view[at] if at < end and view[at] < 0x80 else end + 1
            if stop <= end:  # a length under 128 that fits, inline: this loop reads every field of the answer
                value, at = view[at + 1 : stop], stop
            else:  # a longer length, or the error of one past the end
                value, at = _bytes(view, at, number)
            got = found.get(number)
            if got is None:
                found[number] = [value]
            else:
                got.append(value)
        elif kind == GROUP_START:
            at = _skip_group(view, at, number, depth=1)
        elif kind == GROUP_END:
            raise WireError(f"field {number} closes a group that was never opened (byte {start})")
        else:
            at = _skip(view, at, number, kind, start)
    return found


def text(value: memoryview, field: str) -> str:
    """The value of the string field ``field``; proto3 strings are UTF-8, and the library refuses one that is not."""
    try:
        return str(value, "utf-8")
    except UnicodeDecodeError as e:
        raise WireError(f"not UTF-8: {e}", field) from None


def _bytes(view: memoryview, at: int, number: int) -> tuple[memoryview, int]:
    length, at = _varint(view, at)
    if length > len(view) - at:
        raise WireError(f"field {number} needs {length} bytes at byte {at}; {len(view) - at} are left")
    return view[at : at + length], at + length


def _skip(view: memoryview, at: int, number: int, kind: int, start: int) -> int:
    """Past one value that is neither length-delimited nor a group."""
    if kind == VARINT:
        return _varint(view, at)[1]
    width = {I64: 8, I32: 4}.get(kind)
    if width is None:
        raise WireError(f"field {number} at byte {start} has wire type {kind}, which does not exist")
    if width > len(view) - at:
        raise WireError(f"field {number} needs {width} bytes at byte {at}; {len(view) - at} are left")
    return at + width


def _skip_group(view: memoryview, at: int, opened: int, depth: int) -> int:
    if depth > MAX_DEPTH:
        raise WireError(f"groups nested deeper than {MAX_DEPTH}")
    while at < len(view):
        start = at
        key, at = _varint(view, at)
        number, kind = key >> 3, key & 7
        # the library lets a field numbered 0 through inside a group it skips, and nowhere else
        if number > MAX_FIELD_NUMBER:
            raise WireError(f"field number {number} at byte {start}: numbers run up to {MAX_FIELD_NUMBER}")
        if kind == GROUP_END:
            if number != opened:
                raise WireError(f"group {opened} closed as {number} (byte {start})")
            return at
        if kind == GROUP_START:
            at = _skip_group(view, at, number, depth + 1)
        elif kind == LEN:
            at = _bytes(view, at, number)[1]
        else:
            at = _skip(view, at, number, kind, start)
    raise WireError(f"group {opened} is never closed")


def _varint(view: memoryview, at: int) -> tuple[int, int]:
    value = 0
    for shift in range(0, 70, 7):
        if at >= len(view):
            raise WireError(f"a varint cut short at byte {at}")
        byte = view[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value & 0xFFFF_FFFF_FFFF_FFFF, at
    raise WireError(f"a varint longer than 10 bytes ending at byte {at}")
