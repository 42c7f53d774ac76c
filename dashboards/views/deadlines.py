"""Deadlines & latency: requests the deadline stopped, work finished after it, attempts
dispatched with too little time left, and the latency tail retries add."""

from __future__ import annotations

import pandas as pd
import streamlit as st
from retryscope.dashboards import charts
from retryscope.dashboards.context import current
from retryscope.dashboards.views.common import frame, ms, nothing_in_scope, num, pct


def render() -> None:
    ctx = current()
    st.header("Deadlines & latency")
    rows = ctx.source.query("deadline", ctx.filters, "overall").to_pylist()
    if nothing_in_scope(rows[0]["logical_requests"] if rows else 0):
        return
    d = rows[0]
    cols = st.columns(5)
    cols[0].metric("Deadline exhausted", num(d["deadline_exhausted"]))
    cols[1].metric("Exhausted rate", pct(d["deadline_exhausted_rate"]))
    cols[2].metric("Late successes", num(d["late_successes"]))
    cols[3].metric("Doomed dispatches", num(d["doomed_dispatches"]))
    cols[4].metric("Deadline miss rate", pct(d["deadline_miss_rate"]))
    st.caption(
        f"{d['requests_with_deadline']:,} of {d['logical_requests']:,} requests carried a "
        "deadline. Doomed: an attempt dispatched with less time left than its route's median "
        "attempt latency."
    )

    lat = ctx.source.query("latency", ctx.filters, "overall").to_pylist()[0]
    st.subheader("Latency: logical request vs first attempt")
    lat_cols = st.columns(4)
    lat_cols[0].metric("Logical p50", ms(lat["logical_p50_ms"]))
    lat_cols[1].metric("Logical p95", ms(lat["logical_p95_ms"]))
    lat_cols[2].metric("Logical p99", ms(lat["logical_p99_ms"]))
    lat_cols[3].metric("Retry tail at p99", ms(lat["retry_tail_p99_ms"]))
    long = pd.DataFrame(
        [
            {"percentile": p, "kind": kind, "ms": lat[f"{prefix}_{p}_ms"]}
            for p in ("p50", "p95", "p99")
            for kind, prefix in (("logical request", "logical"), ("first attempt", "first_attempt"))
        ]
    )
    st.altair_chart(charts.latency_bars(long.dropna()))

    st.subheader("By entry route")
    by_route = frame(ctx.source.query("deadline", ctx.filters, "route")).merge(
        frame(ctx.source.query("latency", ctx.filters, "route")),
        on=["value", "logical_requests"],
        how="outer",
    )
    st.dataframe(by_route.rename(columns={"value": "entry_route"}), hide_index=True)


if __name__ == "__main__":
    render()
