"""Which Parquet columns are dictionary-encoded.

Dictionary encoding pays for columns with few distinct values (roles, routes, tenants,
attribute keys); for columns whose values are (nearly) all distinct — ids, digests,
timestamps, durations — the writer builds a dictionary as large as the data only to fall
back to plain encoding, so those are written plain: faster to write, and zstd compresses
them better than the dictionary's indices (smaller files).
"""

from __future__ import annotations

import io
from typing import Final

import pyarrow.parquet as pq

from retryscope.schema import SPAN_SCHEMA

PLAIN_COLUMNS: Final = frozenset(
    {
        "trace_id",
        "span_id",
        "parent_span_id",
        "start_time",
        "end_time",
        "duration_ms",
        "logical_request_id",
        "logical_request_digest",
        "idempotency_digest",
        "deadline",
        "gen_ai_response_id",
    }
)
"""Top-level span columns written without a dictionary (values mostly unique per span)."""

PLAIN_LEAVES: Final = frozenset(
    {"events.list.element.time", "links.list.element.trace_id", "links.list.element.span_id"}
)
"""Nested leaves written without a dictionary, for the same reason."""


def _leaf_paths() -> list[str]:
    """Every leaf column path of the span schema in Parquet (``attributes.key_value.key``
    for a map's keys): dictionary options name leaves, not top-level fields.

    The file is written without a table: building Arrow arrays makes pyarrow import pandas
    when it is installed, and importing the exporter must not load it."""
    sink = io.BytesIO()
    pq.ParquetWriter(sink, SPAN_SCHEMA).close()
    schema = pq.ParquetFile(io.BytesIO(sink.getvalue())).schema
    return [schema.column(i).path for i in range(len(schema))]


DICTIONARY_COLUMNS: Final[list[str]] = [
    path
    for path in _leaf_paths()
    if path.split(".", 1)[0] not in PLAIN_COLUMNS and path not in PLAIN_LEAVES
]
"""The leaf columns written with dictionary encoding (``use_dictionary`` of the writer)."""
