"""Requests: the explorer every other page links into — a sortable, filterable list of the
logical requests in scope (start, tenant, terminal, excess attempts, cost, wasted cost,
findings first, so they show without scrolling; receiver attempts, retry amplification,
duration, route path, then operation, attempts, retry product, distinct operations,
trace); selecting one opens its drill-down.

Its query lives in the URL (``retryscope.dashboards._explorer``), so a KPI, a chart mark
or a table row elsewhere opens exactly the requests it counts, and a list can be shared.
The rows come from ``retryscope.analytics.request_list`` (the model's figures, the
same the report counts), sorted and cut in DuckDB: only the listed page reaches the browser.
"""

from __future__ import annotations

from dataclasses import astuple
from typing import Any

import streamlit as st

from retryscope.analytics import COMPARE_DIMENSIONS, RequestQuery, RequestSort
from retryscope.dashboards import _explorer as explorer
from retryscope.dashboards import _format as fmt
from retryscope.dashboards import _url
from retryscope.dashboards._context import Context, current
from retryscope.dashboards.views.common import frame, request_table, scope_report

LIMITS = (50, 200, 1000)
TEXT_SORTS = (
    RequestSort.TERMINAL,
    RequestSort.TENANT,
    RequestSort.OPERATION,
    RequestSort.ROUTE_PATH,
)
LIMIT_KEY = "req_limit"

COLUMNS = (
    fmt.Column("logical_request_id", "Request", help="Logical request id", pinned=True),
    fmt.Column("started_at", "Started (UTC)", fmt.Unit.TIME),
    fmt.Column("tenant", "Tenant"),
    fmt.Column("terminal", "Terminal"),
    fmt.Column(
        "excess_attempts",
        "Excess attempts",
        fmt.Unit.COUNT,
        help="Receiver attempts beyond one per distinct operation: retries and resends",
    ),
    fmt.Column("cost_micros", "Cost", fmt.Unit.MONEY),
    fmt.Column(
        "wasted_micros",
        "Wasted",
        fmt.Unit.MONEY,
        help="Cost of attempts whose result was not accepted",
    ),
    fmt.Column("findings", "Findings", fmt.Unit.COUNT),
    fmt.Column(
        "receiver_attempts",
        "Receiver attempts",
        fmt.Unit.COUNT,
        help="Attempts with nothing beneath them: what the providers saw",
    ),
    fmt.Column(
        "amplification_ratio",
        "Retry amplification",
        fmt.Unit.RATIO,
        help="Receiver attempts ÷ distinct operations (1.00×: no retry at any layer, however "
        "many distinct calls)",
    ),
    fmt.Column("duration_ms", "Duration", fmt.Unit.MS),
    fmt.Column(
        "route_path",
        "Route path",
        width="medium",
        help="Routes of the outermost attempts, in the order first tried",
    ),
    fmt.Column("rules", "Finding rules", fmt.Unit.LIST, width="large"),
    fmt.Column("operation", "Operation"),
    fmt.Column("attempts", "Attempts", fmt.Unit.COUNT, help="Attempts at every layer"),
    fmt.Column(
        "retry_product",
        "Retry product",
        fmt.Unit.COUNT,
        help="Product of each retried layer's largest retry group (3 × 3 = 9)",
    ),
    fmt.Column(
        "operations",
        "Distinct operations",
        fmt.Unit.COUNT,
        help="Distinct operations: the most distinct calls any one attempt made",
    ),
    fmt.Column("trace_id", "Trace"),
)


def _options(current_value: Any, values: list[str]) -> list[str]:
    """A choice's options: any, the values present, and the chosen one even when the scope
    has none of it (a shared link over other filters)."""
    options = [explorer.ANY, *values]
    if isinstance(current_value, str) and current_value not in options:
        options.append(current_value)
    return options


def _widgets(ctx: Context, report: dict[str, Any]) -> None:
    state = st.session_state
    terminals = sorted(t for t, n in report["terminals"].items() if n)
    rules = sorted(r for r, n in report["violations"].items() if n)
    layers = [
        str(v)
        for v in frame(ctx.source.query("amplification", ctx.filters, "layer"))["value"]
        if v is not None
    ]
    top = st.columns([2, 3, 2, 2])
    top[0].selectbox(
        "Terminal",
        _options(state.get(explorer.TERMINAL), terminals),
        key=explorer.TERMINAL,
    )
    top[1].selectbox(
        "Has finding",
        _options(state.get(explorer.RULE), rules),
        key=explorer.RULE,
        help="Requests with at least one finding of this rule.",
    )
    top[2].selectbox(
        "Layer retried",
        _options(state.get(explorer.LAYER), layers),
        key=explorer.LAYER,
        help="Requests where this layer made more than one attempt in a retry group.",
    )
    top[3].number_input(
        "Min receiver attempts",
        min_value=0,
        max_value=1_000_000,
        step=1,
        key=explorer.MIN_ATTEMPTS,
        placeholder="any",
    )
    st.pills(
        "Has",
        list(explorer.FLAGS),
        selection_mode="multi",
        key=explorer.HAS,
        format_func=lambda f: explorer.FLAGS[f],
    )
    bottom = st.columns([3, 3, 2, 2])
    bottom[0].text_input(
        "Where",
        key=explorer.WHERE,
        placeholder="dimension:value, e.g. http_status:503",
        help="Requests taking this value in this dimension (an attempt-level one: any of "
        "their attempts), as a breakdown's series. Dimensions: "
        + ", ".join(COMPARE_DIMENSIONS)
        + ".",
    )
    bottom[1].selectbox(
        "Sort by",
        list(explorer.SORT_LABELS),
        key=explorer.SORT,
        format_func=lambda s: explorer.SORT_LABELS[RequestSort(s)],
    )
    bottom[2].segmented_control(
        "Order",
        ["desc", "asc"],
        key=explorer.ORDER,
        format_func=lambda o: "↓ most first" if o == "desc" else "↑ least first",
    )
    bottom[3].selectbox("Rows", LIMITS, key=LIMIT_KEY)


def describe(query: RequestQuery) -> str:
    """What the list holds, in words (the caption above it)."""
    which = explorer.selects(query) + " in scope"
    sort = explorer.SORT_LABELS[RequestSort(query.sort)]
    if query.sort in TEXT_SORTS:
        return f"{which}, by {sort} ({'Z–A' if query.descending else 'A–Z'})."
    if query.sort is RequestSort.STARTED:
        return f"{which}, {'latest' if query.descending else 'earliest'} first."
    return f"{which}, {'most' if query.descending else 'least'} {sort} first."


def render() -> None:
    ctx = current()
    st.header("Requests")
    problems = _url.seed(explorer.PARAMS, entered=ctx.entered)
    for problem in problems:
        st.warning(problem)
    report = scope_report(ctx)
    if report is None:
        return
    st.session_state.setdefault(LIMIT_KEY, LIMITS[1])
    _widgets(ctx, report)
    _url.publish(explorer.PARAMS)
    typed = st.session_state.get(explorer.WHERE)
    if typed:
        try:
            explorer.where(typed)
        except ValueError as exc:
            st.error(f"Where {fmt.literal(typed)}: {fmt.plain(exc)}. It is ignored.")
    query = explorer.query_from_state(int(st.session_state[LIMIT_KEY]))
    total, page = ctx.source.query("request_list", ctx.filters, *astuple(query))
    st.subheader(f"{total:,} of {report['logical_requests']:,} requests")
    listed = f" The first {page.num_rows:,} are listed." if total > page.num_rows else ""
    st.caption(describe(query) + listed + " Select a row to open its drill-down.")
    if total == 0:
        st.info("No request in scope matches. Loosen the filters above or in the sidebar.")
        return
    request_table(
        ctx, frame(page), COLUMNS, "requests_table", height=min(38 + 35 * page.num_rows, 740)
    )


if __name__ == "__main__":
    render()
