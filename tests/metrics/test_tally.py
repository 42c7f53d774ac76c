"""A request's tally at the boundaries of its rules: which attempts are resends, retries,
sends, which values read as absent. Ended spans are real SDK ``ReadableSpan`` objects."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext

from retryscope import vocabulary as v
from retryscope.instrumentation._sdk import ended_fields
from retryscope.instrumentation.metrics._tally import RequestTally

MS = 1_000_000


def _ended(tally: RequestTally, span_id: int, start: int, **attrs: Any) -> None:
    """An attempt span ``span_id`` that started at ``start`` (ms) and lasted 5 ms."""
    attributes = {
        v.SPAN_ROLE.key: v.SpanRole.ATTEMPT.value,
        v.LAYER.key: "transport",
        v.ROUTE_ID.key: "p",
        **{getattr(v, name.upper()).key: value for name, value in attrs.items()},
    }
    span = ReadableSpan(
        "attempt",
        context=SpanContext(1, span_id, is_remote=False),
        attributes=attributes,
        start_time=start * MS,
        end_time=(start + 5) * MS,
    )
    tally.add(attributes, ended_fields(span))


def _sends(tally: RequestTally) -> dict[tuple[Any, ...], int]:
    """Sends by layer, route, retry owner and resend, as the processor records them."""
    return {key: n for key, n in tally.ended(None).sends.items() if n}


def _resends(tally: RequestTally) -> dict[str, int]:
    return {("resend" if key[3] else "first"): n for key, n in _sends(tally).items()}


@pytest.mark.parametrize("arrival", ["in order", "reversed"])
def test_of_an_operations_sends_all_but_the_first_to_start_are_resends(arrival: str) -> None:
    """The receiver's order is by start (then span id), whatever order the sends end in."""
    tally = RequestTally()
    sends = [(1, 0, "a"), (2, 10, "b")]  # span id, start, route
    for span_id, start, route in sends if arrival == "in order" else reversed(sends):
        _ended(tally, span_id, start, route_id=route, operation_ordinal=1)
    assert {key[1]: key[3] for key in _sends(tally)} == {"a": False, "b": True}
    assert (sum(_sends(tally).values()), tally.operations) == (2, 1)


@pytest.mark.parametrize("first", [1, 2])
def test_sends_that_started_together_are_ordered_by_span_id(first: int) -> None:
    tally = RequestTally()
    for span_id in (first, 3 - first):
        _ended(tally, span_id, 0, route_id=f"r{span_id}", operation_ordinal=1)
    assert {key[1]: key[3] for key in _sends(tally)} == {"r1": False, "r2": True}


def test_distinct_operations_are_no_resends_and_the_largest_is_the_count() -> None:
    tally = RequestTally()
    for span_id, operation in ((1, 1), (2, 3), (3, 1)):
        _ended(tally, span_id, span_id, operation_ordinal=operation)
    assert _resends(tally) == {"first": 2, "resend": 1}
    assert tally.operations == 3
    plain = RequestTally()  # attempts that are no HTTP send: operation 1
    _ended(plain, 1, 0)
    _ended(plain, 2, 10)
    assert (_resends(plain), plain.operations) == ({"first": 1, "resend": 1}, 1)


def test_an_attempt_named_as_enclosing_is_no_send() -> None:
    tally = RequestTally()
    _ended(tally, 2, 1, parent_layer="harness", parent_attempt_ordinal=1)
    _ended(tally, 3, 2, layer="harness", attempt_ordinal=2)  # another harness attempt: a send
    _ended(tally, 1, 0, layer="harness", attempt_ordinal=1)
    assert {key[0]: n for key, n in _sends(tally).items()} == {"transport": 1, "harness": 1}


def test_an_attempt_started_in_another_attempt_s_span_is_beneath_it() -> None:
    tally = RequestTally()
    attributes = {v.LAYER.key: "sdk", v.ROUTE_ID.key: "p"}
    span = ReadableSpan("sdk", context=SpanContext(1, 2, is_remote=False), attributes=attributes)
    tally.add(attributes, ended_fields(span), enclosing=("harness", 1))
    _ended(tally, 1, 0, layer="harness", attempt_ordinal=1)
    assert {key[0]: n for key, n in _sends(tally).items()} == {"sdk": 1}


def _attempts(tally: RequestTally) -> dict[tuple[Any, ...], int]:
    return tally.ended(None).attempts


def _retries(tally: RequestTally) -> list[bool]:
    return [key[5] for key, n in _attempts(tally).items() for _ in range(n)]


def test_a_retry_follows_a_failure_of_its_group_and_a_hedge_is_none() -> None:
    tally = RequestTally()
    for span_id, outcome, hedge in (
        (1, "retryable", None),
        (2, "success", None),  # after a failure: a retry
        (3, "retryable", None),  # after a success: none
        (4, "success", 1),  # a hedge: none
        (5, "success", None),  # after the hedge's success: none
    ):
        _ended(
            tally, span_id, span_id, outcome=outcome, hedge_ordinal=hedge, attempt_ordinal=span_id
        )
    retried = {(key[2], key[5]): n for key, n in _attempts(tally).items()}
    assert retried == {("retryable", False): 2, ("success", True): 1, ("success", False): 2}


@pytest.mark.parametrize(
    ("field", "values"),
    [
        ("layer", ("harness", "sdk")),
        ("parent_layer", (None, "harness")),
        ("parent_attempt_ordinal", (1, 2)),
        ("operation_ordinal", (1, 2)),
    ],
)
def test_attempts_of_different_groups_are_no_retries_of_one_another(
    field: str, values: tuple[object, object]
) -> None:
    """A failure and then a success that differ in one part of the retry group's key: two
    groups of one attempt each, so no retry (and no nested product)."""
    tally = RequestTally()
    for span_id, (outcome, value) in enumerate(
        zip(("retryable", "success"), values, strict=True), 1
    ):
        attrs: dict[str, Any] = {"outcome": outcome, "attempt_ordinal": 1, field: value}
        if field == "parent_attempt_ordinal":
            attrs["parent_layer"] = "harness"
        _ended(tally, span_id, span_id * 10, **attrs)
    assert _retries(tally) == [False, False]
    same = RequestTally()
    for span_id, outcome in ((1, "retryable"), (2, "success")):
        _ended(same, span_id, span_id * 10, outcome=outcome, **{field: values[0]})
    assert sorted(_retries(same)) == [False, True]


def test_numbers_and_flags_of_another_type_read_as_absent() -> None:
    """As the Parquet columns hold them: a bool is no int, a string no bool."""
    tally = RequestTally()
    _ended(
        tally,
        1,
        0,
        outcome="success",
        backoff_delay_ms=True,
        retry_after_ms="200",
        fallback="yes",
        cost_reserved=1.5,
        deadline_remaining_ms="9",
        route_id=7,  # strings are bounded where they are recorded, not dropped
    )
    figures = tally.ended({v.TERMINAL.key: "complete"})
    assert (figures.samples, figures.costs, figures.remaining, figures.fallback) == (
        [],
        [],
        {},
        None,
    )
    assert list(figures.durations) == [("transport", 7)]


def test_a_success_after_its_deadline_is_late() -> None:
    for own, request, late in (
        (4, None, True),
        (5, None, False),
        (None, 4, True),
        (None, 5, False),
    ):
        tally = RequestTally()  # (the attempt ends at 5 ms)
        _ended(tally, 1, 0, outcome="success", deadline=None if own is None else own * MS)
        ended = {v.DEADLINE.key: request * MS} if request is not None else {}
        assert tally.ended(ended).late_success is late, (own, request)
