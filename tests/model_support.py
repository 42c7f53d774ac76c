"""Helpers of the model tests: comparing two built models table by table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import duckdb

from retryscope.analytics.model import MODEL_TABLES


def model_differences(
    one: duckdb.DuckDBPyConnection, other: duckdb.DuckDBPyConnection
) -> dict[str, int]:
    """Per model table, the rows of one connection's model missing from the other's (as
    multisets, both ways): empty when the two models hold the same rows."""
    one.build()
    other.build()
    compare = duckdb.connect()
    missing = {}
    for table in MODEL_TABLES:
        compare.register("a", one.sql(f"SELECT * FROM {table}").to_arrow_table())
        compare.register("b", other.sql(f"SELECT * FROM {table}").to_arrow_table())
        ((n,),) = compare.execute(
            "SELECT (SELECT count(*) FROM (FROM a EXCEPT ALL FROM b))"
            " + (SELECT count(*) FROM (FROM b EXCEPT ALL FROM a))"
        ).fetchall()
        if n:
            missing[table] = n
    return missing


def model_rows(con: duckdb.DuckDBPyConnection) -> dict[str, int]:
    """Rows per model table (to check a comparison compared something)."""
    con.build()
    return {t: con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in MODEL_TABLES}


_HOLDER = """
import sys, time
from pathlib import Path
from retryscope.analytics.model._cache import DirectoryStore
from retryscope.analytics.model._progress import STAGE_PARTITIONS, Progress, shared
from retryscope.analytics.model._store import Modes
store = DirectoryStore(Path(sys.argv[1]), Modes())
with store.locked():
    shared(None, store.progress_file, 0o600)(
        Progress(STAGE_PARTITIONS, 2, 5, 3.0, 4.0, "date=2026-09-21/hour=15"))
    print("holding", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def hold_model_lock(directory: Path, seconds: float) -> subprocess.Popen[str]:
    """Another process holding the lock of the model ``directory`` for ``seconds``, as a
    build does, having shared its progress (partition 2 of 5, ``hour=15``); returns once
    it holds it."""
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(directory), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "holding"
    return holder
