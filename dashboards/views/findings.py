"""Findings: every violation and anomaly, filterable by rule and severity; each row opens
the drill-down of its request (the link column, or selecting the row)."""

from __future__ import annotations

import streamlit as st

from retryscope.analytics import RULES
from retryscope.dashboards import charts
from retryscope.dashboards.context import current
from retryscope.dashboards.views.common import (
    frame,
    nothing_in_scope,
    request_table,
    with_links,
)

ROW_LIMIT = 1000
_RULES = {r.id: r for r in RULES}


def render() -> None:
    ctx = current()
    st.header("Findings")
    report = ctx.source.query("report", ctx.filters)
    if nothing_in_scope(report["logical_requests"]):
        return
    found = frame(ctx.source.query("findings", ctx.filters))
    if found.empty:
        st.success("No findings for these requests.")
        return
    left, right = st.columns(2)
    rules = left.multiselect(
        "Rules", sorted(set(found["rule_id"])), key="findings_rules", placeholder="all rules"
    )
    severities = right.multiselect(
        "Severity", ["error", "warning", "info"], key="findings_severity", placeholder="all"
    )
    shown = found
    if rules:
        shown = shown[shown["rule_id"].isin(rules)]
    if severities:
        shown = shown[shown["severity"].isin(severities)]
    counts = shown.groupby("rule_id", as_index=False).size().rename(columns={"size": "findings"})
    st.altair_chart(charts.bars(counts, "rule_id", "findings", "findings"), width="stretch")
    st.caption(
        f"{len(shown):,} finding(s)"
        + (f"; the first {ROW_LIMIT:,} are listed" if len(shown) > ROW_LIMIT else "")
        + ". Select a row or follow its link to open the request."
    )
    table = with_links(shown.head(ROW_LIMIT))[
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
                if r.id in set(shown["rule_id"])
            ]
        )


if __name__ == "__main__":
    render()
