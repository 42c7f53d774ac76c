"""What-if: replay the recorded requests under another retry policy (attempt limit, fallback
on/off, backoff cap, retry budget) and show the estimated effect next to what was recorded,
then the policy drift of requests whose policy document is in the data set.

The replay reuses recorded outcomes (``retryscope.analytics.replay``): figures are
estimates, and requests the new policy would retry beyond the recording have an unknown outcome, so
each replayed figure is a range ``replayed_low``..``replayed_high``.
"""

from __future__ import annotations

from dataclasses import astuple
from typing import Any

import pandas as pd
import streamlit as st

from retryscope.analytics.replay._whatif import DEFAULT_WINDOW_MS, WhatIf
from retryscope.dashboards import _charts as charts
from retryscope.dashboards._context import Context, current
from retryscope.dashboards.views.common import (
    frame,
    nothing_in_scope,
    num,
    pct,
    request_table,
    with_links,
)

ROW_LIMIT = 200
METRICS = (
    # (summary metric, label, format, a rise is bad)
    ("attempts", "Attempts", num, True),
    ("cost_micros", "Cost, micros", num, True),
    ("successes", "Successes", num, False),
    ("success_rate", "Success rate", pct, False),
    ("deadline_misses", "Deadline misses", num, True),
)
CHARTED = ("attempts", "cost_micros", "successes", "deadline_misses")
AFFECTED_COLUMNS = [
    "open",
    "logical_request_id",
    "recorded_terminal",
    "replayed_status",
    "cut_by",
    "cut_at_attempt",
    "recorded_attempts",
    "replayed_attempts",
    "attempts_saved",
    "cost_saved_micros",
    "shift_ms",
    "estimated",
    "recorded_deadline_miss",
    "replayed_deadline_miss",
    "trace_id",
]
DRIFT_COLUMNS = [
    "open",
    "logical_request_id",
    "drift",
    "check",
    "field",
    "attempt_ordinal",
    "route_id",
    "observed",
    "planned",
    "message",
]


def _policy() -> WhatIf | None:
    """The alternative policy from the widgets, or None (after saying why) when a value is
    out of range."""
    st.subheader("Alternative policy")
    left, mid, right = st.columns(3)
    max_attempts = left.number_input(
        "Max attempts",
        min_value=1,
        max_value=1000,
        value=None,
        step=1,
        key="whatif_max_attempts",
        placeholder="as recorded",
        help="Total attempts of the retry owner per request; empty = as recorded.",
    )
    fallback = left.toggle("Allow fallback", value=True, key="whatif_fallback")
    max_backoff_ms = mid.number_input(
        "Backoff cap (ms)",
        min_value=0,
        max_value=86_400_000,
        value=None,
        step=100,
        key="whatif_max_backoff_ms",
        placeholder="as recorded",
        help="Longest wait between attempts (a server's Retry-After still wins); "
        "empty = as recorded.",
    )
    budget_on = right.toggle("Retry budget", value=False, key="whatif_budget_on")
    budget = right.slider(
        "Retries per first attempt (%)",
        min_value=0,
        max_value=100,
        value=10,
        step=1,
        key="whatif_budget",
        disabled=not budget_on,
        help="Share of first attempts per window that may be retried (10 % = Envoy's default).",
    )
    window_s = right.number_input(
        "Budget window (s)",
        min_value=1,
        max_value=86_400,
        value=DEFAULT_WINDOW_MS // 1000,
        step=1,
        key="whatif_window_s",
        disabled=not budget_on,
    )
    try:
        return WhatIf(
            max_attempts=None if max_attempts is None else int(max_attempts),
            no_fallback=not fallback,
            max_backoff_ms=None if max_backoff_ms is None else int(max_backoff_ms),
            retry_budget=float(budget) / 100 if budget_on else None,
            window_ms=int(window_s) * 1000,
        )
    except (TypeError, ValueError) as exc:
        st.error(f"The policy cannot be replayed: {exc}.")
        return None


def _shown(value: Any, fmt: Any) -> str:
    return "unbounded" if value is None or pd.isna(value) else str(fmt(value))


def _short_pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.0%}"


def _replayed(row: dict[str, Any], fmt: Any) -> str:
    """The replayed figure, or its range when unknown outcomes leave it open (percentages
    without decimals there, so the range fits its column)."""
    low, high = row["replayed_low"], row["replayed_high"]
    if high is not None and not pd.isna(high) and high == low:
        return str(fmt(low))
    fmt = _short_pct if fmt is pct else fmt
    return f"{fmt(low)} – {_shown(high, fmt)}"


def _summary(rows: dict[str, dict[str, Any]], policy: WhatIf) -> None:
    counts = rows["requests"]
    st.caption(
        f"Replaying {num(counts['recorded'])} request(s) under **{policy.describe()}**. "
        "Estimates from the recorded outcomes, not measurements."
    )
    for col, (metric, label, fmt, bad_up) in zip(st.columns(len(METRICS)), METRICS, strict=True):
        row = rows[metric]
        delta = row["replayed_low"] - row["recorded"]
        change = f"{delta:+.1%}" if fmt is pct else f"{delta:+,.0f}"
        col.metric(
            f"{label} (est.)",
            _replayed(row, fmt),
            f"{change} vs {fmt(row['recorded'])} recorded",
            delta_color="off" if delta == 0 else ("inverse" if bad_up else "normal"),
            delta_arrow="off" if delta == 0 else "auto",
            help="Change of the low bound against the recording.",
        )
    unknown = int(counts["unknown_requests"])
    estimated = int(counts["estimated_requests"])
    if unknown:
        st.warning(
            f"{unknown} request(s) would be retried beyond what was recorded: their outcome "
            "is unknown. Each figure is a range from `replayed_low` (they make one more "
            "attempt and neither succeed nor miss their deadline) to `replayed_high` (they "
            "make every attempt the policy allows and succeed, or miss their deadline; "
            "unbounded without an attempt limit)."
        )
    if estimated:
        st.info(
            f"{estimated} request(s) succeed at a time the lower backoff cap moves: they keep "
            "their recorded outcome, an estimate."
        )


def _chart(rows: dict[str, dict[str, Any]]) -> None:
    long = pd.DataFrame(
        [
            {"metric": m, "series": series, "value": rows[m][column]}
            for m in CHARTED
            for series, column in (
                ("recorded", "recorded"),
                ("replayed (low)", "replayed_low"),
                ("replayed (high)", "replayed_high"),
            )
        ]
    ).dropna()
    st.altair_chart(charts.comparison(long, list(CHARTED)), width="content")


def _affected(ctx: Context, policy: WhatIf) -> None:
    args = (ROW_LIMIT, *astuple(policy))
    total, top = ctx.source.query("whatif_affected", ctx.filters, *args)
    st.subheader(f"Most affected requests: {total:,}")
    if total == 0:
        st.success("This policy changes no request: it decides as the recorded one did.")
        return
    st.caption(
        "Most attempts saved first. `cut_by` names the rule that stops the request; "
        "`replayed_status` unknown means retried beyond the recording."
        + (f" The first {ROW_LIMIT:,} are listed." if total > ROW_LIMIT else "")
    )
    table = with_links(frame(top))[AFFECTED_COLUMNS]
    request_table(table, "whatif_table")


def _drift(ctx: Context) -> None:
    st.subheader("Policy drift")
    if ctx.source.policy_documents == 0:
        st.info(
            "This data set carries no retry policy — neither on its request spans (the "
            "control plane records the policy it enforced) nor as side files "
            "(`_policies/<sha256>.json`, written by `write_policy_side_file`) — so recorded "
            "attempts cannot be checked against the policy that planned them."
        )
        return
    drift = frame(ctx.source.query("policy_drift", ctx.filters))
    if drift.empty:
        st.success("Every request with a recorded policy followed it.")
        return
    st.caption(
        f"{len(drift):,} request(s) did not follow their recorded policy: the first attempt "
        "the control-plane evaluator rejects, its field, and observed vs planned values."
    )
    table = with_links(drift)[DRIFT_COLUMNS]
    request_table(table, "drift_table")


def render() -> None:
    ctx = current()
    st.header("What-if")
    report = ctx.source.query("report", ctx.filters)
    if nothing_in_scope(report["logical_requests"]):
        return
    policy = _policy()
    if policy is not None:
        summary = ctx.source.query("whatif", ctx.filters, *astuple(policy))
        rows = {r["metric"]: r for r in summary.to_pylist()}
        _summary(rows, policy)
        _chart(rows)
        st.dataframe(
            frame(summary)[["metric", "recorded", "replayed_low", "replayed_high"]],
            hide_index=True,
        )
        _affected(ctx, policy)
    _drift(ctx)


if __name__ == "__main__":
    render()
