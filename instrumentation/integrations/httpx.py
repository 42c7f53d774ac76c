"""httpx integration: every HTTP send of an ``httpx`` client is a visible transport attempt.

Wrap the transport of any ``httpx.Client``/``AsyncClient`` (an SDK's internal client too)::

    client = httpx.Client(transport=RetryscopeTransport())
    async_client = httpx.AsyncClient(transport=AsyncRetryscopeTransport())

or let :class:`retryscope.instrumentation.RetryscopeInstrumentor` record the sends of every
client. Each send gets one CLIENT span. Inside a logical request it is a transport attempt
(layer ``transport``, its own ordinal, its parent attempt, the route of the enclosing
attempt, its operation): ``http.request.resend_count`` is set only when it repeats an
earlier send of the same operation (:mod:`retryscope.instrumentation._sends`), so retries an
SDK makes internally appear one by one under the harness attempt that caused them and
distinct calls are not taken for them. Outside a logical request it is a plain HTTP client
span. The transport classes are ``httpx.BaseTransport`` subclasses, so a wrapping transport takes
them either way round::

    RetryTransport(transport=RetryscopeTransport())   # httpx-retries: a send per try
    RetryscopeTransport(RetryTransport())  # one send; a call when the instrumentor (or a
                                           # contrib instrumentation) sees the tries beneath

Their ``httpx2`` twins are in :mod:`retryscope.instrumentation.integrations.httpx2`.
Statuses, transport errors and
Retry-After are classified and parsed by
:mod:`retryscope.http_rules` (one set of rules for the recorder, the
control plane and the analytics).

It needs no contrib instrumentation, and it writes nothing into request headers: retryscope
context never leaves the process this way (use :func:`retryscope.inject` on purpose).
"""

from __future__ import annotations

import httpx

from retryscope.http_rules import (
    RETRY_AFTER_MAX_CHARS,
    RETRY_AFTER_MAX_MS,
    parse_retry_after_hint,
)
from retryscope.instrumentation._redaction import URL_MAX_CHARS, redact_url
from retryscope.instrumentation.integrations import _httpx_family
from retryscope.instrumentation.integrations._send import outcome_kind
from retryscope.vocabulary import OutcomeKind

__all__ = [
    "RETRY_AFTER_MAX_CHARS",
    "RETRY_AFTER_MAX_MS",
    "URL_MAX_CHARS",
    "AsyncRetryscopeTransport",
    "RetryscopeTransport",
    "parse_retry_after_hint",
    "redact_url",
    "send_outcome_kind",
]


class RetryscopeTransport(_httpx_family.RetryscopeTransport, httpx.BaseTransport):
    """:class:`~._httpx_family.RetryscopeTransport` as an ``httpx.BaseTransport``."""


class AsyncRetryscopeTransport(_httpx_family.AsyncRetryscopeTransport, httpx.AsyncBaseTransport):
    """:class:`~._httpx_family.AsyncRetryscopeTransport` as an ``httpx.AsyncBaseTransport``."""


def send_outcome_kind(
    response: httpx.Response | None, exc: BaseException | None, *, idempotent: bool
) -> OutcomeKind | None:
    """Failure kind of one send (None: success), by
    :data:`retryscope.http_rules.STATUS_RULES` (a redirect is a completed
    send: httpx follows it with another send) or the exception."""
    status = response.status_code if response is not None else None
    return outcome_kind(status, exc, idempotent=idempotent)
