"""Formatting and small helpers shared by the pages."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import pandas as pd
import pyarrow as pa
import streamlit as st

REQUEST_PAGE = "views/request.py"
"""The drill-down page script, relative to ``app.py``."""
REQUEST_URL = "request"
"""Its URL path; ``?id=`` names the request."""

if TYPE_CHECKING:
    from retryscope.dashboards._context import Context

_BUCKETS = (1, 5, 10, 30, 60, 300, 900, 1800, 3600, 6 * 3600, 86_400, 7 * 86_400)


def frame(table: pa.Table) -> pd.DataFrame:
    """A small aggregated Arrow result as a pandas frame for Altair/st.dataframe."""
    df: pd.DataFrame = table.to_pandas()
    return df


def pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def num(value: float | None, digits: int = 0) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def ms(value: float | None) -> str:
    return "–" if value is None or pd.isna(value) else f"{value:,.1f} ms"


def bucket_for(span: timedelta, target: int = 60) -> int:
    """A round time-bucket width (seconds) giving at most ``target`` buckets over ``span``."""
    seconds = span.total_seconds()
    return next((b for b in _BUCKETS if seconds / b <= target), _BUCKETS[-1])


def request_url(ident: Any) -> str:
    """Relative link to the drill-down of one logical request."""
    return f"{REQUEST_URL}?id={quote(str(ident), safe='')}"


def with_links(df: pd.DataFrame, column: str = "logical_request_id") -> pd.DataFrame:
    """``df`` with an ``open`` column linking each row's request to the drill-down."""
    out = df.copy()
    out.insert(0, "open", out[column].map(lambda x: request_url(x) if pd.notna(x) else None))
    return out


LINK_COLUMN = st.column_config.LinkColumn(
    "open", help="Open the request drill-down", display_text="drill-down ›"
)


def request_table(table: pd.DataFrame, key: str) -> None:
    """Show ``table`` (with an ``open`` link column from :func:`with_links`); selecting a
    row that names a request opens its drill-down."""
    event = st.dataframe(
        table,
        hide_index=True,
        width="stretch",
        column_config={"open": LINK_COLUMN},
        on_select="rerun",
        selection_mode="single-row",
        key=key,
    )
    selected = event.selection.rows if event is not None else []
    if selected:
        ident = table.iloc[selected[0]]["logical_request_id"]
        if isinstance(ident, str):
            st.switch_page(REQUEST_PAGE, query_params={"id": ident})


def nothing_in_scope(logical_requests: int) -> bool:
    """Say so when the filters select no requests; True when the page should stop."""
    if logical_requests == 0:
        st.info("No logical requests match the filters. Widen them in the sidebar.")
        return True
    return False


def overall(ctx: Context, query: str) -> dict[str, Any] | None:
    """The unsliced row of a sliced metric under the filters, or None (after saying so)
    when the filters select no requests."""
    rows: list[dict[str, Any]] = ctx.source.query(query, ctx.filters, "overall").to_pylist()
    if nothing_in_scope(int(rows[0]["logical_requests"]) if rows else 0):
        return None
    return rows[0]


def metric_row(items: Sequence[tuple[str, str]]) -> None:
    """One row of ``(label, shown value)`` metrics."""
    for col, (label, value) in zip(st.columns(len(items)), items, strict=True):
        col.metric(label, value)
