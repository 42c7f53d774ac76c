"""One row per logical request whether it has one request span, several (a redelivered
message opens the same logical request twice) or none (its request span never arrived)."""

from __future__ import annotations

import duckdb

from tests.recorder import MS, T0, Clock, Recorder


def _request_rows(con: duckdb.DuckDBPyConnection) -> dict[str, tuple[object, ...]]:
    con.scoped()
    rows = con.execute(
        "SELECT logical_request_id, epoch_ns(started_at), epoch_ns(ended_at), has_request_span,"
        " terminal, tenant, operation, entry_route FROM request_base"
    ).fetchall()
    ids = [str(r[0]) for r in rows]
    assert len(ids) == len(set(ids)), f"a request has several rows: {sorted(ids)}"
    return {str(r[0]): tuple(r[1:]) for r in rows}


def test_one_row_per_request_from_one_many_or_no_request_spans(recorder: Recorder) -> None:
    with recorder.request(Clock(T0), logical_request_id="single", tenant="t1") as req:
        recorder.attempt(req, "primary", ms=100)

    # the same logical request opened twice, 10 s apart; its entry route is the first
    # top-level attempt's
    with recorder.request(Clock(T0 + 1000 * MS), logical_request_id="twice", tenant="t2") as req:
        recorder.attempt(req, "first", ms=100)
    with recorder.request(Clock(T0 + 11_000 * MS), logical_request_id="twice", tenant="t2") as req:
        recorder.attempt(req, "second", ms=300)

    def body(r: object) -> None:
        recorder.attempt(r, "orphan-route", ms=50)  # type: ignore[arg-type]

    recorder.unfinished(
        recorder.request(Clock(T0 + 20_000 * MS), logical_request_id="orphan", tenant="t3"), body
    )

    rows = _request_rows(recorder.connect())
    assert rows["single"] == (T0, T0 + 100 * MS, True, "complete", "t1", "chat", "primary")
    assert rows["twice"] == (
        T0 + 1000 * MS,
        T0 + 11_300 * MS,
        True,
        "complete",
        "t2",
        "chat",
        "first",
    )
    # no request span: times, tenant and operation from the attempts, no terminal
    assert rows["orphan"] == (
        T0 + 20_000 * MS,
        T0 + 20_050 * MS,
        False,
        None,
        "t3",
        "chat",
        "orphan-route",
    )
    assert len(rows) == 3
