"""What every page shares: the data source, the global filters from the sidebar (kept in the
URL: ``since``, ``until``, ``tenant``, ``route``, ``operation``) and the links between pages
that keep them.

``app.py`` draws the sidebar on every run and stores a :class:`Context` in the session
state; pages read it with :func:`current`. Typed text (times) is parsed, never put into SQL;
choices are matched as plain values by the analytics' bound parameters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd
import pyarrow as pa
import streamlit as st

from retryscope.analytics import Filters, parse_time
from retryscope.dashboards import _format as fmt
from retryscope.dashboards import _url
from retryscope.dashboards._data import Source

ANY = "(any)"
_KEY = "retryscope_context"
_PAGE = "retryscope_page"

PRESETS: dict[str, timedelta | None] = {
    "15 min": timedelta(minutes=15),
    "1 h": timedelta(hours=1),
    "24 h": timedelta(hours=24),
    "All": None,
}
"""Time presets: the last 15 min / 1 h / 24 h of the data (up to its last request), or all."""

SINCE, UNTIL, PRESET = "filter_since", "filter_until", "filter_preset"
TENANT, ROUTE, OPERATION = "filter_tenant", "filter_route", "filter_operation"


@dataclass(frozen=True)
class Context:
    source: Source
    filters: Filters
    first: datetime | None
    """First request start in the whole data set (UTC, naive)."""
    last: datetime | None
    params: Mapping[str, str] = field(default_factory=dict)
    """The global filters as query parameters: what a link to another page carries."""
    entered: bool = True
    """Whether this run opened the page (a new session or another page than the last run)."""

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
        try:
            before = start - (end - start)
        except OverflowError:  # a period longer than the calendar left before it
            return None
        return Filters(before, start, f.route, f.tenant, f.operation)

    def link(self, **extra: str) -> dict[str, str]:
        """Query parameters of a link keeping the global filters, plus ``extra``."""
        return _url.merged(self.params, extra)

    def with_time(self, since: datetime, until: datetime) -> dict[str, str]:
        """Query parameters of a link to the same filters over ``[since, until)``."""
        return self.link(since=iso(since), until=iso(until))


def iso(value: datetime) -> str:
    """A UTC time as the URL and the filter boxes write it: ``2026-09-21T14:13:20Z``
    (microseconds kept when there are any)."""
    value = _naive_utc(value)
    spec = "microseconds" if value.microsecond else "seconds"
    return value.isoformat(timespec=spec) + "Z"


def _naive_utc(value: datetime) -> datetime:
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value


def _bound(label: str, text: str) -> datetime | None:
    if not text.strip():
        return None
    try:
        return _naive_utc(parse_time(text))
    except ValueError as exc:
        st.sidebar.error(f"{label}: {fmt.plain(exc)}. This bound is ignored.")
        return None


def _checked_time(text: str) -> str:
    parse_time(text)  # ValueError names the problem
    return text


def _choice_parser(label: str, values: list[str]) -> Any:
    def parse(text: str) -> str:
        if text not in values:
            raise ValueError(f"no such {label.lower()} in the data")
        return text

    return parse


def _values(table: pa.Table, dimension: str) -> list[str]:
    return [str(r["value"]) for r in table.to_pylist() if r["dimension"] == dimension]


def _preset_bounds(name: str, last: datetime | None) -> tuple[str, str]:
    span = PRESETS.get(name)
    if span is None or last is None:
        return "", ""
    return iso(last + timedelta(microseconds=1) - span), ""


def _matching_preset(since: str, until: str, last: datetime | None) -> str | None:
    for name in PRESETS:
        if (since.strip(), until.strip()) == _preset_bounds(name, last):
            return name
    return None


def _choose_preset(last: datetime | None) -> None:
    """on_change of the preset control: fill the time boxes with its bounds."""
    name = st.session_state.get(PRESET)
    if name is not None:
        st.session_state[SINCE], st.session_state[UNTIL] = _preset_bounds(name, last)


def _clear_filters() -> None:
    st.session_state[SINCE] = st.session_state[UNTIL] = ""
    for key in (TENANT, ROUTE, OPERATION):
        st.session_state[key] = ANY


def _params(options: pa.Table) -> list[_url.Param]:
    def choice(name: str, key: str, label: str, dimension: str) -> _url.Param:
        values = _values(options, dimension)
        return _url.Param(name, key, ANY, _choice_parser(label, values))

    return [
        _url.Param("since", SINCE, "", _checked_time),
        _url.Param("until", UNTIL, "", _checked_time),
        choice("tenant", TENANT, "Tenant", "tenant"),
        choice("route", ROUTE, "Route", "route"),
        choice("operation", OPERATION, "Operation", "operation"),
    ]


def page_entered(url_path: str) -> bool:
    """Record the page this run shows; True when it differs from the last run's."""
    entered = st.session_state.get(_PAGE) != url_path
    st.session_state[_PAGE] = url_path
    return entered


def sidebar(source: Source, *, entered: bool) -> Context:
    """Draw the global filters (seeded from the URL, written back to it) and remember the
    resulting context for the pages."""
    span = source.query("time_range").to_pylist()[0]
    first = span["first_started_at"]
    last = span["last_started_at"]
    first = None if first is None else pd.Timestamp(first).floor("us").to_pydatetime()
    last = None if last is None else pd.Timestamp(last).floor("us").to_pydatetime()
    options = source.query("dimension_values")
    params = _params(options)
    new_session = _url.new_session()
    problems = _url.seed(params, entered=new_session)
    # the preset shown is the one the time boxes hold (none: a custom range)
    st.session_state[PRESET] = _matching_preset(
        st.session_state.get(SINCE, ""), st.session_state.get(UNTIL, ""), last
    )
    side = st.sidebar
    side.header("Filters")
    for problem in problems:
        side.warning(problem)
    side.segmented_control(
        "Time range",
        list(PRESETS),
        key=PRESET,
        on_change=_choose_preset,
        args=(last,),
        help="The last 15 min, 1 h or 24 h of the data (up to its last request), or all of it.",
    )
    hint = iso(first) if first else "2026-11-29T10:00:00Z"
    since_text = side.text_input(
        "Since (UTC)",
        key=SINCE,
        placeholder=hint,
        help="ISO-8601 (UTC unless an offset is given) or @unix-seconds; empty = no bound.",
    )
    until_text = side.text_input(
        "Until (UTC)",
        key=UNTIL,
        placeholder=iso(last) if last else hint,
        help="Exclusive upper bound on request start; empty = no bound.",
    )
    since = _bound("Since (UTC)", since_text)
    until = _bound("Until (UTC)", until_text)
    tenant = _choice("Tenant", TENANT, _values(options, "tenant"))
    route = _choice("Route", ROUTE, _values(options, "route"))
    operation = _choice("Operation", OPERATION, _values(options, "operation"))
    if since and until and since >= until:
        side.error("Since must be before Until: the time range is ignored.")
        since = until = None
    side.button("Clear filters", on_click=_clear_filters, width="stretch")
    _url.publish(params)
    ctx = Context(
        source,
        Filters(since, until, route, tenant, operation),
        first,
        last,
        params=_url.values(params),
        entered=entered,
    )
    st.session_state[_KEY] = ctx
    return ctx


def _choice(label: str, key: str, values: list[str]) -> str | None:
    picked = st.sidebar.selectbox(label, [ANY, *values], key=key)
    return None if picked in (None, ANY) else str(picked)


def current() -> Context:
    """The context ``app.py`` stored for this run."""
    ctx = st.session_state.get(_KEY)
    if not isinstance(ctx, Context):
        raise RuntimeError("retryscope pages run inside app.py (retryscope ui PATH)")
    return ctx
