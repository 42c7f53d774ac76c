"""The Requests explorer's query in the URL: its query parameters, the widgets they fill,
and links into it from the other pages (a KPI, a chart mark, a table row), so each opens
the list of the requests it counts.

Parameters: ``terminal``, ``rule`` (a finding rule they have), ``layer`` (a layer that
retried), ``min_attempts`` (receiver attempts), ``has`` (comma-separated flags of
:data:`FLAGS`), ``where`` (``dimension:value``: a value the requests take in a dimension of
:data:`~retryscope.analytics.COMPARE_DIMENSIONS`, as a breakdown's series), ``sort`` (a
:class:`~retryscope.analytics.RequestSort` value) and ``order`` (``asc``/``desc``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import streamlit as st

from retryscope.analytics import COMPARE_DIMENSIONS, RULES_BY_ID, RequestQuery, RequestSort
from retryscope.dashboards import _format as fmt
from retryscope.dashboards import _url
from retryscope.vocabulary import Layer, Terminal

PAGE = "views/requests.py"
"""The explorer's page script, relative to ``app.py``."""
COMPARE_PAGE = "views/compare.py"
"""The page comparing the requests an explorer query selects with the scope's others."""
SLICE_FREE = {"sort", "order"}
"""Parameters of an explorer query that select no requests (a query of only these: all)."""

FLAGS: dict[str, str] = {
    "retried": "retries or resends",
    "fallback": "a fallback",
    "missed_deadline": "a missed deadline",
    "nested": "nested retries",
    "wasted": "wasted cost",
    "violation": "a violation",
}
"""Flags a request may be required to have (``has=``), with their labels ("with …")."""
FLAG_FIELDS: dict[str, str] = {
    "retried": "retried",
    "fallback": "fallback",
    "missed_deadline": "deadline_missed",
    "nested": "nested",
    "wasted": "wasted",
    "violation": "violations",
}

SORT_LABELS: dict[RequestSort, str] = {
    RequestSort.RECEIVER_ATTEMPTS: "receiver attempts",
    RequestSort.EXCESS: "excess attempts",
    RequestSort.AMPLIFICATION: "retry amplification",
    RequestSort.ATTEMPTS: "attempts (all layers)",
    RequestSort.RETRY_PRODUCT: "retry product",
    RequestSort.DURATION: "duration",
    RequestSort.COST: "cost",
    RequestSort.WASTED: "wasted cost",
    RequestSort.PAST_DEADLINE: "time past the deadline",
    RequestSort.FINDINGS: "findings",
    RequestSort.STARTED: "start time",
    RequestSort.TERMINAL: "terminal",
    RequestSort.TENANT: "tenant",
    RequestSort.OPERATION: "operation",
    RequestSort.ROUTE_PATH: "route path",
}

TERMINAL, RULE, LAYER = "req_terminal", "req_rule", "req_layer"
MIN_ATTEMPTS, HAS, SORT, ORDER = "req_min_attempts", "req_has", "req_sort", "req_order"
WHERE = "req_where"


def _rule(text: str) -> str:
    if text not in RULES_BY_ID:
        raise ValueError("no such finding rule")
    return text


def _member(kind: type[Terminal] | type[Layer]) -> Any:
    def parse(text: str) -> str:
        if text not in kind.__members__.values():
            raise ValueError(f"no such {kind.__name__.lower()}")
        return text

    return parse


def _min_attempts(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 1_000_000:
        raise ValueError("must be within 0..1000000")
    return value


def where_text(dimension: str, value: str) -> str:
    """``where=`` of the requests taking ``value`` in ``dimension``."""
    return f"{dimension}:{value}"


def where(text: str) -> tuple[str, str]:
    """``dimension:value`` → (dimension, value); ``ValueError`` names what is wrong."""
    dimension, colon, value = text.partition(":")
    if not colon:
        raise ValueError("must be dimension:value")
    if dimension not in COMPARE_DIMENSIONS:
        raise ValueError(f"no such dimension (dimensions: {', '.join(COMPARE_DIMENSIONS)})")
    return dimension, value


def _where(text: str) -> str:
    where(text)
    return text


def _order(text: str) -> str:
    if text not in ("asc", "desc"):
        raise ValueError("must be asc or desc")
    return text


ANY = "(any)"
"""The choice that selects no value (a terminal, rule or layer)."""

PARAMS: tuple[_url.Param, ...] = (
    _url.Param("terminal", TERMINAL, ANY, _member(Terminal)),
    _url.Param("rule", RULE, ANY, _rule),
    _url.Param("layer", LAYER, ANY, _member(Layer)),
    _url.Param("min_attempts", MIN_ATTEMPTS, None, _min_attempts),
    _url.Param("has", HAS, [], _url.comma_list(FLAGS, "flag"), ",".join),
    _url.Param("where", WHERE, None, _where),
    _url.Param(
        "sort", SORT, RequestSort.RECEIVER_ATTEMPTS, lambda t: RequestSort(t), lambda s: s.value
    ),
    _url.Param("order", ORDER, "desc", _order),
)


def _chosen(value: Any) -> str | None:
    return None if value in (None, ANY) else str(value)


def query_from_state(limit: int) -> RequestQuery:
    """The explorer's query from its widgets' state."""
    state = st.session_state
    flags = set(state.get(HAS) or [])
    minimum = state.get(MIN_ATTEMPTS)
    try:
        dimension, value = where(state[WHERE]) if state.get(WHERE) else (None, None)
    except ValueError:  # typed into the explorer's box: the page names it
        dimension = value = None
    return RequestQuery(
        terminal=_chosen(state.get(TERMINAL)),
        rule=_chosen(state.get(RULE)),
        layer=_chosen(state.get(LAYER)),
        min_receiver_attempts=None if minimum is None else int(minimum),
        sort=RequestSort(state.get(SORT) or RequestSort.RECEIVER_ATTEMPTS),
        descending=state.get(ORDER, "desc") != "asc",
        limit=limit,
        where_dimension=dimension,
        where_value=value,
        **{field: True for flag, field in FLAG_FIELDS.items() if flag in flags},
    )


def params(
    *,
    terminal: str | None = None,
    rule: str | None = None,
    layer: str | None = None,
    min_attempts: int | None = None,
    has: tuple[str, ...] = (),
    where: tuple[str, str] | None = None,
    sort: RequestSort = RequestSort.RECEIVER_ATTEMPTS,
    descending: bool = True,
) -> dict[str, str]:
    """The query parameters of an explorer query (defaults left out)."""
    for flag in has:
        if flag not in FLAGS:
            raise ValueError(f"unknown flag {flag!r}")
    out: dict[str, Any] = {
        "terminal": terminal,
        "rule": rule,
        "layer": layer,
        "min_attempts": None if min_attempts is None else str(min_attempts),
        "has": ",".join(has) or None,
        "where": None if where is None else where_text(*where),
        "sort": None if sort is RequestSort.RECEIVER_ATTEMPTS else RequestSort(sort).value,
        "order": None if descending else "asc",
    }
    return {k: v for k, v in out.items() if v is not None}


def selects(query: RequestQuery) -> str:
    """The requests ``query`` selects, in words: ``Requests with a fallback``."""
    parts = []
    if query.terminal:
        parts.append(f"terminal {fmt.literal(query.terminal)}")
    if query.rule:
        rule = RULES_BY_ID[query.rule].severity.value
        parts.append(f"a {fmt.literal(query.rule)} finding ({rule})")
    if query.layer:
        parts.append(f"retries at layer {fmt.literal(query.layer)}")
    if query.min_receiver_attempts:
        parts.append(f"{query.min_receiver_attempts:,}+ receiver attempts")
    parts += [FLAGS[flag] for flag, field in FLAG_FIELDS.items() if getattr(query, field)]
    if query.where_dimension is not None:
        label = COMPARE_DIMENSIONS[query.where_dimension]
        parts.append(f"{label} {fmt.literal(query.where_value or '')}")
    return "Requests with " + ", ".join(parts) if parts else "All requests"


def link(
    label: str,
    global_params: Mapping[str, str],
    query: Mapping[str, str],
    *,
    help: str | None = None,
    icon: str | None = ":material/list:",
    page: str = PAGE,
) -> None:
    """A link into the explorer (or another ``page`` reading its query: Compare) in the
    same tab, with the global filters and ``query``."""
    st.page_link(
        page,
        label=label,
        icon=icon,
        help=help,
        query_params=_url.merged(global_params, query),
    )


def open_explorer(global_params: Mapping[str, str], query: Mapping[str, str]) -> None:
    """Switch to the explorer (same tab) with the global filters and ``query``."""
    st.switch_page(PAGE, query_params=_url.merged(global_params, query))
