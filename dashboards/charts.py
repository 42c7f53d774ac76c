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


def trend(series: pd.DataFrame, storms: pd.DataFrame, field: str, title: str) -> Figure:
    """``field`` per time bucket (``bucket`` datetimes) with storm windows (``window_start``,
    ``window_end``) shaded red behind it."""
    line = (
        alt.Chart(series)
        .mark_line(point=True)
        .encode(
            x=alt.X("bucket:T", title="time (UTC)"),
            y=alt.Y(f"{field}:Q", title=title),
            tooltip=[alt.Tooltip("bucket:T", format="%Y-%m-%d %H:%M:%S"), f"{field}:Q"],
        )
    )
    bands = (
        alt.Chart(storms)
        .mark_rect(color="#e53935", opacity=0.18)
        .encode(
            x="window_start:T",
            x2="window_end:T",
            tooltip=[
                alt.Tooltip("window_start:T", title="storm from", format="%H:%M:%S"),
                alt.Tooltip("retry_fraction:Q", format=".1%"),
            ],
        )
    )
    return alt.layer(bands, line).properties(height=220)


def bars(frame: pd.DataFrame, category: str, value: str, title: str) -> Figure:
    """Horizontal bars of ``value`` per ``category``."""
    chart: Figure = (
        alt.Chart(frame)
        .mark_bar()
        .encode(
            x=alt.X(f"{value}:Q", title=title),
            y=alt.Y(f"{category}:N", title=None, sort="-x"),
            tooltip=[f"{category}:N", f"{value}:Q"],
        )
        .properties(height=alt.Step(24))
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
    return alt.layer(cells, labels)


def latency_bars(frame: pd.DataFrame) -> Figure:
    """Logical vs first-attempt latency per percentile (``percentile``, ``kind``, ``ms``)."""
    chart: Figure = (
        alt.Chart(frame)
        .mark_bar()
        .encode(
            x=alt.X("kind:N", title=None),
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
    request started, coloured by ``outcome``), dashed backoff gaps, ``not_before`` ticks and
    the deadline as a red rule."""
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
    ]
    lanes = list(dict.fromkeys(attempts["lane"]))
    y = alt.Y("lane:N", title=None, sort=lanes)
    bars_ = (
        alt.Chart(attempts)
        .mark_bar(height=18)
        .encode(
            x=alt.X("start_ms:Q", title="ms since the request started"),
            x2="end_ms:Q",
            y=y,
            color=alt.Color("outcome:N", scale=_OUTCOME_SCALE, title="outcome"),
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
        .mark_text(align="left", dx=3, dy=-14, fontSize=11)
        .encode(x="start_ms:Q", y=y, text="label:N")
    )
    layers: list[alt.Chart] = [bars_, labels]
    if not gaps.empty:
        layers.append(
            alt.Chart(gaps)
            .mark_rule(strokeDash=[4, 3], color="#616161")
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
            .mark_tick(color="black", thickness=3, size=26)
            .encode(
                x="not_before_ms:Q",
                y=y,
                tooltip=["lane:N", alt.Tooltip("not_before_ms:Q", title="not_before ms")],
            )
        )
    if deadline_ms is not None:
        marker = pd.DataFrame({"deadline_ms": [deadline_ms], "label": ["deadline"]})
        layers.append(
            alt.Chart(marker).mark_rule(color="#d50000", strokeWidth=2).encode(x="deadline_ms:Q")
        )
        layers.append(
            alt.Chart(marker)
            .mark_text(color="#d50000", align="left", dx=4, baseline="top", y=2)
            .encode(x="deadline_ms:Q", text="label:N")
        )
    return alt.layer(*layers).properties(height=max(120, 48 * len(lanes)))
