"""Exporting beside a CPU-bound thread: a short GIL switch interval while a batch is written.

Converting and writing a batch releases the GIL many times (every Arrow kernel, every
write). A thread that releases the GIL gets it back only when the holder lets go; a
CPU-bound application thread lets go only when the interpreter asks it to, after the switch
interval (``sys.getswitchinterval()``, 5 ms by default). So each release costs the export
thread up to 5 ms, a 512-span batch tens of them, and next to one busy thread the exporter
falls behind: the batch processor's queue fills and drops spans (the convoy effect).

While at least one export is in progress the interval is lowered to ``switch_interval_s``
(``ExportConfig``), so the exporter gets the GIL back within it; the interpreter's value is
restored when the last export ends, unless the application changed it meanwhile (then its
value stays). Between exports nothing differs from the interpreter's own setting.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from retryscope._fork import reset_in_child


class _SwitchInterval:
    """The process's lowered-interval bookkeeping (one per process)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = 0  # exports in progress
        self._saved = 0.0  # the interval before the first of them
        self._set = 0.0  # the interval they set (0.0: none set)
        reset_in_child(self._after_fork)

    def _after_fork(self) -> None:
        """In a forked child: no export is in progress there (only the forking thread is
        copied); an interval a parent's export had lowered is put back."""
        self._lock = threading.Lock()
        if self._active and sys.getswitchinterval() == self._set:
            sys.setswitchinterval(self._saved)
        self._active, self._set = 0, 0.0

    def enter(self, interval: float) -> None:
        with self._lock:
            self._active += 1
            current = sys.getswitchinterval()
            if self._active == 1:
                self._saved, self._set = current, 0.0
            if interval < current:
                sys.setswitchinterval(interval)
                self._set = sys.getswitchinterval()  # as the interpreter rounded it

    def leave(self) -> None:
        with self._lock:
            self._active -= 1
            if self._active == 0 and self._set and sys.getswitchinterval() == self._set:
                sys.setswitchinterval(self._saved)


_STATE = _SwitchInterval()


@contextmanager
def responsive(interval_s: float) -> Iterator[None]:
    """Run the body with the GIL switch interval at most ``interval_s`` (0: unchanged)."""
    if not interval_s > 0:
        yield
        return
    _STATE.enter(interval_s)
    try:
        yield
    finally:
        _STATE.leave()
