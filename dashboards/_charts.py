"""Altair charts of the audit UI, built from small aggregated tables (pandas frames)."""

from __future__ import annotations

import altair as alt
import pandas as pd

from retryscope.vocabulary import Outcome

OUTCOME_COLOURS = {
    Outcome.SUCCESS.value: "#2e7d32",
    Outcome.RETRYABLE.value: "#ef6c00",
    Outcome.NON_RETRYABLE.value: "#c62828",
    Outcome.INDETERMINATE.value: "#6a1b9a",
    "unknown": "#9e9e9e",
}
Figure = alt.Chart | alt.LayerChart | alt.FacetChart
"""What the builders return (Altair types a chart with properties as any of these)."""

_OUTCOME_SCALE = alt.Scale(domain=list(OUTCOME_COLOURS), range=list(OUTCOME_COLOURS.values()))


SERIES = ("recorded", "replayed (low)", "replayed (high)")
"""The series of :func:`comparison`, in order."""

_UTC = alt.Scale(type="utc")
_UTC_AXIS = alt.Axis(format="%H:%M:%S", labelAngle=0)


def trend(
    series: pd.DataFrame,
    storms: pd.DataFrame,
    field: str,
    title: str,
    budget: float | None = None,
) -> Figure:
    """``field`` per time bucket (``bucket`` datetimes, UTC) with storm windows
    (``window_start``, ``window_end``) shaded red behind it, and ``budget`` as a dashed
    line when given."""
    line = (
        alt.Chart(series)
        .mark_line(point=True)
        .encode(
            x=alt.X("bucket:T", title="time (UTC)", scale=_UTC, axis=_UTC_AXIS),
            y=alt.Y(f"{field}:Q", title=title),
            tooltip=[
                alt.Tooltip("utcyearmonthdatehoursminutesseconds(bucket):T", title="bucket (UTC)"),
                f"{field}:Q",
            ],
        )
    )
    bands = (
        alt.Chart(storms)
        .mark_rect(color="#e53935", opacity=0.18)
        .encode(
            x=alt.X("window_start:T", scale=_UTC),
            x2="window_end:T",
            tooltip=[
                alt.Tooltip(
                    "utcyearmonthdatehoursminutesseconds(window_start):T", title="storm from (UTC)"
                ),
                alt.Tooltip("retry_fraction:Q", format=".1%"),
            ],
        )
    )
    layers: list[alt.Chart] = [bands, line]
    if budget is not None:
        layers.append(
            alt.Chart(pd.DataFrame({"budget": [budget]}))
            .mark_rule(strokeDash=[6, 4], color="#b71c1c")
            .encode(y="budget:Q", tooltip=[alt.Tooltip("budget:Q", title="retry budget")])
        )
    chart: Figure = alt.layer(*layers).properties(height=220)
    return chart


def bars(frame: pd.DataFrame, category: str, value: str, title: str) -> Figure:
    """Horizontal bars of ``value`` per ``category``."""
    chart: Figure = (
        alt.Chart(frame)
        .mark_bar()
        .encode(
            x=alt.X(f"{value}:Q", title=title),
            y=alt.Y(f"{category}:N", title=None, sort="-x", axis=alt.Axis(labelLimit=280)),
            tooltip=[f"{category}:N", f"{value}:Q"],
        )
        .properties(height=alt.Step(24))
    )
    return chart


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
        x=alt.X("attempt_ordinal:O", title="attempt ordinal"),
        y=alt.Y("after_kind:N", title="after failure kind"),
    )
    cells = base.mark_rect().encode(
        color=alt.Color(
            "success_rate:Q",
            title="success",
            scale=alt.Scale(domain=[0, 1], scheme="redyellowgreen"),
        ),
        tooltip=[
            "layer:N",
            "after_kind:N",
            "attempt_ordinal:O",
            "retries:Q",
            alt.Tooltip("success_rate:Q", format=".0%"),
        ],
    )
    labels = base.mark_text(fontSize=12).encode(text=alt.Text("label:N"), color=alt.value("black"))
    chart: Figure = alt.layer(cells, labels).properties(height=alt.Step(40))
    return chart


def latency_bars(frame: pd.DataFrame) -> Figure:
    """Logical vs first-attempt latency per percentile (``percentile``, ``kind``, ``ms``)."""
    chart: Figure = (
        alt.Chart(frame)
        .mark_bar()
        .encode(
            x=alt.X("kind:N", title=None, axis=None),
            xOffset="kind:N",
            y=alt.Y("ms:Q", title="ms"),
            color=alt.Color("kind:N", title=None),
            column=alt.Column("percentile:N", title=None),
            tooltip=["percentile:N", "kind:N", alt.Tooltip("ms:Q", format=",.1f")],
        )
        .properties(width=110, height=200)
    )
    return chart


def timeline(
    attempts: pd.DataFrame,
    gaps: pd.DataFrame,
    not_before: pd.DataFrame,
    deadline_ms: float | None,
) -> Figure:
    """One bar per attempt (``lane`` = layer · route, ``start_ms``..``end_ms`` since the
    request started, coloured by ``outcome``, labelled ``#ordinal`` where there is room),
    dashed backoff gaps, ``not_before`` ticks and the deadline as a red rule. The x axis
    spans the attempts; a deadline far beyond them is left out (the caller says where)."""
    last = float(attempts["end_ms"].max()) or 1.0
    show_deadline = deadline_ms is not None and deadline_ms <= 2 * last
    upper = max(last, deadline_ms if show_deadline and deadline_ms else 0.0) * 1.05
    attempts = attempts[
        [
            "lane",
            "label",
            "layer",
            "attempt_ordinal",
            "route_id",
            "start_ms",
            "end_ms",
            "duration_ms",
            "outcome",
            "outcome_kind",
            "decision",
        ]
    ].copy()
    attempts["label"] = attempts["label"].where(
        (attempts["end_ms"] - attempts["start_ms"]) >= upper / 40, ""
    )
    lanes = list(dict.fromkeys(attempts["lane"]))
    x = alt.X(
        "start_ms:Q",
        title="ms since the request started",
        scale=alt.Scale(domain=[0, upper], nice=False),
    )
    y = alt.Y("lane:N", title=None, sort=lanes)
    bars_ = (
        alt.Chart(attempts)
        .mark_bar(height=22, stroke="white", strokeWidth=1)
        .encode(
            x=x,
            x2="end_ms:Q",
            y=y,
            color=alt.Color(
                "outcome:N",
                scale=_OUTCOME_SCALE,
                title="outcome",
                legend=alt.Legend(orient="bottom", direction="horizontal"),
            ),
            tooltip=[
                "layer:N",
                "attempt_ordinal:Q",
                "route_id:N",
                "outcome:N",
                "outcome_kind:N",
                "decision:N",
                alt.Tooltip("start_ms:Q", format=",.1f"),
                alt.Tooltip("duration_ms:Q", format=",.1f"),
            ],
        )
    )
    labels = (
        alt.Chart(attempts)
        .transform_calculate(mid="(datum.start_ms + datum.end_ms) / 2")
        .mark_text(color="white", fontSize=11, fontWeight="bold")
        .encode(x="mid:Q", y=y, text="label:N")
    )
    layers: list[alt.Chart] = [bars_, labels]
    if not gaps.empty:
        layers.append(
            alt.Chart(gaps)
            .mark_rule(strokeDash=[4, 3], color="#616161", strokeWidth=2)
            .encode(
                x="from_ms:Q",
                x2="to_ms:Q",
                y=y,
                tooltip=["lane:N", alt.Tooltip("gap_ms:Q", title="backoff gap ms", format=",.1f")],
            )
        )
    if not not_before.empty:
        layers.append(
            alt.Chart(not_before)
            .mark_tick(color="black", thickness=3, size=30)
            .encode(
                x="not_before_ms:Q",
                y=y,
                tooltip=["lane:N", alt.Tooltip("not_before_ms:Q", title="not_before ms")],
            )
        )
    if show_deadline:
        marker = pd.DataFrame({"deadline_ms": [deadline_ms], "label": ["deadline"]})
        layers.append(
            alt.Chart(marker).mark_rule(color="#d50000", strokeWidth=2).encode(x="deadline_ms:Q")
        )
        layers.append(
            alt.Chart(marker)
            .mark_text(color="#d50000", align="right", dx=-4, baseline="top", y=2)
            .encode(x="deadline_ms:Q", text="label:N")
        )
    chart: Figure = alt.layer(*layers).properties(height=timeline_height(len(lanes)))
    return chart


def timeline_height(lanes: int) -> int:
    """Pixels a timeline of ``lanes`` lanes needs (axis and legend included)."""
    return 110 + 48 * lanes
