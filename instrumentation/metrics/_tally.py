"""One logical request's live figures, counted as its attempt spans end.

An attempt is counted once, when its span ends, from what the span holds then: its own
values (layer, route, outcome and kind, retry owner, cost, backoff, Retry-After,
``not_before``, time left) and the place the recorder gave it when it started (ordinal,
enclosing attempt, operation). An HTTP send that recorded no outcome is classified by its
status with :data:`~retryscope.http_rules.STATUS_RULES` (the table the
analytics' ``rs_http_outcome`` macro is rendered from). The request's counts grow with
each attempt; when the request span ends, :meth:`RequestTally.ended` adds what only that
span says (terminal, deadline, allowed data boundary, required route) and returns the
frozen :class:`Figures` the processor records. Nothing of a span is kept but a few values
of its successes and fallbacks.

The counts follow the audit model (``analytics/sql``); they are counted in the order the
attempts end, which is the model's order whenever the attempts of one retry group do not
overlap:

* a **retry** is a non-hedge attempt after a failed one of its group (same layer,
  enclosing attempt and, for sends, operation); a group's non-hedge attempts are its size,
  the **nested-retry product** multiplies each retried layer's largest;
* a **send** is an attempt no other attempt names as its enclosing one (those beneath it
  end first); of each operation's sends (an attempt that is no HTTP send: operation 1) all
  but the first to start are **resends**, and the request's **operations** are the largest
  operation among its sends;
* an attempt is **accepted** when it succeeded, its decision was ``complete`` (or none), it
  is no cancelled hedge and its request completed (or recorded no terminal): the cost of
  the others is wasted; the **fallback** and **widened data boundary** figures are
  ``request_facts.sql``'s, from the accepted attempts and those on a fallback route.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from opentelemetry.trace import SpanContext, Status, StatusCode

from retryscope import vocabulary as v
from retryscope.http_rules import (
    NO_RESPONSE_KIND,
    OTHER_STATUS_KIND,
    classify_status,
)
from retryscope.instrumentation.metrics._instruments import FallbackQuality
from retryscope.vocabulary import BOUNDARY_RANK, Decision, HedgeResult, Layer, Outcome, Terminal

_SUCCESS: Final = Outcome.SUCCESS.value
_COMPLETE: Final = Decision.COMPLETE.value
_CANCELLED: Final = HedgeResult.CANCELLED.value
_COMPLETE_TERMINAL: Final = Terminal.COMPLETE.value
_STOP_DEADLINE: Final = Terminal.STOP_DEADLINE.value
_LAYER_RANK: Final = {layer.value: rank for rank, layer in enumerate(Layer)}
_BOUNDARY_RANK: Final = {b.value: rank for b, rank in BOUNDARY_RANK.items()}
_NO_RESPONSE: Final = (NO_RESPONSE_KIND.family.value, NO_RESPONSE_KIND.value)
_HTTP_STATUS: Final = v.HTTP_STATUS_CODE.key
_OLD_HTTP_STATUS: Final = v.HTTP_STATUS_CODE.aliases[0]  # older HTTP semantic conventions
_HTTP_METHOD: Final = v.HTTP_METHOD.key
_OLD_HTTP_METHOD: Final = v.HTTP_METHOD.aliases[0]
_IDEMPOTENCY: Final = v.IDEMPOTENCY_DIGEST.key

_LAYER: Final = v.LAYER.key
_ROUTE: Final = v.ROUTE_ID.key
_OUTCOME: Final = v.OUTCOME.key
_KIND: Final = v.OUTCOME_KIND.key
_OWNER: Final = v.RETRY_OWNER.key
_ORDINAL: Final = v.ATTEMPT_ORDINAL.key
_PARENT_LAYER: Final = v.PARENT_LAYER.key
_PARENT_ORDINAL: Final = v.PARENT_ATTEMPT_ORDINAL.key
_OPERATION_ORDINAL: Final = v.OPERATION_ORDINAL.key
_HEDGE: Final = v.HEDGE_ORDINAL.key
_FALLBACK: Final = v.FALLBACK.key
_REMAINING: Final = v.DEADLINE_REMAINING_MS.key
_BACKOFF: Final = v.BACKOFF_DELAY_MS.key
_RETRY_AFTER: Final = v.RETRY_AFTER_MS.key
_NOT_BEFORE: Final = v.NOT_BEFORE.key
_RESERVED: Final = v.COST_RESERVED.key
_ACTUAL: Final = v.COST_ACTUAL.key
_SUCCESS_KEYS: Final = (
    v.DECISION.key,
    v.HEDGE_RESULT.key,
    v.DEADLINE.key,
    v.ROUTE_DATA_BOUNDARY.key,
)
_BOUNDARY: Final = v.ROUTE_DATA_BOUNDARY.key
_CAPABILITY: Final = v.ROUTE_CAPABILITY_DIGEST.key
_BEHAVIOR: Final = v.ROUTE_BEHAVIOR_CLASS.key
_ESTIMATED: Final = v.COST_ESTIMATED.key
_CURRENCY: Final = v.COST_CURRENCY.key
_TENANT: Final = v.TENANT.key
_OPERATION: Final = v.OPERATION.key

Place = tuple[Any, Any]
"""A layer and route as the spans hold them."""
Counted = tuple[Any, Any, Any, Any, Any, bool, bool | None]
"""Layer, route, outcome, kind, retry owner, retry, send (None: none; True: a resend)."""
Sample = tuple[str, int, Place, SpanContext | None]
"""A backoff (``"backoff"``) or Retry-After (``"retry_after"``) value, its place and span."""
Cost = tuple[Any, Any, bool, bool, int]
"""Currency, route, accepted (before the request's terminal), estimated, micro-units."""


def _int(value: object) -> int | None:
    """An integer attribute (a ``bool`` or another type reads as absent, as in Parquet)."""
    return value if type(value) is int else None


def _str(value: object) -> str | None:
    return value if type(value) is str else None


def _layer_rank(layer: Any) -> int:
    return _LAYER_RANK.get(layer or "", len(_LAYER_RANK))


def _within(boundary: Any, allowed: Any) -> bool | None:
    rank, limit = _BOUNDARY_RANK.get(boundary or ""), _BOUNDARY_RANK.get(allowed or "")
    return None if rank is None or limit is None else rank <= limit


def _equal(a: Any, b: str | None) -> bool | None:
    return None if a is None or b is None else a == b


def _quality(capability: bool | None, behavior: bool | None, boundary: bool | None) -> str:
    if capability is None or behavior is None or boundary is None:
        return FallbackQuality.UNVERIFIED.value
    if capability and boundary:
        return (FallbackQuality.BOUND if behavior else FallbackQuality.DEGRADED).value
    return FallbackQuality.MISMATCH.value


def _http_kinds() -> dict[int, tuple[str, str | None]]:
    """(outcome, kind) of every status a rule names, by ``2 * status + idempotent``."""
    table: dict[int, tuple[str, str | None]] = {}
    for status in range(100, 600):
        for idempotent in (False, True):
            kind = classify_status(status, idempotent=idempotent)
            family = (_SUCCESS, None) if kind is None else (kind.family.value, kind.value)
            table[2 * status + idempotent] = family
    return table


_HTTP_KINDS: Final = _http_kinds()
_OTHER_STATUS: Final = (OTHER_STATUS_KIND.family.value, OTHER_STATUS_KIND.value)


def http_outcome(attrs: Mapping[str, Any], status: Status | None) -> tuple[Any, Any]:
    """(outcome, kind) of an HTTP send that recorded no outcome, by its status code
    (``rs_http_outcome``/``_kind``, from the same table); without one, a failed send (span
    ``status`` ``ERROR``) got no response, else it says nothing (None, None)."""
    code = attrs.get(_HTTP_STATUS)
    if code is None:
        code = attrs.get(_OLD_HTTP_STATUS)
    if type(code) is not int:
        failed = status is not None and status.status_code is StatusCode.ERROR
        return _NO_RESPONSE if failed else (None, None)
    idempotent = attrs.get(_IDEMPOTENCY) is not None
    return _HTTP_KINDS.get(2 * code + idempotent, _OTHER_STATUS)


@dataclass(frozen=True, slots=True)
class Fallback:
    """A request that dispatched to a fallback route."""

    from_route: Any
    to_route: Any
    success: bool
    quality: str | None
    """On a success only (a :class:`FallbackQuality` value)."""


@dataclass(frozen=True, slots=True)
class Figures:
    """What one request's attempts came to, and (``request`` True: its span ended here)
    the request's own figures; for a continuation, or a request recorded while still open,
    the attempts' only."""

    attempts: dict[tuple[Any, Any, Any, Any, Any, bool], int]
    """Attempts by layer, route, outcome, kind, retry owner and retry."""
    sends: dict[tuple[Any, Any, Any, bool], int]
    """Sends by layer, route, retry owner and resend."""
    durations: dict[Place, list[float]]
    """Each attempt's duration (ms) by place, in the order they ended."""
    remaining: dict[Place, list[int]]
    """The time left at dispatch (ms) of the attempts that had a deadline."""
    violations: dict[Place, int]
    """Attempts started before their ``not_before``."""
    samples: list[Sample]
    costs: list[Cost]
    complete: bool
    """The request completed (or recorded no terminal): an accepted attempt's cost is not
    wasted."""
    tenant: Any
    operation: Any
    """The request's tenant and operation (from its span, else from its first attempt)."""
    request: bool = False
    terminal: str | None = None
    retry_owner: str | None = None
    receiver: int = 0
    operations: int = 0
    nested_product: int | None = None
    deadline_exhausted: bool = False
    late_success: bool = False
    fallback: Fallback | None = None
    widened: tuple[Any, Any] | None = None
    """The route and boundary of the accepted attempt beyond the allowed boundary."""


class RequestTally:
    """The counts of one request's attempts so far (see the module's rules). Not
    thread-safe: the processor calls it under its lock."""

    __slots__ = (
        "_accepted",
        "_entry",
        "_fallbacks",
        "_first_keys",
        "_firsts",
        "_groups",
        "_keys",
        "_late",
        "_late_end",
        "_named",
        "costs",
        "counted",
        "durations",
        "operation",
        "operations",
        "remaining",
        "samples",
        "tenant",
        "violations",
    )

    def __init__(self) -> None:
        self.counted: dict[Counted, int] = {}
        """The attempts by layer, route, outcome, kind, retry owner, retry and send (None:
        no send, False: its operation's first, True: a resend)."""
        self.durations: dict[Place, list[float]] = {}
        self.remaining: dict[Place, list[int]] = {}
        self.violations: dict[Place, int] = {}
        self.samples: list[Sample] = []
        self.costs: list[Cost] = []
        self.operations = 0
        self.tenant: Any = None
        self.operation: Any = None
        self._groups: dict[tuple[Any, Any, Any], dict[int | None, int]] = {}
        """Per layer and enclosing attempt (its layer and ordinal), per operation (None: no
        send), the retry group's state: 2 × its non-hedge attempts, + 1 when its last
        attempt failed."""
        self._named: dict[Any, set[int | None]] = {}
        """By layer, the ordinals of the attempts another attempt named as its enclosing
        one."""
        self._firsts: dict[int, int] = {}
        """Per operation: its first send's start and span id, as ``start << 64 | span_id``
        (an int: a request of many operations holds no object per operation that the
        garbage collector tracks)."""
        self._first_keys: dict[int, Counted] = {}
        """Per operation: its first send's key in :attr:`counted`, one of :attr:`_keys`."""
        self._keys: dict[Counted, Counted] = {}
        """Each key counted as an operation's first send, once."""
        self._entry: tuple[int, Any, Any] | None = None
        """Start, route and boundary of the first top-level attempt."""
        self._accepted: list[tuple[int, Any, Any]] = []
        """Layer rank, route and boundary of the accepted attempts that name a boundary."""
        self._fallbacks: list[tuple[int, int, Any, bool, Any, Any, Any]] = []
        """Layer rank, start, route, accepted, capability, behaviour and boundary of each
        attempt on a fallback route."""
        self._late = False
        self._late_end: int | None = None
        """The last end of a success with no deadline of its own (the request's decides)."""

    def add(
        self,
        attrs: Mapping[str, Any],
        ended: tuple[Any, Any, Any, Any, Any, Any],
        enclosing: tuple[Any, Any] | None = None,
    ) -> None:
        """Count one ended attempt span: its attributes; its context, span id, parent span
        id, start, end and status (``_sdk.ended_fields``); and ``enclosing``, the (layer,
        ordinal) of the attempt whose span it started in when it names none itself."""
        get = attrs.get  # (one read per key: cheaper than unpacking a ``map`` of them)
        layer = get(_LAYER)
        route = get(_ROUTE)
        outcome = get(_OUTCOME)
        kind = get(_KIND)
        owner = get(_OWNER)
        ordinal = get(_ORDINAL)
        parent_layer = get(_PARENT_LAYER)
        parent_ordinal = get(_PARENT_ORDINAL)
        operation = get(_OPERATION_ORDINAL)
        hedge = get(_HEDGE)
        fallback = get(_FALLBACK)
        remaining = get(_REMAINING)
        backoff = get(_BACKOFF)
        retry_after = get(_RETRY_AFTER)
        not_before = get(_NOT_BEFORE)
        reserved = get(_RESERVED)
        actual = get(_ACTUAL)
        context, span_id, _, start, end, status = ended
        start = start or 0
        end = end or start
        if outcome is None and (  # an HTTP send says it by its status
            attrs.get(_HTTP_METHOD) is not None or attrs.get(_OLD_HTTP_METHOD) is not None
        ):
            code = attrs.get(_HTTP_STATUS)
            if type(code) is int:  # (http_outcome's common case, inline)
                safe = attrs.get(_IDEMPOTENCY) is not None
                outcome, http_kind = _HTTP_KINDS.get(2 * code + safe, _OTHER_STATUS)
            else:
                outcome, http_kind = http_outcome(attrs, status)
            if kind is None:
                kind = http_kind
        counted = self.counted
        if not counted:
            self.tenant, self.operation = attrs.get(_TENANT), attrs.get(_OPERATION)
        top = parent_layer is None
        if top and enclosing is not None:
            parent_layer, parent_ordinal = enclosing
        elif type(parent_ordinal) is not int:
            parent_ordinal = None
        if type(operation) is not int:
            operation = None
        succeeded = outcome == _SUCCESS
        hedged = type(hedge) is int and hedge != 0

        # the retry group: its size and whether its last attempt failed
        enclosed = (layer, parent_layer, parent_ordinal)
        groups = self._groups.get(enclosed)
        if groups is None:
            groups = self._groups[enclosed] = {}
        state = groups.get(operation, 0)
        retry = state & 1 == 1 and not hedged
        groups[operation] = (state | 1) + (0 if hedged else 2) - (1 if succeeded else 0)

        # a send unless another attempt named it as its enclosing one (those end first)
        named = self._named
        if parent_layer is not None:
            ordinals = named.get(parent_layer)
            if ordinals is None:
                named[parent_layer] = {parent_ordinal}
            elif parent_ordinal not in ordinals:
                ordinals.add(parent_ordinal)
        if (
            named
            and (ordinals := named.get(layer))
            and ((ordinal if type(ordinal) is int else None) in ordinals)
        ):
            key: Counted = (layer, route, outcome, kind, owner, retry, None)
        else:
            sent = 1 if operation is None else operation
            order = start << 64 | span_id
            firsts = self._firsts
            first = firsts.get(sent)
            if first is None or order < first:  # its operation's first to start
                key = (layer, route, outcome, kind, owner, retry, False)
                key = self._keys.setdefault(key, key)
                firsts[sent] = order
                if first is None:
                    if sent > self.operations:
                        self.operations = sent
                else:
                    self._resent(self._first_keys[sent])
                self._first_keys[sent] = key
            else:
                key = (layer, route, outcome, kind, owner, retry, True)
        counted[key] = counted.get(key, 0) + 1

        place = (layer, route)
        durations = self.durations.get(place)
        if durations is None:
            durations = self.durations[place] = []
        durations.append((end - start) / 1e6)
        if type(remaining) is int:
            left = self.remaining.get(place)
            if left is None:
                self.remaining[place] = [remaining]
            else:
                left.append(remaining)

        accepted = False
        boundary = None
        if succeeded:
            decision, result, deadline, boundary = map(attrs.get, _SUCCESS_KEYS)
            if type(deadline) is not int:
                if self._late_end is None or end > self._late_end:
                    self._late_end = end
            elif end > deadline:
                self._late = True
            accepted = (decision is None or decision == _COMPLETE) and (
                result is None or result != _CANCELLED
            )
            if accepted and boundary is not None:
                self._accepted.append((_layer_rank(layer), route, boundary))
        elif top:
            boundary = attrs.get(_BOUNDARY)
        if top and enclosing is None and (self._entry is None or start < self._entry[0]):
            self._entry = (start, route, boundary)
        if fallback is True:
            capability = behavior = None
            if succeeded:
                capability, behavior = attrs.get(_CAPABILITY), attrs.get(_BEHAVIOR)
            self._fallbacks.append(
                (_layer_rank(layer), start, route, accepted, capability, behavior, boundary)
            )
        if (
            backoff is not None
            or retry_after is not None
            or not_before is not None
            or reserved is not None
            or actual is not None
        ):
            extra = (backoff, retry_after, not_before, reserved, actual)
            self._extra(attrs, place, start, context, accepted, *extra)

    def _resent(self, was: Counted) -> None:
        """The send counted as its operation's first (``was``) started after another: it is
        a resend."""
        counted = self.counted
        counted[was] -= 1
        now = (*was[:6], True)
        counted[now] = counted.get(now, 0) + 1

    def _extra(
        self,
        attrs: Mapping[str, Any],
        place: Place,
        start: int,
        context: SpanContext | None,
        accepted: bool,
        backoff: Any,
        retry_after: Any,
        not_before: Any,
        reserved: Any,
        actual: Any,
    ) -> None:
        """An attempt's cost, backoff, Retry-After and ``not_before``."""
        if type(reserved) is not int:
            reserved = None
        if type(actual) is not int:
            actual = None
        if actual is not None or reserved is not None:
            estimated = attrs.get(_ESTIMATED)
            self.costs.append(
                (
                    attrs.get(_CURRENCY),
                    place[1],
                    accepted,
                    actual is None or estimated is True,
                    actual if actual is not None else reserved or 0,
                )
            )
        if type(not_before) is int and start < not_before:
            self.violations[place] = self.violations.get(place, 0) + 1
        if type(backoff) is int:
            self.samples.append(("backoff", backoff, place, context))
        if type(retry_after) is int:
            self.samples.append(("retry_after", retry_after, place, context))

    def ended(self, request: Mapping[str, Any] | None) -> Figures:
        """The figures, with the request's own when its span ended here (``request``: that
        span's attributes; None for a continuation or a request recorded while open)."""
        attempts: dict[tuple[Any, Any, Any, Any, Any, bool], int] = {}
        sends: dict[tuple[Any, Any, Any, bool], int] = {}
        for (layer, route, outcome, kind, owner, retry, send), n in self.counted.items():
            tried = (layer, route, outcome, kind, owner, retry)
            attempts[tried] = attempts.get(tried, 0) + n
            if send is not None and n:
                sent = (layer, route, owner, send)
                sends[sent] = sends.get(sent, 0) + n
        counted = (
            attempts,
            sends,
            self.durations,
            self.remaining,
            self.violations,
            self.samples,
            self.costs,
        )
        if request is None:
            return Figures(*counted, complete=True, tenant=self.tenant, operation=self.operation)
        terminal = _str(request.get(v.TERMINAL.key))
        complete = terminal is None or terminal == _COMPLETE_TERMINAL
        deadline = _int(request.get(v.DEADLINE.key))
        late = self._late or (
            deadline is not None and self._late_end is not None and self._late_end > deadline
        )
        largest: dict[Any, int] = {}
        for (layer, _, _), by_operation in self._groups.items():
            most = max(by_operation.values()) >> 1
            if most > largest.get(layer, 0):
                largest[layer] = most
        retried = [n for n in largest.values() if n > 1]
        allowed: Any = _str(request.get(v.MAX_DATA_BOUNDARY.key))
        if allowed is None and self._entry is not None:
            allowed = self._entry[2]
        widened = None
        if complete and allowed in _BOUNDARY_RANK:
            beyond = [a for a in self._accepted if _within(a[2], allowed) is False]
            if beyond:
                widened = min(beyond, key=lambda a: a[0])[1:]
        return Figures(
            *counted,
            complete=complete,
            tenant=_str(request.get(v.TENANT.key)),
            operation=_str(request.get(v.OPERATION.key)),
            request=True,
            terminal=terminal,
            retry_owner=_str(request.get(v.RETRY_OWNER.key)),
            receiver=sum(sends.values()),
            operations=self.operations,
            nested_product=math.prod(retried) if len(retried) >= 2 else None,
            deadline_exhausted=terminal == _STOP_DEADLINE,
            late_success=late,
            fallback=self._fallback(request, complete, allowed),
            widened=widened,
        )

    def _fallback(
        self, request: Mapping[str, Any], complete: bool, allowed: Any
    ) -> Fallback | None:
        """The request's fallback: the accepted fallback attempt of the outermost layer, or
        the last one to start of the outermost layer when none was accepted."""
        fallbacks = self._fallbacks
        if not fallbacks:
            return None
        entry = self._entry[1] if self._entry is not None else None
        answered = [f for f in fallbacks if f[3]] if complete else []
        if not answered:
            outermost = min(f[0] for f in fallbacks)
            last = max((f for f in fallbacks if f[0] == outermost), key=lambda f: f[1])
            return Fallback(entry, last[2], False, None)
        chosen = min(answered, key=lambda f: f[0])
        quality = _quality(
            _equal(chosen[4], _str(request.get(v.REQUIRED_CAPABILITY_DIGEST.key))),
            _equal(chosen[5], _str(request.get(v.REQUIRED_BEHAVIOR_CLASS.key))),
            _within(chosen[6], allowed),
        )
        return Fallback(entry, chosen[2], True, quality)
