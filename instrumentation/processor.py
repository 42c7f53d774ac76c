"""``AttemptStampingProcessor``: put the logical request on every span beneath it.

LLM and HTTP instrumentations create their spans without knowing about retries. This
processor reads the retryscope :class:`~retryscope.instrumentation.context.Scope` from the
parent context in ``on_start`` and stamps the span with the logical request id,
idempotency digest, tenant, operation, enclosing attempt ordinal and route, so a physical
HTTP send made by httpx or requests joins its logical request in the audit data set.

It is on the hot path of every span: one context lookup and one ``set_attributes`` call
with a precomputed mapping. It never raises into the application.
"""

from __future__ import annotations

import logging

from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
from retryscope.instrumentation.context import _SCOPE_KEY, Scope

from retryscope.vocabulary import SPAN_ROLE

_log = logging.getLogger(__name__)
_ROLE_KEY = SPAN_ROLE.key


class AttemptStampingProcessor(SpanProcessor):
    """Stamps spans started under a logical request; leaves all other spans alone."""

    def __init__(self) -> None:
        self.errors = 0
        """Spans whose stamping failed (contained, logged once)."""

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        try:
            scope = otel_context.get_value(_SCOPE_KEY, parent_context)
            if type(scope) is not Scope:
                return
            attributes = span.attributes
            if attributes is not None and _ROLE_KEY in attributes:
                return  # retryscope's own span: it carries the full record already
            span.set_attributes(scope.stamp)
        except Exception:  # never break the instrumented application
            self.errors += 1
            if self.errors == 1:
                _log.exception("retryscope: stamping a span failed (further failures counted)")

    def on_end(self, span: ReadableSpan) -> None:
        return None

    def shutdown(self) -> None:
        return None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True
