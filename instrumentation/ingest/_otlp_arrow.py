"""OTLP JSON lines → span rows, parsed and pivoted natively by Arrow (the ingest fast path).

Arrow's JSON reader parses a block of lines in C++ and infers the nested OTLP structure
(``resourceSpans → scopeSpans → spans → attributes``); Arrow compute then validates it and
builds the columns of :data:`retryscope.schema.SPAN_SCHEMA`: ids, times and enums checked
and converted column-wise, attribute ``{key, value}`` lists pivoted into the dedicated
columns by the vocabulary (the same routing as :class:`SpanColumns`), the rest JSON-encoded
into the attribute maps.

The reference is :func:`otlp_decode.decode_traces`; this path must give exactly its rows.
Whenever a block holds anything it does not reproduce exactly, or anything the reference
would reject (a malformed line, an unknown AnyValue kind, an array or kvlist nested in
another, a JSON ``null``, duplicate keys, an integer Arrow cannot hold, ...),
:func:`decode_json_lines` returns None and the caller decodes that block line by line with
the reference decoder, which reports each bad line by number. So the fast path only ever
decides the easy, common case, and every doubt costs speed, never correctness.
"""

from __future__ import annotations

import io
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from retryscope.instrumentation.ingest._otlp_decode import KINDS, STATUS_CODES
from retryscope.schema import ATTR_MAP, EVENT_TYPE, LINK_TYPE, SPAN_SCHEMA, TIMESTAMP
from retryscope.vocabulary import BY_KEY, DEDICATED, AttrType

_NULL_TOKEN: Final = re.compile(rb"[:\[,]\s*null")
"""A JSON ``null`` value: Arrow cannot tell it from an absent key, the reference can."""

_VALUE_KINDS: Final = frozenset(
    {"stringValue", "boolValue", "intValue", "doubleValue", "bytesValue"}
)
_COMPOUND_KINDS: Final = frozenset({"arrayValue", "kvlistValue"})
_INT32: Final = (-(2**31), 2**31 - 1)
_FLOAT_EXACT: Final = 2**53
_INT_TEXT: Final = r"^-?[0-9]+$"
_NEEDS_ESCAPE: Final = r'["\\\x00-\x1f]'
"""What ``encode_basestring`` escapes (it keeps every other character as it is)."""

_encode_str = json.encoder.encode_basestring  # as SpanColumns encodes a string value


def _document_schema() -> pa.Schema:
    """The text fields of a trace document, declared so Arrow never infers a timestamp
    from a string that looks like one; numbers, enums and times stay inferred (writers
    spell them as numbers or as strings)."""
    text = pa.string()
    leaf = pa.struct([("stringValue", text), ("bytesValue", text)])
    leaf_key_values = pa.list_(pa.struct([("key", text), ("value", leaf)]))
    value = pa.struct(
        [
            *leaf,
            ("arrayValue", pa.struct([("values", pa.list_(leaf))])),
            ("kvlistValue", pa.struct([("values", leaf_key_values)])),
        ]
    )
    key_values = pa.list_(pa.struct([("key", text), ("value", value)]))
    span = pa.struct(
        [
            ("traceId", text),
            ("spanId", text),
            ("parentSpanId", text),
            ("name", text),
            ("attributes", key_values),
            ("status", pa.struct([("message", text)])),
            ("events", pa.list_(pa.struct([("name", text), ("attributes", key_values)]))),
            (
                "links",
                pa.list_(
                    pa.struct([("traceId", text), ("spanId", text), ("attributes", key_values)])
                ),
            ),
        ]
    )
    scope_spans = pa.struct(
        [("scope", pa.struct([("name", text), ("version", text)])), ("spans", pa.list_(span))]
    )
    resource_spans = pa.struct(
        [
            ("resource", pa.struct([("attributes", key_values)])),
            ("scopeSpans", pa.list_(scope_spans)),
        ]
    )
    return pa.schema([("resourceSpans", pa.list_(resource_spans))])


_PARSE_BLOCK: Final = 1 << 20
_PARSE: Final = pj.ParseOptions(
    explicit_schema=_document_schema(), unexpected_field_behavior="infer"
)


class _Unsure(Exception):
    """The block holds something this path does not reproduce exactly."""


def _enum_texts(names: tuple[str, ...], prefix: str) -> dict[str, str]:
    texts = {name: name for name in names}
    texts.update({prefix + name: name for name in names})
    texts.update({str(number): name for number, name in enumerate(names)})
    return texts


_KIND_TEXTS: Final = _enum_texts(KINDS, "SPAN_KIND_")
_STATUS_TEXTS: Final = _enum_texts(STATUS_CODES, "STATUS_CODE_")


def decode_json_lines(lines: Sequence[bytes]) -> pa.Table | None:
    """The span rows of OTLP JSON ``lines`` (one trace document per line) in
    :data:`SPAN_SCHEMA`, exactly as the reference decoder makes them; None when the block
    must be decoded line by line instead (see the module docstring)."""
    body = b"\n".join(lines)
    documents = longest = 0
    for line in lines:
        text = line.strip(b" \t\r\n")
        if not text:
            continue
        if text[:1] != b"{" or text[-1:] != b"}":
            return None  # one object per line, and none spans two lines
        documents += 1
        longest = max(longest, len(line))
    if documents == 0 or (b"null" in body and _NULL_TOKEN.search(body)):
        return None
    try:
        if not body.isascii():
            body.decode("utf-8")  # Arrow does not validate UTF-8; the reference does
        table = pj.read_json(
            io.BytesIO(body),
            # blocks parsed on all cores; each must hold the longest line whole
            read_options=pj.ReadOptions(block_size=max(longest + 2, _PARSE_BLOCK)),
            parse_options=_PARSE,
        )
        if table.num_rows != documents:
            return None  # a line held two objects: the reference rejects that line
        return _Decoder(table).table()
    except (_Unsure, pa.ArrowException, UnicodeDecodeError, ValueError, OverflowError):
        return None


# -- navigating the inferred structure ------------------------------------------------------


def _field(struct: pa.Array, name: str) -> pa.Array | None:
    """Child ``name`` of a struct array with the parent's nulls applied; None if no row
    has it."""
    if pa.types.is_null(struct.type):
        return None
    if not pa.types.is_struct(struct.type):
        raise _Unsure(f"expected an object, got {struct.type}")
    index = struct.type.get_field_index(name)
    if index < 0:
        return None
    child: pa.Array = struct.flatten()[index]
    return None if pa.types.is_null(child.type) else child


def _items(lists: pa.Array | None) -> tuple[pa.Array, np.ndarray]:
    """(items, owner row of each item) of a list column; an absent list is empty."""
    if lists is None:
        return pa.array([], pa.null()), np.zeros(0, np.int64)
    if not pa.types.is_list(lists.type):
        raise _Unsure(f"expected a list, got {lists.type}")
    owners = pc.list_parent_indices(lists).to_numpy(zero_copy_only=False).astype(np.int64)
    return lists.flatten(), owners


def _offsets(owners: np.ndarray, rows: int) -> pa.Array:
    """List offsets for items grouped by ascending owner row (rows without items: empty)."""
    counts = np.bincount(owners, minlength=rows) if len(owners) else np.zeros(rows, np.int64)
    offsets = np.zeros(rows + 1, np.int32)
    np.cumsum(counts, out=offsets[1:])
    return pa.array(offsets, pa.int32())


def _strings(values: pa.Array | None, rows: int) -> pa.Array:
    """A string column (absent: null)."""
    if values is None:
        return pa.nulls(rows, pa.string())
    if not pa.types.is_string(values.type):
        raise _Unsure(f"expected strings, got {values.type}")
    return values


def _opt_strings(values: pa.Array | None, rows: int) -> pa.Array:
    """``_opt_str``: absent or ``""`` → null."""
    text = _strings(values, rows)
    return pc.if_else(pc.equal(text, ""), pa.scalar(None, pa.string()), text)


def _all(mask: pa.Array) -> bool:
    return bool(pc.all(mask, skip_nulls=False).as_py() is not False) if len(mask) else True


def _ints(
    values: pa.Array | None, rows: int, default: pa.Array | int, low: int, high: int
) -> pa.Array:
    """``_int`` within ``low..high``: numbers or decimal strings; absent → ``default``."""
    if values is None:
        out = default if isinstance(default, pa.Array) else pa.array(np.full(rows, default))
        return out
    if pa.types.is_string(values.type):
        present = values.drop_null()
        if not _all(pc.match_substring_regex(present, _INT_TEXT)):
            raise _Unsure("an integer spelled other than plain decimal digits")
        values = pc.cast(values, pa.int64())
    elif not pa.types.is_int64(values.type):
        raise _Unsure(f"expected integers, got {values.type}")
    if values.null_count:
        values = pc.if_else(pc.is_valid(values), values, default)
    if len(values) and not _all(
        pc.and_(pc.greater_equal(values, low), pc.less_equal(values, high))
    ):
        raise _Unsure("an integer out of range")
    return values


def _enums(
    values: pa.Array | None, rows: int, names: tuple[str, ...], texts: dict[str, str]
) -> pa.Array:
    """``_enum``: a name (with or without its prefix) or number; absent → the first name."""
    if values is None:
        return pa.array([names[0]] * rows, pa.string())
    if pa.types.is_string(values.type):
        known = pa.array(list(texts))
        index = pc.index_in(values, value_set=known)
        named = pc.take(pa.array(list(texts.values())), index)
        if named.null_count != values.null_count:
            raise _Unsure("an enum text this path does not map")
        return pc.fill_null(named, names[0])
    numbers = _ints(values, rows, 0, 0, len(names) - 1)
    return pc.take(pa.array(names), numbers)


def _hex_ids(values: pa.Array | None, width: int, *, optional: bool, rows: int) -> pa.Array:
    """``_hex_id``: ``width`` hex digits, lowercased; optional ids absent or ``""`` → null."""
    text = _opt_strings(values, rows) if optional else _strings(values, rows)
    if not optional and text.null_count:
        raise _Unsure("an id is missing")
    present = text.drop_null()
    if not _all(pc.match_substring_regex(present, f"^[0-9a-fA-F]{{{width}}}$")):
        raise _Unsure("an id that is not hex")
    return pc.utf8_lower(text)


def _times(values: pa.Array | None, rows: int, default: pa.Array | int) -> pa.Array:
    return _ints(values, rows, default, 0, 2**63 - 1)


# -- attribute lists ------------------------------------------------------------------------


_STR, _BOOL, _INT, _DOUBLE, _NONE, _ARRAY, _KVLIST = 0, 1, 2, 3, 4, 5, 6


@dataclass(frozen=True, slots=True)
class _Values:
    """Flattened ``AnyValue`` objects: each one's kind (``tag``) and its value in the typed
    array of that kind (``arrays``: the JSON text of the list)."""

    tag: np.ndarray
    strings: pa.Array
    bools: pa.Array
    ints: pa.Array
    doubles: pa.Array
    arrays: pa.Array
    kvlists: pa.Array

    def encoded(self, where: np.ndarray) -> pa.Array:
        """The values at ``where`` as the JSON text ``SpanColumns`` stores in an attribute
        map (``encode_value``; ``json.dumps`` for lists)."""
        out = np.full(len(where), "null", dtype=object)
        tag = self.tag[where]
        for kind, column in (
            (_BOOL, self.bools),
            (_INT, self.ints),
            (_ARRAY, self.arrays),
            (_KVLIST, self.kvlists),
        ):
            at = np.flatnonzero(tag == kind)
            if len(at):
                picked = pc.take(column, pa.array(where[at]))
                out[at] = pc.cast(picked, pa.string()).to_numpy(zero_copy_only=False)
        at = np.flatnonzero(tag == _DOUBLE)
        if len(at):
            doubles = pc.take(self.doubles, pa.array(where[at])).to_pylist()
            out[at] = [_json_float(x) for x in doubles]
        at = np.flatnonzero(tag == _STR)
        if len(at):
            out[at] = _json_strings(pc.take(self.strings, pa.array(where[at])))
        return pa.array(out, pa.string())


@dataclass(frozen=True, slots=True)
class _KeyValues:
    """A flattened ``KeyValue`` list: keys, values and each item's owner row."""

    keys: pa.Array
    owners: np.ndarray
    values: _Values

    def as_map(self, rows: int, keep: np.ndarray | None = None) -> pa.Array:
        """The (optionally filtered) items as one map per owner row."""
        where = np.flatnonzero(keep) if keep is not None else np.arange(len(self.keys))
        keys = pc.take(self.keys, pa.array(where)) if keep is not None else self.keys
        offsets = _offsets(self.owners[where], rows)
        values = self.values.encoded(where)
        return pa.MapArray.from_arrays(offsets, keys, values, type=ATTR_MAP)


def _json_float(x: float) -> str:
    """``json.dumps`` of a float (Arrow reads ``NaN`` and ``Infinity`` as Python does)."""
    if x != x:
        return "NaN"
    if x in (math.inf, -math.inf):
        return "Infinity" if x > 0 else "-Infinity"
    return float.__repr__(x)


def _json_strings(strings: pa.Array) -> np.ndarray:
    """``encode_basestring`` of each string: quoted, and escaped where it needs it."""
    plain = pc.binary_join_element_wise('"', strings, '"', "").to_numpy(zero_copy_only=False)
    escape = pc.match_substring_regex(strings, _NEEDS_ESCAPE).to_numpy(zero_copy_only=False)
    at = np.flatnonzero(escape)
    if len(at):
        plain[at] = [_encode_str(s) for s in pc.take(strings, pa.array(at)).to_pylist()]
    encoded: np.ndarray = plain
    return encoded


def _any_values(value: pa.Array | None, n: int, *, nested: bool) -> _Values:
    """``any_value`` of ``n`` AnyValue objects (absent or ``{}``: None). Scalars of every
    kind, and (unless ``nested``) arrays and kvlists of scalars; anything else is left to
    the reference."""
    kinds: dict[str, pa.Array] = {}
    if value is not None:
        if not pa.types.is_struct(value.type):
            raise _Unsure("an attribute value that is not an object")
        for f in value.type:
            if f.name not in _VALUE_KINDS and (nested or f.name not in _COMPOUND_KINDS):
                raise _Unsure(f"AnyValue kind {f.name}")
            child = _field(value, f.name)
            if child is not None and child.null_count < len(child):
                kinds[f.name] = child
    tag = np.full(n, _NONE, np.int8)
    present = np.zeros(n, np.int8)
    typed: dict[int, pa.Array] = {}
    for name, child in kinds.items():
        valid = pc.is_valid(child).to_numpy(zero_copy_only=False)
        present += valid
        if name in ("stringValue", "bytesValue"):
            kind, array = _STR, _strings(child, n)
            if _STR in typed:
                array = pc.coalesce(typed[_STR], array)
        elif name == "boolValue":
            if not pa.types.is_boolean(child.type):
                raise _Unsure("boolValue not a boolean")
            kind, array = _BOOL, child
        elif name == "intValue":
            kind, array = _INT, _ints(child, n, pa.nulls(n, pa.int64()), -(2**63), 2**63 - 1)
        elif name == "doubleValue":
            if pa.types.is_int64(child.type):
                child = pc.cast(child, pa.float64())
            elif not pa.types.is_float64(child.type):
                raise _Unsure("doubleValue not a number")
            kind, array = _DOUBLE, child
        elif name == "arrayValue":
            kind, array = _ARRAY, _arrays(child, n)
        else:
            kind, array = _KVLIST, _kvlists(child, n)
        tag[valid] = kind
        typed[kind] = array
    if n and present.max(initial=0) > 1:
        raise _Unsure("an AnyValue with two kinds")  # the reference takes the first one
    return _Values(
        tag=tag,
        strings=typed.get(_STR, pa.nulls(n, pa.string())),
        bools=typed.get(_BOOL, pa.nulls(n, pa.bool_())),
        ints=typed.get(_INT, pa.nulls(n, pa.int64())),
        doubles=typed.get(_DOUBLE, pa.nulls(n, pa.float64())),
        arrays=typed.get(_ARRAY, pa.nulls(n, pa.string())),
        kvlists=typed.get(_KVLIST, pa.nulls(n, pa.string())),
    )


def _arrays(array_value: pa.Array, n: int) -> pa.Array:
    """``arrayValue`` objects as ``json.dumps`` of each list (``{}``: the empty list)."""
    elements, owners = _items(_field(array_value, "values"))
    m = len(elements)
    values = _any_values(elements if m else None, m, nested=True)
    offsets = _offsets(owners, n)
    texts = values.encoded(np.arange(m))
    joined = pc.binary_join(pa.ListArray.from_arrays(offsets, texts), ", ")
    encoded: pa.Array = pc.binary_join_element_wise("[", joined, "]", "")
    return encoded


def _kvlists(kvlist_value: pa.Array, n: int) -> pa.Array:
    """``kvlistValue`` objects as ``json.dumps`` of their dict (``{}``: the empty dict)."""
    kv = _key_values(_field(kvlist_value, "values"), nested=True)
    texts = pc.binary_join_element_wise(
        pa.array(_json_strings(kv.keys), pa.string()),
        kv.values.encoded(np.arange(len(kv.keys))),
        ": ",
    )
    joined = pc.binary_join(pa.ListArray.from_arrays(_offsets(kv.owners, n), texts), ", ")
    return pc.binary_join_element_wise("{", joined, "}", "")


def _key_values(lists: pa.Array | None, *, nested: bool = False) -> _KeyValues:
    items, owners = _items(lists)
    n = len(items)
    keys = _strings(_field(items, "key"), n) if n else pa.array([], pa.string())
    if keys.null_count:
        raise _Unsure("an attribute without a key")
    values = _any_values(_field(items, "value") if n else None, n, nested=nested)
    if n:
        _check_unique_keys(keys, owners)
    return _KeyValues(keys=keys, owners=owners, values=values)


def _check_unique_keys(keys: pa.Array, owners: np.ndarray) -> None:
    """A key twice in one list becomes one dict entry in the reference (last value, first
    position): rare enough to leave to it."""
    codes = pc.dictionary_encode(keys).indices.to_numpy(zero_copy_only=False).astype(np.int64)
    distinct = int(codes.max(initial=0)) + 1
    combined = owners * distinct + codes
    if len(combined) * 8 >= int(owners[-1] + 1) * distinct:
        repeated = bool(np.bincount(combined).max(initial=0) > 1)
    else:
        repeated = len(pc.unique(pa.array(combined))) != len(combined)
    if repeated:
        raise _Unsure("a key twice in one attribute list")


# -- routing span attributes into the dedicated columns -------------------------------------

_ROUTES: Final = tuple(BY_KEY.items())
_ROUTE_KEYS: Final = pa.array([key for key, _ in _ROUTES], pa.string())
_COLUMN_OF: Final = {a.key: i for i, a in enumerate(DEDICATED)}


def _fitting(attr_type: AttrType, kv: _KeyValues, where: np.ndarray) -> np.ndarray:
    """Which items at ``where`` fit a dedicated column of ``attr_type`` (as ``_fits``)."""
    tag = kv.values.tag[where]
    fits: np.ndarray
    if attr_type is AttrType.STR:
        fits = tag == _STR
    elif attr_type is AttrType.BOOL:
        fits = tag == _BOOL
    elif attr_type in (AttrType.INT, AttrType.TIME_NS):
        fits = tag == _INT
    else:
        ints = np.zeros(len(where), np.int64)
        is_int = tag == _INT
        if is_int.any():
            picked = pc.take(kv.values.ints, pa.array(where[is_int]))
            ints[is_int] = picked.to_numpy(zero_copy_only=False)
        if attr_type is AttrType.INT32:
            fits = is_int & (ints >= _INT32[0]) & (ints <= _INT32[1])
        else:  # FLOAT
            if (is_int & (np.abs(ints) > _FLOAT_EXACT)).any():
                raise _Unsure("an int a float column cannot hold exactly")
            fits = is_int | (tag == _DOUBLE)
    return fits


def _column_values(attr_type: AttrType, kv: _KeyValues, where: np.ndarray) -> pa.Array:
    index = pa.array(where, pa.int64())
    if attr_type is AttrType.STR:
        return pc.take(kv.values.strings, index)
    if attr_type is AttrType.BOOL:
        return pc.take(kv.values.bools, index)
    if attr_type is AttrType.FLOAT:
        ints = pc.cast(pc.take(kv.values.ints, index), pa.float64())
        return pc.coalesce(pc.take(kv.values.doubles, index), ints)
    return pc.take(kv.values.ints, index)


def _route(kv: _KeyValues, rows: int) -> tuple[list[pa.Array], np.ndarray]:
    """(dedicated columns, which items stay in the generic map), as ``SpanColumns._route``:
    a fitting value under the current key fills its column and leaves the map; under an
    older alias it fills the column only when the current key did not, and stays."""
    n = len(kv.keys)
    found = pc.index_in(kv.keys, value_set=_ROUTE_KEYS)
    route = pc.fill_null(found, -1).to_numpy(zero_copy_only=False).astype(np.int64)
    keep = np.ones(n, bool)
    columns: list[pa.Array] = []
    routed = np.flatnonzero(route >= 0) if n else np.zeros(0, np.int64)
    by_column: dict[int, list[int]] = {}
    for r in np.unique(route[routed]) if len(routed) else ():
        by_column.setdefault(_COLUMN_OF[_ROUTES[r][1].key], []).append(int(r))
    for index, attr in enumerate(DEDICATED):
        candidates: list[np.ndarray] = []
        priorities: list[np.ndarray] = []
        for r in by_column.get(index, ()):
            where = routed[route[routed] == r]
            fits = where[_fitting(attr.type, kv, where)]
            current = _ROUTES[r][0] == attr.key
            if current:
                keep[fits] = False
            candidates.append(fits)
            priorities.append(np.full(len(fits), 0 if current else 1))
        arrow_type = SPAN_SCHEMA.field(attr.column).type
        if not candidates or not sum(len(c) for c in candidates):
            columns.append(pa.nulls(rows, arrow_type))
            continue
        items = np.concatenate(candidates)
        priority = np.concatenate(priorities)
        owners = kv.owners[items]
        order = np.lexsort((items, priority, owners))  # per row: current key first
        items, owners = items[order], owners[order]
        first = np.ones(len(items), bool)
        first[1:] = owners[1:] != owners[:-1]
        items, owners = items[first], owners[first]
        slot = np.full(rows, -1, np.int64)
        slot[owners] = np.arange(len(items))
        values = _column_values(attr.type, kv, items)
        picked = pc.take(values, pa.array(slot, mask=slot < 0))
        columns.append(pc.cast(picked, arrow_type))
    return columns, keep


# -- the document -------------------------------------------------------------------------


class _Decoder:
    """One parsed block of trace documents → the span table."""

    def __init__(self, documents: pa.Table) -> None:
        if "resourceSpans" not in documents.column_names:
            raise _Unsure("no resourceSpans")
        lines = documents.column("resourceSpans").combine_chunks()
        if lines.null_count:
            raise _Unsure("a line without resourceSpans")
        self.resource_spans, _ = _items(lines)
        self.scope_spans, self.scope_owner = _items(_field(self.resource_spans, "scopeSpans"))
        self.spans, span_scope = _items(_field(self.scope_spans, "spans"))
        self.span_resource = self.scope_owner[span_scope]
        self.span_scope = span_scope
        self.rows = len(self.spans)

    def table(self) -> pa.Table:
        rows, spans = self.rows, self.spans
        if rows == 0:
            raise _Unsure("no spans")  # the reference still checks the rest: let it
        status = _field(spans, "status")
        start = _times(_field(spans, "startTimeUnixNano"), rows, 0)
        end = _times(_field(spans, "endTimeUnixNano"), rows, start)
        scope = _field(self.scope_spans, "scope")
        scope_at = pa.array(self.span_scope)
        columns: dict[str, pa.Array] = {
            "trace_id": _hex_ids(_field(spans, "traceId"), 32, optional=False, rows=rows),
            "span_id": _hex_ids(_field(spans, "spanId"), 16, optional=False, rows=rows),
            "parent_span_id": _hex_ids(_field(spans, "parentSpanId"), 16, optional=True, rows=rows),
            "name": pc.fill_null(_strings(_field(spans, "name"), rows), ""),
            "kind": _enums(_field(spans, "kind"), rows, KINDS, _KIND_TEXTS),
            "start_time": pc.cast(start, TIMESTAMP),
            "end_time": pc.cast(end, TIMESTAMP),
            "duration_ms": pc.divide(
                pc.cast(pc.subtract(end, start), pa.float64(), safe=False), 1e6
            ),
            "status_code": _enums(
                _field(status, "code") if status is not None else None,
                rows,
                STATUS_CODES,
                _STATUS_TEXTS,
            ),
            "status_message": _opt_strings(
                _field(status, "message") if status is not None else None, rows
            ),
            "scope_name": pc.take(
                _opt_strings(_sub(scope, "name"), len(self.scope_spans)), scope_at
            ),
            "scope_version": pc.take(
                _opt_strings(_sub(scope, "version"), len(self.scope_spans)), scope_at
            ),
        }
        resources, services = self._resources()
        resource_at = pa.array(self.span_resource)
        columns["service_name"] = pc.take(services, resource_at)
        columns["resource_attributes"] = pc.take(resources, resource_at)
        attributes = _key_values(_field(spans, "attributes"))
        dedicated, keep = _route(attributes, rows)
        for attr, values in zip(DEDICATED, dedicated, strict=True):
            columns[attr.column] = values
        columns["attributes"] = attributes.as_map(rows, keep)
        columns["events"] = self._events(_field(spans, "events"))
        columns["links"] = self._links(_field(spans, "links"))
        columns["dropped_attributes"] = pc.cast(
            _ints(_field(spans, "droppedAttributesCount"), rows, 0, 0, 2**31 - 1), pa.int32()
        )
        return pa.Table.from_arrays(
            [columns[name] for name in SPAN_SCHEMA.names], schema=SPAN_SCHEMA
        )

    def _resources(self) -> tuple[pa.Array, pa.Array]:
        """Each resource's encoded attribute map, and its string ``service.name``."""
        count = len(self.resource_spans)
        kv = _key_values(_sub(_field(self.resource_spans, "resource"), "attributes"))
        is_service = pc.equal(kv.keys, "service.name").to_numpy(zero_copy_only=False)
        service = np.flatnonzero(is_service & (kv.values.tag == _STR))
        slot = np.full(count, -1, np.int64)
        slot[kv.owners[service]] = service
        services = pc.take(kv.values.strings, pa.array(slot, mask=slot < 0))
        return kv.as_map(count), services

    def _events(self, lists: pa.Array | None) -> pa.Array:
        items, owners = _items(lists)
        n = len(items)
        if n == 0:
            return pa.ListArray.from_arrays(_offsets(owners, self.rows), pa.nulls(0, EVENT_TYPE))
        names = pc.fill_null(_opt_strings(_field(items, "name"), n), "")
        times = _times(_field(items, "timeUnixNano"), n, 0)
        attributes = _key_values(_field(items, "attributes")).as_map(n)
        events = pa.StructArray.from_arrays(
            [names, pc.cast(times, TIMESTAMP), attributes], fields=list(EVENT_TYPE)
        )
        return pa.ListArray.from_arrays(_offsets(owners, self.rows), events)

    def _links(self, lists: pa.Array | None) -> pa.Array:
        items, owners = _items(lists)
        n = len(items)
        if n == 0:
            return pa.ListArray.from_arrays(_offsets(owners, self.rows), pa.nulls(0, LINK_TYPE))
        links = pa.StructArray.from_arrays(
            [
                _hex_ids(_field(items, "traceId"), 32, optional=False, rows=n),
                _hex_ids(_field(items, "spanId"), 16, optional=False, rows=n),
                _key_values(_field(items, "attributes")).as_map(n),
            ],
            fields=list(LINK_TYPE),
        )
        return pa.ListArray.from_arrays(_offsets(owners, self.rows), links)


def _sub(struct: pa.Array | None, name: str) -> pa.Array | None:
    return None if struct is None else _field(struct, name)
