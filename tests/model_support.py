"""Helpers of the model tests: comparing two built models table by table."""

from __future__ import annotations

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
