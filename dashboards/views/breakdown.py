"""Breakdown: any figure by any dimension over time — a line per top value, one for the
others and one for every request in scope, and the table of the same figures (the whole
range, then each time bucket). A point or a cell opens the requests behind it in the
Requests explorer (``where=dimension:value``, the bucket as the time range, the figure's
query); "other" raises the number of values kept apart. Figure, dimension and count live
in the URL (``figure``, ``by``, ``top``). Figures: ``retryscope.analytics.breakdown``,
each by its rule's macro over the explorer's rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pandas as pd
import streamlit as st

from retryscope.analytics import BREAKDOWN_FIGURES, COMPARE_DIMENSIONS, RequestSort, trend_bucket
from retryscope.dashboards import _charts as charts
from retryscope.dashboards import _explorer as explorer
from retryscope.dashboards import _format as fmt
from retryscope.dashboards import _url
from retryscope.dashboards._context import Context, current, iso
from retryscope.dashboards.views.common import frame, scope_report

PAGE = "views/breakdown.py"
FIGURE, BY, TOP = "breakdown_figure", "breakdown_by", "breakdown_top"
TOPS = (3, 5, 10, 20, 50)
ALL, OTHER = "all requests", "other"
WHOLE = "Whole range"
_APPLIED = "breakdown_other_applied"


@dataclass(frozen=True)
class Figure:
    """How a figure is shown: its column, unit and weight, what a link to its requests asks
    the explorer, and the columns shown beside it."""

    column: str
    unit: fmt.Unit
    weight: str  # the count the values are ranked by (as the SQL ranks them)
    opens: dict[str, str] = field(default_factory=dict)
    beside: tuple[fmt.Column, ...] = ()


# Each of BREAKDOWN_FIGURES as the page shows and links it.
FIGURES: dict[str, Figure] = {
    "requests": Figure("requests", fmt.Unit.COUNT, "requests"),
    "amplification": Figure(
        "amplification",
        fmt.Unit.RATIO,
        "excess_attempts",
        explorer.params(sort=RequestSort.EXCESS),
        (fmt.Column("excess_attempts", "Excess attempts", fmt.Unit.COUNT),),
    ),
    "fallback_rate": Figure(
        "fallback_rate",
        fmt.Unit.PCT,
        "fallback_requests",
        explorer.params(has=("fallback",)),
        (fmt.Column("fallback_requests", "Fell back", fmt.Unit.COUNT),),
    ),
    "deadline_exhausted": Figure(
        "deadline_exhausted",
        fmt.Unit.COUNT,
        "deadline_exhausted",
        explorer.params(terminal="stop_deadline", sort=RequestSort.DURATION),
        (fmt.Column("deadline_exhausted_rate", "Exhausted rate", fmt.Unit.PCT),),
    ),
    "wasted": Figure(
        "wasted",
        fmt.Unit.MONEY,
        "wasted",
        explorer.params(has=("wasted",), sort=RequestSort.WASTED),
    ),
    "after_deadline": Figure(
        "after_deadline",
        fmt.Unit.MONEY,
        "after_deadline",
        explorer.params(has=("missed_deadline",), sort=RequestSort.PAST_DEADLINE),
        (fmt.Column("max_past_deadline_ms", "Longest past the deadline", fmt.Unit.MS),),
    ),
    "violations": Figure(
        "violations",
        fmt.Unit.COUNT,
        "violations",
        explorer.params(has=("violation",), sort=RequestSort.FINDINGS),
    ),
}
VALUE_FORMATS = {
    fmt.Unit.COUNT: ",.0f",
    fmt.Unit.RATIO: ",.2f",
    fmt.Unit.PCT: ".1%",
    fmt.Unit.MONEY: ",.2f",
}


def _top(text: str) -> int:
    value = int(text)
    if value not in TOPS:
        raise ValueError(f"must be one of {', '.join(map(str, TOPS))}")
    return value


PARAMS = (
    _url.Param("figure", FIGURE, "amplification", _url.one_of(BREAKDOWN_FIGURES, "figure")),
    _url.Param("by", BY, "route", _url.one_of(COMPARE_DIMENSIONS, "dimension")),
    _url.Param("top", TOP, 5, _top),
)


def _series(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with each row's series ``name`` as shown: a value, or :data:`ALL` /
    :data:`OTHER`."""
    table = table.copy()
    names = {"all": ALL, "other": OTHER}
    table["name"] = [names.get(s, v) for s, v in zip(table["series"], table["value"], strict=True)]
    return table


def requests_of(
    ctx: Context,
    figure: str,
    where: tuple[str, str] | None,
    start: datetime | None,
    width: timedelta,
) -> dict[str, str]:
    """The explorer's query parameters listing the requests behind ``figure`` of the
    requests taking ``where`` (dimension, value; None: every request) in the bucket from
    ``start`` (None: the whole range): the global filters, the bucket clipped to their time
    range, the value, the figure's query."""
    query = dict(FIGURES[figure].opens)
    if where is not None:
        query["where"] = explorer.where_text(*where)
    if start is None:
        return ctx.link(**query)
    since, until = start, start + width
    if ctx.filters.since is not None:
        since = max(since, ctx.filters.since)
    if ctx.filters.until is not None:
        until = min(until, ctx.filters.until)
    return ctx.link(since=iso(since), until=iso(until), **query)


def _open(
    ctx: Context,
    figure: str,
    row: pd.Series,
    dimension: str,
    start: datetime | None,
    width: timedelta,
) -> None:
    """Open the requests behind a point or cell of series ``row``; on the other values'
    series, keep more values apart instead."""
    if row["series"] == "other":
        # the chart and the table keep their selection when the page reruns itself: a
        # selection keeps more values apart once
        top = int(st.session_state.get(TOP) or TOPS[0])
        applied = (figure, dimension, top, start)
        if st.session_state.get(_APPLIED) == applied:
            return
        st.session_state[_APPLIED] = applied
        more = next((t for t in TOPS if t > top), None)
        if more is not None:
            query = _url.merged(ctx.params, _url.values(PARAMS), {"top": str(more)})
            st.switch_page(PAGE, query_params=query)
        return
    where = None if row["series"] == "all" else (dimension, str(row["value"]))
    st.switch_page(explorer.PAGE, query_params=requests_of(ctx, figure, where, start, width))


def _controls() -> tuple[str, str, int]:
    left, mid, right = st.columns([3, 3, 1])
    figure = left.selectbox(
        "Figure", list(BREAKDOWN_FIGURES), key=FIGURE, format_func=BREAKDOWN_FIGURES.__getitem__
    )
    by = mid.selectbox(
        "By", list(COMPARE_DIMENSIONS), key=BY, format_func=COMPARE_DIMENSIONS.__getitem__
    )
    top = right.selectbox("Top", TOPS, key=TOP, help="Values kept apart; the rest: other")
    return str(figure), str(by), int(top)


def _bucket_label(start: Any) -> str:
    return str(pd.Timestamp(start).strftime("%Y-%m-%dT%H:%M:%SZ"))


def _ordered(whole: pd.DataFrame, weight: str) -> pd.DataFrame:
    """The whole-range rows: every request first, the values by weight, the others last."""
    values = whole[whole["series"] == "value"].sort_values(
        [weight, "requests", "value"], ascending=[False, False, True]
    )
    return pd.concat(
        [whole[whole["series"] == "all"], values, whole[whole["series"] == "other"]],
        ignore_index=True,
    )


def render() -> None:
    ctx = current()
    st.header("Breakdown")
    for problem in _url.seed(PARAMS, entered=ctx.entered):
        st.warning(problem)
    report = scope_report(ctx)
    if report is None:
        return
    figure, by, top = _controls()
    _url.publish(PARAMS)
    span = ctx.source.query("scope_time_range", ctx.filters).to_pylist()[0]
    first = pd.Timestamp(span["first_started_at"]).floor("us").to_pydatetime()
    last = pd.Timestamp(span["last_started_at"]).floor("us").to_pydatetime()
    seconds = trend_bucket(first, last)
    width = timedelta(seconds=seconds)
    table = _series(frame(ctx.source.query("breakdown", ctx.filters, by, figure, seconds, top)))
    table["key"] = table["series"] + ":" + table["value"].fillna("")
    shown = FIGURES[figure]
    label = BREAKDOWN_FIGURES[figure]
    whole = _ordered(table[table["start"].isna()], shown.weight)
    buckets = table[table["start"].notna()].copy()
    buckets["start"] = pd.to_datetime(buckets["start"])
    buckets["end"] = buckets["start"] + width
    buckets["label"] = buckets["start"].map(_bucket_label)
    costs = report["cost"]["by_currency"]
    currency = costs[0]["currency"] if len(costs) == 1 else None
    mixed = shown.unit is fmt.Unit.MONEY and len(costs) > 1
    st.caption(
        f"{label.capitalize()} by {COMPARE_DIMENSIONS[by]}, per {fmt.width(width)} "
        f"(UTC): the {top} values of most weight, the other values' requests as one series "
        f"and {ALL} in scope (the report's figure, dashed). A request counts in every value "
        "its attempts take. Click a point or a cell to list its requests (on other: to keep "
        "more values apart)." + (" Costs add up several currencies here." if mixed else "")
    )
    domain = (first, max(last, buckets["end"].max().to_pydatetime()) if len(buckets) else last)
    scale = 1e-6 if shown.unit is fmt.Unit.MONEY else 1
    event = st.altair_chart(
        charts.series_over_time(
            buckets.assign(figure=buckets[shown.column] * scale),
            "figure",
            label,
            domain,
            list(dict.fromkeys(whole["name"])),
            value_format=VALUE_FORMATS[shown.unit],
        ),
        width="stretch",
        key="breakdown_chart",
        on_select="rerun",
    )
    picked = charts.picked_point(event, ("name", "label"))
    if picked is not None:
        hit = buckets[(buckets["name"] == picked[0]) & (buckets["label"] == picked[1])]
        if not hit.empty:
            _open(ctx, figure, hit.iloc[0], by, hit["start"].iloc[0].to_pydatetime(), width)
    _table(ctx, figure, by, whole, buckets, width, currency)


def _table(
    ctx: Context,
    figure: str,
    by: str,
    whole: pd.DataFrame,
    buckets: pd.DataFrame,
    width: timedelta,
    currency: str | None,
) -> None:
    """Series × (the whole range, then each bucket): a selected cell opens its requests."""
    shown = FIGURES[figure]
    label = BREAKDOWN_FIGURES[figure]
    rows = whole.copy()
    starts = sorted(buckets["start"].unique())
    per_bucket = buckets.pivot_table(
        index="key", columns="label", values=shown.column, aggfunc="first"
    ).reindex(rows["key"])
    columns = [
        fmt.Column("name", COMPARE_DIMENSIONS[by].capitalize(), width="medium", pinned=True),
        fmt.Column(shown.column, f"{label.capitalize()} ({WHOLE.lower()})", shown.unit),
        fmt.Column("requests", "Requests", fmt.Unit.COUNT),
        *shown.beside,
    ]
    for start in starts:
        bucket = _bucket_label(start)
        rows[bucket] = per_bucket[bucket].to_numpy() if bucket in per_bucket else None
        columns.append(fmt.Column(bucket, bucket.removesuffix("Z").replace("T", " "), shown.unit))
    shown_rows, config = fmt.shown(rows, columns, currency=currency, as_text=True)
    event = st.dataframe(
        shown_rows,
        hide_index=True,
        width="stretch",
        column_config=config,
        on_select="rerun",
        selection_mode="single-cell",
        key="breakdown_table",
    )
    cells = event.selection.cells if event is not None else []
    if not cells:
        return
    row, column = cells[0]
    if not 0 <= int(row) < len(rows):
        return
    picked = next((s for s in starts if _bucket_label(s) == column), None)
    start = None if picked is None else pd.Timestamp(picked).to_pydatetime()
    _open(ctx, figure, rows.iloc[int(row)], by, start, width)


if __name__ == "__main__":
    render()
