"""The floor of an exact first report (issue #19 goal 1): the steps no exact model can skip.

Each step is the cheapest query that still does its join, sort or aggregate over every
attempt, reduced to a few rows so that nothing but the step is paid. The attempts' key
columns are read once into a narrow table, then:

* retry groups: each attempt's previous attempt in its group (a hash join on ordinal - 1,
  as the model finds it for groups numbered without gaps), the retries after a failure;
* leaves: the attempts with no attempt beneath them (an anti join);
* first sends: each operation's first send (an aggregate, joined back), the resends;
* rollup: one row per logical request with its attempt counts.

No report is built: the steps' sum against the one-pass baseline (``bench/one_pass.py``)
bounds how close to it a model computed from the spans at report time can get.
"""

from __future__ import annotations

import time
from typing import Any

import duckdb

KEYS = """
CREATE TEMP TABLE a AS
SELECT hash(logical_request_id) AS h, layer, parent_layer, parent_attempt_ordinal,
       attempt_ordinal, operation_ordinal, start_time, hash(span_id) AS sid, outcome
FROM read_parquet($glob, hive_partitioning = false)
WHERE span_role = 'attempt' AND logical_request_id IS NOT NULL
"""

STEPS = {
    "retry groups": """
        WITH k AS (
            SELECT hash(h, layer, parent_layer, parent_attempt_ordinal, operation_ordinal) AS g,
                   attempt_ordinal AS o, outcome, layer
            FROM a
        )
        SELECT k.layer, count(*) FILTER (WHERE p.outcome <> 'success')
        FROM k LEFT JOIN k p ON p.g = k.g AND p.o = k.o - 1
        GROUP BY 1
    """,
    "leaves": """
        WITH c AS (
            SELECT DISTINCT hash(h, parent_layer, parent_attempt_ordinal) AS k
            FROM a WHERE parent_layer IS NOT NULL
        )
        SELECT count(*) FROM a ANTI JOIN c ON c.k = hash(a.h, a.layer, a.attempt_ordinal)
    """,
    "first sends": """
        WITH f AS (
            SELECT hash(h, coalesce(operation_ordinal, 1)) AS k,
                   min({t: start_time, s: sid}) AS first
            FROM a GROUP BY 1
        )
        SELECT count(*) FILTER (WHERE {t: a.start_time, s: a.sid} IS DISTINCT FROM f.first)
        FROM a JOIN f ON f.k = hash(a.h, coalesce(a.operation_ordinal, 1))
    """,
    "rollup": """
        SELECT count(*), sum(n) FROM (
            SELECT h, count(*) AS n,
                   count(*) FILTER (WHERE layer = 'harness') AS harness,
                   count(*) FILTER (WHERE parent_layer IS NULL) AS top_level,
                   max(attempt_ordinal) AS ordinals, min(start_time) AS started,
                   max(operation_ordinal) AS operations,
                   count(*) FILTER (WHERE outcome = 'success') AS successes
            FROM a GROUP BY h
        )
    """,
}


def run(path: str) -> dict[str, Any]:
    """Seconds per step (``keys``: the narrow table) over the Parquet files under ``path``
    (a fresh connection, DuckDB's default settings)."""
    con = duckdb.connect(":memory:")
    try:
        con.execute("SET enable_progress_bar = false")
        began = time.perf_counter()
        con.execute(KEYS, {"glob": f"{path}/**/*.parquet"})
        steps = {"keys": time.perf_counter() - began}
        for name, sql in STEPS.items():
            start = time.perf_counter()
            con.execute(sql).fetchall()
            steps[name] = time.perf_counter() - start
        return {"steps": steps}
    finally:
        con.close()
