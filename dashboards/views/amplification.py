"""Amplification: where attempts multiply — by layer and route, nested retry owners and
their product, attempts hidden below the harness, and which retries ever succeed."""

from __future__ import annotations

import streamlit as st

from retryscope.analytics._report import BY_LAYER_DROPPED
from retryscope.dashboards import _charts as charts
from retryscope.dashboards._context import current
from retryscope.dashboards.views.common import (
    LINK_COLUMN,
    frame,
    metric_row,
    num,
    overall,
    with_links,
)

NESTED_LIMIT = 200

_COLUMNS = [
    "value",
    "logical_requests",
    "physical_attempts",
    "receiver_attempts",
    "amplification_ratio",
    "hidden_attempts",
    "max_attempts_per_request",
    "p99_attempts_per_request",
]


def render() -> None:
    ctx = current()
    st.header("Amplification")
    row = overall(ctx, "amplification")
    if row is None:
        return
    product = row["max_nested_multiplication"]
    metric_row(
        [
            ("Amplification", f"{row['amplification_ratio']:.2f}×"),
            ("Receiver attempts", num(row["receiver_attempts"])),
            ("Hidden attempts", num(row["hidden_attempts"])),
            ("Nested-retry requests", num(row["nested_retry_requests"])),
            ("Largest product", f"{product}×" if product else "–"),
        ]
    )
    st.caption(
        "Amplification: receiver attempts per logical request (`amplification_ratio` of "
        "the report, overall, by layer and by route). Receiver attempts: what the provider "
        "saw (attempts with nothing beneath them). Hidden: receiver attempts beyond the "
        "harness's own."
    )

    for title, by in (("By layer", "layer"), ("By route", "route")):
        # per layer, what only whole requests have (hidden attempts, nesting) is left out,
        # as in the report's by_layer rows
        columns = [c for c in _COLUMNS if by != "layer" or c not in BY_LAYER_DROPPED]
        table = frame(ctx.source.query("amplification", ctx.filters, by))[columns]
        table = table.rename(columns={"value": by})
        st.subheader(title)
        left, right = st.columns([2, 3])
        left.altair_chart(
            charts.bars(table, by, "receiver_attempts", "receiver attempts"),
            width="stretch",
        )
        right.dataframe(table, hide_index=True, width="stretch")

    st.subheader("Nested retries")
    nested = frame(ctx.source.query("nested_retry_requests", ctx.filters, NESTED_LIMIT))
    if nested.empty:
        st.success("No request retried at two or more layers.")
    else:
        st.caption(
            "Requests where two or more layers retried: their attempts multiply. "
            "Keep one retry owner (disable SDK retries or harness retries)."
        )
        st.dataframe(
            with_links(nested),
            hide_index=True,
            width="stretch",
            column_config={"open": LINK_COLUMN},
        )

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
        f"{rate:.0%} of {n}"
        for rate, n in zip(cells["success_rate"], cells["retries"], strict=True)
    ]
    st.altair_chart(charts.heatmap(cells), width="stretch")


if __name__ == "__main__":
    render()
