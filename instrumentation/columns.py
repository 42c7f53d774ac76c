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
    """Accumulates span rows as Python column lists; :meth:`to_table` makes the Arrow table.

    :meth:`append` adds one span (the OTLP ingest); :meth:`extend` adds a batch given column
    by column (the exporter), which saves the per-span call and keyword overhead.
    """

    def __init__(self) -> None:
        self._base: dict[str, list[Any]] = {f.name: [] for f in BASE_FIELDS}
        self._dedicated: list[list[Any]] = [[] for _ in DEDICATED]
        self._attributes: list[list[tuple[str, str]]] = []
        self._resource: list[int] = []  # per row: its index into _resource_maps
        self._resource_maps: list[list[tuple[str, str]]] = []  # each distinct resource once
        self._events: list[list[dict[str, Any]]] = []
        self._links: list[list[dict[str, Any]]] = []
        self._dropped: list[int] = []
        self._resources: dict[int | None, tuple[Mapping[str, Any] | None, int, str | None]]
        self._resources = {}

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
        self.extend(
            trace_id=[trace_id],
            span_id=[span_id],
            parent_span_id=[parent_span_id],
            name=[name],
            kind=[kind],
            start_ns=[start_ns],
            end_ns=[end_ns],
            status_code=[status_code],
            status_message=[status_message],
            attributes=[attributes],
            resource=[resource],
            scope_name=[scope_name],
            scope_version=[scope_version],
            events=[events],
            links=[links],
            dropped_attributes=[dropped_attributes],
        )

    def extend(
        self,
        *,
        trace_id: list[str],
        span_id: list[str],
        parent_span_id: list[str | None],
        name: list[str],
        kind: list[str],
        start_ns: list[int],
        end_ns: list[int],
        status_code: list[str],
        status_message: list[str | None],
        attributes: list[Mapping[str, Any] | None],
        resource: list[Mapping[str, Any] | None],
        scope_name: list[str | None],
        scope_version: list[str | None],
        events: list[Sequence[tuple[str, int, Mapping[str, Any] | None]]],
        links: list[Sequence[tuple[str, str, Mapping[str, Any] | None]]],
        dropped_attributes: list[int],
    ) -> None:
        """Add a batch of spans given as equally long columns (as :meth:`append` takes them)."""
        n = len(trace_id)
        b = self._base
        b["trace_id"] += trace_id
        b["span_id"] += span_id
        b["parent_span_id"] += parent_span_id
        b["name"] += name
        b["kind"] += kind
        b["start_time"] += start_ns
        b["end_time"] += end_ns
        b["duration_ms"] += [(e - s) / 1e6 for s, e in zip(start_ns, end_ns, strict=True)]
        b["status_code"] += status_code
        b["status_message"] += [m or None for m in status_message]
        resource_rows = [self._resource_row(r) for r in resource]
        b["service_name"] += [service for _, service in resource_rows]
        b["scope_name"] += scope_name
        b["scope_version"] += scope_version
        self._resource += [index for index, _ in resource_rows]
        self._route(attributes, n)
        self._events += [
            [{"name": e, "time": t, "attributes": encode_map(a)} for e, t, a in span_events]
            if span_events
            else []
            for span_events in events
        ]
        self._links += [
            [{"trace_id": t, "span_id": s, "attributes": encode_map(a)} for t, s, a in span_links]
            if span_links
            else []
            for span_links in links
        ]
        self._dropped += dropped_attributes
        if len(self._dropped) != len(b["trace_id"]):
            raise ValueError("SpanColumns.extend: columns of different lengths")

    def _resource_row(self, resource: Mapping[str, Any] | None) -> tuple[int, str | None]:
        """(index of the encoded resource, service name): spans of one process share one
        resource object, so each is encoded once per builder and stored once."""
        key = id(resource) if resource else None
        cached = self._resources.get(key)
        if cached is not None and (key is None or cached[0] is resource):
            return cached[1], cached[2]
        service = resource.get("service.name") if resource else None
        index = len(self._resource_maps)
        self._resource_maps.append(encode_map(resource))
        named = service if isinstance(service, str) else None
        self._resources[key] = (resource, index, named)
        return index, named

    def _route(self, batch: list[Mapping[str, Any] | None], n: int) -> None:
        """Each span's attributes into its dedicated columns (the value fits the column's
        type) or the JSON-encoded ``attributes`` map (everything else)."""
        columns = self._dedicated
        first = len(self._attributes)
        for column in columns:
            column += [None] * n
        rest_column = self._attributes
        route = _ROUTE
        encode_str = _encode_str
        for row, attributes in enumerate(batch, start=first):
            rest: list[tuple[str, str]] = []
            rest_column.append(rest)
            if not attributes:
                continue
            for key, value in attributes.items():
                target = route.get(key)
                if target is not None:
                    index, exact, low, high, attr_type, current = target
                    kind = type(value)
                    if (kind in exact and (kind is not int or low <= value <= high)) or _fits(
                        attr_type, value
                    ):
                        values = columns[index]
                        if current:
                            values[row] = list(value) if isinstance(value, tuple) else value
                            continue
                        # an older alias: fills the column unless the current key did
                        if values[row] is None:
                            values[row] = value
                rest.append((key, encode_str(value) if type(value) is str else encode_value(value)))

    def to_table(self) -> pa.Table:
        columns: dict[str, list[Any]] = {
            **self._base,
            **{a.column: values for a, values in zip(DEDICATED, self._dedicated, strict=True)},
            "attributes": self._attributes,
            "events": self._events,
            "links": self._links,
            "dropped_attributes": self._dropped,
        }
        arrays = {
            name: _array(values, SPAN_SCHEMA.field(name).type) for name, values in columns.items()
        }
        # Each distinct resource is built once and repeated by index.
        resources = _array(self._resource_maps, SPAN_SCHEMA.field("resource_attributes").type)
        arrays["resource_attributes"] = resources.take(pa.array(self._resource, pa.int32()))
        return pa.Table.from_arrays(
            [arrays[name] for name in SPAN_SCHEMA.names], schema=SPAN_SCHEMA
        )


_INDEX: Final[dict[str, int]] = {a.key: i for i, a in enumerate(DEDICATED)}


_EXACT: Final[dict[AttrType, tuple[frozenset[type], int, int]]] = {
    AttrType.STR: (frozenset({str}), 0, 0),
    AttrType.BOOL: (frozenset({bool}), 0, 0),
    AttrType.INT: (frozenset({int}), -_INT64_MAX - 1, _INT64_MAX),
    AttrType.TIME_NS: (frozenset({int}), -_INT64_MAX - 1, _INT64_MAX),
    AttrType.INT32: (frozenset({int}), -_INT32_MAX - 1, _INT32_MAX),
    AttrType.FLOAT: (frozenset({float, int}), -(2**1023), 2**1023),
    AttrType.STR_LIST: (frozenset(), 0, 0),
}
"""Per column type: the exact value types it takes without calling :func:`_fits`, and the
bounds an ``int`` must be within for that; anything else (a ``str`` subclass, an ``int``
out of bounds, a list) is decided by :func:`_fits`."""

_ROUTE: Final[dict[str, tuple[int, frozenset[type], int, int, AttrType, bool]]] = {
    key: (_INDEX[attr.key], *_EXACT[attr.type], attr.type, key == attr.key)
    for key, attr in BY_KEY.items()
}
"""Span key → (dedicated column index, exact types, int bounds, column type, whether it is
the current key rather than an older alias)."""
