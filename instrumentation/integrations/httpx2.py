"""httpx2 integration: the sends of ``httpx2`` clients, which the OpenAI 3.x and Anthropic
2.x SDKs send through.

::

    client = openai.OpenAI(http_client=httpx2.Client(transport=RetryscopeTransport()))
    client = anthropic.Anthropic(
        http_client=anthropic.DefaultHttpxClient(transport=RetryscopeTransport())
    )

or :class:`retryscope.instrumentation.RetryscopeInstrumentor` for every client. The
transport classes are those of :mod:`retryscope.instrumentation.integrations.httpx`: they
subclass neither library's ``BaseTransport`` (the Anthropic SDK rejects an ``httpx`` class)
and make their default inner transport from the library of the request, so
``RetryscopeTransport()`` works inside both. Each send's ``x-stainless-retry-count`` is the
SDK's own evidence that it is a retry.
"""

from __future__ import annotations

import httpx2  # noqa: F401  (the extra this module needs)

from retryscope.instrumentation.integrations._httpx_family import (
    AsyncRetryscopeTransport,
    RetryscopeTransport,
)

__all__ = ["AsyncRetryscopeTransport", "RetryscopeTransport"]
