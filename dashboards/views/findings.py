"""Findings: every violation and anomaly, filterable by rule and severity; a bar opens the
requests of that rule in the explorer, a row opens the drill-down of its request."""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from retryscope.analytics import RULES, RULES_BY_ID, Severity
from retryscope.dashboards import _charts as charts
from retryscope.dashboards import _explorer as explorer
from retryscope.dashboards import _format as fmt
from retryscope.dashboards import _url
from retryscope.dashboards._context import Context, current
from retryscope.dashboards.views.common import frame, request_table, scope_report

ROW_LIMIT = 1000
RULES_KEY, SEVERITY_KEY = "findings_rules", "findings_severity"
# Rules offered a Compare link (those chosen, in order).
COMPARED_LISTED = 12

COLUMNS = (
    fmt.Column("time", "Time (UTC)", fmt.Unit.TIME),
    fmt.Column("severity", "Severity"),
    fmt.Column("rule_id", "Rule", width="medium"),
    fmt.Column("logical_request_id", "Request"),
    fmt.Column("evidence_text", "Evidence", width="large"),
    fmt.Column("action", "What to change", width="large"),
)


def _most_severe_first(ctx: Context, chosen: list[str]) -> pd.DataFrame:
    """The first :data:`ROW_LIMIT` findings of the ``chosen`` rules, error ones first, then
    warning, then info, each by time (one query per severity)."""
    parts = []
    left = ROW_LIMIT
    for severity in Severity:
        rules = tuple(r for r in chosen if RULES_BY_ID[r].severity is severity)
        if rules and left > 0:
            part = ctx.source.query("findings", ctx.filters, left, rules)
            parts.append(frame(part))
            left -= part.num_rows
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def _by_severity(counts: dict[str, int]) -> str:
    """How many findings of each severity, and which of them the Overview's Violations
    counts (the error and warning ones)."""
    per = {s: 0 for s in Severity}
    for rule, n in counts.items():
        per[RULES_BY_ID[rule].severity] += n
    shown = ", ".join(f"{per[s]:,} {s.value}" for s in Severity)
    violations = sum(n for s, n in per.items() if s is not Severity.INFO)
    return (
        f"{sum(per.values()):,} findings in scope: {shown}. The Overview's Violations counts "
        f"the {violations:,} error and warning ones."
    )


PARAMS = (
    _url.Param("rules", RULES_KEY, [], _url.comma_list(RULES_BY_ID, "rule"), ",".join),
    _url.Param(
        "severity",
        SEVERITY_KEY,
        [],
        _url.comma_list([s.value for s in Severity], "severity"),
        ",".join,
    ),
)


def render() -> None:
    ctx = current()
    st.header("Findings")
    for problem in _url.seed(PARAMS, entered=ctx.entered):
        st.warning(problem)
    report = scope_report(ctx)
    if report is None:
        return
    # counts per rule come from SQL; only the rows listed cross to the browser
    counts = {rule: n for rule, n in ctx.source.query("finding_counts", ctx.filters).items() if n}
    if not counts:
        st.success("No findings for these requests.")
        return
    st.caption(_by_severity(counts))
    left, right = st.columns(2)
    # a rule from the URL stays offered when the scope has none of it
    offered = sorted({*counts, *st.session_state.get(RULES_KEY, [])})
    rules = left.multiselect("Rules", offered, key=RULES_KEY, placeholder="all rules")
    severities = right.multiselect(
        "Severity", [s.value for s in Severity], key=SEVERITY_KEY, placeholder="all"
    )
    _url.publish(PARAMS)
    chosen = [
        rule
        for rule in sorted(counts)
        if (not rules or rule in rules)
        and (not severities or RULES_BY_ID[rule].severity.value in severities)
    ]
    total = sum(counts[rule] for rule in chosen)
    bars = pd.DataFrame(
        {
            "rule_id": chosen,
            "findings": [counts[r] for r in chosen],
            "severity": [RULES_BY_ID[r].severity.value for r in chosen],
        }
    )
    event = st.altair_chart(
        charts.bars(bars, "rule_id", "findings", "findings", pickable=True),
        width="stretch",
        key="findings_rules_chart",
        on_select="rerun",
    )
    rule = charts.picked(event, "rule_id")
    if rule is not None:
        explorer.open_explorer(ctx.params, explorer.params(rule=rule))
    st.caption(
        f"{total:,} finding(s)"
        + (f"; the first {ROW_LIMIT:,} are listed" if total > ROW_LIMIT else "")
        + ". Most severe first, then by time. Click a bar to list a rule's requests; select "
        "a row to open its request "
        "(retry storms are windows, not requests)."
    )
    with st.container(horizontal=True, gap="small"):
        for rule in chosen[:COMPARED_LISTED]:
            explorer.link(
                f"Compare {rule}",
                ctx.params,
                explorer.params(rule=rule),
                help="What sets the requests with this finding apart from the others",
                icon=":material/compare_arrows:",
                page=explorer.COMPARE_PAGE,
            )
    shown = _most_severe_first(ctx, chosen)
    if shown.empty:
        st.info("No findings of the chosen rules and severities.")
        return
    names: dict[str, str] = ctx.source.query("class_names")
    shown["evidence_text"] = [fmt.evidence_text(json.loads(e), names) for e in shown["evidence"]]
    shown["action"] = [RULES_BY_ID[r].action for r in shown["rule_id"]]
    request_table(ctx, shown, COLUMNS, "findings_table", as_text=True)
    with st.expander("What the rules mean"):
        st.table(
            [
                {
                    "Rule": r.id,
                    "Severity": r.severity.value,
                    "Meaning": r.meaning,
                    "Action": r.action,
                }
                for r in RULES
                if r.id in chosen
            ]
        )


if __name__ == "__main__":
    render()
