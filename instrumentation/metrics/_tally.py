"""One logical request's live figures, from its attempt spans as they end.

An attempt is read once, when its span ends, from what the span holds then: its own
values (layer, route, outcome and kind, retry owner, cost, backoff, Retry-After,
``not_before``, time left) and the place the recorder gave it when it started (ordinal,
enclosing attempt, operation: the :data:`~retryscope.instrumentation._open_sends.Sent`
handed over for a send the stamping processor made, else its attributes). An HTTP send
that recorded no outcome is classified by its status with
:data:`~retryscope.http_rules.STATUS_RULES` (the table the analytics' ``rs_http_outcome``
macro is rendered from). Each attempt is kept as one
:data:`Row` (its group, order, key and hedge: plain values, no span); durations, time left,
costs and samples are summed as they come. When the request span ends,
:meth:`RequestTally.ended` sorts the rows into their groups, counts them, adds what only
that span says (terminal, deadline, allowed data boundary, required route) and returns the
frozen :class:`Figures` the processor records.

The counts follow the audit model (``analytics/sql``), whatever order the attempts ended
in:

* a **retry** is a non-hedge attempt after a failed one of its group (same layer,
  enclosing attempt and, for sends, operation) in the model's order (ordinal, start, span
  id); a group's non-hedge attempts are its size, the **nested-retry product** multiplies
  each retried layer's largest (a group of sends a caller above the client repeated holds
  two loops: the caller's tries, and the client's sends within the largest try);
* a **send** is an attempt no other attempt names as its enclosing one (even one that
  ended after it); of each operation's sends (an attempt that is no HTTP send: operation
  1) all but the first to start are **resends**, and the request's **operations** are the
  largest operation among its sends;
* an attempt is **accepted** when it succeeded, its decision was ``complete`` (or none), it
  is no cancelled hedge and its request completed (or recorded no terminal): the cost of
  the others is wasted; the **fallback** and **widened data boundary** figures are
  ``request_facts.sql``'s, from the accepted attempts and those on a fallback route.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Final

from opentelemetry.trace import SpanContext, Status, StatusCode

from retryscope import vocabulary as v
from retryscope.http_rules import (
    NO_RESPONSE_KIND,
    OTHER_STATUS_KIND,
    classify_status,
)
from retryscope.instrumentation._open_sends import Sent
from retryscope.instrumentation._sdk import Ended
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
_DECISION: Final = v.DECISION.key
_HEDGE_RESULT: Final = v.HEDGE_RESULT.key
_DEADLINE: Final = v.DEADLINE.key
_TRY: Final = v.OPERATION_TRY.key
_CALLER: Final = v.CALLER_RETRY_LAYER
_RARE: Final = (
    _HEDGE,
    _DECISION,
    _HEDGE_RESULT,
    _BACKOFF,
    _RETRY_AFTER,
    _NOT_BEFORE,
    _RESERVED,
    _ACTUAL,
    _TRY,
)
"""Values most attempts lack: read only when one of them is there (a tuple: ``isdisjoint``
walks it faster than a set's table)."""
_SEND_OPTIONAL: Final = (
    *_RARE,
    _OUTCOME,
    _KIND,
    _REMAINING,
    _FALLBACK,
    _DEADLINE,
    v.ROUTE_DATA_BOUNDARY.key,
)
"""Values a send the recorder placed hardly ever carries: read only when one is there."""
_NO_ORDINAL: Final = 1 << 64
"""What an attempt without an ordinal sorts by: after every one (the model's NULLS LAST)."""
_PARENT: Final = itemgetter(0, 1)
_NO_GROUP: Final[Any] = object()
"""The enclosing layer of no group: before the first row."""
_BOUNDARY: Final = v.ROUTE_DATA_BOUNDARY.key
_CAPABILITY: Final = v.ROUTE_CAPABILITY_DIGEST.key
_BEHAVIOR: Final = v.ROUTE_BEHAVIOR_CLASS.key
_ESTIMATED: Final = v.COST_ESTIMATED.key
_CURRENCY: Final = v.COST_CURRENCY.key
_TENANT: Final = v.TENANT.key
_OPERATION: Final = v.OPERATION.key

Route = tuple[Any, Any]
"""A layer and route as the spans hold them."""
Key = tuple[Any, Any, Any, Any, Any]
"""An attempt's layer, route, outcome, kind and retry owner."""
GroupKey = tuple[Any, int, int, Any]
"""A retry group: enclosing attempt's layer ("": none) and ordinal (-1: none), operation (-1:
no send) and layer."""
Row = tuple[Any, int, int, Any, int, int, int, Any, Any, Any, Any, bool]
"""An attempt as counted at the request's end: its :data:`GroupKey`, ordinal
(:data:`_NO_ORDINAL`: none), start and span id (the model's order in its group), route,
outcome, kind, retry owner and hedge. One tuple of plain values per attempt is all a request
keeps until it ends (the garbage collector stops tracking such a tuple the first time it
sees it), and sorting the rows puts each group's attempts together, in order."""
Attempts = dict[tuple[Any, Any, Any, Any, Any, bool], int]
Sends = dict[tuple[Any, Any, Any, bool], int]
Sample = tuple[str, int, Route, SpanContext | None]
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


def _accepted(decision: Any, result: Any) -> bool:
    """A success is accepted when its decision was ``complete`` (or none) and it is no
    cancelled hedge."""
    return (decision is None or decision == _COMPLETE) and (result is None or result != _CANCELLED)


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

    attempts: Attempts
    """Attempts by layer, route, outcome, kind, retry owner and retry."""
    sends: Sends
    """Sends by layer, route, retry owner and resend."""
    durations: dict[Route, list[float]]
    """Each attempt's duration (ms) by place, in the order they ended."""
    remaining: dict[Route, list[int]]
    """The time left at dispatch (ms) of the attempts that had a deadline."""
    violations: dict[Route, int]
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


def _key(row: Row) -> Key:
    return (row[3], row[7], row[8], row[9], row[10])


def _sortable(row: Row) -> tuple[str, int, int, str, int, int, int]:
    """A row's place in its request when its group's values do not compare (a layer
    attribute of another type than ``str``): the same groups, the same order in each."""
    return (repr(row[0]), row[1], row[2], repr(row[3]), row[4], row[5], row[6])


class RequestTally:
    """The attempts of one request so far (see the module's rules). Not thread-safe: the
    processor calls it under its lock."""

    __slots__ = (
        "_accepted",
        "_entry",
        "_fallbacks",
        "_late",
        "_late_end",
        "_tries",
        "costs",
        "durations",
        "operation",
        "operations",
        "remaining",
        "request_end",
        "rows",
        "samples",
        "tenant",
        "violations",
    )

    def __init__(self) -> None:
        self.rows: list[Row] = []
        """The attempts counted so far, in the order they ended."""
        self._tries: dict[GroupKey, dict[int, int]] = {}
        """Per group of sends a caller above the client repeated: its tries 2, 3, … and
        their non-hedge sends (the model's ``operation_try``)."""
        self.durations: dict[Route, list[float]] = {}
        self.remaining: dict[Route, list[int]] = {}
        self.violations: dict[Route, int] = {}
        self.samples: list[Sample] = []
        self.costs: list[Cost] = []
        self.operations = 0
        """The request's operations, as of the last :meth:`ended`."""
        self.tenant: Any = None
        self.operation: Any = None
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
        self.request_end: tuple[Mapping[str, Any], SpanContext | None] | None = None
        """The request span's attributes and context, when it ended while a continuation
        of it was still open in this process."""

    @property
    def attempts(self) -> int:
        """The attempts counted so far."""
        return len(self.rows)

    def add(
        self,
        attrs: Mapping[str, Any],
        ended: Ended,
        enclosing: tuple[Any, Any] | None = None,
        sent: Sent | None = None,
        span_id: int | None = None,
    ) -> None:
        """Count one ended attempt span: its attributes; its context, start, end and status
        (``_sdk.ended_fields``, read before the processor's lock is taken: reading a span
        may run its class's code); ``enclosing``, the (layer, ordinal) of the attempt
        whose span it started in when it names none itself; for a send the stamping
        processor made, ``sent`` (its place) and ``span_id``."""
        get = attrs.get  # (one read per key: cheaper than unpacking a ``map`` of them)
        layer = get(_LAYER)
        route = get(_ROUTE)
        owner = get(_OWNER)
        # the values most attempts (and nearly every send) lack, read only when one is there
        optional = sent is None or not attrs.keys().isdisjoint(_SEND_OPTIONAL)
        if optional:
            outcome, kind = get(_OUTCOME), get(_KIND)
            rare = not attrs.keys().isdisjoint(_RARE)
        else:
            outcome = kind = None
            rare = False
        context, start, end, status = ended
        if span_id is None:
            span_id = context.span_id if context is not None else 0
        start = start or 0
        end = end or start
        if outcome is None and (  # an HTTP send says it by its status
            get(_HTTP_METHOD) is not None or get(_OLD_HTTP_METHOD) is not None
        ):
            code = get(_HTTP_STATUS)
            if type(code) is int:  # (http_outcome's common case, inline)
                safe = get(_IDEMPOTENCY) is not None
                outcome, http_kind = _HTTP_KINDS.get(2 * code + safe, _OTHER_STATUS)
            else:
                outcome, http_kind = http_outcome(attrs, status)
            if kind is None:
                kind = http_kind
        rows = self.rows
        if not rows:
            self.tenant, self.operation = get(_TENANT), get(_OPERATION)
        if sent is None:  # not placed by the recorder: where its attributes say
            ordinal = get(_ORDINAL)
            parent_layer = get(_PARENT_LAYER)
            parent_ordinal = get(_PARENT_ORDINAL)
            operation = get(_OPERATION_ORDINAL)
            top = parent_layer is None
            if top:
                if enclosing is None:
                    parent_layer = ""
                else:
                    parent_layer, parent_ordinal = enclosing
            if type(parent_ordinal) is not int:
                parent_ordinal = -1
            if type(ordinal) is not int:
                ordinal = _NO_ORDINAL
            if type(operation) is not int:
                operation = -1
        else:
            _, parent_layer, parent_ordinal, stamped = sent
            ordinal, operation = stamped[_ORDINAL], stamped[_OPERATION_ORDINAL]
            top = parent_layer == ""
        hedged = False
        if rare:
            hedge = get(_HEDGE)
            hedged = type(hedge) is int and hedge != 0
            caller_try = get(_TRY)
            if type(caller_try) is int and not hedged:
                tries = self._tries.setdefault((parent_layer, parent_ordinal, operation, layer), {})
                tries[caller_try] = tries.get(caller_try, 0) + 1
        rows.append(
            (
                parent_layer,
                parent_ordinal,
                operation,
                layer,
                ordinal,
                start,
                span_id,
                route,
                outcome,
                kind,
                owner,
                hedged,
            )
        )
        route_key = (layer, route)
        durations = self.durations.get(route_key)
        if durations is None:
            self.durations[route_key] = [(end - start) / 1e6]
        else:
            durations.append((end - start) / 1e6)
        if optional:
            remaining, fallback = get(_REMAINING), get(_FALLBACK)
            deadline, boundary = get(_DEADLINE), get(_BOUNDARY)
            if type(remaining) is int:
                left = self.remaining.get(route_key)
                if left is None:
                    self.remaining[route_key] = [remaining]
                else:
                    left.append(remaining)
        else:
            fallback = deadline = boundary = None

        accepted = False
        if outcome == _SUCCESS:
            if type(deadline) is not int:
                if self._late_end is None or end > self._late_end:
                    self._late_end = end
            elif end > deadline:
                self._late = True
            accepted = not rare or _accepted(get(_DECISION), get(_HEDGE_RESULT))
            if accepted and boundary is not None:
                self._accepted.append((_layer_rank(layer), route, boundary))
        elif not top:
            boundary = None
        if top and enclosing is None and (self._entry is None or start < self._entry[0]):
            self._entry = (start, route, boundary)
        if fallback is True:
            capability = behavior = None
            if outcome == _SUCCESS:
                capability, behavior = get(_CAPABILITY), get(_BEHAVIOR)
            self._fallbacks.append(
                (_layer_rank(layer), start, route, accepted, capability, behavior, boundary)
            )
        if rare:
            self._rare(attrs, route_key, start, context, accepted)

    def _rare(
        self,
        attrs: Mapping[str, Any],
        place: Route,
        start: int,
        context: SpanContext | None,
        accepted: bool,
    ) -> None:
        """An attempt's cost, backoff, Retry-After and ``not_before``."""
        get = attrs.get
        reserved, actual = _int(get(_RESERVED)), _int(get(_ACTUAL))
        if actual is not None or reserved is not None:
            self.costs.append(
                (
                    get(_CURRENCY),
                    place[1],
                    accepted,
                    actual is None or get(_ESTIMATED) is True,
                    actual if actual is not None else reserved or 0,
                )
            )
        not_before = get(_NOT_BEFORE)
        if type(not_before) is int and start < not_before:
            self.violations[place] = self.violations.get(place, 0) + 1
        backoff, retry_after = get(_BACKOFF), get(_RETRY_AFTER)
        if type(backoff) is int:
            self.samples.append(("backoff", backoff, place, context))
        if type(retry_after) is int:
            self.samples.append(("retry_after", retry_after, place, context))

    def _count(self) -> tuple[Attempts, Sends, dict[Any, int]]:
        """The attempts by retry and the sends by resend, in the model's order, and the
        largest retry group's non-hedge attempts per layer. Sets :attr:`operations`."""
        rows = self.rows
        try:
            rows.sort()
        except TypeError:
            rows.sort(key=_sortable)
        named: dict[Any, set[int]] = {}
        for parent_layer, parent_ordinal in set(map(_PARENT, rows)):
            if parent_layer != "":
                named.setdefault(parent_layer, set()).add(parent_ordinal)
        plain: dict[Key, int] = {}
        retried: dict[Key, int] = {}
        firsts: dict[Key, int] = {}
        resent: dict[Key, int] = {}
        first_sends: dict[int, Row] = {}
        largest: dict[Any, int] = {}
        group: GroupKey = (_NO_GROUP, -1, -1, None)
        failed = multiple = False
        size = sent = 0
        ordinals: set[int] | None = None
        for row in rows:
            (
                parent,
                parent_ordinal,
                operation,
                layer,
                ordinal,
                start,
                span_id,
                route,
                outcome,
                kind,
                owner,
                hedged,
            ) = row
            if (
                operation != group[2]
                or layer != group[3]
                or parent_ordinal != group[1]
                or parent != group[0]
            ):
                if multiple:  # the group before: its largest
                    self._largest(largest, group, size)
                group = row[:4]
                failed = multiple = False
                size = 0
                ordinals = named.get(layer) if named else None
                sent = 1 if operation < 0 else operation
            else:
                multiple = True
            key = (layer, route, outcome, kind, owner)
            if hedged:
                counted = plain
            else:
                counted = retried if failed else plain
                size += 1
            counted[key] = counted.get(key, 0) + 1
            failed = outcome != _SUCCESS
            if ordinals is not None and (-1 if ordinal == _NO_ORDINAL else ordinal) in ordinals:
                continue  # an enclosing attempt: no send
            first = first_sends.get(sent)
            if first is None:
                first_sends[sent] = row
                firsts[key] = firsts.get(key, 0) + 1
            elif start > first[5] or (start == first[5] and span_id > first[6]):
                resent[key] = resent.get(key, 0) + 1
            else:  # the first so far started after this one: a resend
                was = _key(first)
                firsts[was] -= 1
                resent[was] = resent.get(was, 0) + 1
                first_sends[sent] = row
                firsts[key] = firsts.get(key, 0) + 1
        if multiple:
            self._largest(largest, group, size)
        self.operations = max(first_sends, default=0)
        attempts: Attempts = {}
        for retry, counted in ((False, plain), (True, retried)):
            for (layer, route, outcome, kind, owner), n in counted.items():
                attempts[layer, route, outcome, kind, owner, retry] = n
        sends: Sends = {}
        for resend, counted in ((False, firsts), (True, resent)):
            for (layer, route, _, _, owner), n in counted.items():
                if n:
                    key4 = (layer, route, owner, resend)
                    sends[key4] = sends.get(key4, 0) + n
        return attempts, sends, largest

    def _largest(self, largest: dict[Any, int], group: GroupKey, size: int) -> None:
        """A retry group of more than one attempt (``size``: its non-hedge attempts) in
        ``largest``: the largest group per layer, and the caller's
        tries when a caller above the client repeated its sends (two loops: the caller's
        tries, the client's sends within the largest try)."""
        layer = group[3]
        tries = self._tries.get(group) if self._tries else None
        if tries:
            size = max(size - sum(tries.values()), *tries.values())
            if max(tries) > largest.get(_CALLER, 0):
                largest[_CALLER] = max(tries)
        if size > largest.get(layer, 0):
            largest[layer] = size

    def ended(self, request: Mapping[str, Any] | None) -> Figures:
        """The figures, with the request's own when its span ended here (``request``: that
        span's attributes; None for a continuation or a request recorded while open)."""
        attempts, sends, largest = self._count()
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
