"""A JSON text read from the front one value at a time, for answers too large to decode in one call.

``json.loads`` is a single C call that holds the GIL until the whole text is decoded, so it stops the event loop
even when it runs in a worker thread. ``JsonReader`` walks the outer arrays and objects itself and hands each value
below them to the same C decoder: between two values the worker thread lets the event loop run. Errors are
``MalformedAnswer``s that say where the text broke, never what it held.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import NoReturn

from adapter.errors import MalformedAnswer

_SPACE = re.compile(r"[ \t\n\r]*")


def refuse_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")  # json accepts NaN and Infinity unless told not to


_DECODER = json.JSONDecoder(parse_constant=refuse_constant)


def _space_end(text: str, at: int) -> int:
    match = _SPACE.match(text, at)
    return match.end() if match else at


class JsonReader:
    """``at`` is where the next value starts. ``members`` and ``elements`` walk the object or array there; the
    caller reads each member or element (``value``, or a nested walk) before asking for the next."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.at = _space_end(text, 0)
        self._cuts = True  # whether ``batches`` may still look for places to cut
        self._bad_cut = -1  # the last place a cut failed

    def value(self, depth: int = 0) -> object:
        """The next value. Arrays and objects ``depth`` levels down are walked rather than decoded in one call."""
        head = self.text[self.at : self.at + 1]
        if depth > 0 and head == "[":
            return [self.value(depth - 1) for _ in self.elements("a value")]
        if depth > 0 and head == "{":
            return {key: self.value(depth - 1) for key in self.members("a value")}
        try:
            value, end = _DECODER.raw_decode(self.text, self.at)
        except RecursionError:
            raise MalformedAnswer("the answer is nested too deeply") from None
        except ValueError as e:  # a JSONDecodeError says where; a number or constant refused does not
            problem, where = getattr(e, "msg", e), getattr(e, "pos", self.at)
            raise MalformedAnswer(f"the answer is not valid JSON ({problem} at character {where})") from None
        self.at = _space_end(self.text, end)
        return value

    def members(self, where: str) -> Iterator[str]:
        """The name of each member of the object that is next."""
        if not self._take("{"):
            raise MalformedAnswer(f"{where} is not an object")
        if self._take("}"):
            return
        while True:
            key = self.value() if self.text.startswith('"', self.at) else None
            if not isinstance(key, str) or not self._take(":"):
                self._invalid()
            yield key
            if self._take("}"):
                return
            if not self._take(","):
                self._invalid()

    def elements(self, where: str) -> Iterator[int]:
        """The index of each element of the array that is next."""
        if not self._take("["):
            raise MalformedAnswer(f"{where} is not an array")
        if self._take("]"):
            return
        index = 0
        while True:
            yield index
            index += 1
            if self._take("]"):
                return
            if not self._take(","):
                self._invalid()

    def batches(self, where: str, size: int) -> Iterator[tuple[int, list[object]]]:
        """The elements of the array that is next, a batch at a time with the index of its first: each batch about
        ``size`` characters of text decoded in one C call, or a single element where the text cannot be cut into
        batches there. A Python step per element costs more than decoding it (a 4 MB series listing: 100 ms read
        element by element, 50 by ``json.loads`` whole), while one call over the whole text would hold the GIL for
        all of it."""
        first = 0
        for _ in self.elements(where):
            batch = self._batch(size)
            values = batch if batch is not None else [self.value()]
            yield first, values
            first += len(values)

    def _batch(self, size: int) -> list[object] | None:
        """The elements from ``at`` up to the first ``},{`` after ``size`` characters, or up to the array's end when
        it is near; None where that text is not a run of whole elements. A ``},{`` cut inside a string leaves the
        string unterminated, so a wrong cut cannot decode. ``at`` is left after the last element read."""
        start, text = self.at, self.text
        if not self._cuts or start <= self._bad_cut:
            return None
        cut = text.find("},{", start + size)
        try:
            if cut != -1:
                try:
                    values: list[object] = _DECODER.decode(f"[{text[start : cut + 1]}]")
                except ValueError:
                    self._bad_cut = cut  # element by element past it, then batches again
                    raise
                self.at = cut + 1
                return values
            if len(text) - start > 2 * size:
                self._cuts = False  # not compact flat objects: no later search can find a cut either
                return None
            values, end = _DECODER.raw_decode(f"[{text[start:]}")
        except (ValueError, RecursionError):
            return None
        self.at = start + end - 2  # at the array's "]"
        return values

    def end(self) -> None:
        """Nothing may follow the value read."""
        if self.at != len(self.text):
            self._invalid()

    def _take(self, char: str) -> bool:
        if not self.text.startswith(char, self.at):
            return False
        self.at = _space_end(self.text, self.at + 1)
        return True

    def _invalid(self) -> NoReturn:
        raise MalformedAnswer(f"the answer is not valid JSON (unexpected text at character {self.at})")
