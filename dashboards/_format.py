"""How the audit UI writes numbers: one function per unit (counts, ratios, rates,
percentage points, milliseconds, money), deltas with an ASCII minus (Streamlit reads a
leading ``-`` as a decrease, not U+2212), and human column headers for tables.

Formatting only: every figure shown comes from ``retryscope.analytics`` as computed there.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

import pandas as pd
import streamlit as st

from retryscope import vocabulary as v
from retryscope._safe_text import ECHO_MAX_CHARS, echoed

DASH = "–"
_SYMBOLS = {"USD": "$", "EUR": "€", "GBP": "£", "JPY": "¥"}


def _missing(value: Any) -> bool:
    if value is None:
        return True
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def count(value: Any) -> str:
    """``1,234``."""
    return DASH if _missing(value) else f"{int(value):,}"


def ratio(value: Any) -> str:
    """``2.40×`` (attempts per request, cost amplification)."""
    return DASH if _missing(value) else f"{float(value):,.2f}×"


def pct(value: Any, digits: int = 1) -> str:
    """A rate in [0, 1] as ``32.0%``."""
    return DASH if _missing(value) else f"{float(value) * 100:.{digits}f}%"


def ms(value: Any) -> str:
    """A duration in milliseconds: ``3.5 ms``, ``1,461 ms``, ``12.3 s`` from 10 s."""
    if _missing(value):
        return DASH
    v = float(value)
    if abs(v) >= 10_000:
        return f"{v / 1000:,.1f} s"
    return f"{v:,.1f} ms" if abs(v) < 10 else f"{v:,.0f} ms"


def money(micros: Any, currency: str | None) -> str:
    """Integer micro-units of ``currency`` as ``$1.05`` / ``$0.75`` / ``$0.0017`` /
    ``CHF 2.50``."""
    if _missing(micros):
        return DASH
    units = int(micros) / 1_000_000
    text = f"{abs(units):,.2f}"
    if abs(units) < 1:  # small amounts to 4 decimals, trailing zeros beyond 2 dropped
        whole, fraction = f"{abs(units):.4f}".split(".")
        text = f"{whole}.{fraction.rstrip('0').ljust(2, '0')}"
    code = (currency or "").upper()
    symbol = _SYMBOLS.get(code)
    sign = "-" if units < 0 else ""
    if symbol:
        return f"{sign}{symbol}{text}"
    return f"{sign}{code or '?'} {text}"


def width(span: timedelta) -> str:
    """A time bucket's width in words: ``15 min``, ``1 hour``, ``2 days``, ``45 s``."""
    seconds = int(span.total_seconds())
    for unit, size in (("day", 86_400), ("hour", 3600), ("min", 60)):
        if seconds % size == 0 and seconds >= size:
            n = seconds // size
            return f"{n} {unit}" if unit == "min" else f"{n} {unit}{'s' if n > 1 else ''}"
    return f"{seconds} s"


def _signed(change: float, text: str) -> str:
    return ("-" if change < 0 else "+") + text


def delta_count(now: Any, before: Any) -> str | None:
    if _missing(now) or _missing(before):
        return None
    change = int(now) - int(before)
    return _signed(change, f"{abs(change):,}")


def delta_ratio(now: Any, before: Any) -> str | None:
    if _missing(now) or _missing(before):
        return None
    change = float(now) - float(before)
    return _signed(change, f"{abs(change):,.2f}×")


def delta_pp(now: Any, before: Any) -> str | None:
    """The change of a rate in percentage points: ``+4.2 pp``."""
    if _missing(now) or _missing(before):
        return None
    change = (float(now) - float(before)) * 100
    return _signed(change, f"{abs(change):.1f} pp")


def is_zero(delta: str | None) -> bool:
    """Whether a formatted delta shows no change (``+0``, ``+0.00×``, ``+0.0 pp``)."""
    if delta is None:
        return True
    digits = [c for c in delta if c.isdigit()]
    return bool(digits) and set(digits) == {"0"}


class Unit(enum.Enum):
    """How a table column is shown."""

    TEXT = "text"
    COUNT = "count"
    RATIO = "ratio"
    PCT = "pct"
    MS = "ms"
    MONEY = "money"
    TIME = "time"
    FLAG = "flag"
    LIST = "list"


@dataclass(frozen=True, slots=True)
class Column:
    """A column of a shown table: its source ``name``, header ``label``, ``unit`` and
    ``help`` (the header's tooltip)."""

    name: str
    label: str
    unit: Unit = Unit.TEXT
    help: str | None = None
    width: str | int | None = None
    pinned: bool = False
    """Stays in view when the table scrolls sideways."""


def _config(column: Column) -> Any:
    common: dict[str, Any] = {"help": column.help}
    if column.width is not None:
        common["width"] = column.width
    if column.pinned:
        common["pinned"] = True
    u = column.unit
    if u is Unit.COUNT:
        return st.column_config.NumberColumn(column.label, format="%,d", **common)
    if u is Unit.RATIO:
        return st.column_config.NumberColumn(column.label, format="%.2f×", **common)
    if u is Unit.PCT:
        return st.column_config.NumberColumn(column.label, format="%.1f%%", **common)
    if u is Unit.MS:
        return st.column_config.NumberColumn(column.label, format="%,.0f ms", **common)
    if u is Unit.TIME:
        return st.column_config.DatetimeColumn(
            column.label, format="YYYY-MM-DD HH:mm:ss.SSS", timezone="UTC", **common
        )
    if u is Unit.FLAG:
        return st.column_config.CheckboxColumn(column.label, **common)
    if u is Unit.LIST:
        return st.column_config.ListColumn(column.label, **common)
    return st.column_config.TextColumn(column.label, **common)


CURRENCY_COLUMN = "cost_currency"
_TEXT: dict[Unit, Any] = {
    Unit.COUNT: count,
    Unit.RATIO: ratio,
    Unit.PCT: pct,
    Unit.MS: ms,
}


def shown(
    frame: pd.DataFrame,
    columns: Sequence[Column],
    *,
    currency: str | None = None,
    as_text: bool = False,
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """``frame`` reduced to ``columns`` in their order, ready for ``st.dataframe``: rates
    scaled to percent, money written in its row's ``cost_currency`` (else in
    ``currency``), and the ``column_config`` that gives each its header and format.
    Columns absent from ``frame`` are left out. With
    ``as_text`` numbers are written as text (``–`` where nothing was recorded, not
    ``None``): for small tables that are read, not sorted."""
    out = pd.DataFrame(index=frame.index)
    config: dict[str, Any] = {}
    for column in columns:
        if column.name not in frame.columns:
            continue
        values = frame[column.name]
        if as_text and column.unit in (*_TEXT, Unit.TEXT):
            show = _TEXT.get(column.unit, lambda v: DASH if _missing(v) else str(v))
            out[column.name] = values.map(show)
            config[column.name] = st.column_config.TextColumn(column.label, help=column.help)
            continue
        if column.unit is Unit.PCT:
            values = values.astype("float64") * 100
        elif column.unit is Unit.MONEY:
            codes = (
                frame[CURRENCY_COLUMN]
                if CURRENCY_COLUMN in frame.columns
                else pd.Series([currency] * len(frame), index=frame.index)
            )
            values = pd.Series(
                [money(v, c) for v, c in zip(values, codes, strict=True)], index=frame.index
            )
        out[column.name] = values
        config[column.name] = _config(column)
    return out, config


def evidence_text(evidence: Mapping[str, Any], names: Mapping[str, str] | None = None) -> str:
    """A finding's evidence as ``key: value`` pairs on one line (numbers rounded; a class
    with the name ``names`` gives it, :func:`class_detail`)."""
    parts = []
    for key, value in evidence.items():
        if key in CLASS_COLUMNS and names:
            value = class_detail(value, names)
        elif isinstance(value, float) and math.isfinite(value):
            value = f"{value:.3g}" if abs(value) < 10 else f"{value:,.1f}"
        elif isinstance(value, list):
            value = ", ".join(str(v) for v in value)
        parts.append(f"{key.replace('_', ' ')}: {DASH if value is None else value}")
    return " · ".join(parts)


_SECRETS = (
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@"), r"\1REDACTED@"),
    (
        re.compile(
            r"(?i)\b(api[_-]?key|access[_-]?token|token|secret|password|passwd|signature|"
            r"authorization|key)=([^&\s\"']+)"
        ),
        r"\1=REDACTED",
    ),
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{6,}"), r"\1 REDACTED"),
    (re.compile(r"\b(sk|pk|rk)-[A-Za-z0-9_-]{8,}"), r"\1-REDACTED"),
)
ERROR_MAX_CHARS = 2_000


def redacted(text: Any) -> str:
    """An error message or event value as the UI shows it: credentials in URLs, secret
    query values, bearer tokens and API-key-like strings replaced by ``REDACTED``, cut at
    :data:`ERROR_MAX_CHARS` characters."""
    if _missing(text):
        return DASH
    out = str(text)
    for pattern, replacement in _SECRETS:
        out = pattern.sub(replacement, out)
    return out if len(out) <= ERROR_MAX_CHARS else out[:ERROR_MAX_CHARS] + " …"


CLASS_COLUMNS: Final = tuple(
    a.column
    for a in (
        v.ROUTE_BEHAVIOR_CLASS,
        v.REQUIRED_BEHAVIOR_CLASS,
        v.ROUTE_CAPABILITY_DIGEST,
        v.REQUIRED_CAPABILITY_DIGEST,
    )
)
"""The columns (and evidence keys) holding a capability or behavior class."""
_DIGEST = re.compile(r"[0-9a-f]{64}")
DIGEST_SHOWN = 12
"""Hex digits of a SHA-256 digest a table shows where no name was recorded for it."""


def class_label(value: Any, names: Mapping[str, str]) -> str | None:
    """A capability or behavior class as a table or sentence shows it: the name recorded
    beside it (``names``: ``retryscope.analytics.class_names``), else the value itself, a
    SHA-256 digest cut to :data:`DIGEST_SHOWN` hex digits."""
    if _missing(value):
        return None
    text = str(value)
    if text in names:
        return names[text]
    return text[:DIGEST_SHOWN] if _DIGEST.fullmatch(text) else text


def class_detail(value: Any, names: Mapping[str, str]) -> str | None:
    """A class with everything recorded of it: ``name (digest)`` where a name was recorded
    beside it, else the value whole."""
    if _missing(value):
        return None
    text = str(value)
    return f"{names[text]} ({text})" if text in names else text


_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")
_BACKTICKS = re.compile(r"`+")


def literal(value: Any, limit: int = ECHO_MAX_CHARS) -> str:
    """A value from the URL or the data inside a sentence the page renders as markdown:
    a code span no backtick in the value can close (so nothing in it is a link, HTML,
    emphasis or a Streamlit directive), cut to ``limit`` characters."""
    text = echoed(str(value), limit)  # no newline, control or bidi character
    fence = "`" * (max((len(run) for run in _BACKTICKS.findall(text)), default=0) + 1)
    pad = " " if text[:1] in ("`", " ") or text[-1:] in ("`", " ") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def plain(value: Any, limit: int = ERROR_MAX_CHARS) -> str:
    """Text that may hold values from the URL or the data (an error message) as markdown
    shows it verbatim: every ASCII punctuation character backslash-escaped (no link,
    autolink, code, emphasis, HTML, math or directive can start), cut to ``limit``."""
    return _PUNCTUATION.sub(r"\\\1", echoed(str(value), limit))
