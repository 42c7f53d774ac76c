"""The figures' SQL rules (``analytics/sql/model/macros.sql``) at their boundaries, and the
analytics guide's "Where each figure is defined" pointing at each definition's line."""

from __future__ import annotations

import re
from fnmatch import fnmatchcase
from pathlib import Path

import duckdb
import pytest

from retryscope.analytics import REPORT_KEYS, _macros

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "guides" / "analytics.md"
MACROS = ROOT / "analytics" / "sql" / "model" / "macros.sql"
HELPERS = {"rs_ratio", "rs_ms", "rs_request_key", "rs_dim", "rs_rollup_hour", "rs_rollup_selects"}
"""Macros that decide no figure (arithmetic, keys, slices, the rollups' grain)."""


@pytest.fixture(scope="module")
def con() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    _macros.install_macros(con)
    return con


def _values(con: duckdb.DuckDBPyConnection, expression: str, rows: str, names: str) -> list[object]:
    """``expression`` over each row of the VALUES list ``rows`` (columns ``names``)."""
    query = f"SELECT {expression} FROM (VALUES {rows}) t({names})"
    return [value for (value,) in con.execute(query).fetchall()]


def _aggregate(con: duckdb.DuckDBPyConnection, expression: str, rows: str, names: str) -> object:
    (value,) = _values(con, expression, rows, names)
    return value


def test_sends_and_operations_are_counted_over_the_sends_only(
    con: duckdb.DuckDBPyConnection,
) -> None:
    rows = "('a', TRUE, NULL), ('b', TRUE, 2), ('c', TRUE, 2), ('d', FALSE, 3)"
    names = "span_id, is_leaf, op"
    assert _aggregate(con, "rs_sends(span_id, is_leaf)", rows, names) == 3
    # ordinals run 1..k: the largest is the count; a send without one is operation 1
    assert _aggregate(con, "rs_operations(op, is_leaf)", rows, names) == 2
    assert _aggregate(con, "rs_operations(op, is_leaf)", "('a', TRUE, NULL)", names) == 1
    assert _aggregate(con, "rs_operations(op, is_leaf)", "('d', FALSE, 3)", names) == 0


def test_resends_and_amplification_at_one_send_per_operation(
    con: duckdb.DuckDBPyConnection,
) -> None:
    rows = "(1, 2), (2, 2), (3, 2), (0, 0)"
    assert _values(con, "rs_resends(s, o)", rows, "s, o") == [0, 0, 1, 0]
    assert _values(con, "rs_amplification(s, o)", rows, "s, o") == [0.5, 1.0, 1.5, 0.0]


def test_a_routes_resends_are_its_sends_that_repeat(con: duckdb.DuckDBPyConnection) -> None:
    rows = "('a', FALSE), ('b', TRUE), ('c', NULL), ('d', TRUE)"
    assert _aggregate(con, "rs_repeat_sends(s, r)", rows, "s, r") == 2
    assert _aggregate(con, "rs_repeat_sends(s, r)", "('a', FALSE)", "s, r") == 0


def test_nesting_needs_a_retry_at_two_layers(con: duckdb.DuckDBPyConnection) -> None:
    assert _values(con, "rs_retried(n)", "(1), (2)", "n") == [False, True]
    assert _aggregate(con, "rs_multiplication(n)", "(3), (3), (1)", "n") == 9
    assert _aggregate(con, "rs_multiplication(n)", "(1), (1)", "n") == 1
    assert _values(con, "rs_nested(k)", "(1), (2)", "k") == [False, True]


def test_fallback_quality_degraded_and_unverified(con: duckdb.DuckDBPyConnection) -> None:
    rows = (
        "(TRUE, TRUE, TRUE), (TRUE, FALSE, TRUE), (TRUE, TRUE, FALSE), (FALSE, FALSE, TRUE),"
        " (NULL, TRUE, TRUE)"
    )
    names = "c, b, d"
    assert _values(con, "rs_fallback_quality(c, b, d)", rows, names) == [
        True, False, False, False, None,
    ]  # fmt: skip
    assert _values(con, "rs_fallback_degraded(c, b, d)", rows, names) == [
        False, True, False, False, False,
    ]  # fmt: skip
    assert _values(con, "rs_fallback_unverified(c, b, d)", rows, names) == [
        False, False, False, False, True,
    ]  # fmt: skip
    assert _values(con, "rs_fallback_answer(a, f)", "(TRUE, TRUE), (FALSE, TRUE)", "a, f") == [
        True,
        False,
    ]


def test_deadline_exhaustion_and_a_success_at_the_deadline(
    con: duckdb.DuckDBPyConnection,
) -> None:
    terminals = "('stop_deadline'), ('stop_attempt_budget'), (NULL)"
    assert _values(con, "rs_deadline_exhausted(t)", terminals, "t") == [True, False, None]
    # the deadline wins a tie
    rows = "('success', 999), ('success', 1000), ('retryable', 1000)"
    assert _values(con, "rs_late(e, 1000)", rows, "o, e") == [False, True, True]
    assert _values(con, "rs_late_success(o, e, 1000)", rows, "o, e") == [False, True, False]


def test_cost_measured_before_reserved_and_wasted_when_not_accepted(
    con: duckdb.DuckDBPyConnection,
) -> None:
    rows = "(5, 9, NULL), (NULL, 9, NULL), (NULL, NULL, NULL), (5, NULL, TRUE), (0, NULL, FALSE)"
    names = "actual, reserved, estimated"
    assert _values(con, "rs_cost_micros(actual, reserved)", rows, names) == [5, 9, 0, 5, 0]
    assert _values(con, "rs_cost_is_estimate(actual, reserved, estimated)", rows, names) == [
        False, True, False, True, False,
    ]  # fmt: skip
    assert _values(con, "rs_has_cost(actual, reserved)", rows, names) == [
        True, True, False, True, True,
    ]  # fmt: skip
    spent = "(10, TRUE), (5, FALSE), (7, FALSE)"
    assert _aggregate(con, "rs_wasted_micros(c, a)", spent, "c, a") == 12
    assert _aggregate(con, "rs_wasted_micros(c, a)", "(10, TRUE)", "c, a") == 0


def test_retries_after_a_failure_and_opaque_ownership(con: duckdb.DuckDBPyConnection) -> None:
    rows = "(TRUE, 'success'), (TRUE, 'retryable'), (TRUE, NULL), (FALSE, 'retryable')"
    assert _values(con, "rs_retry_after_failure(r, p)", rows, "r, p") == [
        False, True, True, False,
    ]  # fmt: skip
    kinds = "('rate_limited', 'retryable'), (NULL, 'retryable'), (NULL, NULL)"
    assert _values(con, "rs_after_kind(k, p)", kinds, "k, p") == [
        "rate_limited", "retryable", "unknown",
    ]  # fmt: skip
    assert _aggregate(con, "rs_successes(o)", "('success'), ('retryable'), (NULL)", "o") == 1
    owners = "(NULL, 3), ('harness', 0), ('harness', NULL), ('harness', 1)"
    assert _values(con, "rs_opaque_ownership(w, n)", owners, "w, n") == [
        False, False, False, True,
    ]  # fmt: skip


def test_a_gateways_retries_are_its_attempts_beyond_the_first(
    con: duckdb.DuckDBPyConnection,
) -> None:
    rows = "(NULL), (0), (1), (2), (4)"
    assert _values(con, "rs_gateway_retries(a)", rows, "a") == [0, 0, 0, 1, 3]


def _section() -> str:
    text = GUIDE.read_text(encoding="utf-8")
    return text.split("\n## Where each figure is defined\n", 1)[1].split("\n## ", 1)[0]


def test_the_guide_links_each_figure_to_its_definitions_line() -> None:
    links = re.findall(r"\[`(\w+)`\]\(([^)#]+)#L(\d+)\)", _section())
    assert links
    wrong = []
    for name, target, line in links:
        lines = (GUIDE.parent / target).read_text(encoding="utf-8").splitlines()
        if int(line) > len(lines) or not re.search(rf"\b{name}\b", lines[int(line) - 1]):
            wrong.append((name, f"{target}#L{line}"))
    assert wrong == []


def test_the_guide_names_every_rule_macro() -> None:
    defined = set(re.findall(r"CREATE OR REPLACE MACRO (\w+)", MACROS.read_text(encoding="utf-8")))
    linked = set(re.findall(r"\[`(rs_\w+)`\]", _section()))
    assert defined - HELPERS == linked


def test_the_guide_names_report_keys_of_the_contract() -> None:
    rows = [line.split(" | ") for line in _section().splitlines() if line.startswith("| ")]
    named = [key for row in rows[1:] for key in re.findall(r"`([^`]+)`", row[1])]
    assert named
    paths = [k.path for k in REPORT_KEYS]
    assert [k for k in named if not any(fnmatchcase(p, k) for p in paths)] == []
