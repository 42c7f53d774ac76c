"""What every page shares: the data source and the global filters from the sidebar.

``app.py`` draws the sidebar on every run and stores a :class:`Context` in the session
state; pages read it with :func:`current`. Typed text (times) is parsed, never put into SQL;
choices are matched as plain values by the analytics' bound parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pandas as pd
import pyarrow as pa
import streamlit as st

from retryscope.analytics import Filters, parse_time
from retryscope.dashboards._data import Source

ANY = "(any)"
_KEY = "retryscope_context"


@dataclass(frozen=True)
class Context:
    source: Source
    filters: Filters
    first: datetime | None
    """First request start in the whole data set (UTC, naive)."""
    last: datetime | None

    @property
    def previous(self) -> Filters | None:
        """The period of equal length just before the selected one (a time range must be
        set), with the same tenant/route/operation."""
        f = self.filters
        if f.since is None and f.until is None:
            return None
        start = f.since or self.first
        end = f.until or (self.last + timedelta(microseconds=1) if self.last else None)
        if start is None or end is None or end <= start:
            return None
        return Filters(start - (end - start), start, f.route, f.tenant, f.operation)

    def span(self) -> timedelta:
        """The length of time the selection covers (at least one second)."""
        start = self.filters.since or self.first
        end = self.filters.until or self.last
        if start is None or end is None:
            return timedelta(seconds=1)
        return max(end - start, timedelta(seconds=1))


def _naive_utc(value: datetime) -> datetime:
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value


def _time_input(label: str, key: str, hint: datetime | None) -> datetime | None:
    text = st.sidebar.text_input(
        label,
        key=key,
        placeholder=hint.isoformat(timespec="seconds") + "Z" if hint else "2026-11-29T10:00Z",
        help="ISO-8601 (UTC unless an offset is given) or @unix-seconds; empty = no bound.",
    )
    if not text.strip():
        return None
    try:
        return _naive_utc(parse_time(text))
    except ValueError as exc:
        st.sidebar.error(f"{label}: {exc}. This bound is ignored.")
        return None


def _choice(label: str, key: str, values: list[str]) -> str | None:
    picked = st.sidebar.selectbox(label, [ANY, *values], key=key)
    return None if picked in (None, ANY) else str(picked)


def _values(table: pa.Table, dimension: str) -> list[str]:
    return [str(r["value"]) for r in table.to_pylist() if r["dimension"] == dimension]


def sidebar(source: Source) -> Context:
    """Draw the global filters and remember the resulting context for the pages."""
    span = source.query("time_range").to_pylist()[0]
    first = span["first_started_at"]
    last = span["last_started_at"]
    first = None if first is None else pd.Timestamp(first).floor("us").to_pydatetime()
    last = None if last is None else pd.Timestamp(last).ceil("us").to_pydatetime()
    options = source.query("dimension_values")
    st.sidebar.header("Filters")
    since = _time_input("Since (UTC)", "filter_since", first)
    until = _time_input("Until (UTC)", "filter_until", last)
    tenant = _choice("Tenant", "filter_tenant", _values(options, "tenant"))
    route = _choice("Route", "filter_route", _values(options, "route"))
    operation = _choice("Operation", "filter_operation", _values(options, "operation"))
    if since and until and since >= until:
        st.sidebar.error("Since must be before Until: the time range is ignored.")
        since = until = None
    ctx = Context(source, Filters(since, until, route, tenant, operation), first, last)
    st.session_state[_KEY] = ctx
    return ctx


def current() -> Context:
    """The context ``app.py`` stored for this run."""
    ctx = st.session_state.get(_KEY)
    if not isinstance(ctx, Context):
        raise RuntimeError("retryscope pages run inside app.py (retryscope ui PATH)")
    return ctx
