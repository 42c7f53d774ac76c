"""Record what a streamed response delivered to the caller before it ended.

A stream that fails after output reached the caller cannot be retried or replaced by a
fallback without the caller seeing duplicated or spliced output: its outcome is
``stream_interrupted_after_output`` (indeterminate), and the committed events and bytes are
recorded so reconciliation knows what the caller already has. A failure before any output
is an ordinary failure of the attempt (classified as usual)::

    with req.attempt("primary") as a:
        for chunk in stream(a, response.iter_text()):
            sink.write(chunk)

The wrapper records the time to the first event (ms from the attempt's start), the events
and bytes delivered (bytes for ``bytes`` chunks, characters for ``str``) and the terminal
state: completed, failed_before_output, interrupted_after_output, or abandoned (the caller
stopped iterating early). Recording never disturbs the stream: the source's items and
exceptions reach the caller unchanged, whatever fails in the recording (contained).

Where the caller can tell tentative output from committed output, the control plane's
commit protocol (:mod:`retryscope.control`, ``RetryController.run(..., stream=sink)``) lets
a failed stream be invalidated and the request retried or fallen back without ever
splicing the new output onto the partial one.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import Final, TypeVar

from opentelemetry.util.types import AttributeValue

from retryscope import vocabulary as v
from retryscope.instrumentation._classify import error_type
from retryscope.instrumentation._containment import contained
from retryscope.instrumentation._context import Attempt
from retryscope.vocabulary import OutcomeKind, StreamState

T = TypeVar("T")
_NS_PER_MS: Final = 1_000_000


class _Progress:
    def __init__(self, attempt: Attempt) -> None:
        self.attempt = attempt
        self.events = 0
        self.size = 0
        self.first_ns: int | None = None

    @contained("stream")
    def delivered(self, item: object) -> None:
        if self.first_ns is None:
            self.first_ns = self.attempt.request.clock()
        self.events += 1
        if isinstance(item, bytes | bytearray | memoryview | str):
            self.size += len(item)

    @contained("stream")
    def finish(self, state: StreamState, exc: BaseException | None = None) -> None:
        attrs: dict[str, AttributeValue] = {
            v.STREAM_EVENTS.key: self.events,
            v.STREAM_BYTES_KEY: self.size,
            v.STREAM_STATE_KEY: state.value,
        }
        if self.first_ns is not None and self.attempt.started_at is not None:
            attrs[v.STREAM_FIRST_EVENT_MS_KEY] = (
                self.first_ns - self.attempt.started_at
            ) // _NS_PER_MS
        self.attempt.span.set_attributes(attrs)
        if state is StreamState.INTERRUPTED_AFTER_OUTPUT and exc is not None:
            self.attempt.set_outcome(
                OutcomeKind.STREAM_INTERRUPTED_AFTER_OUTPUT, error=error_type(exc)
            )

    def failed(self, exc: BaseException) -> None:
        if self.events:
            self.finish(StreamState.INTERRUPTED_AFTER_OUTPUT, exc)
        else:
            self.finish(StreamState.FAILED_BEFORE_OUTPUT, exc)


def stream(attempt: Attempt, source: Iterable[T]) -> Iterator[T]:
    """Yield ``source``'s items to the caller, recording delivery on ``attempt``."""
    progress = _Progress(attempt)
    try:
        for item in source:
            progress.delivered(item)
            yield item
    except GeneratorExit:
        progress.finish(StreamState.ABANDONED)
        raise
    except BaseException as exc:
        progress.failed(exc)
        raise
    progress.finish(StreamState.COMPLETED)


async def astream(attempt: Attempt, source: AsyncIterable[T]) -> AsyncIterator[T]:
    """The async twin of :func:`stream`."""
    progress = _Progress(attempt)
    try:
        async for item in source:
            progress.delivered(item)
            yield item
    except GeneratorExit:
        progress.finish(StreamState.ABANDONED)
        raise
    except BaseException as exc:
        progress.failed(exc)
        raise
    progress.finish(StreamState.COMPLETED)
