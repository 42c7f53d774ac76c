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
or a URL/header key) picks out are decoded and redacted in Python; a table with nothing to
change is returned as the same object.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
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


def scrub(table: pa.Table, *, keep_content: bool = False) -> tuple[pa.Table, int]:
    """``table`` (rows of :data:`retryscope.schema.SPAN_SCHEMA`; the same object when nothing
    changes) redacted and, unless ``keep_content``, with every content value of its span and
    event attributes replaced by the mark; and how many content values were replaced."""
    withheld = 0
    for index, field in enumerate(table.schema):
        if pa.types.is_string(field.type):
            convert: Callable[[pa.Array], tuple[pa.Array, int]] = _text_column
        elif field.name in _MAPS:
            convert = functools.partial(
                _attribute_maps, content=not keep_content and field.name == "attributes"
            )
        elif field.name in _LISTS:
            convert = functools.partial(
                _struct_lists, content=not keep_content and field.name == "events"
            )
        else:
            continue
        column = table.column(index)
        chunks = []
        for chunk in column.chunks:
            new, count = convert(chunk)
            chunks.append(new)
            withheld += count
        if any(new is not old for new, old in zip(chunks, column.chunks, strict=True)):
            table = table.set_column(index, field, pa.chunked_array(chunks, column.type))
    return table, withheld


def _suspects(values: pa.Array) -> pa.Array:
    """Boolean mask of the strings of ``values`` that may hold a secret (nulls: false)."""
    return pc.fill_null(pc.match_substring_regex(values, MAY_HOLD_SECRET, ignore_case=True), False)


def _replaced(values: pa.Array, mask: pa.Array, redact: Callable[..., str], *keys: Any) -> pa.Array:
    """``values`` with each value at ``mask`` redacted (``values`` itself if none changes)."""
    old = values.filter(mask).to_pylist()
    new = list(map(redact, *(k.filter(mask).to_pylist() for k in keys), old))
    if new == old:
        return values
    return pc.replace_with_mask(values, mask, pa.array(new, values.type))


def _text(values: pa.Array) -> pa.Array:
    """A string array with its text redacted."""
    if len(values) == values.null_count:
        return values
    mask = _suspects(values)
    return _replaced(values, mask, redact_text) if pc.any(mask).as_py() else values


def _text_column(values: pa.Array) -> tuple[pa.Array, int]:
    return _text(values), 0


@functools.lru_cache(maxsize=4096)
def _redact_encoded(key: str, encoded: str) -> str:
    """A JSON-encoded attribute value of ``key``, redacted (the same text if unchanged)."""
    try:
        value = json.loads(encoded)
    except ValueError:
        return redact_text(encoded)
    new = redact_value(key, value)
    return encoded if new == value else encode_value(new)


def _attribute_maps(maps: pa.Array, *, content: bool) -> tuple[pa.Array, int]:
    """Maps of JSON-encoded values redacted and, if ``content``, with content values marked
    (``maps`` itself if nothing changes); and how many were marked."""
    if maps.offset:
        maps = pa.concat_arrays([maps])  # children start at row 0
    keys = maps.keys
    if len(keys) == 0:
        return maps, 0
    items = maps.items
    unique = [key for key in pc.unique(keys).to_pylist() if key]
    ruled = [key for key in unique if key in URL_KEYS or secret_attribute(key)]
    marked = [key for key in unique if content and is_content_key(key)]
    suspects = _suspects(items)
    if ruled:
        suspects = pc.or_(suspects, pc.is_in(keys, value_set=pa.array(ruled, keys.type)))
    count = 0
    new_items = items
    if marked:
        hit = pc.is_in(keys, value_set=pa.array(marked, keys.type))
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


def _struct_lists(lists: pa.Array, *, content: bool) -> tuple[pa.Array, int]:
    """Lists of events or links with their string fields and attributes redacted (and
    content marked if ``content``); ``lists`` itself if nothing changes."""
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
            fields[i], count = _attribute_maps(fields[i], content=content)
        elif field.name == "name":
            fields[i] = _text(fields[i])
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
