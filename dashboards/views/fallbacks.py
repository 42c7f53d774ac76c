"""Fallbacks: how often requests fell back, whether the fallback answered, whether the
answer kept the request's contract — and the incompatible, degraded and boundary-widening
requests to review, one row per request with the evidence of each case.

The counts are the fallback metric's (``fallback.sql``) and the findings of the same
definitions (a degraded fallback keeps the capability and the boundary; an incompatible one
breaks the capability), so a KPI and the cases below it agree.
"""

from __future__ import annotations

import json
from dataclasses import astuple

import pandas as pd
import streamlit as st

from retryscope.analytics import RULES_BY_ID, RequestQuery
from retryscope.dashboards import _explorer as explorer
from retryscope.dashboards import _format as fmt
from retryscope.dashboards._context import Context, current
from retryscope.dashboards.views.common import (
    Kpi,
    frame,
    kpi_row,
    overall,
    picked_row,
    request_table,
    rule_kpi,
    table,
)

CASES = (
    ("incompatible", "fallback_capability_mismatch"),
    ("degraded", "degraded_fallback"),
    ("boundary widened", "fallback_boundary_widening"),
)
CASE_LIMIT = 500

ROUTE_COLUMNS = (
    fmt.Column("value", "Entry route", width="medium"),
    fmt.Column("logical_requests", "Requests", fmt.Unit.COUNT),
    fmt.Column("requests_with_fallback", "Fell back", fmt.Unit.COUNT),
    fmt.Column("fallback_rate", "Fallback rate", fmt.Unit.PCT),
    fmt.Column(
        "fallback_success_rate",
        "Fallback success",
        fmt.Unit.PCT,
        help="Requests a fallback answered ÷ requests that fell back",
    ),
    fmt.Column(
        "fallback_quality",
        "Fallback quality",
        fmt.Unit.PCT,
        help="Answers binding the capability, behavior class and data boundary ÷ fallback answers",
    ),
    fmt.Column("degraded_fallbacks", "Degraded", fmt.Unit.COUNT),
    fmt.Column("boundary_widened_requests", "Boundary widened", fmt.Unit.COUNT),
)
# The headers of the evidence columns naming a capability or behavior class (by name).
CLASS_HEADERS = ("Route behavior", "Required behavior", "Route capability", "Required capability")
_CLASS_HELP = (
    "The name recorded beside the class; where none was, the class as recorded (a digest: "
    f"its first {fmt.DIGEST_SHOWN} hex digits). The request's page shows both."
)
CASE_COLUMNS = (
    fmt.Column("logical_request_id", "Request"),
    fmt.Column("cases", "Cases", width="large"),
    fmt.Column("route_id", "Answered by route", width="medium"),
    fmt.Column("route_data_boundary", "Route boundary"),
    fmt.Column("allowed_boundary", "Allowed boundary"),
    *(
        fmt.Column(column, header, help=_CLASS_HELP)
        for column, header in zip(fmt.CLASS_COLUMNS, CLASS_HEADERS, strict=True)
    ),
    fmt.Column("time", "Answered at (UTC)", fmt.Unit.TIME),
)


def _cases(ctx: Context) -> pd.DataFrame:
    """One row per request with a case: which cases, and the evidence of its answer."""
    rules = tuple(rule for _, rule in CASES)
    found = frame(ctx.source.query("findings", ctx.filters, CASE_LIMIT * len(rules), rules))
    if found.empty:
        return found
    label = {rule: name for name, rule in CASES}
    evidence = pd.DataFrame([json.loads(e) for e in found["evidence"]], index=found.index)
    rows = pd.concat([found[["logical_request_id", "time"]], evidence], axis=1)
    rows["case"] = found["rule_id"].map(label)
    rows["order"] = found["rule_id"].map({rule: i for i, (_, rule) in enumerate(CASES)})
    grouped = rows.sort_values("order").groupby("logical_request_id", sort=False)
    out = grouped.first()
    out["cases"] = grouped["case"].agg(", ".join)
    names: dict[str, str] = ctx.source.query("class_names")
    for column in fmt.CLASS_COLUMNS:
        if column in out.columns:
            out[column] = out[column].map(lambda value: fmt.class_label(value, names))
    return out.reset_index().sort_values(["time", "logical_request_id"])


TRIGGER_COLUMNS = (
    fmt.Column("selected_requests", "Requests", fmt.Unit.COUNT),
    fmt.Column("selected_share", "Of the fallbacks", fmt.Unit.PCT),
)


# The dimensions that say why fallbacks fired: their column's header and caption.
WHY = (
    (
        "fallback_trigger",
        "Outcome before the fallback",
        "The outcome of the attempt each fallback followed (a request counts once per outcome).",
    ),
    (
        "route_hop",
        "Route hop, after",
        "Per route hop: the route a fallback left, the one it went to, and the outcome it "
        "followed.",
    ),
)


def _triggers(ctx: Context) -> None:
    """Why fallbacks fired: the outcome kind of the attempt each fallback followed, and
    each route hop with it, from the comparison of the requests that fell back with the
    others (the Compare page's figures); a row opens the Compare page listing those
    requests."""
    query = RequestQuery(fallback=True, limit=1)  # as the Compare page asks it
    compared = frame(ctx.source.query("compare", ctx.filters, None, None, *astuple(query)))
    if not (compared["dimension"] == "fallback_trigger").any():
        return
    st.subheader("Why fallbacks fired")
    for dimension, header, what in WHY:
        rows = compared[compared["dimension"] == dimension].sort_values(
            ["selected_requests", "value"], ascending=[False, True]
        )
        st.caption(what + " Select a row to list its requests and compare them with the others.")
        key = "fallback_triggers" if dimension == "fallback_trigger" else f"fallback_{dimension}"
        columns = (fmt.Column("value", header, width="large"), *TRIGGER_COLUMNS)
        picked = picked_row(rows, columns, key)
        if picked is not None:
            value = str(rows["value"].iloc[picked])
            st.switch_page(
                explorer.COMPARE_PAGE,
                query_params=ctx.link(has="fallback", dim=dimension, value=value),
            )
    st.page_link(
        "views/breakdown.py",
        label="Fallback rate by what a fallback followed, over time",
        icon=":material/stacked_line_chart:",
        query_params=ctx.link(figure="fallback_rate", by="fallback_trigger"),
    )


def render() -> None:
    ctx = current()
    st.header("Fallbacks")
    row = overall(ctx, "fallback")
    if row is None:
        return
    counts = ctx.source.query("finding_counts", ctx.filters)
    kpi_row(
        ctx,
        [
            Kpi(
                "Fallback rate",
                fmt.pct(row["fallback_rate"]),
                opens=explorer.params(has=("fallback",)),
                help="Requests with an attempt on a non-primary route ÷ logical requests",
            ),
            Kpi(
                "Fallback success",
                fmt.pct(row["fallback_success_rate"]),
                help="Requests a fallback answered ÷ requests that fell back",
            ),
            Kpi(
                "Fallback quality",
                fmt.pct(row["fallback_quality"]),
                help="Answers binding the request's capability, behavior class and data "
                "boundary ÷ fallback answers",
            ),
            rule_kpi(
                "Incompatible",
                counts["fallback_capability_mismatch"],
                "fallback_capability_mismatch",
            ),
            rule_kpi("Degraded", row["degraded_fallbacks"], "degraded_fallback"),
            rule_kpi(
                "Boundary widened", row["boundary_widened_requests"], "fallback_boundary_widening"
            ),
        ],
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
    table(by_route, ROUTE_COLUMNS)
    _triggers(ctx)

    cases = _cases(ctx)
    st.subheader(f"Cases to review: {len(cases):,} request(s)")
    st.caption(
        " ".join(
            f"**{name.capitalize()}** ({counts[rule]:,}): {RULES_BY_ID[rule].meaning}"
            for name, rule in CASES
        )
        + " A request can be in several cases. Select a row to open it."
    )
    if cases.empty:
        st.success("No fallback broke the request's contract.")
        return
    request_table(ctx, cases, CASE_COLUMNS, "fallback_cases", as_text=True)


if __name__ == "__main__":
    render()
