"""Request drill-down: one logical request found by its id, trace id or idempotency digest,
as an investigator reads it — its figures and contract, one waterfall of its attempts and
span tree (every span beneath the request and its trace's spans of no request, one colour
per outcome kind, with durations, backoff gaps, Retry-After, not_before marks, fallback
and late-success markers, the deadline and the critical path; collapsible, a span opens a
detail panel), its findings, and a compact attempts table; a link to the trace in a
tracing backend. Two requests side by side: their key figures in two columns, their
waterfalls on one time axis.

``?id=`` names the request, ``?span=`` the span whose details are shown and ``?vs=`` the
request to compare it with, so each view can be shared.
"""

from __future__ import annotations

import json
import os
from typing import Any
from urllib.parse import quote

import pandas as pd
import streamlit as st

from retryscope._safe_text import echoed
from retryscope.analytics import RULES_BY_ID
from retryscope.dashboards import _charts as charts
from retryscope.dashboards import _format as fmt
from retryscope.dashboards import _url
from retryscope.dashboards._context import Context, current
from retryscope.dashboards.serve import TRACE_URL_ENV
from retryscope.dashboards.views.common import table

_SEARCH = "request_search"
_SPAN = "request_span"
_COLLAPSED = "request_collapsed"
_VS = "request_vs"
PARAMS = (
    _url.Param("id", _SEARCH, ""),
    _url.Param("span", _SPAN, None),
    _url.Param("vs", _VS, ""),
)
# a span tree of more spans starts with the spans beneath attempts collapsed
TREE_EXPANDED_UP_TO = 80

ATTEMPT_COLUMNS = (
    fmt.Column("layer", "Layer"),
    fmt.Column("attempt_ordinal", "#", fmt.Unit.COUNT),
    fmt.Column("route_id", "Route", width="medium"),
    fmt.Column("kind", "Outcome"),
    fmt.Column("http_status_code", "HTTP", fmt.Unit.COUNT),
    fmt.Column("duration_ms", "Duration", fmt.Unit.MS),
    fmt.Column("cost_micros", "Cost", fmt.Unit.MONEY),
    fmt.Column("backoff_delay_ms", "Backoff", fmt.Unit.MS),
    fmt.Column("retry_after_ms", "Retry-After", fmt.Unit.MS),
    fmt.Column("deadline_remaining_ms", "Deadline left", fmt.Unit.MS),
    fmt.Column("decision", "Decision"),
    fmt.Column("start_ms", "Start", fmt.Unit.MS, help="ms after the request started"),
    fmt.Column("is_fallback", "Fallback", fmt.Unit.FLAG),
    fmt.Column("is_leaf", "Reached receiver", fmt.Unit.FLAG),
    fmt.Column("accepted", "Accepted", fmt.Unit.FLAG),
    fmt.Column("parent_layer", "Under layer"),
    fmt.Column("parent_attempt_ordinal", "Under #", fmt.Unit.COUNT),
    fmt.Column(
        "operation_ordinal",
        "Operation #",
        fmt.Unit.COUNT,
        help="A send's distinct operation under its parent attempt: sends of one operation "
        "repeat one another, another operation is a distinct call",
    ),
    fmt.Column("hedge_ordinal", "Hedge", fmt.Unit.COUNT),
    fmt.Column("breaker_state", "Breaker"),
    fmt.Column("release_short", "Release", help="Route release (first 12 characters)"),
    fmt.Column("span_id", "Span"),
)
# a waterfall row's tooltip: (column, field of _fields); no docstring (Streamlit would
# show it: a page script's bare strings are drawn)
WATERFALL_TOOLTIP = tuple(
    (f"tip{i}", field)
    for i, field in enumerate(
        (
            "Span", "Role", "Layer / attempt", "Status", "Error type", "Outcome", "Decision",
            "Terminal", "HTTP", "Route", "Route release", "Fallback", "Start", "Duration",
            "Critical path", "Backoff before it", "Retry-After", "Deadline left at dispatch",
            "Cost", "Hedge", "Breaker", "GenAI model", "Tokens in / out", "Service",
        )
    )
)  # fmt: skip
TOOLTIP_MAX_CHARS = 160
FINDING_COLUMNS = (
    fmt.Column("severity", "Severity"),
    fmt.Column("rule_id", "Rule", width="medium"),
    fmt.Column("evidence_text", "Evidence", width="large"),
    fmt.Column("time", "Time (UTC)", fmt.Unit.TIME),
)


def _since(t: pd.Series, t0: pd.Timestamp) -> pd.Series:
    return (t - t0).dt.total_seconds() * 1000.0


def _text(values: pd.Series, show: Any) -> pd.Series:
    return values.map(lambda v: fmt.DASH if pd.isna(v) else show(v))


def _kind(frame: pd.DataFrame) -> pd.Series:
    """The outcome kind an attempt is coloured by (its family when no kind was recorded)."""
    return frame["outcome_kind"].fillna(frame["outcome"]).fillna("unknown")


def attempt_frames(
    attempts: pd.DataFrame, started_at: pd.Timestamp
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The attempts (the attempts table; ``what`` names one, ``followed`` the attempt
    before it in its retry group, ``prev_end_ms`` that one's end), their backoff gaps and
    their not_before marks, by ``span_id``, in ms since the request started."""
    a = attempts.copy()
    a["start_ms"] = _since(a["start_time"], started_at)
    a["end_ms"] = _since(a["end_time"], started_at)
    a["not_before_ms"] = _since(a["not_before"], started_at)
    a["kind"] = _kind(a)
    a["cost_micros"] = a["cost_micros"].where(a["cost_currency"].notna())  # none recorded
    a["what"] = (
        a["layer"]
        + " #"
        + a["attempt_ordinal"].astype(str)
        + " on "
        + a["route_id"].fillna(fmt.DASH)
    )
    a["release_short"] = a["route_release"].str.slice(0, 12)
    # a retry group: layer and parent attempt (in its continuation, maybe another process)
    group = ["layer", "parent_continuation", "parent_layer", "parent_attempt_ordinal"]
    ordered = a.sort_values([*group, "attempt_ordinal"])
    before = ordered.groupby(group, dropna=False)[["end_ms", "what"]].shift()
    a["prev_end_ms"] = before["end_ms"]  # the end of the attempt before it (aligned by index)
    a["followed"] = before["what"]
    gaps = pd.DataFrame(
        {"span_id": ordered["span_id"], "from_ms": before["end_ms"], "to_ms": ordered["start_ms"]}
    ).dropna()
    gaps = gaps[gaps["to_ms"] > gaps["from_ms"]]
    gaps["gap_ms"] = gaps["to_ms"] - gaps["from_ms"]
    gaps["gap_text"] = gaps["gap_ms"].map(fmt.ms)
    marks = a.loc[a["not_before_ms"].notna(), ["span_id", "not_before_ms"]].copy()
    marks["not_before_text"] = marks["not_before_ms"].map(lambda v: f"{fmt.ms(v)} after start")
    return a, gaps, marks


def _trace_link(trace_id: str) -> None:
    template = os.environ.get(TRACE_URL_ENV, "").strip()
    if template and "{trace_id}" in template:
        st.link_button("Open trace", template.replace("{trace_id}", quote(trace_id, safe="")))
    else:
        st.caption(
            f"Trace id {fmt.literal(trace_id)}. Set {TRACE_URL_ENV} (e.g. "
            "`http://localhost:16686/trace/{trace_id}`) to link it to your tracing backend."
        )


# The request's capability and behavior class: its contract line names them.
_CLASSES = (
    ("required capability", "required_capability_digest"),
    ("required behavior", "required_behavior_class"),
)


def _contract(summary: dict[str, Any], started: pd.Timestamp, names: dict[str, str]) -> str:
    deadline = _deadline_ms(summary)
    after = fmt.DASH if deadline is None else fmt.ms(deadline) + " after the start"
    entry = summary.get("entry_route") or fmt.DASH
    boundary = summary.get("entry_boundary")
    parts = [
        ("tenant", summary["tenant"]),
        ("operation", summary["operation"]),
        ("retry owner", summary["retry_owner"]),
        ("entry route", f"{entry} ({boundary})" if boundary else entry),
        ("allowed boundary", summary.get("max_data_boundary")),
        *((label, fmt.class_label(summary.get(key), names)) for label, key in _CLASSES),
        ("deadline", after),
        ("started", f"{started:%Y-%m-%d %H:%M:%S.%f}"[:-3] + " UTC"),
    ]
    return " · ".join(f"{k}: **{fmt.DASH if v is None else fmt.plain(v)}**" for k, v in parts)


def _classes_help(summary: dict[str, Any], names: dict[str, str]) -> str | None:
    """The tooltip of the contract line: each class with its name and digest in full."""
    shown = [
        f"{label}: {fmt.plain(fmt.class_detail(summary.get(key), names))}"
        for label, key in _CLASSES
        if summary.get(key) is not None
    ]
    return "  \n".join(shown) or None


def key_figures(summary: dict[str, Any], attempts: pd.DataFrame) -> dict[str, str]:
    """A request's key figures as the page shows them (the cards, the side-by-side table),
    as text: values from the data are not escaped."""
    started = pd.Timestamp(summary["started_at"])
    duration = (pd.Timestamp(summary["ended_at"]) - started).total_seconds() * 1000.0
    currency = attempts["cost_currency"].dropna()
    costs = attempts["cost_micros"].where(attempts["cost_currency"].notna())
    operations = int(summary["operations"])
    amplification = fmt.ratio(summary["amplification_ratio"]) if operations else fmt.DASH
    deadline = _deadline_ms(summary)
    past = summary["past_deadline_ms"]
    late = "" if past is None else f", ended {fmt.ms(past)} after it"
    return {
        "Terminal": summary["terminal"] or "unknown",
        "Attempts": fmt.count(len(attempts)),
        "Receiver attempts": fmt.count(int(summary["receiver_attempts"])),
        "Retry amplification": amplification,
        "Distinct operations": fmt.count(operations),
        "Retry product": f"{int(summary['multiplication'])}×",
        "Retried layers": " × ".join(summary["retried_layers"] or []) or fmt.DASH,
        "Duration": fmt.ms(duration),
        "Deadline": fmt.DASH if deadline is None else f"{fmt.ms(deadline)} after the start{late}",
        "Cost": fmt.money(costs.sum(), currency.iloc[0] if len(currency) else None)
        if costs.notna().any()
        else fmt.DASH,
    }


def _figures(summary: dict[str, Any], attempts: pd.DataFrame, findings: int) -> None:
    figures = key_figures(summary, attempts)
    operations = int(summary["operations"])
    row = st.container(horizontal=True, gap="medium")
    with row:
        st.metric("Terminal", fmt.plain(figures["Terminal"]), width="content", border=True)
        st.metric("Attempts", figures["Attempts"], width="content", border=True)
        st.metric("Receiver attempts", figures["Receiver attempts"], width="content", border=True)
        st.metric(
            "Retry amplification",
            figures["Retry amplification"],
            f"{operations:,} distinct operation{'s' if operations != 1 else ''}",
            delta_color="off",
            delta_arrow="off",
            width="content",
            border=True,
            help="Receiver attempts ÷ distinct operations (the most distinct calls any one "
            "attempt made), as the report's `amplification_ratio`",
        )
        layers = summary["retried_layers"]
        st.metric(
            "Retry product",
            figures["Retry product"],
            fmt.plain(figures["Retried layers"]) if layers else None,
            delta_color="off",
            delta_arrow="off",
            width="content",
            border=True,
        )
        st.metric("Duration", figures["Duration"], width="content", border=True)
        st.metric("Cost", figures["Cost"], width="content", border=True)
        st.metric("Findings", fmt.count(findings), width="content", border=True)


def _visible(spans: pd.DataFrame, collapsed: set[str]) -> pd.DataFrame:
    """The spans shown when those in ``collapsed`` hide what lies beneath them (the frame
    is in tree order: a span's descendants follow it with a greater depth)."""
    keep = []
    hide_below: int | None = None
    for span_id, depth in zip(spans["span_id"], spans["depth"], strict=True):
        if hide_below is not None and depth > hide_below:
            keep.append(False)
            continue
        hide_below = depth if span_id in collapsed else None
        keep.append(True)
    return spans[keep]


def _what(spans: pd.DataFrame) -> pd.Series:
    """A span as a row names it: ``layer #ordinal · name`` for an attempt, else its name."""
    attempt = spans["layer"] + " #" + spans["attempt_ordinal"].astype("Int64").astype(str)
    return spans["name"].where(spans["layer"].isna(), attempt + " · " + spans["name"])


def _tree_rows(spans: pd.DataFrame, collapsed: set[str], started: pd.Timestamp) -> pd.DataFrame:
    s = spans.copy()
    s["start_ms"] = _since(s["start_time"], started)
    s["end_ms"] = _since(s["end_time"], started)
    tips = _tooltips(s)  # (before ``kind`` turns from the span's kind to its colour's)
    s["kind"] = _kind(s).where(
        s["span_role"] == "attempt", s["status_code"].map(charts.STATUS_KINDS).fillna("unknown")
    )
    what = _what(s)
    # visible guides (SVG text drops leading and repeated spaces)
    marker = (
        s["children"]
        .gt(0)
        .map({True: "▾ ", False: "· "})
        .where(~s["span_id"].isin(collapsed), "▸ ")
    )
    s["what"] = what
    row = s["depth"].map(lambda d: "│ " * int(d)) + marker + what
    dupes = row.groupby(row).cumcount()
    s["row"] = row.where(dupes == 0, row + " (" + (dupes + 1).astype(str) + ")")
    s["label"] = s["duration_ms"].map(fmt.ms)
    return pd.concat([s, tips], axis=1)


def _on_rows(frame: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    """The marks of ``frame`` (by ``span_id``) on the rows of the spans shown."""
    return frame.merge(rows[["span_id", "row"]], on="span_id")


def _waits(rows: pd.DataFrame, bars: pd.DataFrame) -> pd.DataFrame:
    """The Retry-After an attempt's predecessor's answer asked for (recorded on the
    attempt), from that predecessor's end (none: ending where the attempt starts)."""
    asked = rows[rows["retry_after_ms"].notna()]
    prior = asked["span_id"].map(bars.set_index("span_id")["prev_end_ms"])
    start = prior.fillna(asked["start_ms"] - asked["retry_after_ms"])
    return pd.DataFrame(
        {
            "row": asked["row"],
            "from_ms": start,
            "to_ms": start + asked["retry_after_ms"],
            "gap_text": asked["retry_after_ms"].map(fmt.ms),
        }
    )


def waterfall_rows(
    summary: dict[str, Any], spans: pd.DataFrame, collapsed: set[str] | None = None
) -> pd.DataFrame:
    """The waterfall's rows of one request: its spans shown (those beneath ``collapsed``
    spans hidden) in ms since it started, with their names, colours, labels and tooltips."""
    collapsed = collapsed or set()
    return _tree_rows(_visible(spans, collapsed), collapsed, pd.Timestamp(summary["started_at"]))


def waterfall_chart(
    summary: dict[str, Any],
    rows: pd.DataFrame,
    attempts: pd.DataFrame,
    *,
    domain: tuple[float, float] | None = None,
    label_chars: int | None = None,
) -> charts.Figure:
    """The waterfall of one request's ``rows`` (:func:`waterfall_rows`): backoff gaps,
    Retry-After waits, not_before marks and the deadline on them; ``domain`` and
    ``label_chars`` as :func:`charts.waterfall` takes them."""
    deadline_ms = _deadline_ms(summary)
    gaps = waits = marks = fallbacks = late = None
    if not attempts.empty:
        bars, gaps, marks = attempt_frames(attempts, pd.Timestamp(summary["started_at"]))
        gaps, waits, marks = _on_rows(gaps, rows), _waits(rows, bars), _on_rows(marks, rows)
        fallbacks, late = _fallbacks(bars), _late(bars, deadline_ms)
        fallbacks, late = _on_rows(fallbacks, rows), _on_rows(late, rows)
    return charts.waterfall(
        rows,
        WATERFALL_TOOLTIP,
        gaps=gaps,
        waits=waits,
        not_before=marks,
        fallbacks=fallbacks,
        late=late,
        deadline_ms=deadline_ms,
        domain=domain,
        label_chars=label_chars,
    )


def _fallbacks(bars: pd.DataFrame) -> pd.DataFrame:
    """The fallback attempts of :func:`attempt_frames`: where each starts and its mark's
    text, the attempt it followed and the route it went to."""
    f = bars[bars["is_fallback"].eq(True)]  # (None and NaN: no fallback)
    after = f["followed"].map(lambda v: "" if pd.isna(v) else f"after {v}, ")
    text = after + "to " + f["route_id"].fillna(fmt.DASH)
    return pd.DataFrame(
        {
            "span_id": f["span_id"],
            "start_ms": f["start_ms"],
            "fallback_text": text.map(lambda v: echoed(v, TOOLTIP_MAX_CHARS)),
        }
    )


def _late(bars: pd.DataFrame, deadline_ms: float | None) -> pd.DataFrame:
    """The successes after the deadline (the query's ``late_success``): where each ended
    and how late."""
    f = bars[bars["late_success"].fillna(False).astype(bool)]
    late = f["end_ms"] - (deadline_ms if deadline_ms is not None else float("nan"))
    text = [
        f"{what}, {fmt.DASH if pd.isna(by) else fmt.ms(by)} after the deadline"
        for what, by in zip(f["what"], late, strict=True)
    ]
    return pd.DataFrame(
        {
            "span_id": f["span_id"],
            "end_ms": f["end_ms"],
            "late_text": [echoed(t, TOOLTIP_MAX_CHARS) for t in text],
        }
    )


def _deadline_ms(summary: dict[str, Any]) -> float | None:
    """The request's deadline in ms after its start (None: it had none)."""
    deadline = summary["deadline"]
    if deadline is None:
        return None
    after = pd.Timestamp(deadline) - pd.Timestamp(summary["started_at"])
    return float(after.total_seconds()) * 1000.0


def _fields(span: pd.Series) -> list[tuple[str, str]]:
    """What is recorded of one span, as (field, text): its retryscope attributes, status,
    HTTP, GenAI model and tokens, its place on the critical path. The detail panel and the
    waterfall's tooltips show it."""

    def value(name: str, show: Any = str) -> str | None:
        v = span.get(name)
        return None if v is None or (not isinstance(v, list | dict) and pd.isna(v)) else show(v)

    cost = value("cost_micros", lambda c: fmt.money(c, span.get("cost_currency")))
    if cost is not None and span.get("cost_estimated"):
        cost += " (estimate)"
    tokens = [value("gen_ai_input_tokens", fmt.count), value("gen_ai_output_tokens", fmt.count)]
    fields = [
        ("Span", f"{span['name']} ({span['kind']}, {span['span_id']})"),
        ("Role", value("span_role")),
        (
            "Layer / attempt",
            " #".join(
                x for x in (value("layer"), value("attempt_ordinal", lambda v: str(int(v)))) if x
            )
            or None,
        ),
        (
            "Status",
            " — ".join(
                x for x in (value("status_code"), value("status_message", fmt.redacted)) if x
            )
            or None,
        ),
        ("Error type", value("error_type", fmt.redacted)),
        ("Outcome", " / ".join(x for x in (value("outcome"), value("outcome_kind")) if x) or None),
        ("Decision", value("decision")),
        ("Terminal", value("terminal")),
        (
            "HTTP",
            " ".join(
                x
                for x in (value("http_method"), value("http_status_code", lambda v: str(int(v))))
                if x
            )
            or None,
        ),
        ("Resend", value("http_resend_count", lambda v: str(int(v)))),
        ("Route", value("route_id")),
        ("Route release", value("route_release")),
        ("Route data boundary", value("route_data_boundary")),
        ("Route behavior class", value("route_behavior_class")),
        ("Fallback", "yes" if span.get("is_fallback") is True else None),
        ("Start", value("start_ms", lambda v: f"{fmt.ms(v)} after the request started")),
        ("Duration", value("duration_ms", fmt.ms)),
        (
            "Critical path",
            value(
                "critical_ms",
                lambda v: f"{fmt.ms(v)} of it ({fmt.pct(span.get('critical_share'))})",
            ),
        ),
        ("Backoff before it", value("backoff_delay_ms", fmt.ms)),
        ("Retry-After", value("retry_after_ms", fmt.ms)),
        ("Deadline left at dispatch", value("deadline_remaining_ms", fmt.ms)),
        ("Cost", cost),
        ("Hedge", value("hedge_ordinal", lambda v: f"#{int(v)}")),
        ("Breaker", value("breaker_state")),
        ("GenAI provider", value("gen_ai_provider_name")),
        (
            "GenAI model",
            " → ".join(
                x for x in (value("gen_ai_request_model"), value("gen_ai_response_model")) if x
            )
            or None,
        ),
        ("GenAI operation", value("gen_ai_operation_name")),
        ("Tokens in / out", " / ".join(t or fmt.DASH for t in tokens) if any(tokens) else None),
        ("Service", value("service_name")),
        ("Instrumentation", value("scope_name")),
    ]
    return [(k, v) for k, v in fields if v is not None]


def _detail(span: pd.Series) -> list[tuple[str, str]]:
    """The detail panel of one span: (field, shown value as markdown), recorded fields
    only (st.table renders its cells as markdown: the recorded values are escaped)."""
    return [(k, fmt.plain(v)) for k, v in _fields(span)]


def _tooltips(spans: pd.DataFrame) -> pd.DataFrame:
    """The waterfall's tooltip of each span, one column per field of
    :data:`WATERFALL_TOOLTIP` (as :func:`_fields` says it; ``–`` where nothing was
    recorded), cut and with its controls escaped: a tooltip shows text, never markup."""
    rows = [dict(_fields(span)) for _, span in spans.iterrows()]
    return pd.DataFrame(
        {
            column: [echoed(r.get(field, fmt.DASH), TOOLTIP_MAX_CHARS) for r in rows]
            for column, field in WATERFALL_TOOLTIP
        },
        index=spans.index,
    )


def _events(span: pd.Series) -> pd.DataFrame:
    events = span.get("events")
    if events is None or len(events) == 0:
        return pd.DataFrame()
    rows = []
    for event in events:
        attributes = dict(event.get("attributes") or [])
        shown = " · ".join(
            f"{k}: {fmt.redacted(_json_value(v))}" for k, v in sorted(attributes.items())
        )
        rows.append(
            {"Event": event.get("name"), "Time (UTC)": event.get("time"), "Attributes": shown}
        )
    return pd.DataFrame(rows)


def _json_value(text: Any) -> Any:
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return text


def _waterfall(summary: dict[str, Any], spans: pd.DataFrame, attempts: pd.DataFrame) -> None:
    rid = summary["logical_request_id"]
    spans = spans.assign(start_ms=_since(spans["start_time"], pd.Timestamp(summary["started_at"])))
    key = f"{_COLLAPSED}:{rid}"
    if key not in st.session_state:
        deep = spans[(spans["depth"] >= 1) & (spans["span_role"] == "attempt")]
        st.session_state[key] = (
            set()
            if len(spans) <= TREE_EXPANDED_UP_TO
            else set(deep["span_id"][deep["children"] > 0])
        )
    collapsed: set[str] = st.session_state[key]
    st.subheader(f"Span tree: {len(spans):,} span(s)")
    left, right = st.columns([3, 2])
    with left:
        buttons = st.container(horizontal=True)
        if buttons.button("Expand all", key="tree_expand"):
            collapsed.clear()
        if buttons.button(
            "Collapse attempts", key="tree_collapse", help="Hide what lies beneath each attempt"
        ):
            collapsed.update(
                spans["span_id"][(spans["span_role"] == "attempt") & (spans["children"] > 0)]
            )
        rows = waterfall_rows(summary, spans, collapsed)
        event = st.altair_chart(
            waterfall_chart(summary, rows, attempts),
            width="stretch",
            key=f"tree:{rid}",
            on_select="rerun",
        )
        clicked = charts.picked(event, "span_id")
        if clicked is not None and clicked != st.session_state.get(_SPAN):
            st.session_state[_SPAN] = clicked
            _url.publish(PARAMS)
        deadline_ms = _deadline_ms(summary)
        beyond = (
            f" The deadline, {deadline_ms:,.0f} ms after the start, lies beyond the spans."
            if deadline_ms is not None
            and deadline_ms > charts.waterfall_domain(rows, deadline_ms)[1]
            else ""
        )
        st.caption(
            "One row per span, its duration after its bar, one colour per outcome kind; "
            "outlined: the critical path. Dashed grey: the backoff before an attempt; dashed "
            "orange (below it): the Retry-After the answer before it asked for, from that "
            "answer's end; black ticks: not_before; **fallback**: a fallback attempt (its "
            "tooltip: the attempt it followed and the route it went to); red diamond: a "
            "success after the deadline; red line: the deadline. Click a span for its "
            "details. ▾: the spans beneath it are shown; ▸: they are collapsed; ·: nothing "
            "beneath it." + beyond
        )
    with right:
        chosen = st.session_state.get(_SPAN)
        match = spans[spans["span_id"] == chosen]
        span = match.iloc[0] if len(match) else spans.iloc[0]
        with st.container(border=True):
            st.markdown(f"**{fmt.plain(span['name'], 300)}**")
            if span["children"] > 0:
                hidden = span["span_id"] in collapsed
                verb = "Expand" if hidden else "Collapse"
                label = f"{verb} its {int(span['children'])} child span(s)"
                if st.button(label, key="tree_toggle"):
                    (collapsed.discard if hidden else collapsed.add)(span["span_id"])
                    st.rerun()
            st.table(pd.DataFrame(_detail(span), columns=["Field", "Value"]).set_index("Field"))
            events = _events(span)
            if not events.empty:
                st.markdown("**Events**")
                st.dataframe(events, hide_index=True, width="stretch")
    _critical_path(spans)


def _critical_path(spans: pd.DataFrame) -> None:
    """The critical path's total and each span's share of it (critical_path.sql)."""
    path = spans[spans["critical_ms"].notna()].copy()
    if path.empty:
        return
    total = float(path["critical_total_ms"].iloc[0])
    st.markdown(
        f"**Critical path: {fmt.ms(total)}**, {len(path):,} span(s): from the end of the "
        "request, the span that finished last, before it started the one that finished "
        "last by then, and so on, within every span on the path. Each span's share is the "
        "time it alone accounts for."
    )
    shown = pd.DataFrame(
        {
            "Span": _what(path).map(lambda v: fmt.plain(v, 200)),
            "On the path": path["critical_ms"].map(fmt.ms),
            "Share": path["critical_share"].map(fmt.pct),
            "Duration": path["duration_ms"].map(fmt.ms),
        }
    )
    # st.table renders its cells as markdown: the span names are escaped
    st.table(shown.set_index("Span"))


def _findings(findings: pd.DataFrame, names: dict[str, str]) -> None:
    st.subheader(f"Findings: {len(findings):,}")
    if findings.empty:
        st.success("No finding names this request.")
        return
    f = findings.copy()
    f["evidence_text"] = [fmt.evidence_text(json.loads(e), names) for e in f["evidence"]]
    table(f, FINDING_COLUMNS, as_text=True)
    with st.expander("What these rules mean"):
        for rule in dict.fromkeys(f["rule_id"]):
            r = RULES_BY_ID.get(rule)
            if r is not None:
                st.markdown(f"**{r.id}** ({r.severity.value}): {r.meaning} *{r.action}*")


def _lookup(ctx: Context, ident: str) -> list[dict[str, Any]]:
    """The logical requests ``ident`` names (an idempotency digest may name several)."""
    rows: list[dict[str, Any]] = ctx.source.query("request_summary", None, ident).to_pylist()
    return rows


def _request(ctx: Context, rid: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The attempts and the span tree (with its critical path) of request ``rid``."""
    attempts = ctx.source.query("request_attempts", None, rid).to_pandas()
    spans = ctx.source.query("request_span_tree", None, rid).to_pandas()
    if not spans.empty:  # the detail panel and tooltips: a class's name and digest
        names: dict[str, str] = ctx.source.query("class_names")
        behavior = spans["route_behavior_class"]
        spans["route_behavior_class"] = behavior.map(lambda c: fmt.class_detail(c, names))
    return attempts, spans


def _side_by_side(ctx: Context, pair: tuple[dict[str, Any], dict[str, Any]]) -> None:
    """Two requests' key figures in two columns and their waterfalls on one time axis,
    each from its own start."""
    shown = []
    for summary in pair:
        attempts, spans = _request(ctx, summary["logical_request_id"])
        rows = waterfall_rows(summary, spans) if not spans.empty else None
        shown.append((summary, attempts, spans, rows))
    figures = {}
    for name, (summary, attempts, spans, _) in zip("AB", shown, strict=True):
        column = f"{name}: {echoed(summary['logical_request_id'], 40)}"
        on_path = spans[spans["critical_ms"].notna()] if not spans.empty else spans
        figures[column] = {
            **key_figures(summary, attempts),
            "Spans": fmt.count(len(spans)),
            "Critical path": f"{fmt.ms(on_path['critical_total_ms'].iloc[0])} over "
            f"{len(on_path):,} span(s)"
            if len(on_path)
            else fmt.DASH,
        }
    st.subheader("Side by side")
    shown_figures = pd.DataFrame(figures)
    # every row in view (35 px a row and the header)
    st.dataframe(shown_figures, width="stretch", height=35 * (len(shown_figures) + 1) + 3)
    drawn = [(s, a, r) for s, a, _, r in shown if r is not None]
    domains = [charts.waterfall_domain(r, _deadline_ms(s)) for s, _, r in drawn]
    domain = (min(d[0] for d in domains), max(d[1] for d in domains)) if domains else None
    chars = max((len(row) for _, _, r in drawn for row in r["row"]), default=0)
    for name, (summary, attempts, _, rows) in zip("AB", shown, strict=True):
        figures_ = key_figures(summary, attempts)
        st.markdown(
            f"**{name}**: {fmt.literal(summary['logical_request_id'])} — "
            f"{fmt.plain(figures_['Terminal'])}, {figures_['Duration']}"
        )
        if rows is None:
            st.info("This request recorded no spans.")
            continue
        st.altair_chart(
            waterfall_chart(summary, rows, attempts, domain=domain, label_chars=chars),
            width="stretch",
            key=f"vs:{name}",
        )
    st.caption(
        "Both waterfalls on one time axis, each from its request's start; outlined: the "
        "critical path."
    )
    st.button(
        "Show A alone", key="request_vs_close", on_click=lambda: st.session_state.update({_VS: ""})
    )


def render() -> None:
    ctx: Context = current()
    st.header("Request drill-down")
    problems = _url.seed(PARAMS, entered=ctx.entered)
    for problem in problems:
        st.warning(problem)
    search, versus = st.columns(2)
    ident = search.text_input(
        "Logical request id, trace id or idempotency digest",
        key=_SEARCH,
        placeholder="e.g. 4bf92f3577b34da6a3ce929d0e0e4736",
    ).strip()
    vs = versus.text_input(
        "Compare with another request (optional)",
        key=_VS,
        placeholder="its id, trace id or idempotency digest",
        help="Both requests' key figures side by side and their waterfalls on one time axis",
    ).strip()
    _url.publish(PARAMS)
    if not ident:
        st.info(
            "Enter a logical request id, trace id or idempotency digest, or open a request "
            "from the Requests explorer (or any table of requests)."
        )
        return
    summaries = _lookup(ctx, ident)
    if not summaries:
        st.warning(f"No logical request, trace or idempotency digest matches {fmt.literal(ident)}.")
        return
    summary = summaries[0]
    if len(summaries) > 1:
        ids = [s["logical_request_id"] for s in summaries]
        picked = st.selectbox(f"{len(ids)} requests share this key", ids, key="request_pick")
        summary = summaries[ids.index(picked)]
    if vs:
        others = _lookup(ctx, vs)
        if others:
            if len(others) > 1:
                st.info(
                    f"{len(others)} requests share {fmt.literal(vs)}: compared with the "
                    f"first, {fmt.literal(others[0]['logical_request_id'])}."
                )
            _side_by_side(ctx, (summary, others[0]))
            return
        st.warning(
            f"No logical request, trace or idempotency digest matches {fmt.literal(vs)}: "
            "nothing to compare with."
        )
    rid = summary["logical_request_id"]
    attempts, spans = _request(ctx, rid)
    findings = ctx.source.query("request_findings", None, rid).to_pandas()
    started = pd.Timestamp(summary["started_at"])

    _figures(summary, attempts, len(findings))
    names: dict[str, str] = ctx.source.query("class_names")
    st.markdown(
        f"Logical request {fmt.literal(rid)} — " + _contract(summary, started, names),
        help=_classes_help(summary, names),
    )
    _trace_link(str(summary["trace_id"]))
    if attempts.empty:
        st.info("This request recorded no attempts.")
    if not spans.empty:
        _waterfall(summary, spans, attempts)
    _findings(findings, names)
    if not attempts.empty:
        st.subheader("Attempts")
        table(attempt_frames(attempts, started)[0], ATTEMPT_COLUMNS, as_text=True)


if __name__ == "__main__":
    render()
