"""Opening one source safely and reading its bytes, decompressed when its content says so.

A source is opened without blocking and must be a regular file (a FIFO or a device named
as a source would never end). gzip and zstd are recognised by their magic numbers, never
by the name, and decompressed in bounded steps: every read is checked against the
decompressed-size and ratio bounds, and a stream that ends inside a compressed frame is
reported as truncated (zstd's own reader would end there silently).
"""

from __future__ import annotations

import gzip
import io
import os
import stat
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final, Protocol

import zstandard

from retryscope.instrumentation.ingest.limits import (
    RATIO_GRACE_BYTES,
    IngestLimits,
    LimitExceeded,
)

GZIP_MAGIC: Final = b"\x1f\x8b"
ZSTD_MAGIC: Final = b"\x28\xb5\x2f\xfd"
_ZSTD_FEED: Final = 512
"""Compressed bytes given to zstd per step: a step yields at most 16 MiB (128 KiB blocks
of 4 bytes), so one step of a bomb stays small."""
_ZSTD_WINDOW: Final = 1 << 27
"""Largest zstd window accepted (libzstd's default limit): bounds the decoder's memory."""


class SourceError(Exception):
    """A source cannot be read at all (vanished, unreadable, not a regular file, a symlink
    loop); the message names it and says why."""


class TruncatedStream(Exception):
    """A compressed stream ended inside a frame (a file still being written, or cut)."""


@dataclass(frozen=True, slots=True)
class Identity:
    """What the file system says about an open source."""

    device: int
    inode: int
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, fd: int) -> Identity:
        st = os.fstat(fd)
        return cls(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def open_source(path: Path) -> tuple[IO[bytes], Identity]:
    """The open file and its identity; :class:`SourceError` when it cannot be a source."""
    name = os.fspath(path)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        raise SourceError(f"{name}: vanished before it was read (or a dangling link)") from None
    except OSError as exc:
        reason = "a symbolic link loop" if exc.errno == 40 else exc.strerror or str(exc)
        raise SourceError(f"{name}: cannot be opened: {reason}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise SourceError(f"{name}: not a regular file (a FIFO, socket or device)")
        os.set_blocking(fd, True)
        identity = Identity.of(fd)
        return os.fdopen(fd, "rb", buffering=0), identity
    except BaseException:
        os.close(fd)
        raise


class Readable(Protocol):
    def read(self, size: int, /) -> bytes: ...


class _Counted(io.RawIOBase):
    """A raw file that counts the bytes read from it."""

    def __init__(self, raw: Readable) -> None:
        super().__init__()
        self.raw = raw
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        into = getattr(self.raw, "readinto", None)
        if into is not None:
            n = int(into(buffer) or 0)
        else:
            data = self.raw.read(len(buffer))
            n = len(data)
            buffer[:n] = data
        self.count += n
        return n


class _Zstd:
    """Concatenated zstd frames, decompressed in small steps; a stream that ends inside a
    frame raises :class:`TruncatedStream` once the complete data before it is read."""

    def __init__(self, raw: Readable) -> None:
        self.raw = raw
        self.dctx = zstandard.ZstdDecompressor(max_window_size=_ZSTD_WINDOW)
        self.obj = self.dctx.decompressobj()
        self.in_frame = False
        self.pending = b""
        self.surplus = bytearray()

    def read(self, size: int, /) -> bytes:
        """Up to ``size`` (positive) bytes; what one step gives beyond them is kept."""
        out = self.surplus
        while len(out) < size:
            chunk = self.pending or self.raw.read(_ZSTD_FEED)
            self.pending = b""
            if not chunk:
                if self.in_frame:
                    if out:
                        break  # report the truncation on the next read, after this data
                    raise TruncatedStream("the zstd stream ends inside a frame")
                break
            if self.obj.eof:
                self.obj = self.dctx.decompressobj()
            self.in_frame = True
            try:
                out += self.obj.decompress(chunk)
            except zstandard.ZstdError as exc:
                raise ValueError(f"corrupt zstd data: {exc}") from None
            if self.obj.eof:
                self.in_frame = False
                self.pending = self.obj.unused_data
        self.surplus = out[size:]
        return bytes(out[:size])


class Budget:
    """The decompressed-size and ratio bounds of one source, shared by its outer stream
    and its compressed frames."""

    def __init__(self, limits: IngestLimits) -> None:
        self.limits = limits
        self.compressed = 0
        self.produced = 0

    def account(self, compressed: int, produced: int) -> None:
        self.compressed += compressed
        self.produced += produced
        limits = self.limits
        if self.produced > limits.max_decompressed_bytes:
            raise LimitExceeded(
                f"decompresses to more than {limits.max_decompressed_bytes} bytes "
                f"({IngestLimits.named('max_decompressed_bytes')})"
            )
        if self.produced > RATIO_GRACE_BYTES and self.produced > limits.max_ratio * max(
            self.compressed, 1
        ):
            raise LimitExceeded(
                f"decompresses more than {limits.max_ratio:g} times its size "
                f"({self.produced} bytes from {self.compressed}; "
                f"{IngestLimits.named('max_ratio')})"
            )


def frame_payload(payload: bytes, budget: Budget) -> bytes:
    """One length-prefixed frame's message: decompressed when it is a zstd or gzip frame (the
    file exporter's ``compression: zstd``), at most ``max_message_bytes``."""
    if not (payload.startswith(ZSTD_MAGIC) or payload.startswith(GZIP_MAGIC)):
        return payload
    cap = budget.limits.max_message_bytes
    stream = Logical(io.BytesIO(payload), budget)
    parts: list[bytes] = []
    size = 0
    while part := stream.read(1 << 20):
        size += len(part)
        if size > cap:
            raise LimitExceeded(
                f"a compressed frame holds more than {cap} bytes "
                f"({IngestLimits.named('max_message_bytes')})"
            )
        parts.append(part)
    return b"".join(parts)


class Logical:
    """A source's content: the file itself, or its gzip/zstd decompression (recognised
    by the magic number, and kept only when the data after it decompresses: a text line
    that happens to start with the magic bytes is read as text), read within the
    decompressed-size and ratio bounds."""

    def __init__(self, raw: IO[bytes], budget: Budget) -> None:
        self.budget = budget
        self._truncated: str | None = None
        self._stopped: LimitExceeded | None = None
        self._first = b""
        self._open(raw, plain=False)

    def _open(self, raw: IO[bytes], *, plain: bool) -> None:
        self.counted = _Counted(raw)
        self._accounted = 0
        buffered = io.BufferedReader(self.counted)
        magic = b"" if plain else buffered.peek(4)[:4]
        self.compression: str | None = None
        self.stream: Readable = buffered
        if magic.startswith(GZIP_MAGIC):
            self.compression, self.stream = "gzip", gzip.GzipFile(fileobj=buffered, mode="rb")
        elif magic == ZSTD_MAGIC:
            self.compression, self.stream = "zstd", _Zstd(buffered)
        if self.compression is None:
            return
        try:
            self._first = self._read(1)
        except (zlib.error, gzip.BadGzipFile, ValueError):
            raw.seek(0)  # not compressed after all
            self._open(raw, plain=True)
        except TruncatedStream as exc:
            self._truncated = str(exc)

    def _read(self, size: int) -> bytes:
        """Up to ``size`` bytes; data decompressed before a truncation is returned first
        and the truncation raised on the next read."""
        if not isinstance(self.stream, gzip.GzipFile):
            return self.stream.read(size)
        out = bytearray()
        while len(out) < size:
            try:
                piece = self.stream.read1(size - len(out))
            except EOFError:
                if not out:
                    raise TruncatedStream("the gzip stream ends inside a member") from None
                self._truncated = "the gzip stream ends inside a member"
                break
            if not piece:
                break
            out += piece
        return bytes(out)

    @property
    def raw_bytes(self) -> int:
        """Bytes read from the file so far."""
        return self.counted.count

    def read(self, size: int) -> bytes:
        if self._truncated is not None:
            raise TruncatedStream(self._truncated)
        if self._stopped is not None:
            raise self._stopped
        first, self._first = self._first[:size], self._first[size:]
        try:
            data = first + self._read(size - len(first)) if len(first) < size else first
        except TruncatedStream as exc:
            if not first:
                raise
            data, self._truncated = first, str(exc)
        except (zlib.error, gzip.BadGzipFile) as exc:
            raise ValueError(f"corrupt gzip data: {exc}") from None
        if self.compression is not None and data:
            compressed = self.counted.count - self._accounted
            self._accounted = self.counted.count
            before = self.budget.produced
            try:
                self.budget.account(compressed, len(data))
            except LimitExceeded as exc:  # the data up to the bound first, the error next
                self._stopped = exc
                return data[: max(0, self.budget.limits.max_decompressed_bytes - before)]
        return data
