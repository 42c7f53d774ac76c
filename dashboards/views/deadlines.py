"""Deadlines & latency: requests the deadline stopped, work finished after it, attempts
dispatched with too little time left, and the latency tail retries add."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from retryscope.dashboards import _charts as charts
from retryscope.dashboards._context import current
from retryscope.dashboards.views.common import frame, metric_row, ms, num, overall, pct


def render() -> None:
    ctx = current()
    st.header("Deadlines & latency")
    d = overall(ctx, "deadline")
    if d is None:
        return
    metric_row(
        [
            ("Deadline exhausted", num(d["deadline_exhausted"])),
            ("Exhausted rate", pct(d["deadline_exhausted_rate"])),
            ("Late successes", num(d["late_successes"])),
            ("Doomed dispatches", num(d["doomed_dispatches"])),
            ("Deadline miss rate", pct(d["deadline_miss_rate"])),
        ]
    )
    st.caption(
        f"{d['requests_with_deadline']:,} of {d['logical_requests']:,} requests carried a "
        "deadline. Doomed: an attempt dispatched with less time left than its route's median "
        "attempt latency."
    )

    lat = ctx.source.query("latency", ctx.filters, "overall").to_pylist()[0]
    st.subheader("Latency: logical request vs first attempt")
    metric_row(
        [
            ("Logical p50", ms(lat["logical_p50_ms"])),
            ("Logical p95", ms(lat["logical_p95_ms"])),
            ("Logical p99", ms(lat["logical_p99_ms"])),
            ("Retry tail at p99", ms(lat["retry_tail_p99_ms"])),
        ]
    )
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
