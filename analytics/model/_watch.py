"""Keeping a data set's cached model current while its files arrive (``retryscope model
PATH --watch``, and the UI's background watcher).

The exporter and ``retryscope ingest`` write each file under a hidden name and rename it
into place once it is complete (``instrumentation/export/_files.py``): a visible file is a
closed file. A time partition (a folder: an hour) is closed once the writer has moved on
to a later one, or once no file of it has been written for ``settle`` seconds (the
exporter cuts a file at least every ``rotate_age_s``, 60 s, while spans arrive): the
hour being written is not built again at every file it gets, only once it is done. So the
watcher looks at the data set's visible files every ``interval`` seconds (a ``stat``
each, no reads) and, when the files of its closed partitions changed, brings the model of
those up to date: the cache builds only the time partitions whose files changed (an hour
just closed, a late file in an older hour, a rewritten file), the requests across
partitions and the tables across requests (:mod:`._build`). A file that does not read is
named by the update and the rest of its partition is built. An analysis meanwhile builds
what the model lacks (the hour still being written) itself.

One watcher per model directory: a second one says which process holds the directory's
``watch.lock`` and waits for it to stop. (The model's own ``lock`` still orders every
writer, watchers and one-off builds alike.)
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Final

from retryscope._environment import WATCH_INTERVAL_S, WATCH_SETTLE_S
from retryscope._fs import make_dirs
from retryscope.analytics._dataset import is_visible
from retryscope.analytics.model._cache import hold
from retryscope.analytics.model._store import Modes

WATCH_LOCK: Final = "watch.lock"

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


def closed(files: Snapshot, settle: float, now: float) -> Snapshot:
    """The ``files`` of the closed time partitions (folders): those a file of a later
    partition follows in path order, and those none of whose files is newer than
    ``settle`` seconds before ``now`` (the modification times' clock)."""
    folders: dict[str, list[tuple[str, int, int]]] = {}
    for entry in files:
        folders.setdefault(os.path.dirname(entry[0]), []).append(entry)
    order = sorted(folders, key=lambda folder: folder.split(os.sep))
    quiet_since = (now - settle) * 1e9
    return frozenset(
        entry
        for k, folder in enumerate(order)
        if k < len(order) - 1 or max(m for _, _, m in folders[folder]) <= quiet_since
        for entry in folders[folder]
    )


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
    update: Callable[[Collection[str]], None],
    *,
    interval: float = WATCH_INTERVAL_S,
    settle: float = WATCH_SETTLE_S,
    stop: threading.Event | None = None,
    failed: Callable[[Exception], None] | None = None,
) -> None:
    """Call ``update(files)`` (bring the model of those files of ``root`` up to date) each
    time the files of the data set's closed partitions (:func:`closed`) changed, looking
    every ``interval`` seconds, until ``stop`` is set. An update that fails is handed to
    ``failed`` and tried again at the next change (a failure that does not pass, such as
    a full disk, is not retried in a loop)."""
    stop = stop or threading.Event()
    last: Snapshot = frozenset()
    while not stop.is_set():
        now = closed(snapshot(root), settle, time.time())
        if now and now != last:  # (a data set emptied keeps its last model)
            last = now
            try:
                update([name for name, _, _ in now])
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
