"""Client integrations: make the retries a client library makes on its own visible.

Each module imports its library, so it needs that library's extra installed:

* :mod:`retryscope.instrumentation.integrations.httpx` — ``[httpx]``: an httpx transport
  that records every HTTP send as a transport attempt;
* :mod:`retryscope.instrumentation.integrations.grpc` — ``[grpc]``: each blocking grpcio
  call as one send (grpcio's own retries run where no Python hook sees them);
* :mod:`retryscope.instrumentation.integrations.aiohttp` — ``[aiohttp]``: a client
  middleware recording every send of an ``aiohttp.ClientSession``, aiohttp-retry's tries
  numbered;
* :mod:`retryscope.instrumentation.integrations.tenacity` — ``[tenacity]``: every try of a
  ``Retrying``/``AsyncRetrying`` as an attempt span;
* :mod:`retryscope.instrumentation.integrations.stamina` — ``[stamina]``: every try of
  ``stamina.retry``/``retry_context`` as an attempt span.
"""
