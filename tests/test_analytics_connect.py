"""``connect`` reads nothing up front, and reconnecting a connection to another data set
rebuilds the analytics tables on next use instead of reusing the old ones."""

from __future__ import annotations

from pathlib import Path

from retryscope.analytics import Filters, build_report, connect
from tests.recorder import Recorder
from tests.test_analytics_randomized import _generate


def test_reconnect_rebuilds_tables(tmp_path: Path) -> None:
    small, large = Recorder(tmp_path / "small"), Recorder(tmp_path / "large")
    _generate(small, 5, seed=1)
    _generate(large, 12, seed=2)
    con = small.connect()
    tables = {r[0] for r in con.sql("SELECT table_name FROM duckdb_tables()").fetchall()}
    assert "physical_attempts" not in tables  # nothing built by connect
    assert build_report(con)["logical_requests"] == 5
    large.connect()  # flushes the second data set's files
    con, _ = connect(large.directory, con=con.con)
    assert build_report(con)["logical_requests"] == 12


def test_filtered_scope_copies_are_dropped_when_filters_are_cleared(tmp_path: Path) -> None:
    rec = Recorder(tmp_path / "data")
    _generate(rec, 30, seed=3)
    con = rec.connect()
    unfiltered = build_report(con)
    narrowed = build_report(con, Filters(tenant="a"))
    assert 0 < narrowed["logical_requests"] < unfiltered["logical_requests"]

    def scoped_tables() -> set[str]:
        rows = con.sql("SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall()
        return {str(r[0]) for r in rows if str(r[0]).startswith("scoped_")}

    assert scoped_tables() == {
        "scoped_requests",
        "scoped_attempt_facts",
        "scoped_request_nesting",
        "scoped_request_layers",
        "scoped_request_routes",
        "scoped_receiver_traffic",
        "scoped_route_latency",
        "scoped_doomed_dispatches",
        "scoped_request_facts",
    }
    assert build_report(con) == unfiltered  # views onto the base tables again
    assert scoped_tables() == set()
