"""The critical path rule (analytics/sql/lookups/critical_path.sql) at its boundaries, on
hand-built span trees: sequential and overlapping children, a child running past its
parent, one wholly outside it, parallel hedges, several roots, spans of no duration."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

import duckdb
import pytest

from retryscope.analytics._queries import load

T0 = datetime(2026, 9, 21, 14, 0, 0)
Span = tuple[str, str | None, float, float]
"""(span id, parent span id, start ms, end ms)."""


def critical(spans: list[Span]) -> dict[str, float | None]:
    """Each span's time on the critical path (None: off it), from the rule's query."""
    con = duckdb.connect()
    con.execute(
        "CREATE TEMP TABLE span_tree (position BIGINT, span_id VARCHAR, "
        "parent_span_id VARCHAR, start_time TIMESTAMP, end_time TIMESTAMP)"
    )
    con.executemany(
        "INSERT INTO span_tree VALUES (?, ?, ?, ?, ?)",
        [
            (i, span, parent, T0 + timedelta(milliseconds=a), T0 + timedelta(milliseconds=b))
            for i, (span, parent, a, b) in enumerate(spans)
        ],
    )
    rows = con.execute(load("critical_path")).fetchall()
    names = [d[0] for d in con.description or ()]
    out = [dict(zip(names, row, strict=True)) for row in rows]
    assert [r["span_id"] for r in out] == [s[0] for s in spans]  # in the tree's order
    ids = {s[0] for s in spans}
    roots = [(a, b) for _, parent, a, b in spans if parent not in ids]
    for r in out:  # the path spans the roots
        assert r["critical_total_ms"] == pytest.approx(
            max(b for _, b in roots) - min(a for a, _ in roots)
        )
        share = None if r["critical_ms"] is None else r["critical_ms"] / r["critical_total_ms"]
        assert r["critical_share"] == (None if share is None else pytest.approx(share))
    return {r["span_id"]: r["critical_ms"] for r in out}


def test_sequential_children_are_all_on_the_path() -> None:
    # b starts exactly when a ends: a determined when b could start
    assert critical([("r", None, 0, 100), ("a", "r", 0, 10), ("b", "r", 10, 60)]) == {
        "r": 40.0,
        "a": 10.0,
        "b": 50.0,
    }
    # a ends 1 ms after b started: it did not hold b up
    assert critical([("r", None, 0, 100), ("a", "r", 0, 11), ("b", "r", 10, 60)]) == {
        "r": 50.0,
        "a": None,
        "b": 50.0,
    }


def test_of_overlapping_children_the_last_to_finish_and_those_done_before_it_began() -> None:
    spans: list[Span] = [
        ("r", None, 0, 100),
        ("a", "r", 0, 40),  # overlaps b: off the path
        ("b", "r", 10, 60),
        ("c", "r", 70, 90),  # finished last
        ("d", "b", 20, 65),  # runs past its parent b: counted until b ended
    ]
    assert critical(spans) == {"r": 30.0, "a": None, "b": 10.0, "c": 20.0, "d": 40.0}


def test_a_child_running_past_its_parent_counts_until_the_parent_ended() -> None:
    assert critical([("r", None, 0, 100), ("a", "r", 50, 150)]) == {"r": 50.0, "a": 50.0}
    # its children too, within what is left of it
    assert critical([("r", None, 0, 100), ("a", "r", 50, 150), ("b", "a", 90, 140)]) == {
        "r": 50.0,
        "a": 40.0,
        "b": 10.0,
    }


def test_a_child_wholly_outside_its_parent_is_off_the_path() -> None:
    spans: list[Span] = [("r", None, 0, 100), ("x", "r", 120, 150), ("y", "r", 100, 130)]
    # x starts after r ended: off; y starts as r ends: on, for no time
    assert critical(spans) == {"r": 100.0, "x": None, "y": 0.0}


def test_parallel_hedges_the_one_that_finished_last() -> None:
    hedges: list[Span] = [
        ("r", None, 0, 100),
        ("attempt", "r", 0, 95),
        ("h1", "attempt", 0, 80),
        ("h2", "attempt", 20, 90),
    ]
    assert critical(hedges) == {"r": 5.0, "attempt": 25.0, "h1": None, "h2": 70.0}
    # two ending at the same instant: the one that started first
    tied: list[Span] = [("r", None, 0, 100), ("h1", "r", 0, 90), ("h2", "r", 20, 90)]
    assert critical(tied) == {"r": 10.0, "h1": 90.0, "h2": None}


def test_several_roots_share_one_path() -> None:
    # a parent not in the set makes a root; the path runs over the roots
    spans: list[Span] = [("a", None, 0, 10), ("b", "elsewhere", 20, 50)]
    assert critical(spans) == {"a": 10.0, "b": 30.0}  # the 10 ms between: neither's


def test_spans_of_no_duration_end_the_walk() -> None:
    spans: list[Span] = [("r", None, 0, 100), ("z1", "r", 50, 50), ("z2", "r", 50, 50)]
    assert critical(spans) == {"r": 100.0, "z1": 0.0, "z2": None}


def test_deep_nesting_and_shares_add_up() -> None:
    spans: list[Span] = [("s0", None, 0, 64.0)] + [
        (f"s{i}", f"s{i - 1}", float(i), 64.0 - i) for i in range(1, 32)
    ]
    got = critical(spans)
    assert all(v is not None for v in got.values())
    assert sum(v for v in got.values() if v is not None) == pytest.approx(64.0)


@pytest.mark.parametrize("seed", range(4))
def test_on_random_trees_the_path_accounts_for_the_whole_request(seed: int) -> None:
    """Under one root, the spans on the path account for all of its time, each for none
    less than nothing; children may overlap, run past their parent or tie."""
    rng = random.Random(seed)
    spans: list[Span] = [("s0", None, 0.0, 1000.0)]
    for i in range(1, 300):
        parent = spans[rng.randrange(len(spans))]
        start = float(rng.randrange(int(parent[2]), int(parent[3]) + 1))
        spans.append((f"s{i}", parent[0], start, float(rng.randrange(int(start), 1100))))
    got = critical(spans)
    on_path = [v for v in got.values() if v is not None]
    assert sum(on_path) == pytest.approx(1000.0)
    assert min(on_path) >= 0
    assert got["s0"] is not None
