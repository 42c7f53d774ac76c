"""Build Arrow tables in :data:`retryscope.schema.SPAN_SCHEMA` column by column.

Shared by the Parquet exporter (finished SDK spans) and the OTLP ingest (Collector files),
so both produce identical rows. Dedicated attributes go to their typed column; a value of
the wrong type stays in the generic ``attributes`` map instead (nothing is lost).

Values the SDK accepts but JSON or UTF-8 cannot hold directly are still kept: bytes are
encoded as base64 text (as OTLP's ``bytesValue`` is on ingest), other objects as their
``repr``. Parquet strings must be valid UTF-8, so a lone surrogate (``"\\ud800"``, e.g. from
badly decoded input) is written as its ``\\uXXXX`` escape: inside the JSON-encoded values
that escape decodes back to exactly the original string; in plain text columns (span name,
attribute keys, dedicated string columns) it stays visible as the escape. The repair runs
only when Arrow refuses a column, so the common path pays nothing for it.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

import pyarrow as pa

from retryscope.schema import BASE_FIELDS, SPAN_SCHEMA
from retryscope.vocabulary import BY_KEY, DEDICATED, AttrType

_INT32_MAX: Final = 2**31 - 1
_INT64_MAX: Final = 2**63 - 1


def _fits(t: AttrType, value: Any) -> bool:
    if t is AttrType.STR:
        return isinstance(value, str)
    if t is AttrType.BOOL:
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if t is AttrType.INT32:
        return isinstance(value, int) and -_INT32_MAX - 1 <= value <= _INT32_MAX
    if t in (AttrType.INT, AttrType.TIME_NS):
        return isinstance(value, int) and -_INT64_MAX - 1 <= value <= _INT64_MAX
    if t is AttrType.FLOAT:
        return isinstance(value, float | int)
    return isinstance(value, list | tuple) and all(isinstance(x, str) for x in value)


_encode_str = json.encoder.encode_basestring  # the C-accelerated JSON string encoder


def encode_value(value: Any) -> str:
    """JSON text of an attribute value, keeping its type (strings quoted)."""
    kind = type(value)
    if kind is str:
        return _encode_str(value)
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return str(value)
    if isinstance(value, tuple):
        value = list(value)
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=True, default=_json_default)
    except (TypeError, ValueError):
        return json.dumps(repr(value), ensure_ascii=False)


def _json_default(value: Any) -> Any:
    """JSON form of what ``json`` cannot encode itself: bytes as base64, anything else its
    ``repr`` (the SDK accepts bytes and, for extended attributes, arbitrary values)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    return repr(value)


def utf8_safe(text: str) -> str:
    """``text`` with each lone surrogate replaced by its ``\\uXXXX`` escape (valid UTF-8)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _repaired(value: Any) -> Any:
    """``value`` (a cell: str, list, tuple, dict) with every string made UTF-8 safe."""
    if isinstance(value, str):
        return utf8_safe(value)
    if isinstance(value, list):
        return [_repaired(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_repaired(v) for v in value)
    if isinstance(value, dict):
        return {k: _repaired(v) for k, v in value.items()}
    return value


def _array(values: list[Any], type_: pa.DataType) -> pa.Array:
    """``pa.array(values, type_)``; strings Arrow refuses (lone surrogates) are escaped."""
    try:
        return pa.array(values, type=type_)
    except UnicodeEncodeError:
        return pa.array([_repaired(v) for v in values], type=type_)


def encode_map(attributes: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    if not attributes:
        return []
    return [(str(k), encode_value(val)) for k, val in attributes.items()]


class SpanColumns:
    """Accumulates span rows as Python column lists; :meth:`to_table` makes the Arrow table."""

    def __init__(self) -> None:
        self._base: dict[str, list[Any]] = {f.name: [] for f in BASE_FIELDS}
        self._dedicated: list[list[Any]] = [[] for _ in DEDICATED]
        self._attributes: list[list[tuple[str, str]]] = []
        self._resource: list[list[tuple[str, str]]] = []
        self._events: list[list[dict[str, Any]]] = []
        self._links: list[list[dict[str, Any]]] = []
        self._dropped: list[int] = []
        self._last_resource: tuple[Mapping[str, Any] | None, list[tuple[str, str]]] = (None, [])

    def __len__(self) -> int:
        return len(self._dropped)

    def append(
        self,
        *,
        trace_id: str,
        span_id: str,
        parent_span_id: str | None,
        name: str,
        kind: str,
        start_ns: int,
        end_ns: int,
        status_code: str,
        status_message: str | None,
        attributes: Mapping[str, Any] | None,
        resource: Mapping[str, Any] | None,
        scope_name: str | None,
        scope_version: str | None,
        events: Sequence[tuple[str, int, Mapping[str, Any] | None]] = (),
        links: Sequence[tuple[str, str, Mapping[str, Any] | None]] = (),
        dropped_attributes: int = 0,
    ) -> None:
        """Add one span. Ids are lowercase hex; times are unix ns."""
        b = self._base
        b["trace_id"].append(trace_id)
        b["span_id"].append(span_id)
        b["parent_span_id"].append(parent_span_id)
        b["name"].append(name)
        b["kind"].append(kind)
        b["start_time"].append(start_ns)
        b["end_time"].append(end_ns)
        b["duration_ms"].append((end_ns - start_ns) / 1e6)
        b["status_code"].append(status_code)
        b["status_message"].append(status_message or None)
        service = resource.get("service.name") if resource else None
        b["service_name"].append(service if isinstance(service, str) else None)
        b["scope_name"].append(scope_name)
        b["scope_version"].append(scope_version)

        rest: list[tuple[str, str]] = []
        row: list[Any] = [None] * len(DEDICATED)
        if attributes:
            for key, value in attributes.items():
                attr = BY_KEY.get(key)
                if attr is None or not _fits(attr.type, value):
                    rest.append((key, encode_value(value)))
                    continue
                slot = _INDEX[attr.key]
                if key == attr.key:
                    row[slot] = list(value) if isinstance(value, tuple) else value
                else:  # an older alias: fills the column unless the current key did
                    rest.append((key, encode_value(value)))
                    if row[slot] is None:
                        row[slot] = value
        for column, value in zip(self._dedicated, row, strict=True):
            column.append(value)
        self._attributes.append(rest)
        last, encoded = self._last_resource
        if resource is not last:  # spans of one process share one resource object
            encoded = encode_map(resource)
            self._last_resource = (resource, encoded)
        self._resource.append(encoded)
        self._events.append(
            [{"name": n, "time": t, "attributes": encode_map(a)} for n, t, a in events]
        )
        self._links.append(
            [{"trace_id": t, "span_id": s, "attributes": encode_map(a)} for t, s, a in links]
        )
        self._dropped.append(dropped_attributes)

    def to_table(self) -> pa.Table:
        arrays: list[pa.Array] = []
        for name, values in self._base.items():
            arrays.append(_array(values, SPAN_SCHEMA.field(name).type))
        for attr, values in zip(DEDICATED, self._dedicated, strict=True):
            arrays.append(_array(values, SPAN_SCHEMA.field(attr.column).type))
        for name, values in (
            ("attributes", self._attributes),
            ("resource_attributes", self._resource),
            ("events", self._events),
            ("links", self._links),
            ("dropped_attributes", self._dropped),
        ):
            arrays.append(_array(values, SPAN_SCHEMA.field(name).type))
        return pa.Table.from_arrays(arrays, schema=SPAN_SCHEMA)


_INDEX: Final[dict[str, int]] = {a.key: i for i, a in enumerate(DEDICATED)}
