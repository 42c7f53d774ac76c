"""Findings: every violation and anomaly, filterable by rule and severity; each row opens
the drill-down of its request (the link column, or selecting the row)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from retryscope.analytics import RULES, Severity
from retryscope.analytics._findings import BY_ID
from retryscope.dashboards import _charts as charts
from retryscope.dashboards._context import current
from retryscope.dashboards.views.common import (
    frame,
    nothing_in_scope,
    request_table,
    with_links,
)

ROW_LIMIT = 1000


def render() -> None:
    ctx = current()
    st.header("Findings")
    report = ctx.source.query("report", ctx.filters)
    if nothing_in_scope(report["logical_requests"]):
        return
    # counts per rule come from SQL; only the rows listed cross to the browser
    counts = {rule: n for rule, n in ctx.source.query("finding_counts", ctx.filters).items() if n}
    if not counts:
        st.success("No findings for these requests.")
        return
    left, right = st.columns(2)
    rules = left.multiselect("Rules", sorted(counts), key="findings_rules", placeholder="all rules")
    severities = right.multiselect(
        "Severity", [s.value for s in Severity], key="findings_severity", placeholder="all"
    )
    chosen = [
        rule
        for rule in sorted(counts)
        if (not rules or rule in rules)
        and (not severities or BY_ID[rule].severity.value in severities)
    ]
    total = sum(counts[rule] for rule in chosen)
    bars = pd.DataFrame({"rule_id": chosen, "findings": [counts[r] for r in chosen]})
    st.altair_chart(charts.bars(bars, "rule_id", "findings", "findings"), width="stretch")
    st.caption(
        f"{total:,} finding(s)"
        + (f"; the first {ROW_LIMIT:,} are listed" if total > ROW_LIMIT else "")
        + ". Select a row or follow its link to open the request."
    )
    shown = frame(ctx.source.query("findings", ctx.filters, ROW_LIMIT, tuple(chosen)))
    if shown.empty:
        st.info("No findings of the chosen rules and severities.")
        return
    table = with_links(shown)[
        ["open", "time", "severity", "rule_id", "logical_request_id", "trace_id", "evidence"]
    ]
    request_table(table, "findings_table")
    with st.expander("What the rules mean"):
        st.table(
            [
                {
                    "rule": r.id,
                    "severity": r.severity.value,
                    "meaning": r.meaning,
                    "action": r.action,
                }
                for r in RULES
                if r.id in chosen
            ]
        )


if __name__ == "__main__":
    render()
