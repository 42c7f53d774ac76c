"""Carry a logical request across processes on purpose: ``inject`` / ``extract``.

retryscope context never travels implicitly (it is not Baggage, which propagators copy into
every outgoing HTTP request). To continue a logical request in a queue consumer or another
service, the caller puts it into a message carrier explicitly::

    carrier: dict[str, str] = {}
    retryscope.inject(carrier)            # W3C traceparent + the "retryscope" field
    queue.publish(body, headers=carrier)

    # consumer, on each delivery (delivery_count from the broker, 1 on the first):
    with retryscope.extract(msg.headers, delivery_count=msg.delivery_count) as req:
        with req.attempt("worker", layer="queue"):
            handle(msg)

The ``retryscope`` field holds the logical request id, operation, tenant, the idempotency
and request digests (never raw keys or payloads) and their key's id, the policy digest, the
absolute deadline (never reset), the retry owner, the attempts made so far per layer and
the attempt it was injected in (layer, ordinal and the continuation that attempt was
recorded in). Each ``extract`` is a continuation with an id of its own, stamped on every
span it records: an attempt is identified by (continuation, layer, ordinal), so two
continuations (a harness's two tries through one gateway) number their attempts
independently and never collide, and the continuation's outermost attempts name the
carried attempt as their parent, in the other process. Its attempts are numbered after the
carrier's count of their layer (a redelivery of the same carrier is numbered by
``delivery_count``: the queue layer's ordinals run on across deliveries). The
continuation's own span has role ``continuation`` so the logical request is still counted
once.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping, MutableMapping
from typing import Any, Final

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from retryscope.instrumentation._containment import FieldError, contained, field_value
from retryscope.instrumentation._context import (
    CarriedParent,
    Clock,
    LogicalRequest,
    current_scope,
    neutral_request,
)
from retryscope.vocabulary import Layer, SpanRole

CARRIER_FIELD: Final = "retryscope"
MAX_FIELD_CHARS: Final = 4096
_VERSION: Final = 1
_TRACE_CONTEXT: Final = TraceContextTextMapPropagator()


class CarrierError(ValueError):
    """A carrier's retryscope field is missing or malformed (names the problem)."""


@contained("inject", fallback=lambda *args, **kwargs: False)
def inject(
    carrier: MutableMapping[str, str], *, context: otel_context.Context | None = None
) -> bool:
    """Write W3C ``traceparent`` and the ``retryscope`` field of the active logical request;
    True when written.

    Only the trace-context propagator is used, whatever the global propagators are, so no
    Baggage is ever written. Outside a logical request (or into a carrier that cannot take
    it) nothing is written and False returned; the failure is contained (counted, logged
    once).
    """
    scope = current_scope(context)
    if scope is None:
        raise LookupError("retryscope.inject: no logical request is active in this context")
    req = scope.request
    attempt = scope.attempt
    parent = (
        (attempt.layer.value, attempt.ordinal, req.continuation)
        if attempt is not None and attempt.ordinal > 0  # 0: an attempt no ordinal was given
        else req.carried_parent
    )
    body: dict[str, Any] = {
        "v": _VERSION,
        "id": req.id,
        "operation": req.operation,
        "tenant": req.tenant,
        "idempotency_digest": req.idempotency_digest,
        "request_digest": req.request_digest,
        "digest_key_id": req.digest_key_id,
        "policy_digest": req.policy_digest,
        "deadline": req.deadline,
        "retry_owner": req.retry_owner.value if req.retry_owner is not None else None,
        "ordinals": {layer.value: n for layer, n in sorted(req.ordinals().items()) if n},
    }
    if parent is not None:
        body["parent"] = list(parent)
    _TRACE_CONTEXT.inject(carrier, context=context)
    carrier[CARRIER_FIELD] = json.dumps(body, separators=(",", ":"), sort_keys=True)
    req._carried()
    return True


def _optional_str(body: Mapping[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is not None and not isinstance(value, str):
        raise CarrierError(f"retryscope field: {key!r} must be a string, got {value!r}")
    return value


def _decode(carrier: Mapping[str, str]) -> dict[str, Any]:
    raw = carrier.get(CARRIER_FIELD)
    if raw is None:
        raise CarrierError(f"carrier has no {CARRIER_FIELD!r} field: was it injected?")
    if not isinstance(raw, str) or len(raw) > MAX_FIELD_CHARS:
        raise CarrierError(f"retryscope field is not a string of at most {MAX_FIELD_CHARS} chars")
    try:
        body = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise CarrierError(f"retryscope field is not JSON: {exc}") from exc
    if not isinstance(body, dict) or body.get("v") != _VERSION:
        raise CarrierError(f"retryscope field: unsupported version {body!r:.80}")
    if not isinstance(body.get("id"), str) or not isinstance(body.get("operation"), str):
        raise CarrierError("retryscope field: 'id' and 'operation' must be strings")
    deadline = body.get("deadline")
    if deadline is not None and (isinstance(deadline, bool) or not isinstance(deadline, int)):
        raise CarrierError(f"retryscope field: 'deadline' must be unix ns, got {deadline!r}")
    ordinals = body.get("ordinals", {})
    if not isinstance(ordinals, dict):
        raise CarrierError("retryscope field: 'ordinals' must be an object")
    for layer, n in ordinals.items():
        if layer not in Layer.__members__.values():
            raise CarrierError(f"retryscope field: unknown layer {layer!r}")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise CarrierError(f"retryscope field: ordinal of {layer!r} must be an int >= 0")
    _carried_parent(body)
    for key in (
        "tenant",
        "idempotency_digest",
        "request_digest",
        "digest_key_id",
        "policy_digest",
        "retry_owner",
    ):
        _optional_str(body, key)
    return body


def _carried_parent(body: Mapping[str, Any]) -> CarriedParent | None:
    """The carrier's ``parent``: [layer, ordinal >= 1, continuation id or null]."""
    parent = body.get("parent")
    if parent is None:
        return None
    if not isinstance(parent, list) or len(parent) != 3:
        raise CarrierError("retryscope field: 'parent' must be [layer, ordinal, continuation]")
    layer, ordinal, continuation = parent
    if layer not in Layer.__members__.values():
        raise CarrierError(f"retryscope field: unknown parent layer {layer!r}")
    if isinstance(ordinal, bool) or not isinstance(ordinal, int) or ordinal < 1:
        raise CarrierError("retryscope field: the parent's ordinal must be an int >= 1")
    if continuation is not None and not isinstance(continuation, str):
        raise CarrierError("retryscope field: the parent's continuation must be a string")
    return (layer, ordinal, continuation)


def _unidentified_continuation(
    carrier: Any = None,
    *,
    tracer_provider: trace.TracerProvider | None = None,
    clock: Clock = time.time_ns,
    **_: Any,
) -> LogicalRequest:
    """Fallback of a contained :func:`extract` whose carrier cannot be read: a continuation
    of an unidentified request (a new id, its own trace), so the work it does is still
    recorded — and marked, through ``retryscope.contained_errors``."""
    return neutral_request(tracer_provider, clock=clock, role=SpanRole.CONTINUATION)


@contained("extract", fallback=_unidentified_continuation, mark_result=True)
def extract(
    carrier: Mapping[str, str],
    *,
    delivery_count: int = 1,
    tracer_provider: trace.TracerProvider | None = None,
    clock: Clock = time.time_ns,
) -> LogicalRequest:
    """The logical request carried by ``carrier``, continued here (use it as ``with``).

    ``delivery_count`` is the broker's 1-based delivery number of this message: on a
    redelivery the queue attempt gets the next ordinal even though the carrier is unchanged.
    A carrier that cannot be read is contained (counted, logged once with the
    :class:`CarrierError` naming the problem): the work is recorded under a continuation of
    an unidentified request instead.
    """
    if isinstance(delivery_count, bool) or not isinstance(delivery_count, int):
        raise FieldError("delivery_count", f"must be an int >= 1, got {delivery_count!r:.40}", 1)
    if delivery_count < 1:
        raise FieldError("delivery_count", f"must be >= 1, got {delivery_count}", 1)
    body = _decode(carrier)
    base = {Layer(layer): n for layer, n in body.get("ordinals", {}).items()}
    base[Layer.QUEUE] = base.get(Layer.QUEUE, 0) + delivery_count - 1
    parent = _TRACE_CONTEXT.extract(carrier)
    from retryscope import __version__

    tracer = field_value(
        "tracer_provider",
        lambda: trace.get_tracer("retryscope", __version__, tracer_provider=tracer_provider),
    )
    return LogicalRequest(
        tracer,  # type: ignore[arg-type]
        operation=body["operation"],
        tenant=body.get("tenant"),
        idempotency_key=None,
        request=None,
        deadline=body.get("deadline"),
        retry_owner=body.get("retry_owner"),
        logical_request_id=body["id"],
        policy_digest=body.get("policy_digest"),
        clock=clock,
        attributes=None,
        role=SpanRole.CONTINUATION,
        parent_context=parent,
        ordinal_base=base,
        digests=(body.get("idempotency_digest"), body.get("request_digest")),
        carried_key_id=body.get("digest_key_id"),
        continuation=uuid.uuid4().hex[:16],
        carried_parent=_carried_parent(body),
    )
