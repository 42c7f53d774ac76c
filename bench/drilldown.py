"""Target 4: the drill-down into one logical request on the generated data set.

``retryscope request PATH ID`` is used when the CLI has it; until then the equivalent query
(the request's logical request row and all its attempts, in start order) runs over
``connect(path)``. Two figures, each the median over sample requests and rounds:

* warm query: the query on an open connection (the data set's files in the OS cache);
* connect + query: a fresh ``connect(path)`` then the query, which is what one
  ``retryscope request`` invocation does after Python has started (the target applies here).

The baseline is the same lookup by ``trace_id``, a column the files are not sorted by, so
the ratio shows what the sort order and row-group statistics save beyond the Bloom filters
that cover both columns (near 1 on files written with them).
"""

from __future__ import annotations

import contextlib
import io
import statistics
import time

from bench.generate import generate
from bench.harness import Result, Target, millis
from bench.settings import Settings
from retryscope import cli
from retryscope.analytics import connect

QUERY = """
SELECT * FROM spans
WHERE {column} = ? AND span_role IN ('attempt', 'logical_request')
ORDER BY start_time
"""


def cli_has_request() -> bool:
    parser = cli.build_parser()
    for action in parser._subparsers._group_actions if parser._subparsers else ():
        choices = getattr(action, "choices", None) or {}
        if "request" in choices:
            return True
    return False


def run(settings: Settings) -> list[Result]:
    data = generate(settings.data_dir, settings.attempts, settings.seed)
    samples = data.sample_ids[:: 3 if not settings.quick else 1][:8]
    use_cli = cli_has_request()
    con, _ = connect(data.path)
    con.execute("SET enable_progress_bar = false")

    def warm(column: str, value: str) -> float:
        began = time.perf_counter()
        rows = con.sql(QUERY.format(column=column), params=[value]).to_arrow_table()
        elapsed = time.perf_counter() - began
        if rows.num_rows == 0:
            raise RuntimeError(f"drill-down found no rows for {column} = {value}")
        return elapsed

    def fresh(value: str) -> float:
        began = time.perf_counter()
        if use_cli:
            with contextlib.redirect_stdout(io.StringIO()):
                code = cli.main(["request", data.path, value])
            if code != 0:
                raise RuntimeError(f"retryscope request exited {code}")
        else:
            c, _ = connect(data.path)
            c.sql(QUERY.format(column="logical_request_id"), params=[value]).to_arrow_table()
            c.close()
        return time.perf_counter() - began

    for lrid, trace in samples[:2]:  # warm the OS cache and DuckDB's metadata
        warm("logical_request_id", lrid)
        warm("trace_id", trace)
        fresh(lrid)
    by_id: list[float] = []
    by_trace: list[float] = []
    by_fresh: list[float] = []
    rounds = 1 if settings.quick else 2
    for r in range(rounds):
        for i, (lrid, trace) in enumerate(samples):
            if (r + i) % 2:
                by_trace.append(warm("trace_id", trace))
                by_id.append(warm("logical_request_id", lrid))
            else:
                by_id.append(warm("logical_request_id", lrid))
                by_trace.append(warm("trace_id", trace))
            by_fresh.append(fresh(lrid))
    con.close()
    t_id, t_trace, t_fresh = (statistics.median(x) for x in (by_id, by_trace, by_fresh))
    how = "retryscope request" if use_cli else "connect(path) + query (no `retryscope request` yet)"
    return [
        Result(
            "drill-down",
            f"{how}",
            t_fresh * 1e3,
            "ms",
            Target(at_most=200.0, text="≤ 200 ms"),
            {"requests sampled": str(len(samples)), "attempts": f"{data.attempts:,}"},
        ),
        Result(
            "drill-down",
            "warm query by logical_request_id / by trace_id",
            t_id / t_trace,
            "×",
            None,
            {"by logical_request_id": millis(t_id), "by trace_id": millis(t_trace)},
        ),
    ]
