"""``schema.md``: every Parquet column (from :mod:`retryscope.schema` and the vocabulary) and
every domain value the columns hold."""

from __future__ import annotations

import enum

import pyarrow as pa

from retryscope import vocabulary as v
from retryscope.reference._markdown import code, header, table
from retryscope.schema import FIELD_DOCS, SPAN_SCHEMA, duckdb_type

SOURCES = "retryscope/vocabulary.py and retryscope/schema.py"

DOMAIN_VALUES: tuple[tuple[str, type[enum.Enum]], ...] = (
    ("span_role", v.SpanRole),
    ("layer", v.Layer),
    ("retry_owner", v.RetryOwner),
    ("outcome", v.Outcome),
    ("outcome_kind", v.OutcomeKind),
    ("decision", v.Decision),
    ("terminal", v.Terminal),
    ("max_data_boundary, route_data_boundary", v.DataBoundary),
    ("breaker_state", v.BreakerState),
    ("hedge_result", v.HedgeResult),
    ("reconciliation_result", v.ReconciliationResult),
)
"""The columns holding enum values, and their enum (in :mod:`retryscope.vocabulary`)."""


class UndocumentedColumn(ValueError):
    """A schema column with no meaning to print."""


def _arrow_type(field: pa.Field) -> str:
    t = field.type
    if pa.types.is_list(t) and pa.types.is_struct(t.value_type):
        text = f"list<struct<{', '.join(f.name for f in t.value_type)}>>"
    else:
        text = str(t).replace("list<item: ", "list<")
    return text if field.nullable else f"{text} not null"


def column_meaning(name: str) -> str:
    """What column ``name`` holds, and for a dedicated column the span attribute(s) it
    comes from."""
    attr = next((a for a in v.DEDICATED if a.column == name), None)
    if attr is None:
        if name not in FIELD_DOCS:
            raise UndocumentedColumn(f"column {name!r} has no entry in schema.FIELD_DOCS")
        return FIELD_DOCS[name]
    source = f"Span attribute {code(attr.key)}"
    if attr.aliases:
        source += " (also read from " + ", ".join(code(k) for k in attr.aliases) + ")"
    return f"{attr.doc} {source}."


def render() -> str:
    for columns, _ in DOMAIN_VALUES:
        for column in columns.split(","):
            if column.strip() not in SPAN_SCHEMA.names:
                raise UndocumentedColumn(f"DOMAIN_VALUES names {column.strip()!r}, not a column")
    lines = header(
        "Parquet schema",
        SOURCES,
        f"One row per finished span (plus telemetry-gap rows), schema version "
        f"{v.SCHEMA_VERSION} (key-value metadata {code('retryscope.schema_version')}). "
        "Identity and timing columns come first, then one typed column per retryscope "
        "attribute, then everything else the span carried, JSON-encoded so its "
        "OpenTelemetry type survives. Readers use DuckDB's "
        f"{code('union_by_name')}, so files of every version read together: a column a "
        "file lacks reads as NULL, and a column an older version wrote stays readable "
        "(version 2 stopped writing the request span's per-layer attempt counts, which "
        "the analytics compute from the attempts).",
    )
    lines += table(
        ("column", "Arrow type", "DuckDB type", "meaning"),
        (
            (
                code(f.name),
                _arrow_type(f),
                duckdb_type(f.type),
                column_meaning(f.name),
            )
            for f in SPAN_SCHEMA
        ),
    )
    lines += ["", "## Values", "", "The string values the enum columns hold.", ""]
    lines += table(
        ("column", "values"),
        (
            (
                ", ".join(code(c.strip()) for c in columns.split(",")),
                ", ".join(code(str(member.value)) for member in enum_type),
            )
            for columns, enum_type in DOMAIN_VALUES
        ),
    )
    lines += [
        "",
        "Each failure kind belongs to one outcome family:",
        "",
        *table(
            ("outcome_kind", "outcome"),
            ((code(kind.value), code(family.value)) for kind, family in v.KIND_FAMILY.items()),
        ),
    ]
    return "\n".join(lines) + "\n"
