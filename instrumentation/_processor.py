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
a span is the same send seen twice and is only stamped. The outcome of a classified span
is not known at start; the analytics read it from its HTTP status attributes.

It is on the hot path of every span: one context lookup, a kind check and one write of a
precomputed mapping — validated once when it was built, and written without the SDK
re-validating it where the SDK's structure allows (:mod:`._sdk`; otherwise one
``set_attributes`` call). An opt-in attribute hook (add or redact
attributes; strings bounded) runs only when configured. It never raises into the
application: failures are counted in :attr:`AttemptStampingProcessor.errors`.
"""

from __future__ import annotations

import logging
from typing import Final

from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from opentelemetry.trace import SpanKind, get_current_span

from retryscope.instrumentation._context import _SCOPE_KEY, Attempt, LogicalRequest
from retryscope.instrumentation._privacy import (
    DEFAULT_MAX_STRING_BYTES,
    AttributeHook,
    apply_hook,
)
from retryscope.instrumentation._sdk import add_clean_attributes, raw_attributes
from retryscope.instrumentation._send_spans import classify_send
from retryscope.vocabulary import SPAN_ROLE

_log = logging.getLogger(__name__)
_ROLE_KEY: Final = SPAN_ROLE.key
_CLIENT: Final = SpanKind.CLIENT
_get_current: Final = otel_context.get_current


def _span_id(ctx: otel_context.Context) -> int | None:
    """Id of the parent span in ``ctx`` (None: no valid parent)."""
    parent = get_current_span(ctx).get_span_context()
    return parent.span_id if parent.is_valid else None


class AttemptStampingProcessor(SpanProcessor):
    """Stamps spans started under a logical request; leaves all other spans alone.

    ``attribute_hook`` (opt-in) is called with the start attributes of every span under a
    logical request and returns attributes to add or override (``None`` redacts); its
    strings are bounded to ``max_string_bytes`` with truncation marked.
    """

    def __init__(
        self,
        *,
        attribute_hook: AttributeHook | None = None,
        max_string_bytes: int = DEFAULT_MAX_STRING_BYTES,
    ) -> None:
        if max_string_bytes < 1:
            raise ValueError(f"max_string_bytes must be >= 1, got {max_string_bytes!r}")
        self.errors = 0
        """Spans whose stamping failed (contained, logged once)."""
        self._hook = attribute_hook
        self._max_bytes = max_string_bytes
        self._open: dict[int, LogicalRequest] = {}
        """Spans classified as sends, still open (one may yet turn into a call)."""

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
                    values, longest = stamps.request.transport_attempt_values(
                        stamps.parent, span, _span_id(ctx), evidence, call_layer
                    )
                    if extra:
                        values.update(extra)
                    self._open[span.get_span_context().span_id] = stamps.request
                    add_clean_attributes(span, values, longest)
                else:
                    add_clean_attributes(span, stamps.stamp, stamps.longest)
            if self._hook is not None:
                span.set_attributes(apply_hook(self._hook, span.attributes or {}, self._max_bytes))
        except Exception:  # never break the instrumented application
            self.errors += 1
            if self.errors == 1:
                _log.exception("retryscope: stamping a span failed (further failures counted)")

    def on_end(self, span: ReadableSpan) -> None:
        if self._open:
            ctx = span.get_span_context()
            request = self._open.pop(ctx.span_id, None) if ctx is not None else None
            if request is not None:
                request.send_ended(ctx.span_id)  # type: ignore[union-attr]

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True
