"""What both writers do to every table before it reaches the disk: redact and withhold.

The Parquet exporter and ``retryscope ingest`` pass every table of span rows through
:func:`scrub`, one pass over its string columns, so the same spans make the same bytes
whichever writer wrote them:

- every string column (span name, status message, the dedicated text columns) and every
  event name is redacted as free text (:func:`~retryscope.instrumentation._redaction.redact_text`);
- every value of the span, resource, event and link attribute maps is redacted as its key
  requires (:func:`~retryscope.instrumentation._redaction.redact_value`: URLs, captured
  headers and gRPC/Connect metadata naming a secret, any other text);
- unless ``keep_content``, a prompt or completion value becomes the mark
  (:mod:`._content`).

Only the values a vectorised test (:data:`~retryscope.instrumentation._redaction.MAY_HOLD_SECRET`,
or a URL/header key) picks out are decoded and redacted in Python. The test runs once per
table, over the distinct strings of all its columns together (pyarrow compiles the regular
expression on every call, and most columns repeat a few values); a table with nothing to
change is returned as the same object.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from retryscope.instrumentation._redaction import (
    MARK,
    MAY_HOLD_SECRET,
    URL_KEYS,
    redact_text,
    redact_value,
    secret_attribute,
)
from retryscope.instrumentation.export._columns import encode_value
from retryscope.instrumentation.export._content import is_content_key

_MARK_JSON: Final = json.dumps(MARK)
"""The mark as the attribute maps hold values (JSON-encoded)."""
_MAPS: Final = ("attributes", "resource_attributes")
_LISTS: Final = ("events", "links")
_IDS: Final = frozenset({"trace_id", "span_id", "parent_span_id"})
"""Columns both writers fill with lowercase hex only (the exporter formats integers, ingest
rejects other ids); every alternative of ``MAY_HOLD_SECRET`` needs a character that is not
a hex digit, so these are never searched."""
_OWN: Final = frozenset({"policy_document"})
"""Columns retryscope writes from its own canonical structures and checks by digest: the
policy document is the control plane's canonical JSON of the policy it enforced, whose
SHA-256 is ``policy_digest`` (free-text redaction would turn its ``context_tokens`` limits
into the mark and every request into policy drift)."""
_UNSCANNED: Final = _IDS | _OWN


@dataclass(frozen=True)
class _Found:
    """What the one vectorised test found in a table."""

    hits: pa.Array
    """The distinct strings (column values, attribute values, event names) that may hold a
    secret."""
    ruled: pa.Array
    """The attribute keys whose values are redacted whatever they hold (URL, secret name)."""
    marked: pa.Array
    """The content keys whose values become the mark (empty when content is kept)."""


def scrub(table: pa.Table, *, keep_content: bool = False) -> tuple[pa.Table, int]:
    """``table`` (rows of :data:`retryscope.schema.SPAN_SCHEMA`; the same object when nothing
    changes) redacted and, unless ``keep_content``, with every content value of its span and
    event attributes replaced by the mark; and how many content values were replaced."""
    found = _find(table, keep_content=keep_content)
    if found is None:
        return table, 0
    no_marks = found.marked[:0]
    withheld = 0
    for index, kind in _layout(table.schema).items():
        field = table.schema.field(index)
        if kind == "text":
            convert: Callable[[pa.Array], tuple[pa.Array, int]] = functools.partial(
                _text_column, found=found
            )
        else:
            marked = found.marked if field.name in ("attributes", "events") else no_marks
            walk = _attribute_maps if kind == "map" else _struct_lists
            convert = functools.partial(walk, found=replace(found, marked=marked))
        column = table.column(index)
        chunks = []
        for chunk in column.chunks:
            new, count = convert(chunk)
            chunks.append(new)
            withheld += count
        if any(new is not old for new, old in zip(chunks, column.chunks, strict=True)):
            table = table.set_column(index, field, pa.chunked_array(chunks, column.type))
    return table, withheld


def _find(table: pa.Table, *, keep_content: bool) -> _Found | None:
    """One test of every string in ``table`` (None: nothing to redact or withhold)."""
    texts: list[pa.Array] = []
    keys: list[pa.Array] = []
    layout = _layout(table.schema)
    for kind, column in zip(layout.values(), table.select(list(layout)).columns, strict=True):
        if kind == "text":
            if column.null_count < len(column):
                texts.extend(column.chunks)
            continue
        for chunk in column.chunks:
            if kind == "list":
                members = chunk.values
                if members.type.get_field_index("name") >= 0:
                    texts.append(members.field("name"))
                chunk = members.field("attributes")
            texts.append(chunk.items)
            keys.append(chunk.keys)
    distinct = _distinct(texts)
    hits = distinct.filter(pc.match_substring_regex(distinct, MAY_HOLD_SECRET, ignore_case=True))
    names = [key for key in _distinct(keys).to_pylist() if key]
    ruled = [key for key in names if key in URL_KEYS or secret_attribute(key)]
    marked = [] if keep_content else [key for key in names if is_content_key(key)]
    if not (len(hits) or ruled or marked):
        return None
    return _Found(hits, pa.array(ruled, pa.string()), pa.array(marked, pa.string()))


def _distinct(arrays: list[pa.Array]) -> pa.Array:
    """The distinct non-null strings of ``arrays``."""
    if not arrays:
        return pa.array([], pa.string())
    return pc.drop_null(pc.unique(pa.concat_arrays(arrays)))


@functools.lru_cache(maxsize=8)
def _layout(schema: pa.Schema) -> dict[int, str]:
    """The columns of ``schema`` :func:`_find` reads: index → "text", "map" or "list"."""
    layout = {}
    for index, field in enumerate(schema):
        if field.name in _UNSCANNED:
            continue
        if pa.types.is_string(field.type):
            layout[index] = "text"
        elif field.name in _MAPS:
            layout[index] = "map"
        elif field.name in _LISTS:
            layout[index] = "list"
    return layout


def _suspects(values: pa.Array, found: _Found) -> pa.Array:
    """Boolean mask of the strings of ``values`` that may hold a secret (nulls: false)."""
    return pc.is_in(values, value_set=found.hits)


def _replaced(values: pa.Array, mask: pa.Array, redact: Callable[..., str], *keys: Any) -> pa.Array:
    """``values`` with each value at ``mask`` redacted (``values`` itself if none changes)."""
    old = values.filter(mask).to_pylist()
    new = list(map(redact, *(k.filter(mask).to_pylist() for k in keys), old))
    if new == old:
        return values
    return pc.replace_with_mask(values, mask, pa.array(new, values.type))


def _text(values: pa.Array, found: _Found) -> pa.Array:
    """A string array with its text redacted."""
    if len(values) == values.null_count:
        return values
    mask = _suspects(values, found)
    return _replaced(values, mask, redact_text) if pc.any(mask).as_py() else values


def _text_column(values: pa.Array, *, found: _Found) -> tuple[pa.Array, int]:
    return _text(values, found), 0


@functools.lru_cache(maxsize=4096)
def _redact_encoded(key: str, encoded: str) -> str:
    """A JSON-encoded attribute value of ``key``, redacted (the same text if unchanged)."""
    try:
        value = json.loads(encoded)
    except ValueError:
        return redact_text(encoded)
    new = redact_value(key, value)
    return encoded if new == value else encode_value(new)


def _attribute_maps(maps: pa.Array, *, found: _Found) -> tuple[pa.Array, int]:
    """Maps of JSON-encoded values redacted and with the values of ``found.marked`` keys
    marked (``maps`` itself if nothing changes); and how many were marked."""
    if maps.offset:
        maps = pa.concat_arrays([maps])  # children start at row 0
    keys = maps.keys
    if len(keys) == 0:
        return maps, 0
    items = maps.items
    suspects = _suspects(items, found)
    if len(found.ruled):
        suspects = pc.or_(suspects, pc.is_in(keys, value_set=found.ruled))
    count = 0
    new_items = items
    if len(found.marked):
        hit = pc.is_in(keys, value_set=found.marked)
        new_items = pc.if_else(hit, pa.scalar(_MARK_JSON, items.type), items)
        suspects = pc.and_not(suspects, hit)
        count = int(pc.sum(hit).as_py() or 0)
    if pc.any(suspects).as_py():
        new_items = _replaced(new_items, suspects, _redact_encoded, keys)
    if new_items is items:
        return maps, count
    rebuilt = pa.MapArray.from_arrays(
        maps.offsets,
        keys,
        new_items,
        type=maps.type,
        mask=maps.is_null() if maps.null_count else None,
    )
    return rebuilt, count


def _struct_lists(lists: pa.Array, *, found: _Found) -> tuple[pa.Array, int]:
    """Lists of events or links with their names and attributes redacted (and the values of
    ``found.marked`` keys marked); ``lists`` itself if nothing changes."""
    if len(lists) == 0:
        return lists, 0
    if lists.offset or lists.values.offset:
        lists = pa.concat_arrays([lists])  # children start at row 0
    members = lists.values
    if len(members) == 0:
        return lists, 0
    old = [members.field(i) for i in range(members.type.num_fields)]
    fields = list(old)
    count = 0
    for i, field in enumerate(members.type):
        if field.name == "attributes":
            fields[i], count = _attribute_maps(fields[i], found=found)
        elif field.name == "name":
            fields[i] = _text(fields[i], found)
    if all(new is was for new, was in zip(fields, old, strict=True)):
        return lists, 0
    rebuilt = pa.StructArray.from_arrays(
        fields, fields=list(members.type), mask=members.is_null() if members.null_count else None
    )
    return (
        pa.ListArray.from_arrays(
            lists.offsets,
            rebuilt,
            type=lists.type,
            mask=lists.is_null() if lists.null_count else None,
        ),
        count,
    )
