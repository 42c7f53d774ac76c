"""Fallbacks: how often requests fell back, whether the fallback answered, whether the
answer kept the request's contract — and the incompatible, degraded and boundary-widening
cases to review."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from retryscope.analytics._findings import BY_ID
from retryscope.dashboards._context import current
from retryscope.dashboards.views.common import (
    LINK_COLUMN,
    frame,
    metric_row,
    num,
    overall,
    pct,
    with_links,
)

CASES = (
    ("Incompatible (capability mismatch)", "fallback_capability_mismatch"),
    ("Degraded (other behavior class)", "degraded_fallback"),
    ("Boundary widening", "fallback_boundary_widening"),
)
CASE_LIMIT = 500


def render() -> None:
    ctx = current()
    st.header("Fallbacks")
    row = overall(ctx, "fallback")
    if row is None:
        return
    metric_row(
        [
            ("Fallback rate", pct(row["fallback_rate"])),
            ("Fallback success", pct(row["fallback_success_rate"])),
            ("Fallback quality", pct(row["fallback_quality"])),
            ("Degraded", num(row["degraded_fallbacks"])),
            ("Boundary widened", num(row["boundary_widened_requests"])),
        ]
    )
    st.caption(
        f"{row['requests_with_fallback']:,} of {row['logical_requests']:,} requests fell back; "
        f"{row['fallback_successes']:,} were answered by a fallback, "
        f"{row['quality_fallback_successes']:,} of those by a route binding the request's "
        f"capability, behavior class and data boundary "
        f"({row['unverified_fallbacks']:,} could not be checked)."
    )
    st.subheader("By entry route")
    by_route = frame(ctx.source.query("fallback", ctx.filters, "route"))
    st.dataframe(by_route.rename(columns={"value": "entry_route"}), hide_index=True)

    counts = ctx.source.query("finding_counts", ctx.filters)
    for title, rule in CASES:
        # the count from SQL, the first CASE_LIMIT rows only
        cases: pd.DataFrame = frame(ctx.source.query("findings", ctx.filters, CASE_LIMIT, (rule,)))
        st.subheader(f"{title}: {counts[rule]:,}")
        st.caption(BY_ID[rule].meaning + " " + BY_ID[rule].action)
        if cases.empty:
            continue
        st.dataframe(
            with_links(cases)[["open", "time", "logical_request_id", "trace_id", "evidence"]],
            hide_index=True,
            width="stretch",
            column_config={"open": LINK_COLUMN},
            key=f"fallback_{rule}",
        )


if __name__ == "__main__":
    render()
