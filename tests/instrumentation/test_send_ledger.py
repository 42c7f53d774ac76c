"""The send ledger's matching rule at its boundaries, however many calls came before.

A send repeats the latest earlier operation of its parent attempt with its call key, else
(with a client retry count above 0) the latest with its digest or the latest of all, else
the latest with its digest when that operation's latest send failed (a repeat the client
calls its first try is then the caller's retry); everything else is a new operation. These
hold for an operation 10,000 distinct calls back as for the one just before.
"""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider

from retryscope.instrumentation._sends import ParentKey, SendEvidence, SendLedger
from retryscope.vocabulary import CALLER_RETRY_LAYER, Layer

ATTEMPT: ParentKey = (Layer.HARNESS, 1)
EARLIER = 10_000


def _place(
    ledger: SendLedger,
    evidence: SendEvidence,
    parent: ParentKey = ATTEMPT,
    *,
    failed: bool | None = True,
) -> tuple[int, int]:
    """Place a send and end it (``failed``: without success; None: left in flight)."""
    place = ledger.place(parent, None, evidence)
    if failed is not None:
        ledger.ended(place.entry, failed)
    return place.operation, place.resend_count


def _long_attempt(ledger: SendLedger, first: SendEvidence) -> None:
    """``first``, then :data:`EARLIER` distinct calls, in one attempt."""
    assert _place(ledger, first) == (1, 0)
    for i in range(EARLIER):
        assert _place(ledger, SendEvidence(digest=f"distinct-{i}")) == (i + 2, 0)


def test_the_same_request_long_after_is_a_resend_of_its_operation() -> None:
    ledger = SendLedger()
    _long_attempt(ledger, SendEvidence(digest="same"))
    assert _place(ledger, SendEvidence(digest="same")) == (1, 1)
    assert _place(ledger, SendEvidence(digest="same")) == (1, 2)
    assert _place(ledger, SendEvidence(digest="new")) == (EARLIER + 2, 0)
    assert _place(ledger, SendEvidence()) == (EARLIER + 3, 0)  # nothing to match on
    assert _place(ledger, SendEvidence(digest="same"), (Layer.HARNESS, 2)) == (1, 0)


def test_a_digest_repeats_the_latest_operation_that_has_it() -> None:
    ledger = SendLedger()
    _long_attempt(ledger, SendEvidence(digest="same", retry_count=0))
    first_try = SendEvidence(digest="same", retry_count=0)
    assert _place(ledger, first_try, failed=False) == (1, 1)  # the caller's retry: it worked
    assert _place(ledger, first_try) == (EARLIER + 2, 0)  # after a success: a new call
    assert _place(ledger, SendEvidence(digest="same")) == (EARLIER + 2, 1)
    assert _place(ledger, SendEvidence(digest="same", retry_count=1)) == (EARLIER + 2, 2)


def test_a_repeat_is_a_resend_only_after_a_failure() -> None:
    """The same request again after a success, or while the earlier send is in flight, is
    a distinct call; after a failure it is a resend, with or without client evidence."""
    ledger = SendLedger()
    assert _place(ledger, SendEvidence(digest="a"), failed=False) == (1, 0)
    assert _place(ledger, SendEvidence(digest="a"), failed=None) == (2, 0)
    assert _place(ledger, SendEvidence(digest="a")) == (3, 0)  # the first is still in flight
    assert _place(ledger, SendEvidence(digest="a")) == (3, 1)
    assert _place(ledger, SendEvidence(digest="a"), failed=False) == (3, 2)
    assert _place(ledger, SendEvidence(digest="a")) == (4, 0)


def test_a_first_try_repeating_a_failed_send_is_the_callers_retry() -> None:
    """The client calls the repeat its first try (``x-stainless-retry-count: 0``): a loop
    above it retried. The resend is the caller's, numbered as its next try; the client's own
    retries within that try stay the client's."""
    ledger = SendLedger()
    first = SendEvidence(digest="chat", retry_count=0, retry_layer=Layer.SDK)
    sdk_retry = SendEvidence(digest="chat", retry_count=1, retry_layer=Layer.SDK)
    places = []
    for evidence in (first, sdk_retry, first, sdk_retry, first):
        place = ledger.place(ATTEMPT, None, evidence)
        ledger.ended(place.entry, True)
        places.append((place.operation, place.resend_count, place.retry_layer, place.tries))
    assert places == [
        (1, 0, None, 1),
        (1, 1, Layer.SDK, 1),
        (1, 2, CALLER_RETRY_LAYER, 2),
        (1, 3, Layer.SDK, 2),
        (1, 4, CALLER_RETRY_LAYER, 3),
    ]
    # a new call with its own key after a failure of the same request: the caller's retry
    keyed = SendEvidence(digest="s3", call_key="inv-1", retry_count=0)
    assert _place(ledger, keyed) == (2, 0)
    again = SendEvidence(digest="s3", call_key="inv-2", retry_count=0)
    assert _place(ledger, again) == (2, 1)
    assert _place(ledger, SendEvidence(call_key="inv-2", retry_count=1)) == (2, 2)


def test_a_call_key_wins_over_the_digest() -> None:
    ledger = SendLedger()
    _long_attempt(ledger, SendEvidence(digest="same", call_key="k1"))
    assert _place(ledger, SendEvidence(digest="other", call_key="k1")) == (1, 1)
    assert _place(ledger, SendEvidence(digest="same", call_key="k2")) == (EARLIER + 2, 0)
    assert _place(ledger, SendEvidence(call_key="k2", retry_count=0)) == (EARLIER + 2, 1)
    assert _place(ledger, SendEvidence(digest="same")) == (EARLIER + 2, 2)
    assert _place(ledger, SendEvidence(call_key="k3")) == (EARLIER + 3, 0)


def test_a_client_retry_repeats_its_digest_or_else_the_latest_operation() -> None:
    ledger = SendLedger()
    unseen_first_try = _place(ledger, SendEvidence(retry_count=2), (Layer.HARNESS, 2))
    assert unseen_first_try == (1, 2)
    _long_attempt(ledger, SendEvidence(digest="same"))
    assert _place(ledger, SendEvidence(digest="same", retry_count=1)) == (1, 1)
    assert _place(ledger, SendEvidence(digest="unseen", retry_count=1)) == (EARLIER + 1, 1)
    assert _place(ledger, SendEvidence(retry_count=1)) == (EARLIER + 1, 2)
    assert _place(ledger, SendEvidence()) == (EARLIER + 2, 0)
    assert _place(ledger, SendEvidence(retry_count=1)) == (EARLIER + 2, 1)


def test_a_call_key_repeats_the_latest_operation_that_has_it() -> None:
    """A send taken for a resend by its digest whose first send inside it is a client's first
    try makes a new operation: with that send's call key, the latest to have it."""
    ledger = SendLedger()
    _long_attempt(ledger, SendEvidence(digest="same", call_key="k"))
    place = ledger.place(ATTEMPT, None, SendEvidence(digest="same"))
    assert (place.operation, place.resend_count) == (1, 1)
    span = TracerProvider().get_tracer(__name__).start_span("POST")
    span_id = span.get_span_context().span_id
    ledger.opened(span_id, span, ATTEMPT, place, (1, 1, 1))
    inside = ledger.place(ATTEMPT, span_id, SendEvidence(call_key="k", retry_count=0))
    assert (inside.operation, inside.resend_count) == (EARLIER + 2, 0)
    span.end()
    ledger.closed(span_id)
    assert _place(ledger, SendEvidence(call_key="k", retry_count=1)) == (EARLIER + 2, 1)
