"""Request drill-down: one logical request found by its id, trace id or idempotency digest —
its attempts on a timeline (by layer and route, backoff gaps, not_before marks, the
deadline), their attributes, and a link to the trace in a tracing backend."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import quote

import pandas as pd
import streamlit as st

from retryscope.dashboards import _charts as charts
from retryscope.dashboards._context import current
from retryscope.dashboards._serve import TRACE_URL_ENV
from retryscope.dashboards.views.common import ms, num

_SEARCH = "request_search"
_SEEN = "request_search_param"

ATTRIBUTES = [
    "layer",
    "attempt_ordinal",
    "parent_layer",
    "parent_attempt_ordinal",
    "route_id",
    "route_release",
    "is_fallback",
    "hedge_ordinal",
    "start_ms",
    "duration_ms",
    "backoff_delay_ms",
    "retry_after_ms",
    "not_before_ms",
    "deadline_remaining_ms",
    "cost_micros",
    "cost_currency",
    "cost_is_estimate",
    "outcome",
    "outcome_kind",
    "http_status_code",
    "decision",
    "breaker_state",
    "is_leaf",
    "accepted",
    "span_id",
]


def _search_box() -> str:
    """The search text; a ``?id=`` query parameter (from a link) fills it when it changes."""
    param = st.query_params.get("id")
    if param is not None and param != st.session_state.get(_SEEN):
        st.session_state[_SEEN] = param
        st.session_state[_SEARCH] = param
    text = st.text_input(
        "Logical request id, trace id or idempotency digest",
        key=_SEARCH,
        placeholder="e.g. 4bf92f3577b34da6a3ce929d0e0e4736",
    ).strip()
    if text and text != param:
        st.query_params["id"] = text
        st.session_state[_SEEN] = text
    return text


def _since(t: pd.Series, t0: pd.Timestamp) -> pd.Series:
    return (t - t0).dt.total_seconds() * 1000.0


def timeline_frames(
    attempts: pd.DataFrame, started_at: pd.Timestamp
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Bars, backoff gaps and not_before marks in ms since the request started."""
    a = attempts.copy()
    a["start_ms"] = _since(a["start_time"], started_at)
    a["end_ms"] = _since(a["end_time"], started_at)
    a["not_before_ms"] = _since(a["not_before"], started_at)
    a["lane"] = a["layer"] + " · " + a["route_id"].fillna("–")
    a["label"] = "#" + a["attempt_ordinal"].astype(str)
    a["outcome"] = a["outcome"].fillna("unknown")
    group = ["layer", "parent_layer", "parent_attempt_ordinal"]
    ordered = a.sort_values([*group, "attempt_ordinal"])
    prev_end = ordered.groupby(group, dropna=False)["end_ms"].shift()
    gaps = pd.DataFrame(
        {"lane": ordered["lane"], "from_ms": prev_end, "to_ms": ordered["start_ms"]}
    ).dropna()
    gaps = gaps[gaps["to_ms"] > gaps["from_ms"]]
    gaps["gap_ms"] = gaps["to_ms"] - gaps["from_ms"]
    marks = a.loc[a["not_before_ms"].notna(), ["lane", "not_before_ms"]]
    return a, gaps, marks


_COUNTS = (
    "attempt_ordinal",
    "parent_attempt_ordinal",
    "hedge_ordinal",
    "backoff_delay_ms",
    "retry_after_ms",
    "deadline_remaining_ms",
    "cost_micros",
    "http_status_code",
)


def _attribute_rows(bars: pd.DataFrame) -> pd.DataFrame:
    """The attempts' attributes for display: counts as integers, times to 0.1 ms."""
    rows = bars[ATTRIBUTES].copy()
    for column in _COUNTS:
        rows[column] = rows[column].astype("Int64")
    for column in ("start_ms", "duration_ms", "not_before_ms"):
        rows[column] = rows[column].map(lambda x: "" if pd.isna(x) else f"{x:,.1f}")
    return rows.rename(columns={"attempt_ordinal": "ordinal"})


def _trace_link(trace_id: str) -> None:
    template = os.environ.get(TRACE_URL_ENV, "").strip()
    if template and "{trace_id}" in template:
        st.link_button("Open trace", template.replace("{trace_id}", quote(trace_id, safe="")))
    else:
        st.caption(
            f"Trace id `{trace_id}`. Set {TRACE_URL_ENV} (e.g. "
            "`http://localhost:16686/trace/{trace_id}`) to link it to your tracing backend."
        )


def _summary_table(summary: dict[str, Any]) -> None:
    shown = {k: ("–" if v is None else str(v)) for k, v in summary.items()}
    st.table(pd.DataFrame({"attribute": list(shown), "value": list(shown.values())}))


def render() -> None:
    ctx = current()
    st.header("Request drill-down")
    ident = _search_box()
    if not ident:
        st.info(
            "Enter a logical request id, trace id or idempotency digest, or open a "
            "request from the Findings or Amplification pages."
        )
        return
    summaries = ctx.source.query("request_summary", None, ident).to_pylist()
    if not summaries:
        st.warning(f"No logical request, trace or idempotency digest matches {ident!r}.")
        return
    summary = summaries[0]
    if len(summaries) > 1:
        ids = [s["logical_request_id"] for s in summaries]
        picked = st.selectbox(f"{len(ids)} requests share this key", ids, key="request_pick")
        summary = summaries[ids.index(picked)]
    rid = summary["logical_request_id"]
    attempts = ctx.source.query("request_attempts", None, rid).to_pandas()

    multiplication = int(summary["multiplication"])
    layers = list(summary["retried_layers"] or [])
    cols = st.columns(5)
    cols[0].metric("Terminal", summary["terminal"] or "unknown")
    cols[1].metric("Attempts", num(len(attempts)))
    cols[2].metric(
        "Receiver attempts", num(int(attempts["is_leaf"].sum())) if len(attempts) else "0"
    )
    cols[3].metric(
        "Retry product", f"{multiplication}×", " × ".join(layers) or None, delta_color="off"
    )
    started = pd.Timestamp(summary["started_at"])
    ended = pd.Timestamp(summary["ended_at"])
    cols[4].metric("Duration", ms((ended - started).total_seconds() * 1000.0))
    st.caption(f"Logical request `{rid}`")
    _trace_link(str(summary["trace_id"]))

    if attempts.empty:
        st.info("This request recorded no attempts.")
    else:
        bars, gaps, marks = timeline_frames(attempts, started)
        deadline = summary["deadline"]
        deadline_ms = (
            (pd.Timestamp(deadline) - started).total_seconds() * 1000.0
            if deadline is not None
            else None
        )
        st.subheader("Attempt timeline")
        lanes = bars["lane"].nunique()
        st.altair_chart(
            charts.timeline(bars, gaps, marks, deadline_ms),
            width="stretch",
            height=charts.timeline_height(lanes),
        )
        beyond = (
            f" The deadline, {deadline_ms:,.0f} ms after the start, lies beyond the attempts."
            if deadline_ms is not None and deadline_ms > 2 * float(bars["end_ms"].max())
            else ""
        )
        st.caption(
            "Bars: attempts by layer · route, coloured by outcome. Dashed: backoff gaps. "
            "Black ticks: not_before. Red line: the deadline." + beyond
        )
        st.subheader("Attempts")
        st.table(_attribute_rows(bars))
    st.subheader("Request attributes")
    _summary_table(summary)


if __name__ == "__main__":
    render()
