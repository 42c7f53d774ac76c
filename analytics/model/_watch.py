"""Keeping a data set's cached model current while its files arrive (``retryscope model
PATH --watch``, and the UI's background watcher).

The exporter and ``retryscope ingest`` write each file under a hidden name and rename it
into place once it is complete (``instrumentation/export/_files.py``): a visible file is a
closed file. So the watcher looks at the data set's visible files every ``interval``
seconds (a ``stat`` each, no reads) and, when they changed, brings the model up to date:
the cache builds only the time partitions whose files changed (a new hour, a late file
in an older hour, a rewritten file), the requests across partitions and the tables
across requests (:mod:`._build`). A file that does not read is named by the update and
the rest of its partition is built.

One watcher per model directory: a second one says which process holds the directory's
``watch.lock`` and waits for it to stop. (The model's own ``lock`` still orders every
writer, watchers and one-off builds alike.)
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

from retryscope._fs import make_dirs
from retryscope.analytics._dataset import is_visible
from retryscope.analytics.model._cache import hold
from retryscope.analytics.model._store import Modes

WATCH_LOCK: Final = "watch.lock"
DEFAULT_INTERVAL_S: Final = 5.0
"""How often a watcher looks for closed files by default."""

Snapshot = frozenset[tuple[str, int, int]]


def snapshot(root: str) -> Snapshot:
    """The visible span files of the data set at ``root`` (those an analysis reads), each
    with its size and modification time."""
    path = Path(root)
    if path.is_file():
        candidates = [str(path)]  # (a missing root: none)
    else:
        candidates = []
        for dirpath, dirnames, filenames in os.walk(path):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            candidates += (os.path.join(dirpath, n) for n in filenames if is_visible(n))
    seen = set()
    for name in candidates:
        with contextlib.suppress(OSError):  # removed since it was listed
            st = os.stat(name)
            seen.add((name, st.st_size, st.st_mtime_ns))
    return frozenset(seen)


@contextlib.contextmanager
def sole_watcher(directory: Path, modes: Modes, say: Callable[[str], None]) -> Iterator[None]:
    """Hold ``directory``'s watcher lock for as long as the watch lasts; while another
    process holds it, ``say`` so once (naming it) and wait."""
    make_dirs(directory, modes.directory)
    path = directory / WATCH_LOCK
    fd = os.open(path, os.O_RDWR | os.O_CREAT, modes.file)
    told = False

    def waiting() -> None:
        nonlocal told
        if not told:
            told = True
            holder = path.read_text(encoding="utf-8").strip() or "unknown"
            say(f"another watcher (pid {holder}) keeps {directory} current: waiting for it to stop")

    try:
        os.fchmod(fd, modes.file)
        hold(fd, waiting)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)


def watch(
    root: str,
    update: Callable[[], None],
    *,
    interval: float = DEFAULT_INTERVAL_S,
    stop: threading.Event | None = None,
    failed: Callable[[Exception], None] | None = None,
) -> None:
    """Call ``update`` (bring the model of ``root`` up to date) once the data set has a
    visible file, then each time its visible files changed, looking every ``interval``
    seconds, until ``stop`` is set. An update that fails is handed to ``failed`` and
    tried again at the next change (a failure that does not pass, such as a full disk, is
    not retried in a loop)."""
    stop = stop or threading.Event()
    last: Snapshot = frozenset()
    while not stop.is_set():
        now = snapshot(root)
        if now != last:
            last = now
            try:
                update()
            except Exception as exc:
                if _interrupted(exc):
                    raise KeyboardInterrupt from exc
                if failed is None:
                    raise
                failed(exc)
        stop.wait(interval)


def _interrupted(exc: Exception) -> bool:
    """Whether ``exc`` is DuckDB's for a query stopped by Ctrl-C (SIGINT, which DuckDB
    takes while a query runs): the watch stops then, as it does between updates."""
    return isinstance(exc, RuntimeError) and str(exc) == "Query interrupted"
