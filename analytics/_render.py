"""Render small Arrow result tables (findings, one request's attempts) for the terminal."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pyarrow as pa

from retryscope._safe_text import for_markdown, for_terminal


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    if hasattr(value, "to_pydatetime"):  # pandas Timestamp from timestamp[ns]
        return _cell(value.to_pydatetime())
    if isinstance(value, float):
        return f"{value:,.1f}"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _cells(table: pa.Table, escape: Callable[[str], str]) -> tuple[list[str], list[list[str]]]:
    rows = [[escape(_cell(v)) for v in row.values()] for row in table.to_pylist()]
    return list(table.column_names), rows


def text_table(table: pa.Table) -> str:
    """Fixed-width columns (a ``-`` for nulls); control characters in values escaped."""
    header, rows = _cells(table, for_terminal)
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


def markdown_table(table: pa.Table) -> str:
    """A markdown table; values escaped so none can end a cell or a row."""
    header, rows = _cells(table, for_markdown)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def json_rows(table: pa.Table) -> list[dict[str, Any]]:
    """Rows ready for ``json.dumps``: times as ISO-8601 strings, evidence parsed."""
    rows: list[dict[str, Any]] = []
    for row in table.to_pylist():
        out: dict[str, Any] = {}
        for key, value in row.items():
            if key == "evidence" and isinstance(value, str):
                out[key] = json.loads(value)
            elif value is not None and not isinstance(value, str | int | float | bool | list):
                out[key] = _cell(value)
            else:
                out[key] = value
        rows.append(out)
    return rows
