"""Altair charts of the audit UI, built from small aggregated tables (pandas frames).

Charts that open other views carry selections: ``pick`` (a point selection on the field a
click opens) and ``zoom`` (an interval on time, brushed to narrow the time range). Their
pages read the selection Streamlit returns (``on_select``) with :func:`picked` and
:func:`brushed`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import altair as alt
import pandas as pd

from retryscope.vocabulary import Outcome, OutcomeKind

Figure = alt.Chart | alt.LayerChart | alt.FacetChart
"""What the builders return (Altair types a chart with properties as any of these)."""

PICK, ZOOM = "pick", "zoom"

STATUS_KINDS = {"OK": "span ok", "ERROR": "span error", "UNSET": "span unset"}
"""What a span that is not an attempt is coloured by: its status."""
KIND_COLOURS: dict[str, str] = {
    Outcome.SUCCESS.value: "#2e7d32",
    OutcomeKind.RATE_LIMITED.value: "#f9a825",
    OutcomeKind.UNAVAILABLE.value: "#ef6c00",
    OutcomeKind.TIMEOUT_BEFORE_RESPONSE.value: "#8d6e63",
    OutcomeKind.REJECTED.value: "#c62828",
    OutcomeKind.POLICY_DENIED.value: "#ad1457",
    OutcomeKind.INVALID_REQUEST.value: "#e57373",
    OutcomeKind.PROTOCOL_VIOLATION.value: "#5d4037",
    OutcomeKind.INVALID_OUTPUT.value: "#f06292",
    OutcomeKind.UNKNOWN_PROVIDER_ACCEPTANCE.value: "#6a1b9a",
    OutcomeKind.STREAM_INTERRUPTED_AFTER_OUTPUT.value: "#9575cd",
    Outcome.RETRYABLE.value: "#ffb74d",
    Outcome.NON_RETRYABLE.value: "#ef9a9a",
    Outcome.INDETERMINATE.value: "#ce93d8",
    "unknown": "#9e9e9e",
    "span ok": "#a5d6a7",
    "span error": "#d32f2f",
    "span unset": "#bdbdbd",
}
"""One colour per outcome kind (an attempt without a kind: its outcome family's)."""

_SERIES_COLOURS = (
    "#1e88e5",
    "#e53935",
    "#43a047",
    "#fb8c00",
    "#8e24aa",
    "#00acc1",
    "#6d4c41",
    "#c0ca33",
    "#d81b60",
    "#3949ab",
)
"""Colours of a breakdown's series (beyond ten they repeat)."""

SERIES = ("recorded", "replayed (low)", "replayed (high)")
"""The series of :func:`comparison`, in order."""


def _kind_colour(kinds: Iterable[str], *, columns: int | None = None) -> alt.Color:
    """Colour by ``kind``, one colour per outcome kind present (:data:`KIND_COLOURS`; an
    unknown kind grey), the legend below the chart."""
    seen = set(kinds)
    present = [k for k in KIND_COLOURS if k in seen] + sorted(seen - set(KIND_COLOURS))
    scale = alt.Scale(
        domain=present, range=[KIND_COLOURS.get(k, KIND_COLOURS["unknown"]) for k in present]
    )
    legend = (
        alt.Legend(orient="bottom", direction="horizontal", labelLimit=0)
        if columns is None
        else alt.Legend(orient="bottom", columns=columns, labelLimit=0)
    )
    return alt.Color("kind:N", scale=scale, title="outcome", legend=legend)


def _utc_datetime(t: datetime) -> alt.DateTime:
    """``t`` (naive = UTC) as a Vega-Lite DateTime (a scale domain of epoch numbers
    misplaces lines and points on a utc scale)."""
    if t.tzinfo is not None:
        t = t.astimezone(UTC).replace(tzinfo=None)
    return alt.DateTime(
        year=t.year,
        month=t.month,
        date=t.day,
        hours=t.hour,
        minutes=t.minute,
        seconds=t.second,
        milliseconds=t.microsecond // 1000,
        utc=True,
    )


def _time_axis(domain: tuple[datetime, datetime], title: str | None = "time (UTC)") -> alt.X:
    """One x axis for every chart over time: the same domain, scale and labels."""
    span = (domain[1] - domain[0]).total_seconds()
    fmt = "%H:%M:%S" if span <= 3 * 3600 else "%m-%d %H:%M" if span <= 3 * 86_400 else "%Y-%m-%d"
    return alt.X(
        "start:T",
        title=title,
        scale=alt.Scale(type="utc", domain=[_utc_datetime(domain[0]), _utc_datetime(domain[1])]),
        axis=alt.Axis(format=fmt, labelAngle=0, labelOverlap=True),
    )


def over_time(
    frame: pd.DataFrame,
    field: str,
    title: str,
    domain: tuple[datetime, datetime],
    *,
    bars: bool = False,
    storms: pd.DataFrame | None = None,
    budget: float | None = None,
    value_format: str = ",.2f",
    pickable: bool = False,
) -> Figure:
    """``field`` per time slot (``start``..``end``, UTC; ``label`` names the slot) on the
    shared time axis ``domain``: bars, or a line with points that breaks where a slot has
    no value (no line across empty slots). Storm windows (``window_start``..``window_end``)
    shade red behind it, ``budget`` is a dashed rule. Brushing the x axis selects
    ``zoom``; with ``pickable`` a click on a bar selects ``pick`` (its ``label``)."""
    x = _time_axis(domain)
    tooltip = [
        alt.Tooltip("label:N", title="from (UTC)"),
        alt.Tooltip(f"{field}:Q", title=title, format=value_format),
    ]
    whole = value_format.endswith(".0f")
    y = alt.Y(
        f"{field}:Q",
        title=title,
        # one axis width on every chart, so their time axes line up; counts tick whole
        axis=alt.Axis(minExtent=44, format="d", tickMinStep=1) if whole else alt.Axis(minExtent=44),
    )
    base = alt.Chart(frame)
    marks: list[Any] = []
    if bars:
        main = base.mark_rect(color="#1e88e5").encode(
            x=x, x2="end:T", y=y, y2=alt.datum(0), tooltip=tooltip
        )
    else:
        marks.append(base.mark_line(color="#1e88e5").encode(x=x, y=y))
        main = base.mark_point(filled=True, size=40, color="#1e88e5").encode(
            x=x, y=y, tooltip=tooltip
        )
    # the selections live on one unit view (Vega-Lite binds a brush to a unit, not a layer)
    main = main.add_params(alt.selection_interval(name=ZOOM, encodings=["x"]))
    if pickable:
        main = main.add_params(alt.selection_point(name=PICK, fields=["label"], on="click"))
    marks.append(main)
    layers: list[Any] = []
    if storms is not None and not storms.empty:
        layers.append(
            alt.Chart(storms)
            .mark_rect(color="#e53935", opacity=0.15)
            .encode(
                x=alt.X("window_start:T"),
                x2="window_end:T",
                tooltip=[
                    alt.Tooltip("label:N", title="storm window from (UTC)"),
                    alt.Tooltip("retry_fraction:Q", title="retry fraction", format=".1%"),
                ],
            )
        )
    layers += marks
    if budget is not None:
        layers.append(
            alt.Chart(pd.DataFrame({"budget": [budget]}))
            .mark_rule(strokeDash=[6, 4], color="#b71c1c")
            .encode(y="budget:Q", tooltip=[alt.Tooltip("budget:Q", title="retry budget")])
        )
    chart: Figure = alt.layer(*layers).properties(height=170)
    return chart


def series_over_time(
    frame: pd.DataFrame,
    field: str,
    title: str,
    domain: tuple[datetime, datetime],
    names: Sequence[str],
    *,
    value_format: str = ",.2f",
) -> Figure:
    """``field`` per time slot (``start``, ``label``) and series (``name``, in the order of
    ``names``; the first drawn dashed grey: the total the others break down), a line with
    points per series on the shared time axis; a click on a point selects ``pick`` (its
    ``name`` and ``label``), brushing the x axis ``zoom``."""
    palette = ["#616161", *(_SERIES_COLOURS[i % len(_SERIES_COLOURS)] for i in range(len(names)))]
    colour = alt.Color(
        "name:N",
        title=None,
        scale=alt.Scale(domain=list(names), range=palette[: len(names)]),
        sort=list(names),
        legend=alt.Legend(orient="bottom", direction="horizontal", labelLimit=0),
    )
    x = _time_axis(domain)
    y = alt.Y(f"{field}:Q", title=title, axis=alt.Axis(minExtent=44))
    dash = (
        alt.condition(alt.datum.name == names[0], alt.value([6, 4]), alt.value([1, 0]))
        if names
        else alt.value([1, 0])
    )
    base = alt.Chart(frame)
    line = base.mark_line().encode(x=x, y=y, color=colour, strokeDash=dash, detail="name:N")
    points = (
        base.mark_point(filled=True, size=50, cursor="pointer")
        .encode(
            x=x,
            y=y,
            color=colour,
            tooltip=[
                alt.Tooltip("name:N", title="series"),
                alt.Tooltip("label:N", title="from (UTC)"),
                alt.Tooltip(f"{field}:Q", title=title, format=value_format),
                alt.Tooltip("requests:Q", title="requests", format=",.0f"),
            ],
        )
        .add_params(
            alt.selection_point(name=PICK, fields=["name", "label"], on="click"),
            alt.selection_interval(name=ZOOM, encodings=["x"]),
        )
    )
    chart: Figure = alt.layer(line, points).properties(height=300)
    return chart


def picked_point(event: Any, fields: Sequence[str]) -> tuple[str, ...] | None:
    """The ``fields`` of the mark a click selected (``pick``), if it names them all."""
    if event is None:
        return None
    rows = event.get("selection", {}).get(PICK) or []
    if isinstance(rows, Mapping):  # a single selected point as a mapping of fields
        rows = [rows]
    for row in rows:
        if isinstance(row, Mapping) and all(row.get(f) is not None for f in fields):
            return tuple(str(row[f]) for f in fields)
    return None


def bars(
    frame: pd.DataFrame,
    category: str,
    value: str,
    title: str,
    *,
    value_format: str = ",.0f",
    pickable: bool = False,
    tooltip: Sequence[alt.Tooltip] = (),
) -> Figure:
    """Horizontal bars of ``value`` per ``category`` (labels never cut); with
    ``pickable`` a click selects ``pick`` (the bar's ``category``)."""
    chart: Any = (
        alt.Chart(frame)
        .mark_bar(color="#1e88e5", cursor="pointer" if pickable else "default")
        .encode(
            x=alt.X(
                f"{value}:Q",
                title=title,
                # counts get whole ticks (no "0.2 findings")
                axis=alt.Axis(tickMinStep=1, format="d")
                if value_format.endswith(".0f")
                else alt.Axis(),
            ),
            y=alt.Y(
                f"{category}:N",
                title=None,
                sort="-x",
                axis=alt.Axis(labelLimit=0, labelFontSize=12, labelColor="#212121"),
            ),
            tooltip=[
                alt.Tooltip(f"{category}:N"),
                alt.Tooltip(f"{value}:Q", title=title, format=value_format),
                *tooltip,
            ],
        )
        .properties(height=alt.Step(26))
    )
    if pickable:
        chart = chart.add_params(alt.selection_point(name=PICK, fields=[category], on="click"))
    figure: Figure = chart
    return figure


def picked(event: Any, field: str) -> str | None:
    """The ``field`` value of the mark a click selected (``pick``), if any."""
    hit = picked_point(event, (field,))
    return None if hit is None else hit[0]


def brushed(event: Any, field: str = "start") -> tuple[datetime, datetime] | None:
    """The time interval the ``zoom`` brush selects on ``field`` (UTC, naive), if any."""
    if event is None:
        return None
    interval = (event.get("selection", {}).get(ZOOM) or {}).get(field)
    if not interval or len(interval) != 2:
        return None
    ends = [_instant(v) for v in interval]
    if None in ends:
        return None
    lo, hi = sorted(e for e in ends if e is not None)
    return (lo, hi) if hi > lo else None


def _instant(value: Any) -> datetime | None:
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value / 1000.0, UTC).replace(tzinfo=None)
    try:
        ts = pd.Timestamp(value)
    except (TypeError, ValueError):
        return None
    if ts.tzinfo is not None:
        ts = ts.tz_convert("UTC").tz_localize(None)
    out: datetime = ts.to_pydatetime()
    return out


def comparison(frame: pd.DataFrame, metrics: list[str]) -> Figure:
    """Recorded vs replayed figures (``metric``, ``series``, ``value``), one panel per
    metric (in the order of ``metrics``) on its own scale: the replayed low and high bounds
    of an estimate side by side."""
    chart: Figure = (
        alt.Chart(frame)
        .mark_bar()
        .encode(
            x=alt.X("series:N", title=None, axis=None, sort=SERIES),
            y=alt.Y("value:Q", title=None),
            color=alt.Color(
                "series:N",
                title=None,
                scale=alt.Scale(domain=list(SERIES), range=["#607d8b", "#1e88e5", "#90caf9"]),
            ),
            tooltip=["metric:N", "series:N", alt.Tooltip("value:Q", format=",.0f")],
        )
        .properties(width=120, height=200)
        .facet(column=alt.Column("metric:N", title=None, sort=metrics))
        .resolve_scale(y="independent")
    )
    return chart


def heatmap(matrix: pd.DataFrame) -> Figure:
    """Retry success rate by preceding failure kind (rows) × attempt ordinal (columns)."""
    base = alt.Chart(matrix).encode(
        x=alt.X("attempt_ordinal:O", title="attempt ordinal", axis=alt.Axis(labelAngle=0)),
        y=alt.Y("after_kind:N", title="after failure kind", axis=alt.Axis(labelLimit=0)),
    )
    cells = base.mark_rect().encode(
        color=alt.Color(
            "success_rate:Q",
            title="success",
            scale=alt.Scale(domain=[0, 1], scheme="redyellowgreen"),
            legend=alt.Legend(format=".0%"),
        ),
        tooltip=[
            alt.Tooltip("layer:N"),
            alt.Tooltip("after_kind:N", title="after failure kind"),
            alt.Tooltip("attempt_ordinal:O", title="attempt ordinal"),
            alt.Tooltip("retries:Q", format=","),
            alt.Tooltip("success_rate:Q", title="success rate", format=".0%"),
        ],
    )
    labels = base.mark_text(fontSize=12).encode(
        text=alt.Text("label:N"),
        # white on the dark ends of the scale, black in between: legible on every cell
        color=alt.condition(
            "datum.success_rate < 0.25 || datum.success_rate > 0.8",
            alt.value("white"),
            alt.value("black"),
        ),
    )
    chart: Figure = alt.layer(cells, labels).properties(height=alt.Step(40))
    return chart


def latency_bars(frame: pd.DataFrame) -> Figure:
    """Logical vs first-attempt latency per percentile (``percentile``, ``kind``, ``ms``)."""
    chart: Figure = (
        alt.Chart(frame)
        .mark_bar()
        .encode(
            x=alt.X("percentile:N", title=None, axis=alt.Axis(labelAngle=0)),
            xOffset=alt.XOffset("kind:N", sort=["first attempt", "logical request"]),
            y=alt.Y("ms:Q", title="ms"),
            color=alt.Color(
                "kind:N",
                title=None,
                sort=["first attempt", "logical request"],
                scale=alt.Scale(range=["#90caf9", "#1e88e5"]),
                legend=alt.Legend(orient="top"),
            ),
            tooltip=[
                alt.Tooltip("percentile:N"),
                alt.Tooltip("kind:N"),
                alt.Tooltip("ms:Q", format=",.0f", title="ms"),
            ],
        )
        .properties(height=220)
    )
    return chart


def _not_before(marks: pd.DataFrame, y: alt.Y) -> alt.Chart:
    """not_before ticks (``not_before_ms``, ``not_before_text``) on the rows ``y`` names."""
    ticks: alt.Chart = (
        alt.Chart(marks)
        .mark_tick(color="black", thickness=3, size=18)
        .encode(
            x="not_before_ms:Q",
            y=y,
            tooltip=[alt.Tooltip("not_before_text:N", title="not before")],
        )
    )
    return ticks


def _deadline(deadline_ms: float) -> list[Any]:
    """The deadline as a red rule across the plot, labelled above it."""
    marker = pd.DataFrame({"deadline_ms": [deadline_ms], "label": ["deadline"]})
    rule = (
        alt.Chart(marker)
        .mark_rule(color="#d50000", strokeWidth=2)
        .encode(x="deadline_ms:Q", tooltip=[alt.Tooltip("deadline_ms:Q", title="deadline, ms")])
    )
    text = (
        alt.Chart(marker)
        .mark_text(color="#d50000", baseline="bottom", dy=-4, fontWeight="bold")
        .encode(x="deadline_ms:Q", y=alt.value(0), text="label:N")
    )
    return [rule, text]


CRITICAL_COLOUR = "#1a237e"
"""The outline of a span on the critical path."""
ROW_PX = 24
"""Height of one waterfall row."""


def waterfall(
    spans: pd.DataFrame,
    tooltip: Sequence[tuple[str, str]],
    *,
    gaps: pd.DataFrame | None = None,
    waits: pd.DataFrame | None = None,
    not_before: pd.DataFrame | None = None,
    fallbacks: pd.DataFrame | None = None,
    late: pd.DataFrame | None = None,
    deadline_ms: float | None = None,
    domain: tuple[float, float] | None = None,
    label_chars: int | None = None,
) -> Figure:
    """A request as a waterfall: one row per span (``row``: its indented name, in tree
    order), a bar from ``start_ms`` to ``end_ms`` (ms since the request started) coloured
    by ``kind``, its ``label`` (the duration) just after it; a span on the critical path
    (``critical_ms`` recorded) outlined. On an attempt's row: the backoff gap before it
    (``gaps``: ``row``, ``from_ms``..``to_ms``, ``gap_text``; dashed, ending where its bar
    starts), the Retry-After the answer before it asked for (``waits``: the same columns,
    below the gap), ``not_before`` ticks (``row``, ``not_before_ms``,
    ``not_before_text``), a bold ``fallback`` ending where a fallback attempt starts, above
    its gap (``fallbacks``: ``row``, ``start_ms``, ``fallback_text``: what it followed and
    where it went) and a red diamond where a success after the deadline ended (``late``:
    ``row``, ``end_ms``, ``late_text``); the deadline a red rule. ``tooltip``: (column,
    title) of display text. ``domain`` fixes the x axis (:func:`waterfall_domain`) and
    ``label_chars`` the room for the row names: waterfalls drawn with the same ones share
    one time axis. A click selects ``pick`` (the span's ``span_id``)."""
    drawn = ["row", "depth", "span_id", "start_ms", "end_ms", "kind", "label", "critical_ms"]
    spans = spans[drawn + [column for column, _ in tooltip]]  # only what it draws is sent
    rows = list(spans["row"])
    lower, upper = domain or waterfall_domain(spans, deadline_ms)
    label_chars = label_chars or max((len(r) for r in rows), default=0)
    pick = alt.selection_point(name=PICK, fields=["span_id"], on="click", empty=False)
    x = alt.X(
        "start_ms:Q",
        title="ms since the request started",
        scale=alt.Scale(domain=[lower, upper], nice=False),
        axis=alt.Axis(tickCount=12, labelFlush=False),
    )
    y = alt.Y(
        "row:N",
        title=None,
        sort=rows,
        axis=alt.Axis(
            labelLimit=0,
            labelFontSize=12,
            labelFont="monospace",
            labelColor="#212121",
            labelAlign="left",
            labelPadding=8 + 7.3 * label_chars,
        ),
    )
    tips = [alt.Tooltip(f"{column}:N", title=title) for column, title in tooltip]
    base = alt.Chart(spans)
    on_path = "datum.critical_ms != null"
    bars_ = (
        base.mark_bar(height=14, cursor="pointer")
        .encode(
            x=x,
            x2="end_ms:Q",
            y=y,
            color=_kind_colour(spans["kind"], columns=3),
            opacity=alt.condition(pick, alt.value(1.0), alt.value(0.8)),
            stroke={
                "condition": [{"param": PICK, "empty": False, "value": "black"}],
                "value": CRITICAL_COLOUR,
            },
            strokeWidth={
                "condition": [
                    {"param": PICK, "empty": False, "value": 2},
                    {"test": on_path, "value": 2.5},
                ],
                "value": 0,
            },
            tooltip=tips,
        )
        .add_params(pick)
    )
    labels = base.mark_text(align="left", dx=5, fontSize=11).encode(
        x="end_ms:Q",
        y=y,
        text="label:N",
        color=alt.condition(on_path, alt.value(CRITICAL_COLOUR), alt.value("#424242")),
        tooltip=tips,
    )
    layers: list[Any] = [bars_, labels]
    for frame, colour, title in (
        (gaps, "#616161", "backoff gap"),
        (waits, "#ef6c00", "Retry-After asked for"),
    ):
        if frame is not None and not frame.empty:
            layers.append(
                alt.Chart(frame)
                .mark_rule(
                    strokeDash=[4, 3],
                    color=colour,
                    strokeWidth=2,
                    yOffset=0 if frame is gaps else 9,
                )
                .encode(
                    x="from_ms:Q",
                    x2="to_ms:Q",
                    y=y,
                    tooltip=[alt.Tooltip("gap_text:N", title=title)],
                )
            )
    if not_before is not None and not not_before.empty:
        layers.append(_not_before(not_before, y))
    if fallbacks is not None and not fallbacks.empty:
        layers.append(
            alt.Chart(fallbacks)
            .mark_text(
                text="fallback",
                align="right",
                baseline="bottom",
                dx=-3,
                dy=-1,  # above the backoff gap's line
                fontSize=11,
                fontWeight="bold",
                color="#1565c0",
            )
            .encode(x="start_ms:Q", y=y, tooltip=[alt.Tooltip("fallback_text:N", title="fallback")])
        )
    if late is not None and not late.empty:
        layers.append(
            alt.Chart(late)
            .mark_point(shape="diamond", size=50, filled=True, color="#d50000", opacity=1)
            .encode(
                x="end_ms:Q",
                y=y,
                tooltip=[alt.Tooltip("late_text:N", title="success after the deadline")],
            )
        )
    if deadline_ms is not None and deadline_ms <= upper:
        layers += _deadline(deadline_ms)
    chart: Figure = (
        alt.layer(*layers)
        .properties(height=alt.Step(ROW_PX), padding={"top": 18})
        .configure_legend(symbolStrokeWidth=0)  # the outline marks the path, not a kind
    )
    return chart


def waterfall_domain(spans: pd.DataFrame, deadline_ms: float | None) -> tuple[float, float]:
    """A waterfall's x axis (ms since the request started): from its start (or a span of
    the trace that started before it) past the last span's end with room for its label,
    and past the deadline when it lies within twice that (one farther is left out)."""
    last = float(spans["end_ms"].max()) or 1.0
    shown = deadline_ms if deadline_ms is not None and deadline_ms <= 2 * last else 0.0
    return min(0.0, float(spans["start_ms"].min())), max(last, shown) * 1.15
