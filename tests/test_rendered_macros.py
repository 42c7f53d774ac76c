"""The SQL macros rendered from Python rule tables answer exactly as the Python rules do:
every HTTP status (and a send with no status), every layer and data boundary; a change to
a rule table changes the model cache's fingerprint."""

from __future__ import annotations

from dataclasses import replace

import duckdb
import pytest

from retryscope import http_rules as http
from retryscope.analytics import _macros
from retryscope.analytics.model._cache import model_fingerprint
from retryscope.vocabulary import BOUNDARY_RANK, Layer, Outcome, OutcomeKind

SPAN_STATUSES = ("UNSET", "OK", "ERROR")


def _python(
    status: int | None, span_status: str, idempotent: bool
) -> tuple[str | None, str | None]:
    """(outcome, kind) of one send by the recorder's rules."""
    if status is None:
        if span_status != "ERROR":
            return None, None
        kind: OutcomeKind | None = http.NO_RESPONSE_KIND
    else:
        kind = http.classify_status(status, idempotent=idempotent)
    if kind is None:
        return Outcome.SUCCESS.value, None
    return kind.family.value, kind.value


@pytest.fixture
def con() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    _macros.install_macros(con)
    return con


def test_every_http_status_is_classified_as_the_recorder_does(
    con: duckdb.DuckDBPyConnection,
) -> None:
    rows = con.execute(
        """
        SELECT s, st, i, rs_http_outcome(s, st, i), rs_http_outcome_kind(s, st, i)
        FROM (SELECT range::INTEGER AS s FROM range(0, 1000) UNION ALL SELECT NULL) a,
             unnest($statuses) b(st), unnest([false, true]) c(i)
        """,
        {"statuses": list(SPAN_STATUSES)},
    ).fetchall()
    assert len(rows) == 1001 * len(SPAN_STATUSES) * 2
    wrong = [
        (s, st, i, (outcome, kind), _python(s, st, i))
        for s, st, i, outcome, kind in rows
        if (outcome, kind) != _python(s, st, i)
    ]
    assert wrong == []


def test_the_status_table_covers_every_http_status_and_408_depends_on_idempotency() -> None:
    assert all(http.status_rule(s) is not None for s in range(100, 600))
    assert http.status_rule(99) is None
    assert http.status_rule(600) is None
    depends = [
        s
        for s in range(100, 600)
        if http.classify_status(s, idempotent=True) != http.classify_status(s, idempotent=False)
    ]
    assert depends == [408]


def test_ranks_are_the_vocabularys(con: duckdb.DuckDBPyConnection) -> None:
    layers = [layer.value for layer in Layer]
    got = con.execute(
        "SELECT list(rs_layer_rank(l) ORDER BY o) FROM unnest($l) WITH ORDINALITY t(l, o)",
        {"l": [*layers, "elsewhere"]},
    ).fetchall()[0][0]
    assert got == list(range(len(layers) + 1))
    boundaries = con.execute(
        "SELECT b, rs_boundary_rank(b) FROM unnest($b) t(b)",
        {"b": [*(b.value for b in BOUNDARY_RANK), "elsewhere"]},
    ).fetchall()
    assert dict(boundaries) == {**{b.value: r for b, r in BOUNDARY_RANK.items()}, "elsewhere": None}


def test_a_changed_status_table_changes_the_model_fingerprint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = model_fingerprint()
    rules = list(http.STATUS_RULES)
    rules[0] = replace(rules[0], statuses=range(200, 300))  # 3xx no longer a completed send
    monkeypatch.setattr(_macros, "STATUS_RULES", tuple(rules))
    _macros.macros_sql.cache_clear()
    try:
        after = model_fingerprint()
    finally:
        monkeypatch.undo()
        _macros.macros_sql.cache_clear()
    assert after != before
    assert model_fingerprint() == before
