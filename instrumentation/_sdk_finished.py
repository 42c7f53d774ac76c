"""A finished span's attributes, ids, times and status, read on the live metrics' hot path.

Part of :mod:`._sdk`, which probes what may be read directly and hands the result to
:func:`use`. Without the shortcuts (:func:`use` given nothing, as under
``RETRYSCOPE_SDK_PUBLIC_ONLY=1`` or inside :func:`._sdk.public_paths`) every read goes
through the public ``ReadableSpan`` and ``SpanContext`` properties.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any, Final

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.trace import SpanContext

_ENDED: Final = ("context", "parent", "start_time", "end_time", "status")
_PUBLIC_ENDED: Final = operator.attrgetter(*_ENDED)
_PRIVATE_ENDED: Final = operator.attrgetter(*(f"_{name}" for name in _ENDED))

_BOUNDED_ATTRIBUTES: Final = BoundedAttributes
_SPAN_CONTEXT: Final = SpanContext

Ended = tuple[Any, Any, Any, Any, Any, Any]
"""Context, span id, parent span id (None without a parent), start, end, status."""


class _Shortcuts:
    """What the probes allowed (empty, False, None: the public path). ``readable_span`` and
    ``plain_span`` are the SDK's span class when it is in the set beside them: the class of
    nearly every span that ends, checked by identity before the set is."""

    def __init__(self) -> None:
        self.readable_types: frozenset[type] = frozenset()
        self.plain_types: frozenset[type] = frozenset()
        self.readable_span: type | None = None
        self.plain_span: type | None = None
        self.tuple_contexts = False


_ALLOWED: Final = _Shortcuts()


def use(
    readable_types: frozenset[type],
    plain_types: frozenset[type],
    tuples: bool,
    span_type: type | None = None,
) -> None:
    """The shortcuts :mod:`._sdk`'s probes allow: span classes whose attributes
    (``_attributes._dict``) and whose other fields (``_context``, ...) may be read
    directly, whether a ``SpanContext``'s item 1 is its span id, and the SDK's span class."""
    _ALLOWED.readable_types = readable_types
    _ALLOWED.plain_types = plain_types
    _ALLOWED.readable_span = span_type if span_type in readable_types else None
    _ALLOWED.plain_span = span_type if span_type in plain_types else None
    _ALLOWED.tuple_contexts = tuples


def finished_attributes(span: Any) -> Mapping[str, Any] | None:
    """A finished span's attributes for reading: the ``BoundedAttributes`` dict itself on the
    SDK's spans (an ended span's attributes no longer change), else ``span.attributes``."""
    kind = type(span)
    if kind is _ALLOWED.readable_span or kind in _ALLOWED.readable_types:
        attrs = span._attributes
        if type(attrs) is _BOUNDED_ATTRIBUTES:
            found: Mapping[str, Any] = attrs._dict
            return found
    public: Mapping[str, Any] | None = span.attributes
    return public


def ended_fields(span: Any) -> Ended:
    """One finished span's context, span id, parent span id (None without a parent), start
    time, end time and status, in one call (the live metrics need them for every attempt
    span): read directly from a span of a probed class, the ids as items of a probed
    ``SpanContext``."""
    allowed = _ALLOWED
    kind = type(span)
    plain = kind is allowed.plain_span or kind in allowed.plain_types
    fields = _PRIVATE_ENDED(span) if plain else _PUBLIC_ENDED(span)
    context, parent, start, end, status = fields
    if (
        allowed.tuple_contexts
        and type(context) is _SPAN_CONTEXT
        and (parent is None or type(parent) is _SPAN_CONTEXT)
    ):
        return context, context[1], None if parent is None else parent[1], start, end, status
    span_id = context.span_id if context is not None else 0
    parent_id = parent.span_id if parent is not None else None
    return context, span_id, parent_id, start, end, status
