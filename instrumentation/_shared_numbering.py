"""A logical request's numbering, shared with the processes it forks.

A child forked inside a request (a fork-based ``multiprocessing.Pool`` or
``ProcessPoolExecutor`` opened inside an attempt) inherits the request with its counters:
every child would number its first send as the same transport attempt and the same
operation as its siblings, and the analytics would read distinct calls as resends of one
another. So when a process forks inside a request, that request's counters (attempt,
route and sibling ordinals per layer, and operations per parent attempt) move to memory
the parent and every child it forks share (an anonymous shared ``mmap`` guarded by a
process-shared semaphore), and every process numbers from them: ordinals stay unique and
dense across processes. The same memory says when the request has ended, so a child that
outlives it (a pool's worker, reused by later requests) stops stamping with it. A request
that never forks never pays for it.
"""

from __future__ import annotations

import marshal
import mmap
import multiprocessing
import struct
from collections.abc import Hashable, Iterable, Mapping
from typing import Final

_SIZE: Final = 1 << 20
"""Bytes reserved for one request's counters (only the pages written are resident)."""
_LENGTH: Final = struct.Struct("<I")
_ENDED: Final = 0
"""Offset of the byte set once the request has ended (in the process that opened it)."""
_COUNTS: Final = 1
"""Offset of the counters' length, then the marshalled counters."""
_WAIT_S: Final = 5.0
"""How long a process waits for another one's allocation (one that died holding it never
releases it: allocations then fail, contained, rather than hang the application)."""

Key = tuple[Hashable, ...]
"""A counter's key: plain str/int/None tuples (marshalled)."""


class NumberingUnavailable(RuntimeError):
    """The shared counters cannot be used (full, or held by a process that died)."""


class SharedNumbering:
    """Counters shared by a process and the children it forks after creating them."""

    __slots__ = ("_lock", "_memory")

    def __init__(self, counts: Mapping[Key, int]) -> None:
        self._lock = multiprocessing.get_context("fork").Lock()
        self._memory = mmap.mmap(-1, _SIZE)  # MAP_SHARED: the same pages after a fork
        self._store(dict(counts))

    def next(self, keys: Iterable[Key]) -> tuple[int, ...]:
        """Increment each of ``keys`` (all or none) and return their new values."""
        if not self._lock.acquire(timeout=_WAIT_S):
            raise NumberingUnavailable("the shared numbering stayed held by another process")
        try:
            counts = self._load()
            values = []
            for key in keys:
                counts[key] = value = counts.get(key, 0) + 1
                values.append(value)
            self._store(counts)
            return tuple(values)
        finally:
            self._lock.release()

    def end(self) -> None:
        """The request ended: every process sharing it stops stamping with it."""
        self._memory[_ENDED] = 1

    def ended(self) -> bool:
        return self._memory[_ENDED] == 1

    def counts(self) -> dict[Key, int]:
        """A snapshot of every counter."""
        if not self._lock.acquire(timeout=_WAIT_S):
            raise NumberingUnavailable("the shared numbering stayed held by another process")
        try:
            return self._load()
        finally:
            self._lock.release()

    def _load(self) -> dict[Key, int]:
        (length,) = _LENGTH.unpack_from(self._memory, _COUNTS)
        start = _COUNTS + _LENGTH.size
        # only this request's processes write this anonymous memory
        counts: dict[Key, int] = marshal.loads(self._memory[start : start + length])  # noqa: S302
        return counts

    def _store(self, counts: dict[Key, int]) -> None:
        data = marshal.dumps(counts)
        start = _COUNTS + _LENGTH.size
        if start + len(data) > _SIZE:
            raise NumberingUnavailable(f"more counters than {_SIZE} bytes hold")
        self._memory[start : start + len(data)] = data
        _LENGTH.pack_into(self._memory, _COUNTS, len(data))
