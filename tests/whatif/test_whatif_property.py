"""The what-if SQL against a direct Python replay, on demo traffic and random policies."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retryscope.analytics import connect
from retryscope.analytics.replay._whatif import WhatIf, whatif_requests
from retryscope.demo._run import generate


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> duckdb.DuckDBPyConnection:
    out: Path = tmp_path_factory.mktemp("whatif-prop") / "data"
    generate(out, 60, seed=11, progress=False)
    con, _ = connect(out)
    return con


def _owner_attempts(con: duckdb.DuckDBPyConnection) -> dict[str, list[dict[str, Any]]]:
    cursor = con.execute(
        "SELECT logical_request_id, layer, attempt_ordinal, epoch_ns(start_time) AS start_ns,"
        " coalesce(is_fallback, coalesce(route_priority, 0) > 0) AS fallback,"
        " coalesce(backoff_delay_ms, 0) AS delay, coalesce(retry_after_ms, 0) AS hint,"
        " outcome FROM physical_attempts"
    )
    names = [d[0] for d in cursor.description]
    by_request: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in cursor.fetchall():
        by_request[row[0]].append(dict(zip(names, row, strict=True)))
    rank = ("workflow", "queue", "harness", "adapter", "sdk", "transport")
    out = {}
    for rid, rows in by_request.items():
        top = min((r["layer"] for r in rows), key=rank.index)
        out[rid] = sorted(
            (r for r in rows if r["layer"] == top),
            key=lambda r: (r["attempt_ordinal"], r["start_ns"]),
        )
    return out


def _python_replay(attempts: dict[str, list[dict[str, Any]]], p: WhatIf) -> dict[str, Any]:
    window_ns = p.window_ms * 1_000_000
    firsts: dict[int, int] = defaultdict(int)
    retries: dict[int, list[tuple[int, str, int]]] = defaultdict(list)
    for rid, rows in attempts.items():
        for ordinal, r in enumerate(rows, 1):
            w = r["start_ns"] // window_ns
            if ordinal == 1:
                firsts[w] += 1
            else:
                retries[w].append((r["start_ns"], rid, ordinal))
    denied = set()
    for w, items in retries.items():
        allowed = math.floor(p.retry_budget * firsts[w]) if p.retry_budget is not None else None
        for rank, (_, rid, ordinal) in enumerate(sorted(items), 1):
            if allowed is not None and rank > allowed:
                denied.add((rid, ordinal))
    result = {}
    for rid, rows in attempts.items():
        cut, shift, why = None, 0, None
        for ordinal, r in enumerate(rows, 1):
            if p.max_attempts is not None and ordinal > p.max_attempts:
                cut, why = ordinal, "attempts"
            elif p.no_fallback and r["fallback"]:
                cut, why = ordinal, "fallback"
            elif (rid, ordinal) in denied:
                cut, why = ordinal, "budget"
            if cut is not None:
                break
        for ordinal, r in enumerate(rows, 1):
            if p.max_backoff_ms is not None and ordinal > 1:
                shift += max(0, r["delay"] - max(p.max_backoff_ms, r["hint"]))
        kept = rows if cut is None else rows[: cut - 1]
        result[rid] = (
            len(kept),
            why,
            cut,
            shift,
            any(r["outcome"] == "success" for r in kept),
        )
    return result


@settings(max_examples=25, deadline=None)
@given(
    max_attempts=st.none() | st.integers(1, 5),
    no_fallback=st.booleans(),
    max_backoff_ms=st.none() | st.integers(0, 2_000),
    retry_budget=st.none() | st.floats(0, 1),
    window_ms=st.sampled_from([1_000, 60_000, 3_600_000]),
)
def test_sql_replay_matches_python(
    demo: duckdb.DuckDBPyConnection,
    max_attempts: int | None,
    no_fallback: bool,
    max_backoff_ms: int | None,
    retry_budget: float | None,
    window_ms: int,
) -> None:
    p = WhatIf(max_attempts, no_fallback, max_backoff_ms, retry_budget, window_ms)
    sql = {
        r["logical_request_id"]: (
            r["replayed_attempts"],
            r["cut_by"],
            r["cut_at_attempt"],
            r["shift_ms"],
            r["replayed_status"] == "success",
        )
        for r in whatif_requests(demo, p).to_pylist()
    }
    assert sql == _python_replay(_owner_attempts(demo), p)
