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
from datetime import datetime, timedelta
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


def relations(store: DirectoryStore) -> dict[str, str]:
    """SQL naming the rows of each of :data:`ROLLUPS` (its partitions' and the corrections
    of the ``across`` folder) and of the facts they are computed from (:data:`_FACTS`) in
    the model ``store`` names, when every partition holds its rollups; otherwise none
    (the headline reads the model's tables)."""
    found = {table: store.relation(table) for table in _FACTS}
    for name in ROLLUPS:
        files = store.unit_files(name)
        if len(files) < len(store.unit_files("all_request_facts")) or store.across is None:
            return {}
        across = store.across / f"{name}.parquet"
        if not across.exists():
            return {}
        found[name] = parquet([*files, str(across)])
    return found


def sum_over(
    cur: duckdb.DuckDBPyConnection,
    rollups: dict[str, str],
    whole: tuple[datetime | None, datetime | None],
    edges: Sequence[tuple[datetime, datetime]],
) -> None:
    """Views on the cursor ``cur`` named as :data:`ROLLUPS`: the rollup rows of the
    requests started within the ``whole`` hours [since, until) (None: unbounded), and the
    rollups of the requests started within the ``edges`` (parts of hours), computed now
    from the model's facts by the scripts a build writes them with."""
    since, until = whole
    cur.execute(
        "CREATE TEMP TABLE rs_whole_hours AS SELECT $since::TIMESTAMP AS since, "
        "$until::TIMESTAMP AS until",
        {"since": since, "until": until},
    )
    if edges:
        _edge_facts(cur, rollups, edges)
        cur.execute(load(ROLLUP_KEYS))
    for name in ROLLUPS:
        computed = f"\nUNION ALL BY NAME SELECT * FROM (\n{load(name)}\n)" if edges else ""
        cur.execute(
            f"CREATE TEMP VIEW {name} AS SELECT r.* FROM {rollups[name]} r, rs_whole_hours w "
            "WHERE rs_rollup_selects(r.hour, NULL, NULL, NULL, w.since, w.until, NULL, NULL, "
            f"NULL){computed}"
        )


def _edge_facts(
    cur: duckdb.DuckDBPyConnection,
    rollups: dict[str, str],
    edges: Sequence[tuple[datetime, datetime]],
) -> None:
    """Tables on ``cur`` named as :data:`_FACTS` holding the model's rows of the requests
    started within ``edges``. Their attempts are found among those whose request ended
    when one of them did (each attempt carries its request's end): the files of other
    hours are skipped by their statistics, not read (at 100 M attempts 0.1 s against
    1.5 s for every attempt's key)."""
    within = " OR ".join("(started_at >= ? AND started_at < ?)" for _ in edges)
    cur.execute(
        f"CREATE TEMP TABLE all_request_facts AS "
        f"SELECT * FROM {rollups['all_request_facts']} WHERE {within}",
        [t for edge in edges for t in edge],
    )
    ((first, last),) = cur.execute(
        "SELECT min(ended_at), max(ended_at) FROM all_request_facts"
    ).fetchall()
    # the ends are read to the microsecond (nanoseconds are cut): widened by one each way
    tick = timedelta(microseconds=1)
    cur.execute(
        f"CREATE TEMP TABLE all_attempt_facts AS SELECT a.* "
        f"FROM {rollups['all_attempt_facts']} a "
        "WHERE (a.request_ended_at BETWEEN $first AND $last OR a.request_ended_at IS NULL) "
        "AND a.h IN (SELECT h FROM all_request_facts)",
        {
            "first": None if first is None else first - tick,
            "last": None if last is None else last + tick,
        },
    )
