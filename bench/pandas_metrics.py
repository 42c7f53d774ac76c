"""The headline figures computed two ways: DuckDB SQL over ``connect(path)`` and pandas.

Both follow the definitions of the report (README, "Report JSON"): the denominator is the
distinct logical request ids seen on attempt or logical request rows. pandas reads only the
columns a figure needs (as an analyst would), vectorised, no loops over rows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import duckdb
import pandas as pd

ROLES = ("attempt", "logical_request")

DUCKDB_SQL: dict[str, str] = {
    # receiver attempts (no attempt beneath them) per logical request, as the report counts
    "sends_per_request": """
        WITH a AS (
            SELECT logical_request_id, layer, attempt_ordinal, parent_layer,
                   parent_attempt_ordinal
            FROM spans WHERE span_role = 'attempt' AND logical_request_id IS NOT NULL
        ),
        parents AS (
            SELECT DISTINCT logical_request_id, parent_layer, parent_attempt_ordinal
            FROM a WHERE parent_layer IS NOT NULL
        )
        SELECT (SELECT count(*) FROM a ANTI JOIN parents p
                ON p.logical_request_id = a.logical_request_id AND p.parent_layer = a.layer
               AND p.parent_attempt_ordinal = a.attempt_ordinal)::DOUBLE
               / (SELECT count(DISTINCT logical_request_id) FROM spans
                  WHERE span_role IN ('attempt', 'logical_request'))""",
    "fallback_rate": """
        SELECT count(DISTINCT logical_request_id)
                   FILTER (WHERE span_role = 'attempt' AND is_fallback)::DOUBLE
               / count(DISTINCT logical_request_id)
        FROM spans WHERE span_role IN ('attempt', 'logical_request')""",
    "deadline_exhausted_rate": """
        SELECT count(*) FILTER (WHERE span_role = 'logical_request'
                                AND terminal = 'stop_deadline')::DOUBLE
               / count(DISTINCT logical_request_id)
        FROM spans WHERE span_role IN ('attempt', 'logical_request')""",
    "routes": """
        SELECT route_id, count(*) AS attempts,
               count(DISTINCT logical_request_id) AS logical_requests,
               count(*) FILTER (WHERE outcome = 'success') AS successes,
               bool_or(is_fallback) AS is_fallback
        FROM attempts WHERE route_id IS NOT NULL
        GROUP BY route_id ORDER BY min(route_priority) NULLS LAST, route_id""",
}


def _read(path: str, columns: list[str], roles: tuple[str, ...] = ROLES) -> pd.DataFrame:
    return pd.read_parquet(path, columns=columns, filters=[("span_role", "in", list(roles))])


def sends_per_request(path: str) -> float:
    """Receiver attempts (attempts no other attempt of the request names as its parent) per
    logical request."""
    key = ["logical_request_id", "layer", "attempt_ordinal"]
    df = _read(path, ["span_role", *key, "parent_layer", "parent_attempt_ordinal"])
    attempts = df.loc[df["span_role"] == "attempt", key].astype({"attempt_ordinal": "Int64"})
    with_parent = df[(df["span_role"] == "attempt") & df["parent_layer"].notna()]
    parents = (
        with_parent[["logical_request_id", "parent_layer", "parent_attempt_ordinal"]]
        .drop_duplicates()
        .set_axis(key, axis=1)
        .astype({"attempt_ordinal": "Int64"})
    )
    merged = attempts.merge(parents, on=key, how="left", indicator=True)
    receiver = int((merged["_merge"] == "left_only").sum())
    return receiver / df["logical_request_id"].nunique()


def fallback_rate(path: str) -> float:
    df = _read(path, ["span_role", "logical_request_id", "is_fallback"])
    on_fallback = (df["span_role"] == "attempt") & df["is_fallback"].eq(True)
    return df.loc[on_fallback, "logical_request_id"].nunique() / df["logical_request_id"].nunique()


def deadline_exhausted_rate(path: str) -> float:
    df = _read(path, ["span_role", "logical_request_id", "terminal"])
    exhausted = (df["span_role"] == "logical_request") & (df["terminal"] == "stop_deadline")
    return float(exhausted.sum()) / df["logical_request_id"].nunique()


def routes(path: str) -> list[tuple[Any, ...]]:
    df = _read(
        path,
        ["route_id", "logical_request_id", "outcome", "is_fallback", "route_priority"],
        ("attempt",),
    )
    df = df[df["route_id"].notna()]
    df = df.assign(success=df["outcome"] == "success")
    table = df.groupby("route_id").agg(
        attempts=("logical_request_id", "size"),
        logical_requests=("logical_request_id", "nunique"),
        successes=("success", "sum"),
        is_fallback=("is_fallback", "any"),
        priority=("route_priority", "min"),
    )
    table = table.reset_index().sort_values(["priority", "route_id"], na_position="last")
    return [
        (
            str(r.route_id),
            int(r.attempts),
            int(r.logical_requests),
            int(r.successes),
            bool(r.is_fallback),
        )
        for r in table.itertuples(index=False)
    ]


PANDAS: dict[str, Callable[[str], Any]] = {
    "sends_per_request": sends_per_request,
    "fallback_rate": fallback_rate,
    "deadline_exhausted_rate": deadline_exhausted_rate,
    "routes": routes,
}


def duckdb_figure(con: duckdb.DuckDBPyConnection, name: str) -> Any:
    rows = con.execute(DUCKDB_SQL[name]).fetchall()
    if name == "routes":
        return [(str(r), int(a), int(q), int(s), bool(f)) for r, a, q, s, f in rows]
    return float(rows[0][0])


def report(path: str) -> dict[str, Any]:
    """Every headline figure with pandas (what the report child of pandas computes)."""
    return {name: fn(path) for name, fn in PANDAS.items()}


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= 1e-9 * max(1.0, abs(a))
    return bool(a == b)
