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
classified with the place it stamped: :data:`Sent`), its
``on_start`` tells them of an attempt span started in an attempt's own span without naming
it (see :meth:`~retryscope.instrumentation.metrics.AttemptMetricsProcessor.attempt_started`),
and its ``force_flush``/``shutdown`` reach them: the SDK calls one processor per span
instead of two (about 1 % of a span's cost on the hot path, ``bench/RESULTS.md``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import SpanKind

from retryscope.instrumentation._context import _SCOPE_KEY, Attempt, LogicalRequest
from retryscope.instrumentation._privacy import (
    DEFAULT_MAX_STRING_BYTES,
    AttributeHook,
    apply_hook,
)
from retryscope.instrumentation._sdk import add_clean_attributes, raw_attributes
from retryscope.instrumentation._send_spans import classify_send, send_failed
from retryscope.vocabulary import SPAN_ROLE

if TYPE_CHECKING:
    from retryscope.instrumentation.metrics import AttemptMetricsProcessor

_log = logging.getLogger(__name__)
Sent = tuple[LogicalRequest, Attempt | None, Mapping[str, Any]]
"""A span this processor made a send: its request, its enclosing attempt (None: the
request's top) and what it stamped on it (its ordinal, its operation). The live metrics
count the send in that place, whatever user code writes on the span afterwards."""
_ROLE_KEY: Final = SPAN_ROLE.key
_CLIENT: Final = SpanKind.CLIENT
_get_current: Final = otel_context.get_current


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
        """Spans whose stamping failed (contained, logged once)."""
        self._hook = attribute_hook
        self._max_bytes = max_string_bytes
        self._open: dict[int, Sent] = {}
        """Spans classified as sends, still open (one may yet turn into a call): their
        request, enclosing attempt and the place stamped on them."""
        self.metrics = metrics
        """The live metrics processor this one hands ended spans to, if any."""
        self._record_end: Callable[[ReadableSpan, Sent | None], None] | None = (
            metrics.take_span_ends() if metrics is not None else None
        )
        self._metrics_start = (
            metrics.attempt_started if metrics is not None and self._record_end else None
        )

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        try:
            ctx = parent_context if parent_context is not None else _get_current()
            owner = ctx.get(_SCOPE_KEY)
            if type(owner) is Attempt or type(owner) is LogicalRequest:
                stamps = owner._stamps
            else:
                return
            attributes = raw_attributes(span)
            if attributes is None or _ROLE_KEY not in attributes:
                if stamps is None:
                    stamps = owner.stamps()
                send = (
                    classify_send(span, attributes)
                    if stamps.transport and attributes and span.kind is _CLIENT
                    else None
                )
                if send is not None:
                    evidence, call_layer, extra = send
                    span_id = span.get_span_context().span_id
                    values, longest = stamps.request.transport_attempt_values(
                        stamps.parent,
                        evidence,
                        span=span,
                        span_id=span_id,
                        parent_context=ctx,
                        call_layer=call_layer,
                    )
                    if extra:
                        values.update(extra)
                    self._open[span_id] = (stamps.request, stamps.parent, values)
                    add_clean_attributes(span, values, longest)
                else:
                    add_clean_attributes(span, stamps.stamp, stamps.longest)
            elif self._metrics_start is not None and type(owner) is Attempt:
                self._metrics_start(span, attributes, owner, ctx)
            if self._hook is not None:
                span.set_attributes(apply_hook(self._hook, span.attributes or {}, self._max_bytes))
        except Exception:  # never break the instrumented application
            self.errors += 1
            if self.errors == 1:
                _log.exception("retryscope: stamping a span failed (further failures counted)")

    def on_end(self, span: ReadableSpan) -> None:
        sent = None
        if self._open:  # only while a span taken for a send is open
            ctx = span.get_span_context()
            if ctx is not None:
                span_id = ctx.span_id
                sent = self._open.pop(span_id, None)
                if sent is not None:
                    sent[0].send_ended(span_id, send_failed(span))
        record = self._record_end
        if record is not None:  # (contains its own failures)
            record(span, sent)

    def shutdown(self) -> None:
        if self.metrics is not None:
            self.metrics.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.metrics.force_flush(timeout_millis) if self.metrics is not None else True
