"""tenacity integration: every try of a ``Retrying``/``AsyncRetrying`` is an attempt span.

::

    retrying = instrument(Retrying(stop=stop_after_attempt(3), wait=wait_fixed(0.1)),
                          route="primary", layer="adapter")
    result = retrying(call_provider, payload)          # call style
    for attempt in retrying:                            # iteration style
        with attempt:
            call_provider(payload)
    decorated = retrying.wraps(call_provider)          # decorator style

Each try records its layer, route and per-layer ordinal; an exception is mapped to an
outcome kind (``classify``, conservative by default); the sleep tenacity schedules
(``upcoming_sleep``, from ``before_sleep``) is recorded on the next try as its backoff.
The caller's own ``before_sleep`` still runs.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, ParamSpec, TypeVar

import tenacity

from retryscope.instrumentation._classify import classify_exception
from retryscope.instrumentation.integrations._tries import (
    Classifier,
    Try,
    TryOptions,
    announce_sleep,
    per_try,
    per_try_async,
)
from retryscope.vocabulary import Layer

P = ParamSpec("P")
R = TypeVar("R")


def _announce(state: tenacity.RetryCallState) -> None:
    outcome = state.outcome
    caused_by = outcome.exception() if outcome is not None and outcome.failed else None
    announce_sleep(
        state.upcoming_sleep, waited_s=state.idle_for - state.upcoming_sleep, caused_by=caused_by
    )


def _chained_before_sleep(retrying: tenacity.BaseRetrying) -> Callable[..., Any]:
    previous = retrying.before_sleep
    if isinstance(retrying, tenacity.AsyncRetrying):

        async def before_sleep_async(state: tenacity.RetryCallState) -> None:
            _announce(state)
            if previous is not None:
                result: object = previous(state)  # a sync or an async callback
                if inspect.isawaitable(result):
                    await result

        return before_sleep_async

    def before_sleep(state: tenacity.RetryCallState) -> None:
        _announce(state)
        if previous is not None:
            previous(state)

    return before_sleep


class InstrumentedRetrying:
    """A tenacity retrying object whose tries are attempts of the current logical request."""

    def __init__(self, retrying: tenacity.BaseRetrying, options: TryOptions) -> None:
        self.options = options
        self.retrying = retrying.copy(before_sleep=_chained_before_sleep(retrying))

    def wraps(self, fn: Callable[P, R]) -> Callable[P, R]:
        """Decorate ``fn``: each call retries under tenacity, each try is an attempt."""
        if isinstance(self.retrying, tenacity.AsyncRetrying):
            wrapped: Any = per_try_async(fn, self.options)  # type: ignore[arg-type,unused-ignore]
        else:
            wrapped = per_try(fn, self.options)
        return self.retrying.wraps(wrapped)

    def __call__(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        if isinstance(self.retrying, tenacity.AsyncRetrying):
            raise TypeError("an AsyncRetrying is awaited: use `await instrumented.acall(...)`")
        return self.retrying(per_try(fn, self.options), *args, **kwargs)

    async def acall(self, fn: Callable[..., Awaitable[R]], *args: Any, **kwargs: Any) -> R:
        if not isinstance(self.retrying, tenacity.AsyncRetrying):
            raise TypeError("acall needs an AsyncRetrying")
        result: R = await self.retrying(per_try_async(fn, self.options), *args, **kwargs)
        return result

    def __iter__(self) -> Iterator[Try]:
        for manager in self.retrying:
            yield Try(manager, self.options)

    async def __aiter__(self) -> AsyncIterator[Try]:
        if not isinstance(self.retrying, tenacity.AsyncRetrying):
            raise TypeError("async iteration needs an AsyncRetrying")
        async for manager in self.retrying:
            yield Try(manager, self.options)


def instrument(
    retrying: tenacity.BaseRetrying,
    *,
    route: str,
    layer: Layer | str = Layer.ADAPTER,
    route_release: str | None = None,
    classify: Classifier = classify_exception,
) -> InstrumentedRetrying:
    """``retrying`` (unchanged; a copy is used) with each try recorded as an attempt."""
    return InstrumentedRetrying(retrying, TryOptions(route, Layer(layer), route_release, classify))
