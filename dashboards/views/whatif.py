"""What-if: replay the recorded requests under another retry policy (attempt limit, fallback
on/off, backoff cap, retry budget; in the URL: ``max_attempts``, ``fallback``,
``max_backoff_ms``, ``budget``, ``budget_pct``, ``window_s``) and show the estimated effect
next to what was recorded, then the policy drift of requests whose policy document is in the
data set.

The replay reuses recorded outcomes (``retryscope.analytics.replay``): figures are
estimates, and requests the new policy would retry beyond the recording have an unknown outcome, so
each replayed figure is a range ``replayed_low``..``replayed_high``.
"""

from __future__ import annotations

from dataclasses import astuple
from typing import Any

import pandas as pd
import streamlit as st

from retryscope.analytics.replay import DEFAULT_WINDOW_MS, WhatIf
from retryscope.dashboards import _charts as charts
from retryscope.dashboards import _format as fmt
from retryscope.dashboards import _url
from retryscope.dashboards._context import Context, current
from retryscope.dashboards.views.common import frame, request_table, scope_report

ROW_LIMIT = 200
CHARTED = ("attempts", "cost_micros", "successes", "deadline_misses")
AFFECTED_COLUMNS = (
    fmt.Column("logical_request_id", "Request"),
    fmt.Column("recorded_terminal", "Recorded terminal"),
    fmt.Column("replayed_status", "Replayed status"),
    fmt.Column("cut_by", "Cut by", help="The policy rule that stops the request"),
    fmt.Column("cut_at_attempt", "Cut at attempt", fmt.Unit.COUNT),
    fmt.Column("recorded_attempts", "Recorded attempts", fmt.Unit.COUNT),
    fmt.Column("replayed_attempts", "Replayed attempts", fmt.Unit.COUNT),
    fmt.Column("attempts_saved", "Attempts saved", fmt.Unit.COUNT),
    fmt.Column("cost_saved_micros", "Cost saved", fmt.Unit.MONEY),
    fmt.Column("shift_ms", "Success moved by", fmt.Unit.MS),
    fmt.Column("estimated", "Estimated", fmt.Unit.FLAG),
    fmt.Column("recorded_deadline_miss", "Recorded miss", fmt.Unit.FLAG),
    fmt.Column("replayed_deadline_miss", "Replayed miss", fmt.Unit.FLAG),
    fmt.Column("trace_id", "Trace"),
)
DRIFT_COLUMNS = (
    fmt.Column("logical_request_id", "Request"),
    fmt.Column("drift", "Drift"),
    fmt.Column("check", "Check"),
    fmt.Column("field", "Field"),
    fmt.Column("attempt_ordinal", "Attempt", fmt.Unit.COUNT),
    fmt.Column("route_id", "Route"),
    fmt.Column("observed", "Observed"),
    fmt.Column("planned", "Planned"),
    fmt.Column("message", "Message", width="large"),
)


def _metrics(currency: str | None) -> tuple[tuple[str, str, Any, bool], ...]:
    """(summary metric, label, format, a rise is bad) of the figures compared; cost in the
    data set's ``currency``."""
    return (
        ("attempts", "Retry-owner attempts", fmt.count, True),
        ("cost_micros", "Cost", lambda v: fmt.money(v, currency), True),
        ("successes", "Successes incl. late", fmt.count, False),
        ("success_rate", "Success rate incl. late", fmt.pct, False),
        ("deadline_misses", "Deadline misses", fmt.count, True),
    )


# What a compared figure counts, where another page counts it otherwise.
MEANING = {
    "attempts": "Attempts of each request's retry owner (its outermost layer), the ones a "
    "policy decides: not every layer's attempts (the Requests page's Attempts) nor the "
    "sends the providers saw (receiver attempts).",
    "successes": "Requests whose retry owner got a successful attempt, late successes "
    "included (a success ending at or after the deadline: the report counts that request "
    "`stop_deadline`, not `complete`).",
    "success_rate": "Successes incl. late ÷ requests replayed.",
}


MAX_ATTEMPTS, FALLBACK, MAX_BACKOFF = (
    "whatif_max_attempts",
    "whatif_fallback",
    "whatif_max_backoff_ms",
)
BUDGET_ON, BUDGET, WINDOW = "whatif_budget_on", "whatif_budget", "whatif_window_s"


def _within(low: int, high: int) -> Any:
    def parse(text: str) -> int:
        value = int(text)
        if not low <= value <= high:
            raise ValueError(f"must be within {low}..{high}")
        return value

    return parse


def _switch(text: str) -> bool:
    if text not in ("on", "off"):
        raise ValueError("must be on or off")
    return text == "on"


def _on_off(value: Any) -> str:
    return "on" if value else "off"


# The alternative policy's inputs in the URL (defaults left out).
PARAMS = (
    _url.Param("max_attempts", MAX_ATTEMPTS, None, _within(1, 1000)),
    _url.Param("fallback", FALLBACK, True, _switch, _on_off),
    _url.Param("max_backoff_ms", MAX_BACKOFF, None, _within(0, 86_400_000)),
    _url.Param("budget", BUDGET_ON, False, _switch, _on_off),
    _url.Param("budget_pct", BUDGET, 10, _within(0, 100)),
    _url.Param("window_s", WINDOW, DEFAULT_WINDOW_MS // 1000, _within(1, 86_400)),
)


def _policy() -> WhatIf | None:
    """The alternative policy from the widgets, or None (after saying why) when a value is
    out of range."""
    st.subheader("Alternative policy")
    for p in PARAMS:  # a session that has not seeded them (the defaults)
        st.session_state.setdefault(p.key, p.default)
    left, mid, right = st.columns(3)
    max_attempts = left.number_input(
        "Max attempts",
        min_value=1,
        max_value=1000,
        value=None,  # empty allowed: as recorded
        step=1,
        key=MAX_ATTEMPTS,
        placeholder="as recorded",
        help="Total attempts of the retry owner per request; empty = as recorded.",
    )
    fallback = left.toggle("Allow fallback", key=FALLBACK)
    max_backoff_ms = mid.number_input(
        "Backoff cap (ms)",
        min_value=0,
        max_value=86_400_000,
        value=None,
        step=100,
        key=MAX_BACKOFF,
        placeholder="as recorded",
        help="Longest wait between attempts (a server's Retry-After still wins); "
        "empty = as recorded.",
    )
    budget_on = right.toggle("Retry budget", key=BUDGET_ON)
    budget = right.slider(
        "Retries per first attempt (%)",
        min_value=0,
        max_value=100,
        step=1,
        key=BUDGET,
        disabled=not budget_on,
        help="Share of first attempts per window that may be retried (10 % = Envoy's default).",
    )
    window_s = right.number_input(
        "Budget window (s)",
        min_value=1,
        max_value=86_400,
        step=1,
        key=WINDOW,
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
        st.error(f"The policy cannot be replayed: {fmt.plain(exc)}.")
        return None


def _shown(value: Any, fmt: Any) -> str:
    return "unbounded" if value is None or pd.isna(value) else str(fmt(value))


def _short_pct(value: float | None) -> str:
    return fmt.pct(value, 0)


def _replayed(row: dict[str, Any], show: Any) -> str:
    """The replayed figure, or its range when unknown outcomes leave it open (percentages
    without decimals there, so the range fits its column)."""
    low, high = row["replayed_low"], row["replayed_high"]
    if high is not None and not pd.isna(high) and high == low:
        return str(show(low))
    show = _short_pct if show is fmt.pct else show
    return f"{show(low)} – {_shown(high, show)}"


def _change(metric: str, low: Any, recorded: Any, show: Any) -> str | None:
    """The low bound's change against the recording: percentage points for a rate."""
    if metric == "success_rate":
        return fmt.delta_pp(low, recorded)
    if metric == "cost_micros":
        change = int(low) - int(recorded)
        return ("-" if change < 0 else "+") + str(show(abs(change)))
    return fmt.delta_count(low, recorded)


def _summary(
    rows: dict[str, dict[str, Any]], policy: WhatIf, currency: str | None, complete: int
) -> None:
    counts = rows["requests"]
    late = int(rows["successes"]["recorded"]) - complete
    st.caption(
        f"Replaying {fmt.count(counts['recorded'])} request(s) under "
        f"**{policy.describe()}**. Estimates from the recorded outcomes, not measurements. "
        f"Attempts are the retry owner's; successes include late ones: recorded "
        f"{fmt.count(rows['successes']['recorded'])} against the report's "
        f"{fmt.count(complete)} `complete`" + (f" ({fmt.count(late)} other)." if late else ".")
    )
    metrics = _metrics(currency)
    cards = st.container(horizontal=True, gap="small")  # as wide as their text: none cut
    for metric, label, show, bad_up in metrics:
        row = rows[metric]
        change = _change(metric, row["replayed_low"], row["recorded"], show)
        flat = fmt.is_zero(change)
        with cards.container(border=True, width="content"):
            st.metric(
                f"{label} (est.)",
                _replayed(row, show),
                f"{change} vs {show(row['recorded'])} recorded",
                delta_color="off" if flat else ("inverse" if bad_up else "normal"),
                delta_arrow="off" if flat else "auto",
                help=(
                    MEANING.get(metric, "") + " Change of the low bound against the recording"
                ).strip()
                + (" (percentage points)." if metric == "success_rate" else "."),
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


def _chart(rows: dict[str, dict[str, Any]], currency: str | None) -> None:
    """Recorded vs replayed low/high per charted figure, money in units of ``currency``."""
    labels = {metric: label for metric, label, _, _ in _metrics(currency)}
    labels["cost_micros"] = f"Cost ({currency or '?'})"
    scale = {"cost_micros": 1e-6}
    long = pd.DataFrame(
        [
            {
                "metric": labels[m],
                "series": series,
                "value": None if rows[m][column] is None else rows[m][column] * scale.get(m, 1),
            }
            for m in CHARTED
            for series, column in (
                ("recorded", "recorded"),
                ("replayed (low)", "replayed_low"),
                ("replayed (high)", "replayed_high"),
            )
        ]
    ).dropna()
    st.altair_chart(charts.comparison(long, [labels[m] for m in CHARTED]), width="content")


def _table(rows: dict[str, dict[str, Any]], currency: str | None) -> None:
    """The exact figures, each in its unit (``unbounded`` where nothing bounds it)."""
    shown = [
        ("Requests", fmt.count, rows["requests"]),
        *((label, show, rows[metric]) for metric, label, show, _ in _metrics(currency)),
    ]
    st.dataframe(
        pd.DataFrame(
            [
                {
                    "Figure": label,
                    "Recorded": show(row["recorded"]),
                    "Replayed (low)": show(row["replayed_low"]),
                    "Replayed (high)": _shown(row["replayed_high"], show),
                }
                for label, show, row in shown
            ]
        ),
        hide_index=True,
    )


def _affected(ctx: Context, policy: WhatIf, currency: str | None) -> None:
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
    request_table(ctx, frame(top), AFFECTED_COLUMNS, "whatif_table", currency=currency)


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
    request_table(ctx, drift, DRIFT_COLUMNS, "drift_table")


def render() -> None:
    ctx = current()
    st.header("What-if")
    for problem in _url.seed(PARAMS, entered=ctx.entered):
        st.warning(problem)
    report = scope_report(ctx)
    if report is None:
        return
    policy = _policy()
    _url.publish(PARAMS)
    if policy is not None:
        summary = ctx.source.query("whatif", ctx.filters, *astuple(policy))
        rows = {r["metric"]: r for r in summary.to_pylist()}
        costs = report["cost"]["by_currency"]
        currency = max(costs, key=lambda r: r["total_micros"])["currency"] if costs else None
        _summary(rows, policy, currency, int(report["terminals"].get("complete", 0)))
        _chart(rows, currency)
        _table(rows, currency)
        _affected(ctx, policy, currency)
    _drift(ctx)


if __name__ == "__main__":
    render()
