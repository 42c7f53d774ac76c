"""``AttemptStampingProcessor``: put the logical request on every span beneath it.

LLM and HTTP instrumentations create their spans without knowing about retries. This
processor reads the retryscope :class:`~retryscope.instrumentation._context.Scope` from the
parent context in ``on_start`` and stamps the span with the logical request id,
idempotency digest, tenant, operation, enclosing attempt ordinal and route, so a physical
HTTP send made by httpx or requests joins its logical request in the audit data set.

HTTP client spans are classified here, at ``on_start``, not in the analytics: a span of
kind CLIENT that carries an HTTP method (``http.request.method``, or the older
``http.method`` that opentelemetry-instrumentation-httpx/-requests still emit by default),
or a known SDK call span (:mod:`._send_spans`), started inside a non-transport attempt is
taken for one physical send: a transport attempt of the request (role ``attempt``, layer
``transport``, the next transport ordinal, its parent attempt, its operation, and
``http.request.resend_count`` when it repeats an earlier send of that operation; see
:mod:`._sends`). When a send starts beneath such a span while it is still open, the span is
a call, not a send: it is rewritten to role ``call`` and its first send takes over its
ordinals. Doing it here keeps ordinals exact (only the process that made the sends can
number them). Inside a transport attempt (a send retryscope's integrations recorded) such
a span is the same send seen twice and is only stamped, unless that send may be a call (a
client's send through a retrying transport): then it is one of its sends. The outcome of a
classified span is not known at start; the analytics read it from its HTTP status attributes.

It is on the hot path of every span: one context lookup, a kind check and one write of a
precomputed mapping — validated once when it was built, and written without the SDK
re-validating it where the SDK's structure allows (:mod:`._sdk`; otherwise one
``set_attributes`` call). An opt-in attribute hook (add or redact
attributes; strings bounded) runs only when configured. It never raises into the
application: failures are counted in :attr:`AttemptStampingProcessor.errors`.

Given an :class:`~retryscope.instrumentation.metrics.AttemptMetricsProcessor`
(``metrics=``), its ``on_end`` also hands every ended span to the live metrics (a send it
classified with the place it stamped, :data:`Sent`, its span id and the attributes it read
at its end), its
``on_start`` tells them of an attempt span started in an attempt's own span without naming
it (see :meth:`~retryscope.instrumentation.metrics.AttemptMetricsProcessor.attempt_started`),
and its ``force_flush``/``shutdown`` reach them: the SDK calls one processor per span
instead of two (about 1 % of a span's cost on the hot path, ``bench/RESULTS.md``).
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import SpanKind

from retryscope.instrumentation._context import (
    _SCOPE_KEY,
    Attempt,
    LogicalRequest,
    _Handle,
    abandoned_scopes,
    live_owner,
)
from retryscope.instrumentation._open_sends import OpenSends, Sent
from retryscope.instrumentation._privacy import (
    DEFAULT_MAX_STRING_BYTES,
    AttributeHook,
    apply_hook,
)
from retryscope.instrumentation._sdk import (
    add_clean_attributes,
    attribute_room,
    finished_attributes,
    raw_attributes,
)
from retryscope.instrumentation._send_spans import classify_send, send_failed
from retryscope.vocabulary import LOGICAL_REQUEST_ID, SPAN_ROLE

if TYPE_CHECKING:
    from retryscope.instrumentation.metrics import AttemptMetricsProcessor

_log = logging.getLogger(__name__)
_ROLE_KEY: Final = SPAN_ROLE.key
_ID_KEY: Final = LOGICAL_REQUEST_ID.key
_CLIENT: Final = SpanKind.CLIENT
_get_current: Final = otel_context.get_current
_weak: Final = weakref.ref
_ROOM: Final = 48
"""Attributes a send may still take after it started: its stamps (about 16) and 32 more its
instrumentation may add (response status, headers, GenAI usage). With less room than that
under its attribute count limit (``OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT``), what the analytics
classify it by is written again with its stamps, so the limit evicts it last (a re-set key
costs the write a reordering, paid only then)."""


class AttemptStampingProcessor(SpanProcessor):
    """Stamps spans started under a logical request; leaves all other spans alone.

    ``attribute_hook`` (opt-in) is called with the start attributes of every span under a
    logical request and returns attributes to add or override (``None`` redacts); its
    strings are bounded to ``max_string_bytes`` with truncation marked. ``metrics`` (opt-in)
    is the live metrics processor this one hands every ended span to (then it need not be
    added to the provider; added as well, it still counts each span once).
    """

    def __init__(
        self,
        *,
        attribute_hook: AttributeHook | None = None,
        max_string_bytes: int = DEFAULT_MAX_STRING_BYTES,
        metrics: AttemptMetricsProcessor | None = None,
    ) -> None:
        if max_string_bytes < 1:
            raise ValueError(f"max_string_bytes must be >= 1, got {max_string_bytes!r}")
        self.errors = 0
        """Spans whose stamping (or, for a send, whose end's bookkeeping) failed (contained,
        logged once)."""
        self.unjoined = 0
        """Sends that ended without their logical request id, evicted by their attribute
        count limit after they started (logged once): rows the report cannot join."""
        self._hook = attribute_hook
        self._max_bytes = max_string_bytes
        self._sends = OpenSends()
        """Spans classified as sends, still open (one may yet turn into a call): their
        request (weakly) and the place stamped on them."""
        self._open = self._sends.entries
        self._open_limit = self._sends.limit
        self._abandoned_before = abandoned_scopes()
        self.metrics = metrics
        """The live metrics processor this one hands ended spans to, if any."""
        self._record_end: (
            Callable[[ReadableSpan, Sent | None, Mapping[str, Any] | None, int], None] | None
        ) = metrics.take_span_ends() if metrics is not None else None
        self._metrics_start = (
            metrics.attempt_started if metrics is not None and self._record_end else None
        )

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        try:
            ctx = parent_context if parent_context is not None else _get_current()
            handle = ctx.get(_SCOPE_KEY)
            if type(handle) is not _Handle:  # no scope
                return
            owner = handle()  # the scope (None: collected, see _Handle)
            if type(owner) is Attempt:
                request = owner.request
                # ended, or shared with forked processes (it may have ended in another)
                if owner._ended or request._ended or request._shared is not None:
                    owner = live_owner(owner)
                    if owner is None:
                        return
            elif type(owner) is not LogicalRequest or (
                owner._ended or (owner._shared is not None and owner._over())
            ):
                return
            stamps = owner._stamps
            attributes = raw_attributes(span)
            if attributes is None or _ROLE_KEY not in attributes:
                if stamps is None:
                    stamps = owner.stamps()
                send = (
                    classify_send(span, attributes)
                    if stamps.transport and attributes and span.kind is _CLIENT
                    else None
                )
                if send is not None and attributes is not None:
                    evidence, call_layer, extra = send
                    span_id = span.context.span_id  # (the property: no typing.cast call)
                    room = attribute_room(span)
                    values, longest = stamps.request._send_values(
                        stamps.parent,
                        evidence,
                        span,
                        span_id,
                        ctx,
                        call_layer,
                        attributes if room is not None and room < _ROOM else None,
                    )
                    if extra:
                        values.update(extra)
                    request = stamps.request
                    parent = stamps.parent
                    open_sends = self._open
                    open_sends[span_id] = (
                        _weak(request),
                        (request.id, parent._layer_value, parent.ordinal, values)
                        if parent is not None
                        else (request.id, "", -1, values),
                    )
                    if len(open_sends) > self._open_limit:
                        self._sends.sweep()
                    add_clean_attributes(span, values, longest)
                else:
                    add_clean_attributes(span, stamps.stamp, stamps.longest)
            elif self._metrics_start is not None and type(owner) is Attempt:
                self._metrics_start(span, attributes, owner, ctx)
            if self._hook is not None:
                span.set_attributes(apply_hook(self._hook, span.attributes or {}, self._max_bytes))
        except Exception:  # never break the instrumented application
            self._failed()

    def on_end(self, span: ReadableSpan) -> None:
        sent = attributes = None
        span_id = 0
        if self._open:  # only while a span taken for a send is open
            try:
                ctx = span.get_span_context()
                if ctx is not None:
                    span_id = ctx.span_id
                    entry = self._open.pop(span_id, None)
                    if entry is not None:
                        request = entry[0]()
                        sent = entry[1]
                        attributes = finished_attributes(span) or {}
                        if request is not None:
                            request._send_closed(span_id, send_failed(span, attributes))
                        if _ID_KEY not in attributes and span.dropped_attributes:
                            self._unjoined()
            except Exception:  # never break the instrumented application
                self._failed()
        record = self._record_end
        if record is not None:  # (contains its own failures)
            record(span, sent, attributes, span_id)

    def _failed(self) -> None:
        self.errors += 1
        if self.errors == 1:
            _log.exception("retryscope: stamping a span failed (further failures counted)")

    def _unjoined(self) -> None:
        self.unjoined += 1
        if self.unjoined == 1:
            _log.warning(
                "retryscope: a send ended without its logical request id: its span attribute "
                "count limit (OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT) evicted it, so it cannot join "
                "its request (further ones counted in processor.unjoined)"
            )

    @property
    def aged(self) -> int:
        """Open sends forgotten because their request was collected first (the send never
        ended: an abandoned stream, a span never ended; see :mod:`._open_sends`), and the
        scopes (``logical_request``/``attempt``) of this process collected without their
        exit since this processor was made (entered and never exited: they stamp nothing
        more; see :func:`~._context.abandoned_scopes`)."""
        return self._sends.aged + abandoned_scopes() - self._abandoned_before

    @property
    def dropped(self) -> int:
        """Open sends of live requests forgotten to keep the table bounded."""
        return self._sends.dropped

    def shutdown(self) -> None:
        if self.metrics is not None:
            self.metrics.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.metrics.force_flush(timeout_millis) if self.metrics is not None else True
