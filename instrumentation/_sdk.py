"""Every use of OpenTelemetry's private structure, each guarded, each with its public path.

retryscope touches every span twice: it stamps spans on the hot path of the application and
converts finished spans to Arrow in bulk. A few shortcuts into SDK-private structure make
both cheap. They all live here: the rest of retryscope calls this module's functions and
never names a private attribute or underscore import of ``opentelemetry``. A shortcut runs only when

* ``RETRYSCOPE_SDK_PUBLIC_ONLY`` is not set to ``1``/``true``/``yes``/``on`` (read once, at
  import; set, it forces every public path), and
* a probe at import found exactly the private structure it relies on and got, on probe
  objects, what the public API gives.

Otherwise — another SDK version, another span class, a span that fails a per-call guard —
the public path runs, and it stores and reads the same data (the pipeline tests run both
ways: ``make unit-public-sdk``). An SDK upgrade that changes its internals therefore costs
speed, not correctness. :func:`fast_paths` says which shortcuts are on. ``make bench``
prints both paths side by side (``bench/hot_path.py``, ``bench/export.py``); the ratios
below were measured on two cores (process CPU time). A shortcut stays only for a gain a
user sees: building an attempt's context in one copy (1.04× per attempt) and reading
``BoundedList``, ``Status`` and ``SpanContext`` internals in the exporter (1.03× of the
conversion) did not.

Stamping (:func:`add_clean_attributes`, :func:`raw_attributes`, :func:`attribute_room`)
    Private: ``Span._lock``, ``Span._end_time``, ``Span._attributes`` — a
    ``BoundedAttributes`` with ``_dict``, ``_immutable``, ``maxlen``, ``max_value_len``.
    Buys: ``set_attributes`` re-validates every value; the stamps are built from plain
    values by retryscope and checked once (:func:`longest_string`), so they are merged into
    the dict directly, under the span's lock. Stamping a third-party HTTP span adds
    7–8 µs instead of 12.5–13.5 µs (the stamped span: public/fast 1.26–1.27×).
    Public: ``Span.set_attributes``; ``Span.attributes``; the count limit of a provider
    without its own (``SpanLimits()``, from the environment).
Finished spans (:func:`finished_rows`, :func:`finished_attributes`, :func:`ended_fields`)
    Private: ``ReadableSpan._context``/``_parent``/``_name``/``_kind``/``_start_time``/
    ``_end_time``/``_status``/``_resource``/``_instrumentation_scope``/``_events``/
    ``_links``/``_attributes``; ``BoundedAttributes._dict``.
    Buys: the exporter reads a batch's fields with ``operator.attrgetter`` in C instead of
    one property call (and, for events and links, one tuple copy) per field per span, and
    each span's attributes as the dict the SDK keeps: converting a batch to Arrow,
    public/fast 1.48–1.51× (5.6–5.9 vs 8.5–8.7 µs a span); ``ParquetSpanExporter`` export
    and write, 1.24–1.26×: less of the export thread's time holding the GIL.
    Public: the ``ReadableSpan`` properties.
Zero-code configurator (:data:`SdkConfigurator`, imported on first use)
    Private: ``opentelemetry.sdk._configuration._OTelSDKConfigurator``, the class the SDK
    tells distributions to subclass (opentelemetry-distro does); imported lazily because it
    loads the logs and metrics SDKs. No public equivalent: the switch does not apply.
"""

from __future__ import annotations

import contextlib
import logging
import operator
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Final

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode
from opentelemetry.util.types import AttributeValue

from retryscope.instrumentation._settings import boolean

if TYPE_CHECKING:
    from opentelemetry.sdk._configuration import _OTelSDKConfigurator as SdkConfigurator

__all__ = [
    "PUBLIC_ONLY",
    "PUBLIC_ONLY_ENV",
    "SdkConfigurator",
    "add_clean_attributes",
    "attribute_room",
    "ended_fields",
    "fast_paths",
    "finished_attributes",
    "finished_rows",
    "longest_string",
    "public_paths",
    "raw_attributes",
]

_log = logging.getLogger(__name__)

PUBLIC_ONLY_ENV: Final = "RETRYSCOPE_SDK_PUBLIC_ONLY"


def _public_only(value: str | None) -> bool:
    """Whether ``value`` of :data:`PUBLIC_ONLY_ENV` forces the public paths (an unknown
    value is logged and leaves the shortcuts on)."""
    try:
        return boolean(value) if value and value.strip() else False
    except ValueError:
        _log.warning("retryscope: %s=%r is not a boolean; ignored", PUBLIC_ONLY_ENV, value)
        return False


PUBLIC_ONLY: Final = _public_only(os.environ.get(PUBLIC_ONLY_ENV))
"""True when :data:`PUBLIC_ONLY_ENV` forced the public paths for this process."""

_PLAIN: Final = frozenset({str, int, bool, float})
_LOCK_TYPE: Final = type(threading.Lock())
_FIELDS: Final = (
    "context",
    "parent",
    "name",
    "kind",
    "start_time",
    "end_time",
    "status",
    "resource",
    "instrumentation_scope",
    "events",
    "links",
)
"""The fields :func:`finished_rows` reads, in its order."""
_PUBLIC_FIELDS: Final = operator.attrgetter(*_FIELDS)
_PRIVATE_FIELDS: Final = operator.attrgetter(*(f"_{name}" for name in _FIELDS))


# -- stamping -------------------------------------------------------------------------------
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


def _probe_span_type() -> type[SdkSpan] | None:
    """The SDK's recording span class, when its private structure is exactly as expected:
    the SDK's span class with its own ``set_attributes``, ``_lock`` and ``_end_time``;
    ``BoundedAttributes`` with a plain ``_dict``, ``_lock``, ``maxlen``, ``max_value_len``,
    ``_immutable``; and fast writes on a probe span give what the public API shows."""
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


def add_clean_attributes(
    span: Span, values: Mapping[str, AttributeValue], longest: int | None
) -> None:
    """``span.set_attributes(values)``, without re-validating ``values`` when possible.

    ``longest`` is :func:`longest_string` of ``values``, computed when they were built
    (None: not known clean, always the public path). Per span, anything but the probed
    class — an ended span, a stamp that would hit the attribute count or value length
    limit — takes ``set_attributes``, so the stored attributes are always the ones the
    SDK itself would have stored, and nothing raises beyond what that call would.
    """
    if longest is not None and type(span) is _paths.span_type:
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
    if type(span) is _paths.span_type:
        attrs = span._attributes
        if type(attrs) is BoundedAttributes:
            return attrs._dict
    return getattr(span, "attributes", None)


def attribute_room(span: Span) -> int | None:
    """How many more attributes ``span`` takes before its attribute count limit
    (``OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT``) evicts its oldest (None: no limit): from its
    ``BoundedAttributes``' ``maxlen`` on the SDK's span; otherwise from the limit the
    environment gives a provider without its own (read now)."""
    if type(span) is _paths.span_type:
        attrs = span._attributes
        if type(attrs) is BoundedAttributes:
            maxlen = attrs.maxlen
            return None if maxlen is None else maxlen - len(attrs._dict)
    limit = SpanLimits().max_span_attributes
    if not isinstance(limit, int):
        return None
    return limit - len(getattr(span, "attributes", None) or ())


# -- finished spans -------------------------------------------------------------------------
def _probe_plain_types(span_type: type[SdkSpan] | None) -> frozenset[type]:
    """SDK span classes whose fields may be read directly (``span._name`` for ``span.name``,
    skipping the property call and the copies ``events``/``links`` make): those that keep
    :class:`ReadableSpan`'s properties, provided a probe span reads the same both ways."""
    try:
        probe = ReadableSpan(
            "probe",
            context=SpanContext(1, 2, is_remote=False),
            parent=SpanContext(1, 3, is_remote=False),
            kind=SpanKind.CLIENT,
            start_time=5,
            end_time=7,
            status=Status(StatusCode.ERROR, "x"),
            events=(Event("e", timestamp=6),),
            links=(Link(SpanContext(1, 4, is_remote=False)),),
            instrumentation_scope=InstrumentationScope("s", "1"),
        )
        public, private = _PUBLIC_FIELDS(probe), _PRIVATE_FIELDS(probe)
        same = public[:9] == private[:9] and all(tuple(private[i]) == public[i] for i in (9, 10))
    except Exception:  # any surprise: the public path only
        return frozenset()
    if not same:
        return frozenset()
    candidates = {ReadableSpan} | ({span_type} if span_type else set())
    return frozenset(
        t
        for t in candidates
        if all(getattr(t, name) is getattr(ReadableSpan, name) for name in _FIELDS)
    )


_ENDED: Final = ("context", "start_time", "end_time", "status")
_PUBLIC_ENDED: Final = operator.attrgetter(*_ENDED)
_PRIVATE_ENDED: Final = operator.attrgetter(*(f"_{name}" for name in _ENDED))

Ended = tuple[Any, int | None, int | None, Any]
"""Context, start, end, status."""


def finished_attributes(span: Any) -> Mapping[str, Any] | None:
    """A finished span's attributes for reading: the ``BoundedAttributes`` dict itself on the
    SDK's spans (an ended span's attributes no longer change), else ``span.attributes``."""
    if type(span) in _paths.readable_types:
        attrs = span._attributes
        if type(attrs) is BoundedAttributes:
            found: Mapping[str, Any] = attrs._dict
            return found
    public: Mapping[str, Any] | None = span.attributes
    return public


def ended_fields(span: Any) -> Ended:
    """One finished span's context, start time, end time and status, in one call (the live metrics
    read them for every attempt span): read directly from a span of a probed class."""
    ended: Ended = (_PRIVATE_ENDED if type(span) in _paths.plain_types else _PUBLIC_ENDED)(span)
    return ended


def finished_rows(spans: Sequence[ReadableSpan]) -> list[tuple[Any, ...]]:
    """Each span's fields in :data:`_FIELDS` order (events and links: sequences), read
    directly when every span is of a probed class."""
    fields_of = _PRIVATE_FIELDS if set(map(type, spans)) <= _paths.plain_types else _PUBLIC_FIELDS
    return list(map(fields_of, spans))


def _probe_readable_types(span_type: type[SdkSpan] | None) -> frozenset[type]:
    """Span classes whose ``_attributes`` is read directly when exported."""
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
    return frozenset({ReadableSpan} | ({span_type} if span_type else set()))


# -- zero-code configurator -----------------------------------------------------------------
def __getattr__(name: str) -> Any:
    """:data:`SdkConfigurator`, imported on first use (it loads the logs and metrics SDKs)."""
    if name == "SdkConfigurator":
        from opentelemetry.sdk._configuration import _OTelSDKConfigurator

        return _OTelSDKConfigurator
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# -- which paths run ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Paths:
    """What each shortcut may use; empty or False: its public path."""

    span_type: type[SdkSpan] | None = None
    plain_types: frozenset[type] = frozenset()
    readable_types: frozenset[type] = frozenset()


_PUBLIC: Final = _Paths()


def _probe() -> _Paths:
    """The shortcuts this SDK allows (each probe falls back on any surprise)."""
    span_type = _probe_span_type()
    return _Paths(
        span_type=span_type,
        plain_types=_probe_plain_types(span_type),
        readable_types=_probe_readable_types(span_type),
    )


_paths: _Paths = _PUBLIC if PUBLIC_ONLY else _probe()
"""The paths the functions above use: what the probes allowed at import (all public when
:data:`PUBLIC_ONLY`), or all public inside :func:`public_paths`."""


def fast_paths() -> dict[str, bool]:
    """Which shortcuts are on now, by name (False: its public path runs)."""
    return {f.name: bool(getattr(_paths, f.name)) for f in fields(_paths)}


@contextlib.contextmanager
def public_paths() -> Iterator[None]:
    """Within the block, every public path, as with :data:`PUBLIC_ONLY_ENV` set; for tests
    and benchmarks that compare both paths in one process. It switches the whole process
    (not for use while other threads record spans)."""
    global _paths
    saved, _paths = _paths, _PUBLIC
    try:
        yield
    finally:
        _paths = saved
