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

import array
import base64
import itertools
import json
import operator
from collections.abc import Callable, Mapping, Sequence, Sized
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa

from retryscope.instrumentation.export import _constant_arrays as constant_arrays
from retryscope.schema import ATTR_MAP, BASE_FIELDS, SPAN_SCHEMA, TIMESTAMP
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
    return isinstance(value, float | int)  # FLOAT


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
    """``pa.array(values, type_)``; strings Arrow refuses (lone surrogates) are escaped.

    All-null columns (most dedicated columns of most spans) skip the per-value conversion.
    """
    if values and values[0] is None and values.count(None) == len(values):
        return constant_arrays.nulls(len(values), type_)
    try:
        return pa.array(values, type=type_)
    except UnicodeEncodeError:
        return pa.array([_repaired(v) for v in values], type=type_)


_ARRAY_CODES: Final[dict[pa.DataType, str]] = {
    t: code
    for t, code, size in (
        (pa.int32(), "i", 4),
        (pa.int64(), "q", 8),
        (TIMESTAMP, "q", 8),
        (pa.float64(), "d", 8),
    )
    if array.array(code).itemsize == size
}
"""Fixed-width Arrow types the :mod:`array` module can fill, with its type code."""


def _dense(values: Sequence[Any], type_: pa.DataType) -> pa.Array:
    """A column of a fixed-width type without nulls (times, durations, offsets), filled by
    the :mod:`array` module in one C loop; values it refuses (None, out of range, another
    type) take :func:`_array`, which keeps or reports them exactly as before."""
    code = _ARRAY_CODES.get(type_)
    if code is not None:
        try:
            data = array.array(code, values)
        except (TypeError, OverflowError):
            pass
        else:
            return pa.Array.from_buffers(type_, len(data), [None, pa.py_buffer(data)])
    return _array(list(values), type_)


def _offsets(rows: Sequence[Sized]) -> pa.Array:
    """int32 offsets of a list or map column whose rows have these lengths."""
    return _dense([0, *itertools.accumulate(map(len, rows))], pa.int32())


def _list_array(rows: list[Sequence[Any]], type_: pa.ListType) -> pa.Array:
    """A list column (no nulls) from its rows, built from offsets and the flat items (an
    empty row costs nothing; a column of empty rows is built once per length)."""
    if rows and not any(rows):
        return constant_arrays.constant((), type_, len(rows), lambda: _list_of(rows, type_))
    return _list_of(rows, type_)


def _list_of(rows: list[Sequence[Any]], type_: pa.ListType) -> pa.Array:
    items = _array(list(itertools.chain.from_iterable(rows)), type_.value_type)
    return pa.ListArray.from_arrays(_offsets(rows), items, type=type_)


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
        self._arrow: dict[str, list[pa.Array]] = {}  # base columns given (in part) as arrays
        self._dedicated: list[list[Any]] = [[] for _ in DEDICATED]
        self._filled: set[int] = set()  # dedicated columns with a value in some row
        self._attr_keys: list[tuple[str, ...]] = []  # per row: keys of the attributes map
        self._attr_values: list[tuple[str, ...]] = []  # per row: their JSON-encoded values
        self._unrouted: list[Mapping[str, Any] | None] = []  # attributes not yet routed
        self._unrouted_shapes: list[tuple[str, ...]] | None = []  # their shapes, if known
        self._resource: list[int] = []  # per row: its index into _resource_maps
        self._resource_maps: list[list[tuple[str, str]]] = []  # each distinct resource once
        self._events: list[Sequence[dict[str, Any]]] = []
        self._links: list[Sequence[dict[str, Any]]] = []
        self._dropped: list[int] = []
        self._resources: dict[int | None, tuple[Mapping[str, Any] | None, int, str | None]]
        self._resources = {}

    def __len__(self) -> int:
        return len(self._dropped)

    def append(self, **span: Any) -> None:
        """Add one span, given as :meth:`extend`'s keyword arguments with one value each
        (``events``, ``links`` and ``dropped_attributes`` may be left out). Ids are
        lowercase hex; times are unix ns."""
        self.extend(**{name: [value] for name, value in {**_ONE_SPAN, **span}.items()})

    def extend(
        self,
        *,
        trace_id: Sequence[str] | pa.Array,
        span_id: Sequence[str] | pa.Array,
        parent_span_id: Sequence[str | None] | pa.Array,
        name: Sequence[str],
        kind: Sequence[str],
        start_ns: Sequence[int],
        end_ns: Sequence[int],
        status_code: Sequence[str],
        status_message: Sequence[str | None],
        attributes: Sequence[Mapping[str, Any] | None],
        resource: Sequence[Mapping[str, Any] | None],
        scope_name: Sequence[str | None],
        scope_version: Sequence[str | None],
        events: Sequence[Sequence[tuple[str, int, Mapping[str, Any] | None]]],
        links: Sequence[Sequence[tuple[str, str, Mapping[str, Any] | None]]],
        dropped_attributes: Sequence[int],
        grouped_shapes: Sequence[tuple[str, ...]] | None = None,
    ) -> None:
        """Add a batch of spans given as equally long columns (as :meth:`append` takes them);
        the id columns may also be given as Arrow string arrays. ``grouped_shapes``: the
        attributes' :func:`attribute_shapes`, for rows that come grouped by them (see
        :func:`shape_order`): their attributes are then routed run by run, in place."""
        n = len(trace_id)
        b = self._base
        self._put("trace_id", trace_id)
        self._put("span_id", span_id)
        self._put("parent_span_id", parent_span_id)
        b["name"] += name
        b["kind"] += kind
        b["start_time"] += start_ns
        b["end_time"] += end_ns
        b["duration_ms"] += [(e - s) / 1e6 for s, e in zip(start_ns, end_ns, strict=True)]
        b["status_code"] += status_code
        b["status_message"] += [m or None for m in status_message]
        if n and len(set(map(id, resource))) == 1:  # the usual case: one process's spans
            index, service = self._resource_row(resource[0])
            b["service_name"] += [service] * n
            self._resource += [index] * n
        else:
            resource_rows = [self._resource_row(r) for r in resource]
            b["service_name"] += [service for _, service in resource_rows]
            self._resource += [index for index, _ in resource_rows]
        b["scope_name"] += scope_name
        b["scope_version"] += scope_version
        shapes = grouped_shapes
        if shapes is not None and self._unrouted_shapes is not None and len(shapes) == n:
            self._unrouted_shapes += shapes
        else:  # not known for some rows: all are worked out when routed
            self._unrouted_shapes = None
        self._unrouted += attributes
        if len(self._unrouted) >= _ROUTE_CHUNK:
            self._route_pending()
        self._events += [
            [{"name": e, "time": t, "attributes": encode_map(a)} for e, t, a in span_events]
            if span_events
            else ()
            for span_events in events
        ]
        self._links += [
            [{"trace_id": t, "span_id": s, "attributes": encode_map(a)} for t, s, a in span_links]
            if span_links
            else ()
            for span_links in links
        ]
        self._dropped += dropped_attributes
        if not len(dropped_attributes) == len(span_id) == len(parent_span_id) == n:
            raise ValueError("SpanColumns.extend: columns of different lengths")

    def _put(self, name: str, values: Sequence[Any] | pa.Array) -> None:
        """Append to base column ``name`` a list of values or an Arrow array of its type."""
        if not isinstance(values, pa.Array):
            self._base[name] += values
            return
        if values.type != _TYPES[name]:
            raise ValueError(f"SpanColumns.extend: {name} is {values.type}, not {_TYPES[name]}")
        pieces = self._arrow.setdefault(name, [])
        if self._base[name]:  # values appended before, as a list: they come first
            pieces.append(_array(self._base[name], _TYPES[name]))
            self._base[name] = []
        pieces.append(values)

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

    def _route_pending(self) -> None:
        """Route the attributes appended since the last call (a chunk at a time: routing
        works per attribute-key shape, so it pays off over many rows)."""
        if not self._unrouted:
            return
        batch, self._unrouted = self._unrouted, []
        shapes, self._unrouted_shapes = self._unrouted_shapes, []
        n = len(batch)
        routed = route_attributes(batch, shapes, grouped=shapes is not None)
        for index, (column, values) in enumerate(
            zip(self._dedicated, routed.dedicated, strict=True)
        ):
            if values is None:
                column += [None] * n
            else:
                column += values
                self._filled.add(index)
        self._attr_keys += routed.keys
        self._attr_values += routed.values

    def _attributes_array(self) -> pa.Array:
        """The ``attributes`` map column, built from flat key and value arrays."""
        keys, values = self._attr_keys, self._attr_values
        return pa.MapArray.from_arrays(
            _offsets(keys),
            _array(list(itertools.chain.from_iterable(keys)), pa.string()),
            _array(list(itertools.chain.from_iterable(values)), pa.string()),
            type=ATTR_MAP,
        )

    def _resources_array(self) -> pa.Array:
        """The ``resource_attributes`` column: each distinct resource built once and repeated
        by index; when every row has the same resource, the column is built once per length
        (see :mod:`.constant_arrays`)."""
        type_ = _TYPES["resource_attributes"]
        maps, rows = self._resource_maps, self._resource

        def build() -> pa.Array:
            return _array(maps, type_).take(_dense(rows, pa.int32()))

        if rows and rows.count(rows[0]) == len(rows):
            value = ("resource", tuple(maps[rows[0]]))
            return constant_arrays.constant(value, type_, len(rows), build)
        return build()

    def to_table(self) -> pa.Table:
        self._route_pending()
        columns: dict[str, list[Any]] = {
            **self._base,
            **{
                a.column: values
                for index, (a, values) in enumerate(zip(DEDICATED, self._dedicated, strict=True))
                if index in self._filled
            },
            "dropped_attributes": self._dropped,
        }
        arrays = {
            name: (_dense if name in _DENSE else _array)(values, SPAN_SCHEMA.field(name).type)
            for name, values in columns.items()
            if name not in self._arrow
        }
        for name, pieces in self._arrow.items():
            if self._base[name]:
                pieces = [*pieces, _array(self._base[name], _TYPES[name])]
            arrays[name] = pieces[0] if len(pieces) == 1 else pa.concat_arrays(pieces)
        for index, attr in enumerate(DEDICATED):
            if index not in self._filled:
                arrays[attr.column] = constant_arrays.nulls(len(self), _TYPES[attr.column])
        arrays["attributes"] = self._attributes_array()
        arrays["events"] = _list_array(self._events, SPAN_SCHEMA.field("events").type)
        arrays["links"] = _list_array(self._links, SPAN_SCHEMA.field("links").type)
        arrays["resource_attributes"] = self._resources_array()
        return pa.Table.from_arrays(
            [arrays[name] for name in SPAN_SCHEMA.names], schema=SPAN_SCHEMA
        )


_TYPES: Final[dict[str, pa.DataType]] = {field.name: field.type for field in SPAN_SCHEMA}

_DENSE: Final = frozenset({"start_time", "end_time", "duration_ms", "dropped_attributes"})
"""Columns never null (by construction), filled through :func:`_dense`."""

_INDEX: Final[dict[str, int]] = {a.key: i for i, a in enumerate(DEDICATED)}


_EXACT: Final[dict[AttrType, tuple[frozenset[type], int, int]]] = {
    AttrType.STR: (frozenset({str}), 0, 0),
    AttrType.BOOL: (frozenset({bool}), 0, 0),
    AttrType.INT: (frozenset({int}), -_INT64_MAX - 1, _INT64_MAX),
    AttrType.TIME_NS: (frozenset({int}), -_INT64_MAX - 1, _INT64_MAX),
    AttrType.INT32: (frozenset({int}), -_INT32_MAX - 1, _INT32_MAX),
    AttrType.FLOAT: (frozenset({float, int}), -(2**1023), 2**1023),
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


_VALUES: Final = operator.methodcaller("values")

_ONE_SPAN: Final[dict[str, Any]] = {"events": (), "links": (), "dropped_attributes": 0}
"""What :meth:`SpanColumns.append` takes for a field it is not given."""

_ROUTE_CHUNK: Final = 4096
"""Rows appended one by one (the OTLP ingest) are routed this many at a time."""


@dataclass(frozen=True, slots=True)
class Routed:
    """A batch's attributes split the way the schema stores them, one entry per row."""

    dedicated: list[Sequence[Any] | None]
    """Per dedicated column (in :data:`DEDICATED` order): its values, None if all null."""
    keys: list[tuple[str, ...]]
    """Per row: the keys that go to the generic ``attributes`` map, in attribute order."""
    values: list[tuple[str, ...]]
    """Per row: those keys' JSON-encoded values."""


@dataclass(frozen=True, slots=True)
class _Shape:
    """How to route attributes with one particular key sequence (see :func:`_shape`)."""

    dedicated: tuple[tuple[int, int, frozenset[type], int, int], ...]
    """(position in the key sequence, dedicated column index, exact types, int bounds)."""
    rest: tuple[int, ...]
    """Positions of the keys that go to the ``attributes`` map."""
    rest_keys: tuple[str, ...]


_SHAPES: dict[tuple[str, ...], _Shape | None] = {}
_MAX_SHAPES: Final = 4096


def _shape(keys: tuple[str, ...]) -> _Shape | None:
    """The routing plan of a key sequence; None when a key is an older alias (the alias
    rules depend on each span's values, so such spans are routed one by one)."""
    if keys in _SHAPES:
        return _SHAPES[keys]
    dedicated: list[tuple[int, int, frozenset[type], int, int]] = []
    rest: list[int] = []
    result: _Shape | None = None
    for position, key in enumerate(keys):
        target = _ROUTE.get(key)
        if target is None:
            rest.append(position)
            continue
        index, exact, low, high, _, current = target
        if not current:
            break
        dedicated.append((position, index, exact, low, high))
    else:
        result = _Shape(tuple(dedicated), tuple(rest), tuple(keys[p] for p in rest))
    if len(_SHAPES) >= _MAX_SHAPES:  # key sequences are few in practice; stay bounded anyway
        _SHAPES.clear()
    _SHAPES[keys] = result
    return result


_Piece = tuple[Mapping[int, Sequence[Any]], list[tuple[str, ...]], list[tuple[str, ...]]]
"""One group of rows routed: dedicated column index → values, map keys and values per row."""


def _encoded(values: Sequence[Any]) -> Sequence[str]:
    """JSON text of each value (:func:`encode_value`), a whole column at a time."""
    kinds = set(map(type, values))
    if kinds == {str}:
        return list(map(_encode_str, values))
    if kinds == {int}:
        return list(map(str, values))
    if kinds == {bool}:
        return ["true" if v else "false" for v in values]
    return [encode_value(v) for v in values]


def _route_shape(shape: _Shape, batch: Sequence[Mapping[str, Any] | None]) -> _Piece | None:
    """Rows that all have the same keys, routed a column at a time; None when some value
    does not fit its dedicated column without a per-value check (:func:`_route_rows`)."""
    m = len(batch)
    if not shape.dedicated and not shape.rest:  # no attributes at all
        return {}, [()] * m, [()] * m
    by_key = list(zip(*map(tuple, map(_VALUES, batch)), strict=True))
    dedicated: dict[int, Sequence[Any]] = {}
    for position, index, exact, low, high in shape.dedicated:
        values = by_key[position]
        kinds = set(map(type, values))
        if not kinds <= exact:
            return None
        if int in kinds:
            ints = values if len(kinds) == 1 else [v for v in values if type(v) is int]
            if min(ints) < low or max(ints) > high:
                return None
        dedicated[index] = values
    if not shape.rest:
        return dedicated, [()] * m, [()] * m
    encoded = list(zip(*[_encoded(by_key[position]) for position in shape.rest], strict=True))
    return dedicated, [shape.rest_keys] * m, encoded


def _route_rows(batch: Sequence[Mapping[str, Any] | None]) -> _Piece:
    """Rows routed one attribute at a time: each value goes to its dedicated column when it
    fits the column's type, else to the JSON-encoded ``attributes`` map."""
    n = len(batch)
    columns: dict[int, list[Any]] = {}
    keys: list[tuple[str, ...]] = []
    encoded: list[tuple[str, ...]] = []
    for row, attributes in enumerate(batch):
        rest: list[tuple[str, str]] = []
        for key, value in (attributes or {}).items():
            target = _ROUTE.get(key)
            if target is not None:
                index, exact, low, high, attr_type, current = target
                kind = type(value)
                if (kind in exact and (kind is not int or low <= value <= high)) or _fits(
                    attr_type, value
                ):
                    values = columns.get(index)
                    if values is None:
                        values = columns[index] = [None] * n
                    if current:
                        values[row] = list(value) if isinstance(value, tuple) else value
                        continue
                    # an older alias: fills the column unless the current key did
                    if values[row] is None:
                        values[row] = value
            rest.append((key, _encode_str(value) if type(value) is str else encode_value(value)))
        keys.append(tuple(key for key, _ in rest))
        encoded.append(tuple(text for _, text in rest))
    return columns, keys, encoded


def _as_is(values: list[Any]) -> list[Any]:
    return values


def attribute_shapes(batch: Sequence[Mapping[str, Any] | None]) -> list[tuple[str, ...]]:
    """Each row's key sequence (``()`` for a row without attributes). Rows of equal key
    sequences share one tuple object, so that comparing two shapes (grouping, dict and set
    lookups further on) is an identity check, not one per key."""
    try:
        shapes: list[tuple[str, ...]] = list(map(tuple, batch))  # type: ignore[arg-type]
    except TypeError:  # a row without attributes (None)
        shapes = [tuple(attributes) if attributes else () for attributes in batch]
    one_each: dict[tuple[str, ...], tuple[str, ...]] = {}
    return list(map(one_each.setdefault, shapes, shapes))


def shape_order(shapes: Sequence[tuple[str, ...]]) -> list[int] | None:
    """The row order that puts rows of one key sequence together (a stable sort by the
    order in which each sequence first appears); None when the rows already are.
    ``shapes``: as :func:`attribute_shapes` gives them (one object per key sequence)."""
    first_seen: dict[int, int] = {}
    codes = list(map(first_seen.setdefault, map(id, shapes), itertools.count()))
    if len(first_seen) == 1 or all(map(operator.le, codes, itertools.islice(codes, 1, None))):
        return None
    return sorted(range(len(codes)), key=codes.__getitem__)


def route_attributes(
    batch: list[Mapping[str, Any] | None],
    shapes: Sequence[tuple[str, ...]] | None = None,
    *,
    grouped: bool = False,
) -> Routed:
    """Each row's attributes into its dedicated columns (the value fits the column's type)
    or the JSON-encoded ``attributes`` map (everything else). ``shapes``: the rows'
    :func:`attribute_shapes`, when known; ``grouped``: rows of one key sequence come one
    after another (:func:`shape_order`).

    Rows are grouped by their key sequence (spans from one instrumentation point carry the
    same keys in the same order), and each group is routed a column at a time: one type
    check per column of the group instead of one per value. Rows that come grouped are
    routed run by run where they are, without reordering them.
    """
    n = len(batch)
    if shapes is None:
        shapes = attribute_shapes(batch)
    groups: list[tuple[tuple[str, ...], Sequence[Mapping[str, Any] | None]]] = []
    put_back: Callable[[list[Any]], Sequence[Any]] = _as_is
    if grouped:  # each run of one key sequence routed where it is
        end = 0
        for _, run in itertools.groupby(map(id, shapes)):  # (equal shapes: one object)
            start, end = end, end + len(list(run))
            groups.append((shapes[start], batch[start:end]))
    elif len(distinct := dict.fromkeys(shapes)) == 1:
        groups = [(next(iter(distinct)), batch)]
    else:  # grouped by a stable sort on a small code per key sequence
        code_of = {keys: code for code, keys in enumerate(distinct)}
        codes = list(map(code_of.__getitem__, shapes))
        order = sorted(range(n), key=codes.__getitem__)
        members = operator.itemgetter(*order)(batch)
        start = 0
        for keys, code in code_of.items():
            end = start + codes.count(code)
            groups.append((keys, members[start:end]))
            start = end
        # (routed group by group: put back in row order at the end)
        put_back = operator.itemgetter(*sorted(range(n), key=order.__getitem__))
    pieces: list[tuple[int, _Piece]] = []
    for keys, rows in groups:
        shape = _shape(keys)
        piece = _route_shape(shape, rows) if shape is not None else None
        pieces.append((len(rows), piece if piece is not None else _route_rows(rows)))
    if len(pieces) == 1:
        dedicated, map_keys, map_values = pieces[0][1]
        return Routed(
            [dedicated.get(index) for index in range(len(DEDICATED))],
            map_keys,
            map_values,
        )
    # concatenated group by group, then put back in row order
    used = sorted({index for _, (dedicated, _, _) in pieces for index in dedicated})
    out: list[Sequence[Any] | None] = [None] * len(DEDICATED)
    for index in used:
        values: list[Any] = []
        for size, (dedicated, _, _) in pieces:
            column = dedicated.get(index)
            values += [None] * size if column is None else column
        out[index] = put_back(values)
    keys_in = put_back(list(itertools.chain.from_iterable(p[1] for _, p in pieces)))
    values_in = put_back(list(itertools.chain.from_iterable(p[2] for _, p in pieces)))
    return Routed(out, list(keys_in), list(values_in))
