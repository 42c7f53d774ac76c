"""Formatting and small helpers shared by the pages."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import quote

import pandas as pd
import pyarrow as pa
import streamlit as st

REQUEST_PAGE = "views/request.py"
"""The drill-down page script, relative to ``app.py``."""
REQUEST_URL = "request"
"""Its URL path; ``?id=`` names the request."""

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


def nothing_in_scope(logical_requests: int) -> bool:
    """Say so when the filters select no requests; True when the page should stop."""
    if logical_requests == 0:
        st.info("No logical requests match the filters. Widen them in the sidebar.")
        return True
    return False
