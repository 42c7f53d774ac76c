"""What a physical send is, and which sends repeat one another.

A **send** is the innermost HTTP client span: one request on the wire. A span with sends
beneath it is a **call** (an SDK's API call wrapping its retry loop, a router call, an HTTP
instrumentation's span around another one's sends), never itself a send. The stamping
processor sees a span's parent still open when a send starts beneath it, so a span first
taken for a send (any HTTP client span, or a known SDK call span) becomes a call the moment
a send starts inside it: its role is rewritten to ``call`` and its first send takes over
the ordinals it held, so the transport ordinals stay 1, 2, 3, … without a gap.

Under one parent attempt, sends are grouped into **operations**. A send is a **resend** of
an earlier operation only when

* it runs inside the same call (an SDK call's sends are its retries);
* the client's own retry evidence says so (``x-stainless-retry-count``,
  ``amz-sdk-request: attempt=N``, urllib3's retry history, a router's attempt count), or it
  carries the same client call key (botocore's invocation id, a router's trace id);
* or it repeats the same request (same method, URL and body, by a digest computed in
  process: :func:`~._digests.send_digest`, never stored) after that request's latest send
  failed or got no answer. This holds with no client evidence, and also when the client
  calls the repeat its first try (``x-stainless-retry-count: 0``, a new botocore
  invocation): then a loop above the client retried without marking its tries, and the
  resend is that loop's (:data:`~retryscope.vocabulary.CALLER_RETRY_LAYER`), numbered as
  the caller's next try of the operation (:data:`~retryscope.vocabulary.OPERATION_TRY`).
  A repeat after a success, or while the earlier send is still in flight, is a new call.

The rule is decided here, once, because only the recorder has its evidence: the body digest
never leaves the process, and whether the earlier send failed is known when it ends. The
analytics and the live metrics read what it decided (operation, resend layer, try).

Everything else is a distinct call: a new operation of its parent attempt. Operations are
numbered per parent attempt in order of their first send
(:data:`~retryscope.vocabulary.OPERATION_ORDINAL`), so the analytics count sends per
distinct operation, and a multi-call attempt without retries reads amplification 1.0.

One :class:`SendLedger` per logical request holds this state; every method is called with
the request's lock held.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, NamedTuple

from opentelemetry.trace import Span

from retryscope.vocabulary import CALLER_RETRY_LAYER, SPAN_ROLE, Layer, SpanRole

ParentKey = tuple[Layer, int] | None
"""The parent attempt of a send within its request: (layer, ordinal); None at the top."""

Ordinals = tuple[int, int, int]
"""(attempt ordinal, route ordinal, sibling ordinal) of a transport attempt."""

_CALL: Final = SpanRole.CALL.value
_ROLE_KEY: Final = SPAN_ROLE.key


@dataclass(frozen=True, slots=True)
class SendEvidence:
    """What a client integration knows about one send.

    ``digest``: :func:`~._digests.send_digest` of method, URL and body (None: body unknown or
    streamed); ``retry_count``: the client's own count of earlier tries of this call (0 on
    its first try); ``call_key``: an id the client gives every try of one call;
    ``retry_layer``: the layer whose retry loop would make a resend.
    """

    digest: str | None = None
    retry_count: int | None = None
    call_key: str | None = None
    retry_layer: Layer | None = None


NO_EVIDENCE: Final = SendEvidence()


RetryLayer = Layer | str
"""The layer whose loop made a resend: an attempt :class:`Layer`, or
:data:`~retryscope.vocabulary.CALLER_RETRY_LAYER`."""


class _Operation:
    __slots__ = ("call_key", "digest", "failed", "ordinal", "sends", "tries")

    def __init__(self, ordinal: int, digest: str | None, call_key: str | None) -> None:
        self.ordinal = ordinal
        self.digest = digest
        self.call_key = call_key
        """What it was first indexed under."""
        self.sends = 0
        self.failed = False
        """Its latest send ended without success (False while one is in flight)."""
        self.tries = 1
        """The caller's tries of it (a repeat after a failure its client calls a first try)."""


class _Operations:
    """The operations under one parent attempt, indexed by what a send is matched on: its
    digest and its call key (each to the latest operation that has it), so placing a send
    costs the same however many distinct calls came before it. An operation with neither is
    kept only while it is the latest (the one a client's retry without a digest repeats).
    Kept until the request ends: about 240 bytes per distinct call with a digest (its
    digest, the operation and the index entry)."""

    __slots__ = ("by_call_key", "by_digest", "count", "last")

    def __init__(self) -> None:
        self.count = 0
        self.last: _Operation | None = None
        self.by_digest: dict[str, _Operation] = {}
        self.by_call_key: dict[str, _Operation] = {}

    def add(self, digest: str | None, call_key: str | None, ordinal: int | None) -> _Operation:
        """A new operation, numbered after the earlier ones (or ``ordinal``, when the
        numbering is shared with other processes)."""
        self.count = self.count + 1 if ordinal is None else ordinal
        op = self.last = _Operation(self.count, digest, call_key)
        if digest is not None:
            self.by_digest[digest] = op
        if call_key is not None:
            self.by_call_key[call_key] = op
        return op

    def match(self, evidence: SendEvidence) -> _Operation | None:
        """The earlier operation this send repeats, or None for a distinct call."""
        retry_count = evidence.retry_count
        if evidence.call_key is not None:
            same = self.by_call_key.get(evidence.call_key)
            if same is not None or retry_count != 0:
                return same
        elif retry_count:  # the client's own retry of a call
            same = self.by_digest.get(evidence.digest) if evidence.digest is not None else None
            return same if same is not None else self.last
        # (:meth:`failed`, inline: every send that is no client retry comes here)
        same = self.by_digest.get(evidence.digest) if evidence.digest is not None else None
        return same if same is not None and same.failed else None

    def failed(self, digest: str | None) -> _Operation | None:
        """The latest operation with ``digest`` when its latest send failed: the same
        request again is then a retry of it."""
        same = self.by_digest.get(digest) if digest is not None else None
        return same if same is not None and same.failed else None

    def retract(self, op: _Operation, into: _Operation) -> bool:
        """Take back ``op``, the latest operation, placed for a span that turned into a call
        before any send of it, whose first send repeats ``into``: what found ``op`` finds
        ``into``. False when ``op`` is not the latest or has sends."""
        if op is not self.last or op.sends or op.ordinal != self.count:
            return False
        self.count -= 1
        self.last = into
        if op.digest is not None and self.by_digest.get(op.digest) is op:
            self.by_digest[op.digest] = into
        if op.call_key is not None and self.by_call_key.get(op.call_key) is op:
            self.by_call_key[op.call_key] = into
        return True


class _Open:
    """An open span taken for a send that may still turn out to be a call."""

    __slots__ = ("call", "handover", "layer", "operation", "parent_key", "span")

    def __init__(
        self,
        span: Span,
        parent_key: ParentKey,
        operation: _Operation,
        ordinals: Ordinals | None,
        layer: Layer | None,
    ) -> None:
        self.span = span
        self.parent_key = parent_key
        self.operation = operation
        self.handover = ordinals
        """Ordinals the first send inside it takes over once it is a call."""
        self.layer = layer
        """Layer of the call's own retry loop (``sdk`` for a known SDK call span)."""
        self.call = False


class SendPlace(NamedTuple):
    """Where a new send belongs: its operation under its parent, the number of earlier
    sends of that operation, the layer that retried (resends only), and the ordinals it
    takes over from a span that became a call (None: allocate new ones). An immutable
    tuple: built for every send, it costs less than a frozen dataclass."""

    operation: int
    resend_count: int
    retry_layer: RetryLayer | None
    handover: Ordinals | None
    entry: _Operation
    """The ledger's record of the operation (for the ledger only)."""
    tries: int
    """The caller's try of the operation this send belongs to (1: no caller repeated it)."""


_new_place: Final = tuple.__new__
"""Builds a :class:`SendPlace` from its fields in order without the Python-level
``__new__`` a NamedTuple's constructor runs (once per send)."""


class SendLedger:
    """Operations, open sends and calls, and the earliest next start of one logical request.
    Every method is called with the request's lock held."""

    __slots__ = ("_operations", "not_before", "numbering", "open")

    def __init__(self) -> None:
        self._operations: dict[ParentKey, _Operations] = {}
        self.open: dict[int, _Open] = {}
        """Span id -> the send still open (read without the lock: only then can a new send
        be part of a call)."""
        self.numbering: Callable[[ParentKey], int] | None = None
        """The next operation ordinal under a parent, when operations are numbered across
        processes (None: numbered here)."""
        self.not_before: int | None = None
        """Earliest start (unix ns) a Retry-After received on a send asks of the next
        attempt at any layer; taken by that attempt."""

    def place(
        self, parent_key: ParentKey, parent_span_id: int | None, evidence: SendEvidence
    ) -> SendPlace:
        """Place a new send whose direct parent span is ``parent_span_id``."""
        enclosing = self.open.get(parent_span_id) if parent_span_id is not None else None
        if enclosing is not None:
            return self._place_in_call(enclosing, parent_key, evidence)
        ops = self._operations.get(parent_key)
        if ops is None:
            ops = self._operations[parent_key] = _Operations()
        return self._placed(ops, parent_key, evidence, ops.match(evidence), None)

    def _place_in_call(
        self, call: _Open, parent_key: ParentKey, evidence: SendEvidence
    ) -> SendPlace:
        op = call.operation
        handover, call.handover = call.handover, None
        if not call.call:
            # The span taken for a send has a send beneath it: it is a call.
            call.call = True
            call.span.set_attribute(_ROLE_KEY, _CALL)
            op.sends -= 1
            if evidence.retry_count == 0:
                # its client calls this its first try: the send's own evidence (its body
                # digest) places the call, not the span's (its URL, or nothing): a new call,
                # or a repeat of a failed one by a loop above the client
                ops = self._operations.setdefault(call.parent_key, _Operations())
                repeated = ops.failed(evidence.digest)
                if op.sends > 0 or (repeated is not None and ops.retract(op, repeated)):
                    place = self._placed(ops, call.parent_key, evidence, repeated, handover)
                    call.operation = place.entry
                    return place
                if evidence.digest is not None:
                    ops.by_digest[evidence.digest] = op
        resend = op.sends
        op.sends += 1
        op.failed = False
        layer = (evidence.retry_layer or call.layer) if resend else None
        return _new_place(SendPlace, (op.ordinal, resend, layer, handover, op, op.tries))

    @staticmethod
    def ended(op: _Operation, failed: bool) -> None:
        """A send of ``op`` (or the call it became) ended; ``failed``: without success."""
        op.failed = failed

    def _placed(
        self,
        ops: _Operations,
        parent_key: ParentKey,
        evidence: SendEvidence,
        op: _Operation | None,
        handover: Ordinals | None,
    ) -> SendPlace:
        """Place a send among ``ops`` (under ``parent_key``) in ``op``, the operation it
        repeats (None: a new one), taking over ``handover``: its operation, resends before
        it and the layer that retried (resends only)."""
        if op is None:
            numbering = self.numbering
            op = ops.add(
                evidence.digest,
                evidence.call_key,
                numbering(parent_key) if numbering is not None else None,
            )
            resend = evidence.retry_count or 0  # a retry whose first try was not seen
            layer: RetryLayer | None = evidence.retry_layer if resend else None
        else:
            resend = op.sends
            if evidence.retry_count == 0:  # its client's first try: a loop above it retried
                op.tries += 1
                layer = CALLER_RETRY_LAYER
                if evidence.call_key is not None:
                    ops.by_call_key[evidence.call_key] = op
            else:
                layer = evidence.retry_layer if resend else None
        op.sends += 1
        op.failed = False
        return _new_place(SendPlace, (op.ordinal, resend, layer, handover, op, op.tries))

    def operation_counts(self) -> dict[ParentKey, int]:
        """Operations numbered so far per parent attempt."""
        return {key: ops.count for key, ops in self._operations.items()}

    def forked(self) -> None:
        """In a forked child: forget the sends of the process it was forked from (a call
        of the child is never taken for a resend of another process's call)."""
        self._operations.clear()
        self.open.clear()
        self.not_before = None

    def opened(
        self,
        span_id: int,
        span: Span,
        parent_key: ParentKey,
        place: SendPlace,
        ordinals: Ordinals | None,
        call_layer: Layer | None = None,
    ) -> None:
        """Register an open send that may still turn out to be a call when a send starts
        beneath it (``ordinals``: what its first send then takes over; ``call_layer``: the
        layer whose retries its sends would be)."""
        self.open[span_id] = _Open(span, parent_key, place.entry, ordinals, call_layer)

    def closed(self, span_id: int, failed: bool | None = None) -> _Operation | None:
        """The open send ``span_id`` ended (``failed``: without success; None: not known);
        its operation, if it was open."""
        entry = self.open.pop(span_id, None)
        if entry is None:
            return None
        if failed is not None:
            entry.operation.failed = failed
        return entry.operation

    def note_retry_after(self, at_ns: int, delay_ms: int) -> None:
        """A send received a Retry-After at ``at_ns``: no attempt should start before."""
        earliest = at_ns + delay_ms * 1_000_000
        if self.not_before is None or earliest > self.not_before:
            self.not_before = earliest

    def take_not_before(self) -> int | None:
        """The pending earliest start, for the attempt starting now (then cleared)."""
        value, self.not_before = self.not_before, None
        return value
