"""What the pages share: KPI cards that open the requests they count, tables whose rows
open a request's drill-down in the same tab, and small helpers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import pandas as pd
import pyarrow as pa
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from retryscope.analytics import RULES_BY_ID
from retryscope.dashboards import _explorer as explorer
from retryscope.dashboards import _format as fmt

if TYPE_CHECKING:
    from retryscope.dashboards._context import Context

REQUEST_PAGE = "views/request.py"
"""The drill-down page script, relative to ``app.py``; ``?id=`` names the request."""


def frame(table: pa.Table) -> pd.DataFrame:
    """A small aggregated Arrow result as a pandas frame for Altair/st.dataframe."""
    df: pd.DataFrame = table.to_pandas()
    return df


def nothing_in_scope(ctx: Context, report: dict[str, Any]) -> bool:
    """Say why when the ``report`` of the scope counts no logical request (its
    ``empty_reason``: filters that select none, or a data set that holds none) instead of
    a page of zeros; True when the page should stop."""
    reason = report["empty_reason"]
    if reason is None:
        return False
    if ctx.first is None:  # the data set holds none, whatever the filters
        st.warning(f"Nothing to audit: {fmt.plain(reason)}.")
    else:
        st.info(f"{fmt.plain(reason[:1].upper() + reason[1:])}. Widen them in the sidebar.")
    return True


def scope_report(ctx: Context) -> dict[str, Any] | None:
    """The report of the requests in scope, or None (after saying why) when it counts none."""
    report: dict[str, Any] = ctx.source.query("report", ctx.filters)
    return None if nothing_in_scope(ctx, report) else report


def table(frame: pd.DataFrame, columns: Sequence[fmt.Column], *, as_text: bool = False) -> None:
    """Show ``columns`` of ``frame`` with their headers and units (see :func:`fmt.shown`)."""
    shown, config = fmt.shown(frame, columns, as_text=as_text)
    st.dataframe(shown, hide_index=True, width="stretch", column_config=config)


def overall(ctx: Context, query: str) -> dict[str, Any] | None:
    """The unsliced row of a sliced metric under the filters, or None (after saying why)
    when the scope holds no requests."""
    rows: list[dict[str, Any]] = ctx.source.query(query, ctx.filters, "overall").to_pylist()
    if rows and rows[0]["logical_requests"]:
        return rows[0]
    nothing_in_scope(ctx, ctx.source.query("report", ctx.filters))
    return None


@dataclass(frozen=True)
class Kpi:
    """One KPI card: a label, its shown value and change, and the explorer query listing
    the requests it counts (``opens``, with the link's text ``link``)."""

    label: str
    value: str
    delta: str | None = None
    bad_up: bool | None = None
    """A rise is bad (red), good (green), or neither (None: grey)."""
    help: str | None = None
    opens: Mapping[str, str] | None = None
    link: str = "Show requests"


def rule_kpi(label: str, value: Any, rule: str, **query: Any) -> Kpi:
    """A KPI counting what finding rule ``rule`` flags: its meaning as the help, and a link
    to the requests with that finding (``query``: more of the explorer's parameters)."""
    return Kpi(
        label,
        fmt.count(value),
        opens=explorer.params(rule=rule, **query),
        help=RULES_BY_ID[rule].meaning,
    )


def kpi_row(ctx: Context, kpis: Sequence[Kpi], row: DeltaGenerator | None = None) -> DeltaGenerator:
    """KPI cards side by side (each as wide as its label and value: nothing is cut; they
    wrap to a second row on a narrow screen), each with a link into the Requests explorer
    when it names the requests it counts; appended to ``row`` when given. The row."""
    row = st.container(horizontal=True, gap="small") if row is None else row
    for k in kpis:
        with row.container(border=True, width="content"):
            flat = fmt.is_zero(k.delta)
            colour: Literal["off", "inverse", "normal"] = (
                "off" if flat or k.bad_up is None else "inverse" if k.bad_up else "normal"
            )
            st.metric(
                k.label,
                k.value,
                k.delta,
                delta_color=colour,
                delta_arrow="off" if flat else "auto",
                help=k.help,
            )
            if k.opens is not None:
                explorer.link(k.link, ctx.params, k.opens, help=f"Requests behind {k.label}")
                if set(k.opens) - explorer.SLICE_FREE:
                    explorer.link(
                        "Compare",
                        ctx.params,
                        {n: v for n, v in k.opens.items() if n not in explorer.SLICE_FREE},
                        help=f"What sets the requests behind {k.label} apart from the others",
                        icon=":material/compare_arrows:",
                        page=explorer.COMPARE_PAGE,
                    )
    return row


def open_request(ctx: Context, ident: str) -> None:
    """Switch to the drill-down of request ``ident`` (same tab, filters kept)."""
    st.switch_page(REQUEST_PAGE, query_params=ctx.link(id=ident))


def picked_row(
    table: pd.DataFrame,
    columns: Sequence[fmt.Column],
    key: str,
    *,
    height: int | Literal["auto"] = "auto",
    as_text: bool = False,
    currency: str | None = None,
) -> int | None:
    """Show ``table`` (``columns`` of it, formatted; see :func:`fmt.shown`) with one row
    selectable; the row selected, if any."""
    shown, config = fmt.shown(table, columns, as_text=as_text, currency=currency)
    event = st.dataframe(
        shown,
        hide_index=True,
        width="stretch",
        height=height,
        column_config=config,
        on_select="rerun",
        selection_mode="single-row",
        key=key,
    )
    return selected_row(event)


def request_table(
    ctx: Context,
    table: pd.DataFrame,
    columns: Sequence[fmt.Column],
    key: str,
    *,
    id_column: str = "logical_request_id",
    height: int | Literal["auto"] = "auto",
    as_text: bool = False,
    currency: str | None = None,
) -> None:
    """Show ``table`` (``columns`` of it, formatted; see :func:`fmt.shown` for
    ``as_text`` and ``currency``); selecting a row that names a request opens its
    drill-down in this tab."""
    row = picked_row(table, columns, key, height=height, as_text=as_text, currency=currency)
    if row is not None:
        ident = table.iloc[row][id_column]
        if isinstance(ident, str):
            open_request(ctx, ident)


def selected_row(event: Any) -> int | None:
    """The row a single-row ``st.dataframe`` selection picked, if any."""
    rows = event.selection.rows if event is not None else []
    return int(rows[0]) if rows else None
