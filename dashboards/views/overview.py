"""Overview: the headline numbers against the previous period, and trends over time with
storm windows (retry fraction over the retry budget) shaded."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pandas as pd
import streamlit as st

from retryscope.analytics import RULES, Severity
from retryscope.analytics._metrics import DEFAULT_THRESHOLDS
from retryscope.dashboards import _charts as charts
from retryscope.dashboards._context import current
from retryscope.dashboards.views.common import bucket_for, frame, nothing_in_scope, num, pct

_VIOLATION_RULES = tuple(r.id for r in RULES if r.severity is not Severity.INFO)


def _cost_amplification(report: dict[str, Any]) -> float | None:
    rows = report["cost"]["by_currency"]
    if not rows:
        return None
    top = max(rows, key=lambda r: r["total_micros"])
    return float(top["cost_amplification"])


def _violations(report: dict[str, Any]) -> int:
    return sum(int(report["violations"][r]) for r in _VIOLATION_RULES)


_KPIS: tuple[
    tuple[str, Callable[[dict[str, Any]], float | None], Callable[[float], str], bool], ...
] = (
    ("Logical requests", lambda r: r["logical_requests"], lambda x: num(x), False),
    ("Amplification", lambda r: r["amplification_ratio"], lambda x: f"{x:.2f}×", True),
    ("Cost amplification", _cost_amplification, lambda x: f"{x:.2f}×", True),
    ("Fallback rate", lambda r: r["fallback_rate"], pct, True),
    ("Deadline exhausted", lambda r: r["deadline_exhausted_rate"], pct, True),
    ("Violations", _violations, lambda x: num(x), True),
)


def _delta(now: float | None, before: float | None, fmt: Callable[[float], str]) -> str | None:
    if now is None or before is None:
        return None
    change = now - before
    sign = "+" if change >= 0 else "−"
    return sign + fmt(abs(change))


def render() -> None:
    ctx = current()
    st.header("Overview")
    report = ctx.source.query("report", ctx.filters)
    if nothing_in_scope(report["logical_requests"]):
        return
    prev = ctx.previous
    before = ctx.source.query("report", prev) if prev is not None else None
    if before is not None and before["logical_requests"] == 0:
        before = None
    for col, (label, get, fmt, bad_up) in zip(st.columns(len(_KPIS)), _KPIS, strict=True):
        value = get(report)
        col.metric(
            label,
            "–" if value is None else fmt(value),
            _delta(value, get(before), fmt) if before is not None else None,
            delta_color="inverse" if bad_up else "normal",
        )
    if prev is None:
        st.caption("Set a time range in the sidebar to compare with the previous period.")
    elif before is None:
        st.caption("No requests in the previous period of equal length: no change shown.")
    else:
        st.caption(
            f"Change vs the previous period {prev.since:%Y-%m-%d %H:%M:%S} – "
            f"{prev.until:%Y-%m-%d %H:%M:%S} UTC ({before['logical_requests']:,} requests)."
        )

    bucket = bucket_for(ctx.span())
    series = frame(ctx.source.query("amplification", ctx.filters, "time_bucket", bucket))
    series["bucket"] = pd.to_datetime(series["value"])
    windows = frame(ctx.source.query("load", ctx.filters))
    storms = windows[windows["over_budget"]].copy()
    storms["window_end"] = storms["window_start"] + timedelta(
        milliseconds=DEFAULT_THRESHOLDS.load_window_ms
    )
    st.subheader("Trends")
    st.caption(
        f"Per {timedelta(seconds=bucket)} bucket. Red bands: storm windows, where repeats "
        f"exceeded the retry budget ({len(storms)} of {len(windows)} windows)."
    )
    left, right = st.columns(2)
    left.altair_chart(
        charts.trend(series, storms, "amplification_ratio", "amplification (×)"),
        width="stretch",
    )
    right.altair_chart(
        charts.trend(series, storms, "logical_requests", "logical requests"),
        width="stretch",
    )
    if not windows.empty:
        windows["window"] = windows["window_start"]
        st.altair_chart(
            charts.trend(
                windows.rename(columns={"window": "bucket"}),
                storms,
                "retry_fraction",
                "retry fraction",
                budget=DEFAULT_THRESHOLDS.retry_budget,
            ),
            width="stretch",
        )


if __name__ == "__main__":
    render()
