"""stamina integration: each try an attempt span, through stamina's public hooks.

::

    install_hook()                     # once: adds retryscope's RetryHook to stamina's hooks

    @retry(on=httpx.HTTPError, attempts=3, route="primary", layer="adapter")
    def call_provider(): ...

    for attempt in retry_context(on=httpx.HTTPError, attempts=3, route="primary"):
        with attempt:
            ...

:func:`retry` and :func:`retry_context` take stamina's arguments and open one attempt of the
current logical request per try. The hook receives stamina's ``RetryDetails`` when a retry
is scheduled and records ``wait_for`` as the next try's backoff, ``waited_so_far`` and the
``caused_by`` error type next to it. stamina's other hooks (logging, Prometheus, structlog)
keep running.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, ParamSpec, TypeVar

import stamina
from stamina.instrumentation import RetryDetails, get_on_retry_hooks, set_on_retry_hooks

from retryscope.instrumentation._classify import classify_exception
from retryscope.instrumentation._containment import contained
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


@contained("stamina hook")
def retryscope_hook(details: RetryDetails) -> None:
    """stamina ``RetryHook``: announce the scheduled wait to the next try of this scope."""
    announce_sleep(details.wait_for, waited_s=details.waited_so_far, caused_by=details.caused_by)


def install_hook() -> None:
    """Add :func:`retryscope_hook` to stamina's retry hooks (idempotent)."""
    hooks = get_on_retry_hooks()
    if retryscope_hook not in hooks:
        set_on_retry_hooks((*hooks, retryscope_hook))


def uninstall_hook() -> None:
    """Remove :func:`retryscope_hook`, keeping every other hook."""
    set_on_retry_hooks(tuple(h for h in get_on_retry_hooks() if h is not retryscope_hook))


def retry(
    *,
    on: Any,
    route: str,
    layer: Layer | str = Layer.ADAPTER,
    route_release: str | None = None,
    classify: Classifier = classify_exception,
    **stamina_kwargs: Any,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """``stamina.retry`` whose tries are attempts (the hook is installed on first use)."""
    options = TryOptions(route, Layer(layer), route_release, classify)
    install_hook()

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        inner: Any = (
            per_try_async(fn, options) if inspect.iscoroutinefunction(fn) else per_try(fn, options)
        )
        return stamina.retry(on=on, **stamina_kwargs)(inner)

    return decorate


class _InstrumentedContext:
    def __init__(self, inner: Any, options: TryOptions) -> None:
        self._inner = inner
        self._options = options

    def __iter__(self) -> Iterator[Try]:
        for attempt in self._inner:
            yield Try(attempt, self._options)

    async def __aiter__(self) -> AsyncIterator[Try]:
        async for attempt in self._inner:
            yield Try(attempt, self._options)


def retry_context(
    *,
    on: Any,
    route: str,
    layer: Layer | str = Layer.ADAPTER,
    route_release: str | None = None,
    classify: Classifier = classify_exception,
    **stamina_kwargs: Any,
) -> _InstrumentedContext:
    """``stamina.retry_context`` yielding tries that are attempts (sync or ``async for``)."""
    install_hook()
    return _InstrumentedContext(
        stamina.retry_context(on=on, **stamina_kwargs),
        TryOptions(route, Layer(layer), route_release, classify),
    )
