"""One logical request, looked up by logical request id, trace id or idempotency digest.

A lookup never builds the data set's model: it copies the rows of the requests ``ident``
names into a table ``spans`` local to a cursor of the model's connection and builds the
model's per-request tables over those rows alone (no scope: a request's figures do not
depend on filters). Every figure of a request depends only on its own rows, so the result equals
the same query over the whole data set.

Finding the rows reads little: every file is sorted by logical request id and carries
Bloom filters on the lookup columns (``instrumentation/export/_bloom_filters.py``). The footers
``connect`` indexed tell which files may hold an id (``bloom_probe.py``), so DuckDB opens
only those: it copies the request's rows (``spans_in``) straight from them, and a trace id
or idempotency digest is first resolved to its requests by reading only the id columns of
the files that may hold it (``span_ids_in``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa

from retryscope.analytics._bloom_probe import files_that_may_hold
from retryscope.analytics._dataset import drop_undecodable_files
from retryscope.analytics._queries import arrow, load
from retryscope.analytics.model._partition import SOURCE, build_tables

if TYPE_CHECKING:
    from retryscope.analytics._audit_model import AuditModel


def _column(cur: duckdb.DuckDBPyConnection, name: str, params: dict[str, object]) -> list[str]:
    return [str(value) for (value,) in cur.execute(load(name), params).fetchall()]


def _candidate_files(cur: duckdb.DuckDBPyConnection, column: str, value: str) -> list[str]:
    """The data set's files that may hold ``value`` in ``column`` (statistics and Bloom
    filters from the footers ``connect`` indexed)."""
    groups = cur.execute(load("request_candidates"), {"column": column, "id": value}).fetchall()
    return files_that_may_hold(groups, value)


def _copy_rows(cur: duckdb.DuckDBPyConnection, lrid: str, *, first: bool) -> int:
    """Copy the rows of request ``lrid`` into ``spans`` (created when ``first``) from the
    files that may hold them; returns how many rows were copied."""
    files = _candidate_files(cur, "logical_request_id", lrid)
    if not files:
        return 0
    query = "request_spans" if first else "request_spans_more"
    ((copied,),) = cur.execute(load(query), {"files": files, "id": lrid}).fetchall()
    return int(copied)


def _aliased_requests(cur: duckdb.DuckDBPyConnection, ident: str) -> list[str]:
    """The logical requests with rows whose trace id or idempotency digest is ``ident``."""
    found: set[str] = set()
    for column, query in (
        ("trace_id", "request_ids_by_trace"),
        ("idempotency_digest", "request_ids_by_digest"),
    ):
        files = _candidate_files(cur, column, ident)
        if files:
            found.update(_column(cur, query, {"files": files, "id": ident}))
    return sorted(found)


def _copy_request_rows(cur: duckdb.DuckDBPyConnection, ident: str) -> None:
    """Fill the cursor-local ``spans`` with the rows of the requests ``ident`` names: the
    request with that id, else those whose trace id or idempotency digest it is, or the
    implicit request's trace an ``implicit:`` id names; then the rows of no request in
    those traces: a process that carried only the trace context (model_http_attempts.sql
    joins it through the trace parent) and implicit requests (implicit_requests.sql)."""
    copied = _copy_rows(cur, ident, first=True)
    ((implicit_trace,),) = cur.execute("SELECT rs_implicit_trace(?)", [ident]).fetchall()
    if not copied and implicit_trace is None:
        for lrid in _aliased_requests(cur, ident):
            copied += _copy_rows(cur, lrid, first=not copied)
    if not copied:
        cur.execute(load("request_spans_none"))
    traces = {
        str(trace) for (trace,) in cur.execute("SELECT DISTINCT trace_id FROM spans").fetchall()
    }
    if not copied:
        traces.add(str(implicit_trace or ident))
    for trace in sorted(traces):
        files = _candidate_files(cur, "trace_id", trace)
        if files:
            cur.execute(load("trace_free_spans"), {"files": files, "id": trace})


@contextmanager
def request_scope(model: AuditModel, ident: str) -> Iterator[duckdb.DuckDBPyConnection]:
    """A cursor of the model's connection whose analytics tables hold only the requests
    ``ident`` names (the data set's model is not built for it)."""
    cur = model.con.cursor()
    try:
        try:
            _copy_request_rows(cur, ident)
        except duckdb.Error:
            if not drop_undecodable_files(model.con):
                raise
            _copy_request_rows(cur, ident)  # from the files that decode
        # every figure of a request is filter-independent: its per-request tables suffice
        cur.execute(f"ALTER TABLE temp.main.spans RENAME TO {SOURCE}")
        build_tables(cur)
        yield cur
    finally:
        cur.close()


def request_summary(model: AuditModel, ident: str) -> pa.Table:
    """The logical requests ``ident`` names (an idempotency digest may name several)."""
    with request_scope(model, ident) as cur:
        return arrow(cur, "request_summary", {"id": ident})


def request_attempts(model: AuditModel, ident: str) -> pa.Table:
    """Their attempts in order: route, layer, ordinals (a send's distinct operation under
    its parent attempt among them), times, backoff, not_before, deadline remaining, cost,
    outcome, decision."""
    with request_scope(model, ident) as cur:
        return arrow(cur, "request", {"id": ident})


def request_detail(model: AuditModel, ident: str) -> tuple[pa.Table, pa.Table]:
    """:func:`request_summary` and :func:`request_attempts` from one lookup (what
    ``retryscope request`` prints)."""
    with request_scope(model, ident) as cur:
        return arrow(cur, "request_summary", {"id": ident}), arrow(cur, "request", {"id": ident})
