"""The Parquet schema of the audit data set, derived from :mod:`retryscope.vocabulary`.

One row per finished span. Identity, timing and status columns come first, then one typed
column per dedicated attribute (:data:`retryscope.vocabulary.DEDICATED`), then everything
else the span carried so nothing is lost: remaining span attributes, resource attributes,
events and links. Values in the ``*attributes`` maps are JSON-encoded so their OpenTelemetry
type survives (``"GET"`` is a string, ``3`` an int, ``[1,2]`` an array).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

import pyarrow as pa

from retryscope.vocabulary import DEDICATED, SCHEMA_VERSION, AttrType

ATTR_MAP: Final = pa.map_(pa.string(), pa.string())
TIMESTAMP: Final = pa.timestamp("ns")  # UTC; DuckDB reads it as TIMESTAMP_NS

_ARROW_TYPES: Final[dict[AttrType, pa.DataType]] = {
    AttrType.STR: pa.string(),
    AttrType.INT: pa.int64(),
    AttrType.INT32: pa.int32(),
    AttrType.BOOL: pa.bool_(),
    AttrType.FLOAT: pa.float64(),
    AttrType.TIME_NS: TIMESTAMP,
}

BASE_FIELDS: Final[tuple[pa.Field, ...]] = (
    pa.field("trace_id", pa.string(), nullable=False),  # 32 lowercase hex
    pa.field("span_id", pa.string(), nullable=False),  # 16 lowercase hex
    pa.field("parent_span_id", pa.string()),
    pa.field("name", pa.string(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),  # INTERNAL, CLIENT, SERVER, ...
    pa.field("start_time", TIMESTAMP, nullable=False),
    pa.field("end_time", TIMESTAMP, nullable=False),
    pa.field("duration_ms", pa.float64(), nullable=False),
    pa.field("status_code", pa.string(), nullable=False),  # UNSET, OK, ERROR
    pa.field("status_message", pa.string()),
    pa.field("service_name", pa.string()),
    pa.field("scope_name", pa.string()),
    pa.field("scope_version", pa.string()),
)

EVENT_TYPE: Final = pa.struct(
    [("name", pa.string()), ("time", TIMESTAMP), ("attributes", ATTR_MAP)]
)
LINK_TYPE: Final = pa.struct(
    [("trace_id", pa.string()), ("span_id", pa.string()), ("attributes", ATTR_MAP)]
)

EXTRA_FIELDS: Final[tuple[pa.Field, ...]] = (
    pa.field("attributes", ATTR_MAP),  # span attributes without a dedicated column
    pa.field("resource_attributes", ATTR_MAP),
    pa.field("events", pa.list_(EVENT_TYPE)),
    pa.field("links", pa.list_(LINK_TYPE)),
    pa.field("dropped_attributes", pa.int32()),
)


FIELD_DOCS: Final[dict[str, str]] = {
    "trace_id": "Trace id, 32 lowercase hex digits (all zeros on a telemetry-gap row).",
    "span_id": "Span id, 16 lowercase hex digits (all zeros on a telemetry-gap row).",
    "parent_span_id": "Parent span id (hex); null for a root span.",
    "name": "Span name.",
    "kind": "`INTERNAL`, `SERVER`, `CLIENT`, `PRODUCER`, `CONSUMER` "
    "(`UNSPECIFIED` from OTLP input).",
    "start_time": "Span start, UTC (a gap row: start of the window in which spans were lost).",
    "end_time": "Span end, UTC (a gap row: end of the loss window).",
    "duration_ms": "`end_time - start_time` in milliseconds.",
    "status_code": "`UNSET`, `OK` or `ERROR`.",
    "status_message": "Status description, when set.",
    "service_name": "Resource attribute `service.name`.",
    "scope_name": "Instrumentation scope name.",
    "scope_version": "Instrumentation scope version.",
    "attributes": "Every span attribute without a dedicated column (and any whose value had "
    "the wrong type for its column), value JSON-encoded.",
    "resource_attributes": "All resource attributes, values JSON-encoded.",
    "events": "Span events: name, time, attributes (JSON-encoded values).",
    "links": "Span links: trace id, span id, attributes (JSON-encoded values).",
    "dropped_attributes": "Attributes the SDK dropped on this span (limits).",
}
"""What each column that is not a dedicated attribute holds (dedicated columns are described
by their :class:`~retryscope.vocabulary.Attr`)."""


def arrow_type(t: AttrType) -> pa.DataType:
    """The Arrow type of a dedicated column of vocabulary type ``t``."""
    return _ARROW_TYPES[t]


SPAN_SCHEMA: Final[pa.Schema] = pa.schema(
    [
        *BASE_FIELDS,
        *(pa.field(a.column, arrow_type(a.type)) for a in DEDICATED),
        *EXTRA_FIELDS,
    ],
    metadata={b"retryscope.schema_version": str(SCHEMA_VERSION).encode()},  # SCHEMA_VERSION_KEY
)
"""Schema of every span file retryscope writes."""

COLUMNS: Final[tuple[str, ...]] = tuple(SPAN_SCHEMA.names)

LOOKUP_COLUMNS: Final = ("logical_request_id", "trace_id", "idempotency_digest")
"""The columns ``retryscope request`` finds a request by: the writer gives each a Bloom
filter per row group and the reader skips the files whose filters rule a value out."""

SCHEMA_VERSION_KEY: Final = b"retryscope.schema_version"
"""Parquet key-value metadata key holding the schema version a file was written with."""


_DUCKDB_SCALARS: Final[dict[pa.DataType, str]] = {
    pa.string(): "VARCHAR",
    pa.int32(): "INTEGER",
    pa.int64(): "BIGINT",
    pa.bool_(): "BOOLEAN",
    pa.float64(): "DOUBLE",
    TIMESTAMP: "TIMESTAMP_NS",
}


def duckdb_type(t: pa.DataType) -> str:
    """How DuckDB names the Arrow type ``t`` when it reads a column of it."""
    if t in _DUCKDB_SCALARS:
        return _DUCKDB_SCALARS[t]
    if pa.types.is_map(t):
        return f"MAP({duckdb_type(t.key_type)}, {duckdb_type(t.item_type)})"
    if pa.types.is_list(t):
        return f"{duckdb_type(t.value_type)}[]"
    if pa.types.is_struct(t):
        members = ", ".join(f"{f.name} {duckdb_type(f.type)}" for f in t)
        return f"STRUCT({members})"
    raise TypeError(f"no DuckDB name for Arrow type {t}")


def duckdb_columns(schema: pa.Schema) -> str:
    """The column list of a DuckDB ``CREATE TABLE`` with the columns of ``schema``, typed as
    DuckDB reads them."""
    return ", ".join(f'"{f.name}" {duckdb_type(f.type)}' for f in schema)


def schema_version_of(metadata: Mapping[bytes, bytes] | None) -> int:
    """The schema version recorded in a file's key-value metadata; 0 for files written before
    versions were recorded. A malformed value raises ``ValueError`` naming it."""
    raw = (metadata or {}).get(SCHEMA_VERSION_KEY)
    if raw is None:
        return 0
    try:
        return int(raw.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise ValueError(f"malformed {SCHEMA_VERSION_KEY.decode()} metadata: {raw!r}") from None
