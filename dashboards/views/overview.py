"""Overview: the headline numbers against the previous period, each opening the requests it
counts; the top offenders (routes, tenants, operations, layers by excess attempts and
wasted cost); trends over time with storm windows shaded, a click on a bucket opening its
requests and a brush narrowing the time range."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

import pandas as pd
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from retryscope.analytics import RULES, RequestSort, Rule, Severity, Thresholds, trend_bucket
from retryscope.dashboards import _charts as charts
from retryscope.dashboards import _explorer as explorer
from retryscope.dashboards import _format as fmt
from retryscope.dashboards import _url
from retryscope.dashboards._context import Context, current, iso
from retryscope.dashboards.views.common import Kpi, frame, kpi_row, picked_row, scope_report

_VIOLATION_RULES = tuple(r.id for r in RULES if r.severity is not Severity.INFO)
_INFO_RULES = tuple(r.id for r in RULES if r.severity is Severity.INFO)
_ERROR_RULES = tuple(r for r in RULES if r.severity is Severity.ERROR)
OFFENDERS_LISTED = 5
# The thresholds the report and the findings the Overview shows were computed with.
THRESHOLDS = Thresholds()
_BRUSHES = "overview_brushes_applied"
# load windows up to this many are drawn one by one, empty ones as gaps in the line
WINDOWS_FILLED = 20_000


def _cost_amplification(report: dict[str, Any]) -> float | None:
    rows = report["cost"]["by_currency"]
    if not rows:
        return None
    top = max(rows, key=lambda r: r["total_micros"])
    return float(top["cost_amplification"])


def _violations(report: dict[str, Any]) -> int:
    return sum(int(report["violations"][r]) for r in _VIOLATION_RULES)


_KpiSpec = tuple[
    str,
    Callable[[dict[str, Any]], Any],
    Callable[[Any], str],
    Callable[[Any, Any], str | None],
    bool,
    str,
    dict[str, str],
]
KPIS: tuple[_KpiSpec, ...] = (
    # (label, figure of the report, format, change, a rise is bad, help, requests it counts)
    (
        "Logical requests",
        lambda r: r["logical_requests"],
        fmt.count,
        fmt.delta_count,
        False,
        "Logical requests in scope (one per caller request, however many attempts).",
        explorer.params(sort=RequestSort.STARTED, descending=False),
    ),
    (
        "Retry amplification",
        lambda r: r["amplification_ratio"],
        fmt.ratio,
        fmt.delta_ratio,
        True,
        "Receiver attempts ÷ distinct operations: sends per operation, 1.00× when no layer "
        "retried however many distinct calls a request made (`amplification_ratio` of the "
        "report).",
        explorer.params(has=("retried",), sort=RequestSort.EXCESS),
    ),
    (
        "Sends / request",
        lambda r: r["sends_per_request"],
        fmt.ratio,
        fmt.delta_ratio,
        True,
        "Receiver attempts ÷ logical requests: what providers saw per request "
        "(`sends_per_request` of the report).",
        explorer.params(min_attempts=2),
    ),
    (
        "Cost amplification",
        _cost_amplification,
        fmt.ratio,
        fmt.delta_ratio,
        True,
        "Cost of every attempt ÷ cost of the accepted ones (the currency spent most).",
        explorer.params(has=("wasted",), sort=RequestSort.WASTED),
    ),
    (
        "Fallback rate",
        lambda r: r["fallback_rate"],
        fmt.pct,
        fmt.delta_pp,
        True,
        "Requests with an attempt on a non-primary route ÷ logical requests; the change "
        "in percentage points.",
        explorer.params(has=("fallback",)),
    ),
    (
        "Deadline exhausted",
        lambda r: r["deadline_exhausted_rate"],
        fmt.pct,
        fmt.delta_pp,
        True,
        "Requests stopped by their deadline (terminal `stop_deadline`) ÷ logical requests; "
        "the change in percentage points.",
        explorer.params(terminal="stop_deadline", sort=RequestSort.DURATION),
    ),
    (
        "Violations",
        _violations,
        fmt.count,
        fmt.delta_count,
        True,
        "Error and warning findings (per request, and per window for retry storms); the "
        "Findings page also lists the info-level ones, which this leaves out.",
        explorer.params(has=("violation",), sort=RequestSort.FINDINGS),
    ),
)


def _errors(ctx: Context, report: dict[str, Any]) -> None:
    """The error-severity findings (a fallback that widened the data boundary …), each rule
    with its count and a link to its requests, above everything else: they are not
    folded into the Violations count alone."""
    found: list[tuple[Rule, int]] = [
        (r, int(report["violations"][r.id])) for r in _ERROR_RULES if report["violations"][r.id]
    ]
    if not found:
        return
    total = sum(n for _, n in found)
    with st.container(border=True):
        st.error(
            f"**{total:,} error-severity finding{'s' if total != 1 else ''}**, not only "
            "counted among the Violations below:\n"
            + "\n".join(f"- **{n:,}** `{r.id}`: {r.meaning}" for r, n in found)
        )
        with st.container(horizontal=True, gap="small"):
            for r, n in found:
                explorer.link(
                    f"{n:,} {r.id}", ctx.params, explorer.params(rule=r.id), help=r.action
                )


def _kpis(
    ctx: Context,
    figures: dict[str, Any],
    before: dict[str, Any] | None,
    specs: Sequence[_KpiSpec],
    row: DeltaGenerator | None = None,
) -> DeltaGenerator:
    """The cards of ``specs`` over ``figures`` (changes against ``before``), appended to
    ``row`` (a new row when None); the row, for cards drawn later."""
    kpis = [
        Kpi(
            label,
            show(get(figures)),
            change(get(figures), get(before)) if before is not None else None,
            bad_up=bad_up,
            help=help_,
            opens=opens,
        )
        for label, get, show, change, bad_up, help_, opens in specs
    ]
    return kpi_row(ctx, kpis, row)


def _info_left_out(report: dict[str, Any]) -> None:
    info = sum(int(report["violations"][r]) for r in _INFO_RULES)
    if info:
        st.caption(
            f"Violations leave out {info:,} info-level finding(s) (deadline exhaustion, "
            f"doomed dispatch …): the Findings page counts {_violations(report) + info:,} in all."
        )


_DIMENSIONS = (
    # (tab, Dimension, what a row opens: a global filter or an explorer parameter)
    ("Routes", "route", "route"),
    ("Tenants", "tenant", "tenant"),
    ("Operations", "operation", "operation"),
    ("Layers", "layer", "layer"),
)


def _offenders(ctx: Context) -> None:
    """Per dimension, the slices with the most excess attempts (then wasted cost): a row
    opens the explorer on that slice."""
    st.subheader("Top offenders")
    st.caption(
        "Ranked by excess attempts (receiver attempts beyond one per distinct operation; per "
        "route, its sends that repeat an operation, a fallback's counted on the fallback "
        "route; per layer, that layer's attempts beyond the first of their retry group: "
        "every tab adds up to the same total), then wasted cost. Select a row to list its "
        "requests."
    )
    for tab, (_, dim, opens) in zip(
        st.tabs([t for t, _, _ in _DIMENSIONS]), _DIMENSIONS, strict=True
    ):
        with tab:
            amp = frame(ctx.source.query("amplification", ctx.filters, dim))
            amp = amp[amp["value"].notna()]
            costs = frame(ctx.source.query("cost", ctx.filters, dim))
            wasted = (
                costs.sort_values("wasted_micros", ascending=False)
                .drop_duplicates("value")[["value", "wasted_micros", "currency"]]
                .rename(columns={"currency": "cost_currency"})
            )
            rows = amp.merge(wasted, on="value", how="left")
            rows = rows.sort_values(
                ["excess_attempts", "wasted_micros", "value"],
                ascending=[False, False, True],
                na_position="last",
            ).head(OFFENDERS_LISTED)
            ratio = "attempts_per_request" if dim == "layer" else "amplification_ratio"
            columns = [
                fmt.Column("value", dim.capitalize(), width="large"),
                fmt.Column("logical_requests", "Requests", fmt.Unit.COUNT),
                fmt.Column("excess_attempts", "Excess attempts", fmt.Unit.COUNT),
                fmt.Column(
                    ratio,
                    "Attempts / request" if dim == "layer" else "Retry amplification",
                    fmt.Unit.RATIO,
                ),
                fmt.Column("wasted_micros", "Wasted cost", fmt.Unit.MONEY),
            ]
            picked = picked_row(rows, columns, f"offenders_{dim}")
            if picked is not None:
                value = str(rows.iloc[picked]["value"])
                query = {"layer": value} if opens == "layer" else {}
                base = ctx.link(**({} if opens == "layer" else {opens: value}))
                retried = explorer.params(has=("retried",), sort=RequestSort.EXCESS)
                explorer.open_explorer(base, {**retried, **query})


def _slots(width: timedelta, first: datetime, last: datetime) -> pd.DataFrame:
    """Every slot of ``width`` from ``first`` to ``last`` (so empty ones show as gaps):
    ``label`` (the slot's ISO start as the analytics writes it), ``start``, ``end``."""
    stops = pd.date_range(pd.Timestamp(first).floor(width), pd.Timestamp(last), freq=width)
    return _labelled(pd.DataFrame({"start": stops}), width)


def _labelled(slots: pd.DataFrame, width: timedelta) -> pd.DataFrame:
    slots["end"] = slots["start"] + width
    slots["label"] = slots["start"].dt.strftime("%Y-%m-%dT%H:%M:%SZ")
    return slots


def _window_count(loads: pd.DataFrame, window: timedelta) -> int:
    """How many windows lie between the first and the last with traffic."""
    span = pd.Timestamp(loads["window_start"].max()) - pd.Timestamp(loads["window_start"].min())
    return int(span / window) + 1


def _zoom(ctx: Context, key: str, event: Any) -> None:
    """A brushed interval on a trend chart becomes the time range (through the URL: the
    sidebar's boxes are drawn already); each brush is applied once, so clearing the
    filters later is not undone by the brush the chart still holds."""
    interval = charts.brushed(event)
    applied = st.session_state.setdefault(_BRUSHES, {})
    if interval is None or applied.get(key) == interval:
        return
    applied[key] = interval
    since, until = iso(interval[0]), iso(interval[1])
    if (st.query_params.get("since"), st.query_params.get("until")) != (since, until):
        st.query_params["since"], st.query_params["until"] = since, until
        st.rerun()


def _trends(ctx: Context) -> None:
    span = ctx.source.query("scope_time_range", ctx.filters).to_pylist()[0]
    first, last = span["first_started_at"], span["last_started_at"]
    if first is None:
        return
    first = pd.Timestamp(first).floor("us").to_pydatetime()
    last = pd.Timestamp(last).floor("us").to_pydatetime()
    bucket = trend_bucket(first, last)
    width = timedelta(seconds=bucket)
    amp = frame(ctx.source.query("amplification", ctx.filters, "time_bucket", bucket))
    slots = _slots(width, first, last)
    series = slots.merge(amp.rename(columns={"value": "label"}), on="label", how="left")
    window = timedelta(milliseconds=THRESHOLDS.load_window_ms)
    loads = frame(ctx.source.query("load", ctx.filters))
    loads["label"] = pd.to_datetime(loads["window_start"]).dt.strftime("%Y-%m-%dT%H:%M:%SZ")
    storms = _labelled(
        loads[loads["over_budget"]].assign(start=lambda d: pd.to_datetime(d["window_start"])),
        window,
    ).assign(window_start=lambda d: d["start"], window_end=lambda d: d["end"])
    # every window from the first to the last, so the line breaks where no traffic was
    windows = (
        _slots(window, loads["window_start"].min(), loads["window_start"].max()).merge(
            loads.drop(columns=["window_start"]), on="label", how="left"
        )
        if len(loads) and _window_count(loads, window) <= WINDOWS_FILLED
        else _labelled(loads.assign(start=pd.to_datetime(loads["window_start"])), window)
    )
    end = max(slots["end"].max(), windows["end"].max()) if len(windows) else slots["end"].max()
    domain = (slots["start"].min().to_pydatetime(), pd.Timestamp(end).to_pydatetime())

    st.subheader("Trends")
    st.caption(
        f"Per {fmt.width(width)} of the requests in scope (UTC). Red bands: storm windows "
        f"({fmt.width(window)}) where repeats exceeded the "
        f"{fmt.pct(THRESHOLDS.retry_budget, 0)} retry budget and "
        f"{THRESHOLDS.retry_budget_min_retries} repeats ({len(storms):,} of "
        f"{len(loads):,} with traffic). Click a bar or a point to list its requests; drag across a "
        "chart to narrow the time range."
    )
    # (key, chart, its slots, what a click on a slot lists)
    figures = (
        (
            "trend_requests",
            charts.over_time(
                series,
                "logical_requests",
                "logical requests",
                domain,
                bars=True,
                storms=storms,
                value_format=",.0f",
                pickable=True,
            ),
            series,
            explorer.params(),
        ),
        (
            "trend_amplification",
            charts.over_time(
                series,
                "amplification_ratio",
                "amplification",
                domain,
                storms=storms,
                pickable=True,
            ),
            series,
            explorer.params(has=("retried",)),  # the bucket's requests that repeated
        ),
        (
            "trend_retry_fraction",
            charts.over_time(
                windows,
                "retry_fraction",
                "retry fraction",
                domain,
                storms=storms,
                budget=THRESHOLDS.retry_budget,
                value_format=".1%",
                pickable=True,
            ),
            windows,
            explorer.params(has=("retried",)),
        ),
    )
    for key, figure, slots_shown, opens in figures:
        event = st.altair_chart(figure, width="stretch", key=key, on_select="rerun")
        _zoom(ctx, key, event)
        label = charts.picked(event, "label")
        slot = slots_shown[slots_shown["label"] == label] if label is not None else None
        if slot is not None and not slot.empty:
            start, end = (slot[c].iloc[0].to_pydatetime() for c in ("start", "end"))
            explorer.open_explorer(ctx.with_time(start, end), opens)


def _compare_period(ctx: Context) -> None:
    """With a time range set (typed, a preset, or brushed on a trend): a link comparing its
    requests with the others of the same tenant, route and operation."""
    since, until = ctx.params.get("since"), ctx.params.get("until")
    if since is None and until is None:
        return
    scope = {k: v for k, v in ctx.params.items() if k not in ("since", "until")}
    period = {k: v for k, v in (("from", since), ("to", until)) if v is not None}
    st.page_link(
        explorer.COMPARE_PAGE,
        label="Compare this time range with the rest",
        icon=":material/compare_arrows:",
        help="What sets the requests of this time range apart from the others",
        query_params=_url.merged(scope, period),
    )


def render() -> None:
    ctx = current()
    st.header("Overview")
    # The headline first, from the model's rollups (the report's own values): on screen
    # before the report's findings across requests, offenders and trends are computed.
    figures: dict[str, Any] = ctx.source.query("headline", ctx.filters)
    if not figures["logical_requests"]:
        scope_report(ctx)  # says why the scope is empty
        return
    prev = ctx.previous
    before = ctx.source.query("headline", prev) if prev is not None else None
    if before is not None and before["logical_requests"] == 0:
        before = None
    errors = st.container()  # above the cards, filled once the findings are counted
    row = _kpis(ctx, figures, before, KPIS[:-1])
    if prev is None:
        st.caption("Set a time range in the sidebar to compare with the previous period.")
    elif before is None:
        st.caption("No requests in the previous period of equal length: no change shown.")
    else:
        st.caption(
            f"Change vs the previous period {prev.since:%Y-%m-%d %H:%M:%S} – "
            f"{prev.until:%Y-%m-%d %H:%M:%S} UTC ({before['logical_requests']:,} requests); "
            "rates change in percentage points (pp)."
        )
    report: dict[str, Any] = ctx.source.query("report", ctx.filters)
    earlier = ctx.source.query("report", prev) if before is not None else None
    with errors:
        _errors(ctx, report)
    _kpis(ctx, report, earlier, KPIS[-1:], row)  # Violations: findings across requests
    _info_left_out(report)
    _compare_period(ctx)
    _offenders(ctx)
    _trends(ctx)


if __name__ == "__main__":
    render()
