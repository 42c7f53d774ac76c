"""Deadlines & latency: requests the deadline stopped, work finished after it, attempts
dispatched with too little time left, the latency tail retries add — and the requests
that missed their deadline, to open."""

from __future__ import annotations

from dataclasses import astuple

import pandas as pd
import streamlit as st

from retryscope.analytics import RULES_BY_ID, RequestQuery, RequestSort
from retryscope.dashboards import _charts as charts
from retryscope.dashboards import _explorer as explorer
from retryscope.dashboards import _format as fmt
from retryscope.dashboards._context import current
from retryscope.dashboards.views.common import (
    Kpi,
    frame,
    kpi_row,
    overall,
    request_table,
    rule_kpi,
    table,
)
from retryscope.dashboards.views.requests import COLUMNS as REQUEST_COLUMNS

MISSED_LISTED = 10
MISSED_COLUMNS = (
    *REQUEST_COLUMNS[:4],
    fmt.Column(
        "past_deadline_ms",
        "Past the deadline",
        fmt.Unit.MS,
        help="How long after its deadline the request ended",
    ),
    fmt.Column(
        "after_deadline_micros",
        "Cost after the deadline",
        fmt.Unit.MONEY,
        help="Cost of its attempts that ended at or after the deadline",
    ),
    *(c for c in REQUEST_COLUMNS[4:] if c.name != "cost_micros"),
)

ROUTE_COLUMNS = (
    fmt.Column("value", "Entry route", width="medium"),
    fmt.Column("logical_requests", "Requests", fmt.Unit.COUNT),
    fmt.Column("deadline_exhausted", "Exhausted", fmt.Unit.COUNT),
    fmt.Column("deadline_exhausted_rate", "Exhausted rate", fmt.Unit.PCT),
    fmt.Column("late_successes", "Late successes", fmt.Unit.COUNT),
    fmt.Column("deadline_miss_rate", "Miss rate", fmt.Unit.PCT),
    fmt.Column("doomed_dispatches", "Doomed", fmt.Unit.COUNT, help="Doomed dispatches"),
    fmt.Column("logical_p50_ms", "p50", fmt.Unit.MS),
    fmt.Column("logical_p99_ms", "p99", fmt.Unit.MS),
    fmt.Column(
        "retry_tail_p99_ms",
        "Retry tail p99",
        fmt.Unit.MS,
        help="Logical p99 − first-attempt p99: the latency retries add",
    ),
)


def render() -> None:
    ctx = current()
    st.header("Deadlines & latency")
    d = overall(ctx, "deadline")
    if d is None:
        return
    missed = explorer.params(has=("missed_deadline",), sort=RequestSort.DURATION)
    kpi_row(
        ctx,
        [
            Kpi(
                "Deadline exhausted",
                fmt.count(d["deadline_exhausted"]),
                opens=explorer.params(terminal="stop_deadline", sort=RequestSort.DURATION),
                help=RULES_BY_ID["deadline_exhausted"].meaning,
            ),
            Kpi(
                "Exhausted rate",
                fmt.pct(d["deadline_exhausted_rate"]),
                help="Deadline-exhausted requests ÷ logical requests",
            ),
            rule_kpi(
                "Late successes", d["late_successes"], "late_success", sort=RequestSort.DURATION
            ),
            rule_kpi("Doomed dispatches", d["doomed_dispatches"], "doomed_dispatch"),
            Kpi(
                "Deadline miss rate",
                fmt.pct(d["deadline_miss_rate"]),
                opens=missed,
                help="Requests stopped by, finished after or succeeding after their deadline "
                "÷ requests with a deadline",
            ),
        ],
    )
    st.caption(
        f"{d['requests_with_deadline']:,} of {d['logical_requests']:,} requests carried a "
        "deadline. Doomed: an attempt dispatched with less time left than its route's median "
        "attempt latency."
    )

    lat = ctx.source.query("latency", ctx.filters, "overall").to_pylist()[0]
    st.subheader("Latency: logical request vs first attempt")
    kpi_row(
        ctx,
        [
            Kpi("Logical p50", fmt.ms(lat["logical_p50_ms"])),
            Kpi("Logical p95", fmt.ms(lat["logical_p95_ms"])),
            Kpi("Logical p99", fmt.ms(lat["logical_p99_ms"])),
            Kpi(
                "Retry tail at p99",
                fmt.ms(lat["retry_tail_p99_ms"]),
                help="Logical p99 − first-attempt p99: the latency retries add",
            ),
        ],
    )
    long = pd.DataFrame(
        [
            {"percentile": p, "kind": kind, "ms": lat[f"{prefix}_{p}_ms"]}
            for p in ("p50", "p95", "p99")
            for kind, prefix in (("logical request", "logical"), ("first attempt", "first_attempt"))
        ]
    )
    st.altair_chart(charts.latency_bars(long.dropna()), width="stretch")

    st.subheader("By entry route")
    by_route = frame(ctx.source.query("deadline", ctx.filters, "route")).merge(
        frame(ctx.source.query("latency", ctx.filters, "route")),
        on=["value", "logical_requests"],
        how="outer",
    )
    table(by_route, ROUTE_COLUMNS)

    query = RequestQuery(deadline_missed=True, sort=RequestSort.PAST_DEADLINE, limit=MISSED_LISTED)
    total, page = ctx.source.query("request_list", ctx.filters, *astuple(query))
    st.subheader(f"Requests that missed their deadline: {total:,}")
    if total == 0:
        st.success("Every request with a deadline finished within it.")
        return
    st.caption(
        "Latest past the deadline first"
        f"{f'; the first {MISSED_LISTED}' if total > MISSED_LISTED else ''}. Past the "
        "deadline: how long after it the request ended; cost after the deadline: what its "
        "attempts that ended at or after it cost. Select a row to open its drill-down."
    )
    request_table(ctx, frame(page), MISSED_COLUMNS, "missed_table")
    with st.container(horizontal=True, gap="small"):
        explorer.link(
            f"All {total:,} in the Requests explorer",
            ctx.params,
            explorer.params(has=("missed_deadline",), sort=RequestSort.PAST_DEADLINE),
        )
        st.page_link(
            "views/breakdown.py",
            label="Cost after the deadline by entry route, over time",
            icon=":material/stacked_line_chart:",
            query_params=ctx.link(figure="after_deadline", by="entry_route"),
        )


if __name__ == "__main__":
    render()
