"""One attempt span per try of a retry library, shared by the tenacity and stamina adapters.

A retry library calls the user's function (or runs a ``with attempt:`` block) once per try
and decides the sleep after the try has ended. So each try opens an attempt of the current
logical request (layer and route as the user declares them) and the library's scheduled
sleep is announced with :meth:`LogicalRequest.schedule_backoff`, to be recorded on the next
try as its backoff delay. Outside a logical request a try runs untouched: there is nothing to
attribute it to.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, ParamSpec, TypeVar

from opentelemetry.util.types import AttributeValue

from retryscope import vocabulary as v
from retryscope.instrumentation._classify import classify_exception, error_type
from retryscope.instrumentation._containment import contained
from retryscope.instrumentation._context import Attempt, current_scope
from retryscope.vocabulary import Layer, OutcomeKind

P = ParamSpec("P")
R = TypeVar("R")

Classifier = Callable[[BaseException], OutcomeKind | str]
"""Maps an exception a try raised to its failure kind."""


@dataclass(frozen=True, slots=True)
class TryOptions:
    """How tries of one retry loop are recorded."""

    route: str
    layer: Layer = Layer.ADAPTER
    route_release: str | None = None
    classify: Classifier = classify_exception
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "layer", Layer(self.layer))


@contained("retry library: open a try")
def open_try(options: TryOptions) -> Attempt | None:
    """A new (not yet entered) attempt in the current logical request, or None outside one."""
    scope = current_scope()
    if scope is None:
        return None
    return scope.request.attempt(
        options.route,
        route_release=options.route_release,
        layer=options.layer,
        attributes=options.attributes or None,
    )


@contained("retry library: close a try")
def _close(attempt: Attempt, options: TryOptions, exc: BaseException | None) -> None:
    try:
        if exc is not None and attempt.outcome is None:
            attempt.set_outcome(options.classify(exc), error=error_type(exc))
    finally:  # a classifier that raises still leaves the attempt closed
        attempt.__exit__(type(exc) if exc else None, exc, exc.__traceback__ if exc else None)


@contained("retry library: announce a sleep")
def announce_sleep(
    delay_s: float | None,
    *,
    waited_s: float | None = None,
    caused_by: BaseException | None = None,
) -> None:
    """The retry library scheduled a sleep: record it on the next try of this scope."""
    scope = current_scope()
    if scope is None:
        return
    attrs: dict[str, AttributeValue] = {}
    if waited_s is not None:
        attrs[v.WAITED_SO_FAR_MS_KEY] = max(0, int(waited_s * 1000))
    if caused_by is not None:
        attrs[v.CAUSED_BY_KEY] = error_type(caused_by)
    delay = None if delay_s is None else max(0, int(delay_s * 1000))
    scope.request.schedule_backoff(delay_ms=delay, attributes=attrs)


class Try(AbstractContextManager[Attempt | None]):
    """Wraps one try's context manager (tenacity's or stamina's) with an attempt span.

    The attempt is entered inside the library's manager and closed before it, so the span
    sees the exception before the library swallows it to decide on a retry. Other attributes
    (tenacity's ``retry_state``, stamina's ``num``) are the library manager's.
    """

    def __init__(self, inner: AbstractContextManager[Any], options: TryOptions) -> None:
        self._inner = inner
        self._options = options
        self._attempt: Attempt | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __enter__(self) -> Attempt | None:
        self._inner.__enter__()
        attempt = open_try(self._options)
        self._attempt = attempt.__enter__() if attempt is not None else None
        return self._attempt

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        if self._attempt is not None:
            _close(self._attempt, self._options, exc)
        return self._inner.__exit__(exc_type, exc, tb)


def per_try(fn: Callable[P, R], options: TryOptions) -> Callable[P, R]:
    """``fn`` with each call recorded as one attempt."""

    @functools.wraps(fn)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        attempt = open_try(options)
        if attempt is None:
            return fn(*args, **kwargs)
        attempt.__enter__()
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            _close(attempt, options, exc)
            raise
        _close(attempt, options, None)
        return result

    return call


def per_try_async(fn: Callable[P, Awaitable[R]], options: TryOptions) -> Callable[P, Awaitable[R]]:
    """The coroutine-function twin of :func:`per_try`."""

    @functools.wraps(fn)
    async def call(*args: P.args, **kwargs: P.kwargs) -> R:
        attempt = open_try(options)
        if attempt is None:
            return await fn(*args, **kwargs)
        attempt.__enter__()
        try:
            result = await fn(*args, **kwargs)
        except BaseException as exc:
            _close(attempt, options, exc)
            raise
        _close(attempt, options, None)
        return result

    return call
