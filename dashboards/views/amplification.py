"""Amplification: where attempts multiply — by route and layer (a click on a bar lists that
slice's requests), nested retry owners and their product, attempts hidden below the
harness, and which retries ever succeed."""

from __future__ import annotations

import altair as alt
import streamlit as st

from retryscope.analytics import RequestSort
from retryscope.dashboards import _charts as charts
from retryscope.dashboards import _explorer as explorer
from retryscope.dashboards import _format as fmt
from retryscope.dashboards._context import Context, current
from retryscope.dashboards.views.common import (
    Kpi,
    frame,
    kpi_row,
    overall,
    request_table,
    table,
)

NESTED_LIMIT = 200

ROUTE_COLUMNS = (
    fmt.Column("value", "Route", width="large"),
    fmt.Column(
        "logical_requests", "Requests", fmt.Unit.COUNT, help="Requests with an attempt on the route"
    ),
    fmt.Column("receiver_attempts", "Receiver attempts", fmt.Unit.COUNT),
    fmt.Column(
        "amplification_ratio",
        "Retry amplification",
        fmt.Unit.RATIO,
        help="Receiver attempts on the route ÷ the distinct operations they served (as the "
        "report's routes)",
    ),
    fmt.Column(
        "sends_per_request",
        "Sends / request",
        fmt.Unit.RATIO,
        help="Receiver attempts on the route ÷ its requests (as the report's routes)",
    ),
    fmt.Column(
        "excess_attempts",
        "Excess attempts",
        fmt.Unit.COUNT,
        help="Receiver attempts beyond one per distinct operation: retries and resends",
    ),
    fmt.Column("physical_attempts", "Attempts (all layers)", fmt.Unit.COUNT),
)
LAYER_COLUMNS = (
    fmt.Column("value", "Layer", width="medium"),
    fmt.Column(
        "logical_requests", "Requests", fmt.Unit.COUNT, help="Requests with an attempt at the layer"
    ),
    fmt.Column("physical_attempts", "Attempts", fmt.Unit.COUNT),
    fmt.Column(
        "attempts_per_request",
        "Attempts / request",
        fmt.Unit.RATIO,
        help="The layer's attempts ÷ its requests: how much the layer multiplies",
    ),
    fmt.Column(
        "excess_attempts",
        "Retries",
        fmt.Unit.COUNT,
        help="The layer's attempts beyond the first of their retry group",
    ),
    fmt.Column(
        "receiver_attempts",
        "Of which receiver attempts",
        fmt.Unit.COUNT,
        help="Attempts at the layer with nothing beneath them",
    ),
)
NESTED_COLUMNS = (
    fmt.Column("logical_request_id", "Request"),
    fmt.Column("product", "Retry groups", width="medium"),
    fmt.Column("multiplication", "Retry product", fmt.Unit.COUNT),
    fmt.Column("tenant", "Tenant"),
    fmt.Column("operation", "Operation"),
    fmt.Column("started_at", "Started (UTC)", fmt.Unit.TIME),
)


def _slice(ctx: Context, dim: str, value: str, columns: tuple[fmt.Column, ...]) -> None:
    """Bars of ``value`` per slice of ``dim`` (a click lists that slice's requests) and
    the slice table beneath."""
    rows = frame(ctx.source.query("amplification", ctx.filters, dim))
    rows = rows[rows["value"].notna()]
    title = next(c.label for c in columns if c.name == value)
    figure = charts.bars(
        rows,
        "value",
        value,
        title,
        value_format=",.2f",
        pickable=True,
        tooltip=[alt.Tooltip("logical_requests:Q", title="requests", format=",")],
    )
    event = st.altair_chart(figure, width="stretch", key=f"amp_{dim}", on_select="rerun")
    picked = charts.picked(event, "value")
    if picked is not None:
        if dim == "layer":
            explorer.open_explorer(ctx.params, explorer.params(layer=picked))
        else:
            explorer.open_explorer(ctx.link(route=picked), explorer.params(has=("retried",)))
    table(rows, columns)


def render() -> None:
    ctx = current()
    st.header("Amplification")
    row = overall(ctx, "amplification")
    if row is None:
        return
    product = row["max_nested_multiplication"]
    nested = explorer.params(has=("nested",), sort=RequestSort.RETRY_PRODUCT)
    kpi_row(
        ctx,
        [
            Kpi(
                "Retry amplification",
                fmt.ratio(row["amplification_ratio"]),
                opens=explorer.params(has=("retried",), sort=RequestSort.EXCESS),
                help="Receiver attempts ÷ distinct operations (1.00×: no layer retried)",
            ),
            Kpi(
                "Sends / request",
                fmt.ratio(row["sends_per_request"]),
                opens=explorer.params(min_attempts=2),
                help="Receiver attempts ÷ logical requests: what the providers saw per request",
            ),
            Kpi(
                "Receiver attempts",
                fmt.count(row["receiver_attempts"]),
                help="Attempts with nothing beneath them: what the providers saw",
            ),
            Kpi(
                "Hidden attempts",
                fmt.count(row["hidden_attempts"]),
                help="Receiver attempts beyond one per operation per harness attempt: "
                "retries below the retry owner",
            ),
            Kpi(
                "Nested-retry requests",
                fmt.count(row["nested_retry_requests"]),
                opens=nested,
                help="Requests where two or more layers retried",
            ),
            Kpi(
                "Largest product",
                f"{product}×" if product else fmt.DASH,
                opens=nested,
                help="Largest product of retry group sizes in one request (3 × 3 = 9)",
            ),
        ],
    )
    st.subheader("By route")
    st.caption(
        "Receiver attempts per distinct operation on each route (retry amplification), as "
        "the report's `routes` rows. Click a bar to list the route's retried requests."
    )
    _slice(ctx, "route", "amplification_ratio", ROUTE_COLUMNS)
    st.subheader("By layer")
    st.caption(
        "Each layer's attempts per request that reached it: a harness's attempts all have "
        "sends beneath them, so it multiplies without receiver attempts of its own. Click "
        "a bar to list the requests that layer retried."
    )
    _slice(ctx, "layer", "attempts_per_request", LAYER_COLUMNS)

    st.subheader("Nested retries")
    found = frame(ctx.source.query("nested_retry_requests", ctx.filters, NESTED_LIMIT))
    if found.empty:
        st.success("No request retried at two or more layers.")
    else:
        st.caption(
            "Requests where two or more layers retried: their attempts multiply. Keep one "
            "retry owner (disable SDK retries or harness retries). Select a row to open it."
        )
        request_table(ctx, found, NESTED_COLUMNS, "nested_table")
        explorer.link("All nested-retry requests", ctx.params, nested)

    st.subheader("Retry success by failure kind × ordinal")
    matrix = frame(ctx.source.query("retry_success_matrix", ctx.filters))
    if matrix.empty:
        st.info("No retries after a failure in scope.")
        return
    layers = list(dict.fromkeys(matrix["layer"]))
    layer = (
        st.selectbox("Layer", layers, key="amplification_layer") if len(layers) > 1 else layers[0]
    )
    cells = matrix[matrix["layer"] == layer].copy()
    cells["label"] = [
        f"{rate:.0%} of {n:,}"
        for rate, n in zip(cells["success_rate"], cells["retries"], strict=True)
    ]
    st.altair_chart(charts.heatmap(cells), width="stretch")


if __name__ == "__main__":
    render()
