"""What the ``report``, ``request`` and ``findings`` subcommands do (argparse is in cli)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

import duckdb
import pyarrow.compute as pc
from retryscope.analytics.dataset import connect
from retryscope.analytics.filters import Filters, parse_time
from retryscope.analytics.findings import findings
from retryscope.analytics.render import json_rows, markdown_table, text_table
from retryscope.analytics.report import build_report, format_json, format_markdown, format_text
from retryscope.analytics.requests import request_detail

REQUEST_COLUMNS = (
    "layer",
    "attempt_ordinal",
    "parent_layer",
    "parent_attempt_ordinal",
    "route_id",
    "start_time",
    "duration_ms",
    "backoff_delay_ms",
    "retry_after_ms",
    "not_before",
    "deadline_remaining_ms",
    "cost_micros",
    "outcome",
    "outcome_kind",
    "decision",
)
"""Columns of ``retryscope request`` in text/markdown (JSON has them all)."""


def _open(path: str) -> duckdb.DuckDBPyConnection:
    con, dataset = connect(path)
    for skipped in dataset.skipped:
        print(f"warning: skipped {skipped.path}: {skipped.reason}", file=sys.stderr)
    return con


def filters_from(
    since: str | None,
    until: str | None,
    route: str | None,
    tenant: str | None,
    operation: str | None = None,
) -> Filters:
    return Filters(
        since=parse_time(since) if since else None,
        until=parse_time(until) if until else None,
        route=route,
        tenant=tenant,
        operation=operation,
    )


def report(path: str, filters: Filters, fmt: str) -> int:
    rendered: dict[str, Callable[[dict[str, object]], str]] = {
        "json": format_json,
        "markdown": format_markdown,
        "text": format_text,
    }
    print(rendered[fmt](build_report(_open(path), filters)))
    return 0


def request(path: str, ident: str, fmt: str) -> int:
    """Print one logical request; exit 1 when ``ident`` names none."""
    summary, attempts = request_detail(_open(path), ident)
    if summary.num_rows == 0:
        print(
            f"retryscope request: no logical request with id, trace id or idempotency "
            f"digest {ident!r}",
            file=sys.stderr,
        )
        return 1
    if fmt == "json":
        shown = {"requests": json_rows(summary), "attempts": json_rows(attempts)}
        print(json.dumps(shown, indent=2))
        return 0
    table = markdown_table if fmt == "markdown" else text_table
    for row in summary.to_pylist():
        lrid = row["logical_request_id"]
        print(
            f"logical request {lrid}  trace {row['trace_id']}  tenant {row['tenant']}  "
            f"operation {row['operation']}  terminal {row['terminal'] or 'unknown'}  "
            f"retried layers {','.join(row['retried_layers']) or '-'}"
        )
        mine = attempts.filter(pc.equal(attempts.column("logical_request_id"), lrid))
        print(table(mine.select(list(REQUEST_COLUMNS))))
        print()
    return 0


def findings_command(path: str, rule: str | None, filters: Filters, fmt: str) -> int:
    table = findings(_open(path), rule=rule, filters=filters)
    if fmt == "json":
        print(json.dumps(json_rows(table), indent=2))
    elif fmt == "markdown":
        print(markdown_table(table))
    else:
        print(text_table(table))
    return 0
