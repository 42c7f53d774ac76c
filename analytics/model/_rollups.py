"""Small rollups of the model kept beside a model cache's tables, which the headline
figures read instead of the per-request tables (:mod:`retryscope.analytics._headline`).

Each build of a time partition (each request partition of it) writes the rollups of its
requests (:data:`ROLLUPS`: ``sql/model/rollup_*.sql``, per hour of a request's start,
tenant, operation and the routes it made an attempt on, the additive parts of the
figures) beside its per-request tables, as it writes them: the rollups of a maintained
model are there as soon as its partitions are. A request whose spans fall in more than
one partition has its rows of each partition replaced by those built from all its spans
(:mod:`._store`); so the ``across`` folder holds the rollups of those rebuilt rows beside
the rollups of the partitions' rows of the same requests with every part negated
(:func:`write_across`), and the sum over every row is the rollup of the model's tables.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

import duckdb

from retryscope.analytics._queries import load, sql_string
from retryscope.analytics.model._cache import RECONCILED, STRADDLERS, DirectoryStore, parquet
from retryscope.analytics.model._scripts import ROLLUP_KEYS, ROLLUPS

KEYS: Final = ("hour", "tenant", "operation", "routes")
"""The grain every rollup shares (``rollup_cost`` adds the currency)."""
_FACTS: Final = ("all_request_facts", "all_attempt_facts")
"""What the rollups' queries read (the views of one build's tables)."""

Copy = Callable[[duckdb.DuckDBPyConnection, str, Path], None]


def write(cur: duckdb.DuckDBPyConnection, file: Callable[[str], Path], copy: Copy) -> None:
    """Write the rollups of the build whose tables ``cur``'s views ``all_request_facts``
    and ``all_attempt_facts`` name, each to ``file(rollup)`` through ``copy``."""
    cur.execute(load(ROLLUP_KEYS))
    for name in ROLLUPS:
        copy(cur, f"(\n{load(name)}\n)", file(name))
    cur.execute(f"DROP TABLE temp.main.{ROLLUP_KEYS}")


def write_across(con: duckdb.DuckDBPyConnection, store: DirectoryStore, folder: Path) -> None:
    """Write to ``folder`` (a staged ``across`` folder holding the straddlers and their
    reconciled tables) the corrections that make the partitions' rollups those of the
    model: the rollups of the reconciled rows, and those of the partitions' rows of the
    same requests (each build's apart, as its own rollup counted them) negated."""
    straddlers = parquet([str(folder / f"{STRADDLERS}.parquet")])
    cur = con.cursor()
    try:
        parts = []
        for table in _FACTS:
            # a build's rows of one request are told from another build's by their file's
            # folder and request partition (<table>-<i>.parquet): the key h becomes one per
            # request and build
            files = store.unit_files(table)
            build = f"parse_dirpath(filename) || replace(parse_filename(filename), '{table}', '')"
            cur.execute(
                f"CREATE OR REPLACE TEMP VIEW rs_units_{table} AS "
                f"SELECT * EXCLUDE (filename) REPLACE (hash(h, {build}) AS h) "
                f"FROM read_parquet({_list(files)}, union_by_name = true, filename = true) "
                f"SEMI JOIN {straddlers} s USING (h)"
            )
        for table in _FACTS:
            cur.execute(f"CREATE OR REPLACE TEMP VIEW {table} AS SELECT * FROM rs_units_{table}")
        cur.execute(load(ROLLUP_KEYS))
        for name in ROLLUPS:
            cur.execute(f"CREATE OR REPLACE TEMP TABLE rs_negated_{name} AS {load(name)}")
        reconciled = [folder / f"{RECONCILED}{table}.parquet" for table in _FACTS]
        if all(p.exists() for p in reconciled):
            for table, path in zip(_FACTS, reconciled, strict=True):
                cur.execute(
                    f"CREATE OR REPLACE TEMP VIEW {table} AS SELECT * FROM {parquet([str(path)])}"
                )
            cur.execute(load(ROLLUP_KEYS))
            parts = [f"SELECT * FROM ({load(name)})" for name in ROLLUPS]
        for k, name in enumerate(ROLLUPS):
            negated = (
                f"SELECT {', '.join(_keys(name))}, "
                f"-COLUMNS(* EXCLUDE ({', '.join(_keys(name))})) FROM rs_negated_{name}"
            )
            rows = " UNION ALL BY NAME ".join([*parts[k : k + 1], negated])
            store.copy(cur, f"({rows})", folder / f"{name}.parquet")
    finally:
        cur.close()


def _keys(name: str) -> tuple[str, ...]:
    return (*KEYS, "currency") if name == "rollup_cost" else KEYS


def _list(files: Sequence[str]) -> str:
    return "[" + ", ".join(sql_string(f) for f in files) + "]"


def point(con: duckdb.DuckDBPyConnection, store: DirectoryStore) -> None:
    """Views on ``con`` named as :data:`ROLLUPS` over the rollups of the model ``store``
    names (its partitions' and the corrections of its ``across`` folder), when every
    partition holds them; otherwise none (the headline reads the model's tables)."""
    drop(con)
    for name in ROLLUPS:
        files = store.unit_files(name)
        if len(files) < len(store.unit_files("all_request_facts")) or store.across is None:
            return
        across = store.across / f"{name}.parquet"
        if not across.exists():
            return
        con.execute(
            f"CREATE OR REPLACE TEMP VIEW {name} AS SELECT * FROM {parquet([*files, str(across)])}"
        )


def drop(con: duckdb.DuckDBPyConnection) -> None:
    """Drop the rollups' views on ``con`` (a model without them is read next)."""
    for name in ROLLUPS:
        con.execute(f"DROP VIEW IF EXISTS temp.main.{name}")


def present(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether ``con``'s model has its rollups' views."""
    ((n,),) = con.execute(
        "SELECT count(*) FROM duckdb_views() WHERE temporary AND view_name IN ?",
        [list(ROLLUPS)],
    ).fetchall()
    return int(n) == len(ROLLUPS)
