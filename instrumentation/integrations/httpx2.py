"""httpx2 integration: the sends of ``httpx2`` clients, which the OpenAI 3.x and Anthropic
2.x SDKs send through.

::

    client = openai.OpenAI(http_client=httpx2.Client(transport=RetryscopeTransport()))
    client = anthropic.Anthropic(
        http_client=anthropic.DefaultHttpxClient(transport=RetryscopeTransport())
    )

or :class:`retryscope.instrumentation.RetryscopeInstrumentor` for every client. The
transport classes are the twins of :mod:`retryscope.instrumentation.integrations.httpx`'s,
``httpx2.BaseTransport`` subclasses (the Anthropic SDK rejects a class with an ``httpx`` one in its
MRO). Each send's ``x-stainless-retry-count`` is the SDK's own evidence that it is a retry.
"""

from __future__ import annotations

import httpx2

from retryscope.instrumentation.integrations import _httpx_family

__all__ = ["AsyncRetryscopeTransport", "RetryscopeTransport"]


class RetryscopeTransport(_httpx_family.RetryscopeTransport, httpx2.BaseTransport):
    """:class:`~._httpx_family.RetryscopeTransport` as an ``httpx2.BaseTransport``."""


class AsyncRetryscopeTransport(_httpx_family.AsyncRetryscopeTransport, httpx2.AsyncBaseTransport):
    """:class:`~._httpx_family.AsyncRetryscopeTransport` as an ``httpx2.AsyncBaseTransport``."""
