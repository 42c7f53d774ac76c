"""Compare: why here, why now — a slice of the requests in scope (a KPI's requests, a
finding rule's, a time range: the Requests explorer's query in the URL, plus ``from`` and
``to``) against the scope's other requests, every dimension's values ranked by how much
more often the slice's requests take them (``retryscope.analytics.compare``, in DuckDB).
Selecting a value lists the slice's requests taking it (``dim`` and ``value`` in the URL);
a request opens its drill-down; a tenant, route or operation can become the scope's filter.
"""

from __future__ import annotations

from dataclasses import astuple
from datetime import datetime

import pandas as pd
import streamlit as st

from retryscope.analytics import COMPARE_DIMENSIONS, parse_time
from retryscope.dashboards import _explorer as explorer
from retryscope.dashboards import _format as fmt
from retryscope.dashboards import _url
from retryscope.dashboards._context import Context, current
from retryscope.dashboards.views.common import frame, picked_row, request_table, scope_report

PAGE = explorer.COMPARE_PAGE
# Values shown per dimension: those that differ most.
VALUES_LISTED = 6
REQUESTS_LISTED = 200
FROM, TO, DIM, VALUE = "compare_from", "compare_to", "compare_dim", "compare_value"
# Dimensions that are also the sidebar's filters: a value can become the scope's.
FILTERS = ("tenant", "route", "operation")


def _time(text: str) -> str:
    parse_time(text)  # ValueError names the problem
    return text


PARAMS = (
    _url.Param("from", FROM, "", _time),
    _url.Param("to", TO, "", _time),
    _url.Param("dim", DIM, None, _url.one_of(COMPARE_DIMENSIONS, "dimension")),
    _url.Param("value", VALUE, None),
)
COLUMNS = (
    fmt.Column("dimension_label", "Dimension", width="medium"),
    fmt.Column("value", "Value", width="medium"),
    fmt.Column(
        "selected_share", "In the slice", fmt.Unit.PCT, help="Share of the slice's requests"
    ),
    fmt.Column(
        "baseline_share",
        "In the baseline",
        fmt.Unit.PCT,
        help="Share of the other requests in scope",
    ),
    fmt.Column(
        "difference_pp",
        "Difference (pp)",
        help="Slice share − baseline share, in percentage points",
    ),
    fmt.Column("selected_requests", "Slice requests", fmt.Unit.COUNT),
    fmt.Column("baseline_requests", "Baseline requests", fmt.Unit.COUNT),
)
LIST_COLUMNS = (
    fmt.Column("logical_request_id", "Request", pinned=True),
    fmt.Column("started_at", "Started (UTC)", fmt.Unit.TIME),
    fmt.Column("tenant", "Tenant"),
    fmt.Column("route_path", "Route path", width="medium"),
    fmt.Column("terminal", "Terminal"),
    fmt.Column("receiver_attempts", "Receiver attempts", fmt.Unit.COUNT),
    fmt.Column("excess_attempts", "Excess attempts", fmt.Unit.COUNT),
    fmt.Column("duration_ms", "Duration", fmt.Unit.MS),
    fmt.Column("wasted_micros", "Wasted", fmt.Unit.MONEY),
    fmt.Column("findings", "Findings", fmt.Unit.COUNT),
)


def _bound(key: str) -> datetime | None:
    text = str(st.session_state.get(key) or "").strip()
    return parse_time(text) if text else None


def _ranked(table: pd.DataFrame) -> pd.DataFrame:
    """The values that differ most per dimension (the analytics' order kept)."""
    shown = table.groupby("dimension", sort=False).head(VALUES_LISTED).copy()
    shown["dimension_label"] = shown["dimension"].map(COMPARE_DIMENSIONS)
    shown["difference_pp"] = (shown["difference"] * 100).round(1)
    return shown.reset_index(drop=True)


def _requests(ctx: Context, args: tuple[object, ...], dimension: str, value: str) -> None:
    total, page = ctx.source.query(
        "compare_requests", ctx.filters, dimension, value, REQUESTS_LISTED, *args
    )
    label = COMPARE_DIMENSIONS[dimension]
    st.subheader(f"Slice requests with {label} = {fmt.literal(value)}: {total:,}")
    listed = f" The first {page.num_rows:,} are listed." if total > page.num_rows else ""
    st.caption(f"Most excess attempts first.{listed} Select a row to open its drill-down.")
    if dimension in FILTERS:
        st.page_link(
            PAGE,
            label=f"Filter every page to this {dimension}",
            icon=":material/filter_alt:",
            query_params=_url.merged(ctx.link(**{dimension: value}), _url.values(explorer.PARAMS)),
        )
    if total:
        request_table(ctx, frame(page), LIST_COLUMNS, "compare_requests_table")


def render() -> None:
    ctx = current()
    st.header("Compare")
    problems = _url.seed((*explorer.PARAMS, *PARAMS), entered=ctx.entered)
    for problem in problems:
        st.warning(problem)
    report = scope_report(ctx)
    if report is None:
        return
    query = explorer.query_from_state(1)
    try:
        since, until = _bound(FROM), _bound(TO)
        if since is not None and until is not None and since >= until:
            raise ValueError("its start must be before its end")
    except ValueError as exc:
        st.error(f"The slice's time range is ignored: {fmt.plain(exc)}.")
        since = until = None
    args = (since, until, *astuple(query))
    table = frame(ctx.source.query("compare", ctx.filters, *args))
    if table.empty:
        st.info("No request in scope to compare.")
        return
    selected, baseline = int(table["selected"].iloc[0]), int(table["baseline"].iloc[0])
    when = (
        f", started {fmt.literal(st.session_state.get(FROM) or '…')} – "
        f"{fmt.literal(st.session_state.get(TO) or '…')}"
        if since or until
        else ""
    )
    st.caption(
        f"Slice: {explorer.selects(query)}{when} — {selected:,} of "
        f"{selected + baseline:,} requests in scope, against the other {baseline:,} (the "
        "baseline). Each dimension's values are ranked by how much more often the slice's "
        "requests take them; an attempt-level value counts a request once whichever of its "
        "attempts take it. Select a value to list the slice's requests taking it."
    )
    if not selected or not baseline:
        st.info(
            "The slice holds every request in scope or none: nothing to compare. Narrow or "
            "widen it (a KPI's Compare link, or the explorer's query in the URL)."
        )
        return
    ranked = _ranked(table)
    row = picked_row(ranked, COLUMNS, "compare_table", height=min(38 + 35 * len(ranked), 740))
    if row is not None and row < len(ranked):
        st.session_state[DIM] = str(ranked["dimension"].iloc[row])
        st.session_state[VALUE] = str(ranked["value"].iloc[row])
    _url.publish((*explorer.PARAMS, *PARAMS))
    dimension, value = st.session_state.get(DIM), st.session_state.get(VALUE)
    if dimension and value is not None:
        _requests(ctx, args, str(dimension), str(value))


if __name__ == "__main__":
    render()
