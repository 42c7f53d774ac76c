"""A model directory for one connection's life: where a model too large to stay
uncompressed in memory is built when no model cache was given.

A model in memory (:class:`~._store.MemoryStore`) keeps up to its uncompressed budget as
built and compresses the rest, which holds the whole model in the process: 5.4 GiB for
the 10 M-attempt bench set under DuckDB's default memory limit. The same build into a
model directory of Parquet files takes as long and 1.0 GiB (``bench/RESULTS.md``,
2026-12-05). So when the data set's model would exceed the budget, it is built into a
directory under DuckDB's temporary directory (where DuckDB spills), which is removed when
the connection is closed and garbage-collected, when the connection builds another model,
or when the process that made it exits (not a forked child); nothing of it is read by a
later run.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref

import duckdb

PREFIX = "retryscope-model-"
"""The name of each temporary model directory starts with it."""

_held: weakref.WeakKeyDictionary[
    duckdb.DuckDBPyConnection, weakref.finalize[..., duckdb.DuckDBPyConnection]
] = weakref.WeakKeyDictionary()


def temporary_directory(con: duckdb.DuckDBPyConnection) -> str:
    """A new empty directory for ``con``'s model (the one it held before removed), under
    ``con``'s ``temp_directory`` when that exists, else the system's."""
    release(con)
    ((setting,),) = con.execute("SELECT current_setting('temp_directory')").fetchall()
    parent = str(setting or "")
    directory = tempfile.mkdtemp(prefix=PREFIX, dir=parent if os.path.isdir(parent) else None)
    _held[con] = weakref.finalize(con, _remove, directory, os.getpid())
    return directory


def _remove(directory: str, owner: int) -> None:
    """Remove ``directory`` in the process that made it (a forked child exiting leaves
    its parent's model in place)."""
    if os.getpid() == owner:
        shutil.rmtree(directory, ignore_errors=True)


def release(con: duckdb.DuckDBPyConnection) -> None:
    """Remove the temporary model directory ``con`` holds, if any (its model's views must
    be gone: they read its files)."""
    held = _held.pop(con, None)
    if held is not None:
        held()
