"""Guarded fast paths into the OpenTelemetry SDK's span attribute storage.

``Span.set_attributes`` re-validates every value (``_clean_attribute_value``), which is most
of what stamping a span costs. retryscope's stamps are built by its own code from plain
``str``/``int``/``bool``/``float`` values and checked once when they are built
(:func:`longest_string`), so :func:`add_clean_attributes` writes them straight into the
span's ``BoundedAttributes`` dict, under the same two locks the SDK takes.

That storage is SDK-private, so the fast path exists only when this module found, once at
import, exactly the structure it expects on a real probe span (the SDK's span class with
its own ``set_attributes``, ``_lock`` and ``_end_time``; ``BoundedAttributes`` with a plain
``_dict``, ``_lock``, ``maxlen``, ``max_value_len``, ``_immutable``) and a fast write on the
probe gave what the public API shows. Per span, anything else — another span class, an
ended span, a stamp that would hit the attribute count limit or the value length limit, a
key already present — takes the public ``set_attributes``, so the stored attributes are
always the ones the SDK itself would have stored. Nothing here raises beyond what the
public call would.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Final

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import Span
from opentelemetry.util.types import AttributeValue

_PLAIN: Final = frozenset({str, int, bool, float})
_LOCK_TYPE: Final = type(threading.Lock())


def longest_string(values: Mapping[str, Any]) -> int | None:
    """Length of the longest string value, or None when a key or value is not in the exact
    form the SDK stores unchanged (non-empty ``str`` key; ``str``/``int``/``bool``/``float``
    value) — such a mapping always takes the public, validating path."""
    longest = 0
    for key, value in values.items():
        kind = type(value)
        if type(key) is not str or not key or kind not in _PLAIN:
            return None
        if kind is str and len(value) > longest:
            longest = len(value)
    return longest


def _fast_write(
    span: Any, values: Mapping[str, AttributeValue], longest: int, merge: bool = False
) -> bool:
    """Write ``values`` into ``span``'s attribute dict when that is exactly what
    ``set_attributes`` would store; False (nothing written) otherwise.

    A key already on the span refuses the write, unless ``merge``: then the values are
    merged and the re-set keys moved last in the order given, as the SDK's
    ``set_attributes`` does (it deletes and re-inserts each), which costs nothing extra
    when no key was present (the common case: no up-front disjointness check).

    Holds the span's lock, as ``set_attributes`` does: every SDK write to a span's
    attributes and its ``end`` take it. The ``BoundedAttributes`` lock the SDK takes inside
    is not needed here: what it orders against (a reader's ``list``/``copy`` of the dict)
    is one C call, and so is this one ``dict.update`` of exact ``str`` keys, which runs
    whole under the GIL (and under the dict's own lock on free-threaded builds)."""
    lock = span._lock
    lock.acquire()  # (acquire/release: cheaper than ``with``)
    try:
        if span._end_time is not None:
            return False
        attrs = span._attributes
        if type(attrs) is not BoundedAttributes or attrs._immutable:
            return False
        limit = attrs.max_value_len
        if limit is not None and longest > limit:
            return False
        stored = attrs._dict
        maxlen = attrs.maxlen
        before = len(stored)
        if maxlen is not None and before + len(values) > maxlen:
            return False  # (with a re-set key it might fit: the SDK decides)
        if not merge:
            if not stored.keys().isdisjoint(values):
                return False
            stored.update(values)
        else:
            stored.update(values)
            if len(stored) != before + len(values):  # some keys were already there
                for key in values:
                    stored[key] = stored.pop(key)
    finally:
        lock.release()
    return True


def _detect() -> type[SdkSpan] | None:
    """The SDK's recording span class when its private structure is exactly as expected."""
    try:
        provider = TracerProvider(sampler=ALWAYS_ON, resource=Resource({}), shutdown_on_exit=False)
        span: Any = provider.get_tracer(__name__).start_span("probe", attributes={"probe": "a"})
        try:
            attrs = getattr(span, "_attributes", None)
            expected = (
                isinstance(span, SdkSpan)
                and type(span).set_attributes is SdkSpan.set_attributes
                and type(getattr(span, "_lock", None)) is _LOCK_TYPE
                and getattr(span, "_end_time", 0) is None
                and type(attrs) is BoundedAttributes
                and type(getattr(attrs, "_dict", None)) is dict
                and type(getattr(attrs, "_lock", None)) is _LOCK_TYPE
                and getattr(attrs, "_immutable", None) is False
                and hasattr(attrs, "maxlen")
                and hasattr(attrs, "max_value_len")
            )
            expected = (
                expected
                and _fast_write(span, {"check": 1}, 0)
                and _fast_write(span, {"probe": "b", "again": 2}, 1, merge=True)
                and list(span.attributes.items()) == [("check", 1), ("probe", "b"), ("again", 2)]
            )
        finally:
            span.end()
            provider.shutdown()
        return type(span) if expected else None
    except Exception:  # any surprise: the public path only
        return None


FAST_SPAN_TYPE: Final = _detect()
"""The span class the fast path serves, or None when this SDK differs (public path only)."""


def add_clean_attributes(
    span: Span, values: Mapping[str, AttributeValue], longest: int | None
) -> None:
    """``span.set_attributes(values)``, without re-validating ``values`` when possible.

    ``longest`` is :func:`longest_string` of ``values``, computed when they were built
    (None: not known clean, always the public path).
    """
    if longest is not None and type(span) is FAST_SPAN_TYPE:
        try:
            written = _fast_write(span, values, longest, True)  # (positional: a faster call)
        except Exception:  # structure changed under us: the public path decides
            written = False
        if written:
            return
    span.set_attributes(values)


def raw_attributes(span: Span) -> Mapping[str, Any] | None:
    """The span's current attributes for quick lookups (its own dict on the SDK's span,
    without the generic ``Mapping`` machinery ``span.attributes`` goes through)."""
    if type(span) is FAST_SPAN_TYPE:
        attrs = span._attributes
        if type(attrs) is BoundedAttributes:
            return attrs._dict
    return getattr(span, "attributes", None)


def _readable_types() -> frozenset[type]:
    """Span classes whose ``_attributes`` is read directly when exported (see below)."""
    try:
        stored = BoundedAttributes(attributes={"probe": "a"}, immutable=False)
        span: Any = ReadableSpan("probe", attributes=stored)
        expected = (
            getattr(span, "_attributes", None) is stored
            and type(getattr(stored, "_dict", None)) is dict
            and stored._dict == dict(span.attributes)
            and stored.dropped == span.dropped_attributes
        )
    except Exception:  # any surprise: the public path only
        expected = False
    if not expected:
        return frozenset()
    return frozenset({ReadableSpan} | ({FAST_SPAN_TYPE} if FAST_SPAN_TYPE else set()))


_READABLE_TYPES: Final = _readable_types()
_COUNTING_TYPES: Final = frozenset(
    t
    for t in _READABLE_TYPES
    if getattr(t, "dropped_attributes", None) is ReadableSpan.dropped_attributes
)
"""Of those, the classes whose ``dropped_attributes`` is ``ReadableSpan``'s (the count of
their ``BoundedAttributes``)."""


def finished_attributes(span: ReadableSpan) -> Mapping[str, Any] | None:
    """A finished span's attributes for reading: the ``BoundedAttributes`` dict itself on the
    SDK's spans (an ended span's attributes no longer change), else ``span.attributes``."""
    if type(span) in _READABLE_TYPES:
        attrs = span._attributes
        if type(attrs) is BoundedAttributes:
            return attrs._dict
    return span.attributes


_DICT: Final = operator.attrgetter("_dict")
_DROPPED: Final = operator.attrgetter("dropped")
_STORED: Final = operator.attrgetter("_attributes")


def finished_attribute_columns(
    spans: Sequence[ReadableSpan],
) -> tuple[list[Mapping[str, Any]], list[int]] | None:
    """For a batch of finished SDK spans: each span's attributes (as
    :func:`finished_attributes` reads them) and its ``dropped_attributes`` count, read
    straight from the ``BoundedAttributes`` of each; None unless every span is of a class
    :func:`finished_attributes` reads directly and stores a ``BoundedAttributes``."""
    if not set(map(type, spans)) <= _COUNTING_TYPES:
        return None
    stored = list(map(_STORED, spans))
    if set(map(type, stored)) != {BoundedAttributes}:
        return None
    return list(map(_DICT, stored)), list(map(_DROPPED, stored))
