"""A source's content read once, in units: JSON lines, length-prefixed frames or one whole
document; every byte taken is hashed in order, so the digest is of exactly what was read.

A unit is taken only when it is complete: a line up to its newline, a frame whose length
prefix and payload are both there. What follows the last complete unit (a line still being
written, a truncated frame) is left untaken, so the ledger's prefix digest and resume point
both end at a unit boundary and the next run starts at the next unit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from retryscope.instrumentation.ingest._source import Logical, TruncatedStream
from retryscope.instrumentation.ingest.limits import LimitExceeded

CHUNK: Final = 1 << 20
BLOCK_BYTES: Final = 8 << 20
"""JSON lines are decoded in blocks of about this size (bounded memory, few native calls)."""


@dataclass(frozen=True, slots=True)
class Lines:
    """Complete lines (``data`` ends with a newline); the first is line ``first``."""

    first: int
    data: bytes


@dataclass(frozen=True, slots=True)
class LongLine:
    """Line ``number``, longer than the bound: taken (hashed) and dropped, never held."""

    number: int
    size: int


@dataclass(frozen=True, slots=True)
class Frame:
    number: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class BadLength:
    """A length prefix of 0 or beyond the bound: the framing is lost from here on."""

    number: int
    length: int


@dataclass(frozen=True, slots=True)
class Tail:
    """What follows the last complete unit at the end of the data (left untaken)."""

    number: int
    data: bytes


class Reader:
    """The content of one source, taken from the front; ``offset`` bytes taken so far,
    ``digest`` of exactly those, ``unit`` the number of the next line or frame."""

    def __init__(self, logical: Logical) -> None:
        self.logical = logical
        self.hash = hashlib.sha256()
        self.offset = 0
        self.unit = 1
        self.buffer = bytearray()
        self.eof = False
        self.truncated: str | None = None
        """Why the data ended early (a compressed stream cut inside a frame), if it did."""
        self.stopped: LimitExceeded | None = None
        """The bound that ended the data early, if one did (what came before is read)."""

    def digest(self) -> str:
        return self.hash.copy().hexdigest()

    def fill(self, size: int) -> bool:
        """Read until ``size`` bytes are buffered; False when the data ends first."""
        while len(self.buffer) < size and not self.eof:
            try:
                chunk = self.logical.read(max(CHUNK, size - len(self.buffer)))
            except TruncatedStream as exc:
                chunk, self.truncated = b"", str(exc)
            except LimitExceeded as exc:
                chunk, self.stopped = b"", exc
            if chunk:
                self.buffer += chunk
            else:
                self.eof = True
        return len(self.buffer) >= size

    def head(self, size: int) -> bytes:
        self.fill(size)
        return bytes(self.buffer[:size])

    def take(self, size: int) -> bytes:
        """The next ``size`` buffered bytes, hashed and counted as read."""
        with memoryview(self.buffer) as view:
            data = view[:size].tobytes()
        del self.buffer[:size]
        self.hash.update(data)
        self.offset += len(data)
        return data

    def skip_to(self, end: int) -> bool:
        """Take bytes up to offset ``end`` without keeping them; False when the data ends
        first."""
        while self.offset < end:
            if not self.fill(min(CHUNK, end - self.offset)) and not self.buffer:
                return False
            self.take(min(len(self.buffer), end - self.offset))
        return True

    def at_end(self) -> bool:
        return not self.fill(1)

    def whole(self, limit: int) -> bytes | None:
        """All the remaining data when it is at most ``limit`` bytes (taken), else None
        (nothing taken)."""
        if self.fill(limit + 1):
            return None
        return self.take(len(self.buffer))

    def json_lines(self, max_line: int) -> Iterator[Lines | LongLine | Tail]:
        """Blocks of complete lines; a line longer than ``max_line`` as :class:`LongLine`;
        the unfinished last line (no newline yet) as :class:`Tail`."""
        block = min(BLOCK_BYTES, max_line)
        while True:
            self.fill(block)
            if not self.buffer:
                return
            cut = self.buffer.rfind(b"\n")
            if cut >= 0:
                data = self.take(cut + 1)
                first = self.unit
                self.unit += data.count(b"\n")
                if len(data) > max_line:
                    yield from self._split_long(first, data, max_line)
                else:
                    yield Lines(first, data)
            elif self.eof:
                yield Tail(self.unit, bytes(self.buffer))
                return
            elif len(self.buffer) > max_line:
                yield self._drop_line()
            else:
                self.fill(len(self.buffer) + CHUNK)

    def _split_long(self, first: int, data: bytes, max_line: int) -> Iterator[Lines | LongLine]:
        """A block that may hold a line over the bound (only when the bound is below the
        block size): its lines, with the long ones dropped."""
        kept: list[bytes] = []
        start = first
        for number, line in enumerate(data.split(b"\n")[:-1], first):
            if len(line) + 1 > max_line:
                if kept:
                    yield Lines(start, b"".join(kept))
                yield LongLine(number, len(line) + 1)
                kept, start = [], number + 1
            else:
                kept.append(line + b"\n")
        if kept:
            yield Lines(start, b"".join(kept))

    def _drop_line(self) -> LongLine:
        number, size = self.unit, 0
        while True:
            cut = self.buffer.find(b"\n")
            if cut >= 0:
                size += len(self.take(cut + 1))
                self.unit += 1
                return LongLine(number, size)
            size += len(self.take(len(self.buffer)))
            if not self.fill(CHUNK) and not self.buffer:
                return LongLine(number, size)  # ended without a newline: taken whole

    def frames(self, max_message: int) -> Iterator[Frame | BadLength | Tail]:
        """Messages behind 4-byte big-endian length prefixes (the Collector file exporter's
        ``proto`` format, and its ``compression: zstd`` output)."""
        while True:
            if not self.fill(4):
                if self.buffer:
                    yield Tail(self.unit, bytes(self.buffer))
                return
            length = int.from_bytes(self.buffer[:4], "big")
            if length == 0 or length > max_message:
                yield BadLength(self.unit, length)
                return
            if not self.fill(4 + length):
                yield Tail(self.unit, bytes(self.buffer))
                return
            number = self.unit
            payload = self.take(4 + length)[4:]
            self.unit += 1
            yield Frame(number, payload)
