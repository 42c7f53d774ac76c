"""A drill-down computes one request from its own rows only: it must equal the same query
over the analytics tables of the whole data set (nested layers, unmarked HTTP spans)."""

from __future__ import annotations

import random
from pathlib import Path

from retryscope.analytics import request_attempts, request_detail, request_summary
from retryscope.analytics._queries import arrow
from tests.recorder import Recorder
from tests.test_analytics_randomized import _generate


def test_drilldown_equals_the_whole_data_set_query(tmp_path: Path) -> None:
    rec = Recorder(tmp_path / "data")
    _generate(rec, 60, seed=7)
    con = rec.connect()
    con.scoped()  # the whole data set's tables, as every query used before drill-downs
    ids = con.sql(
        "SELECT logical_request_id, trace_id FROM request_base ORDER BY logical_request_id"
    ).fetchall()
    assert len(ids) == 60
    for lrid, trace_id in random.Random(7).sample(ids, 10):
        for ident in (lrid, trace_id):
            whole_summary = arrow(con, "request_summary", {"id": ident})
            whole_attempts = arrow(con, "request", {"id": ident})
            assert whole_attempts.num_rows >= 1
            summary, attempts = request_detail(con, ident)
            assert summary.equals(whole_summary), ident
            assert attempts.equals(whole_attempts), ident
            assert request_summary(con, ident).equals(whole_summary)
            assert request_attempts(con, ident).equals(whole_attempts)
    assert request_detail(con, "no-such-request")[0].num_rows == 0
