"""grpcio integration: each blocking gRPC call inside a logical request is one send.

grpcio retries in its C core: a ``retryPolicy`` in the channel's service config, and the
transparent retries of a call that never reached the server application, run below every
Python API. A client interceptor (the contrib ``GrpcInstrumentorClient`` is one) sees the
call, not its attempts; the retried attempts add ``grpc-previous-rpc-attempts`` to the
request metadata the *server* sees, and nothing of them comes back to the client (not in
the initial or trailing metadata). The only per-attempt hooks grpcio has are C++ ones
(``grpc._observability``'s ``ClientCallTracer`` capsule, which ``grpcio-observability``
implements and reports as aggregated metrics, one plugin per process) and a
call-credentials plugin, which refuses every call on an insecure channel. So a gRPC call
is recorded as **one send**, whatever number of attempts the channel made for it; the
clients guide (``docs/guides/clients.md``) gives the evidence. A ``hedgingPolicy`` is not
implemented by grpcio's core: it sends one attempt.

:func:`instrument` wraps ``_blocking`` of grpcio's unary-unary and stream-unary
multicallables (``grpc._channel``), which ``__call__`` and ``with_call`` pass through, so
every channel (intercepted ones too) is covered, below any client interceptor. Inside a
logical request the call is a transport attempt of the current attempt with
``rpc.system`` ``grpc``, ``rpc.service``, ``rpc.method`` and ``rpc.grpc.status_code``,
classified by :data:`retryscope.http_rules.GRPC_STATUS_KINDS`; its evidence is a digest of
the method path and the serialized request (unary requests only; serialized a second time,
in process, and never written), so a repeat of the same request after a failure is a
resend and a distinct call a new operation. A contrib gRPC span around it is then a call.
Outside a logical request, where instrumentation is suppressed (the SDK's span processors
export so: an OTLP exporter's own gRPC calls), and for ``future()``, response-streaming and
``grpc.aio`` calls (whose end another thread or task sees), nothing is recorded here: the
contrib instrumentation's span of such a call still counts as one send.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import grpc
from opentelemetry.instrumentation.utils import is_instrumentation_enabled
from opentelemetry.util.types import AttributeValue

from retryscope import vocabulary as v
from retryscope.http_rules import classify_grpc_status
from retryscope.instrumentation._classify import classify_exception, error_type
from retryscope.instrumentation._containment import note
from retryscope.instrumentation._context import Attempt, current_scope
from retryscope.instrumentation._digests import send_digest
from retryscope.instrumentation._sends import SendEvidence
from retryscope.instrumentation.integrations._send import close_attempt
from retryscope.vocabulary import OutcomeKind

ROUTE: Final = "grpc"
"""Route of a send made outside any attempt of the logical request."""
_TARGETS: Final = (
    ("_UnaryUnaryMultiCallable._blocking", True),
    ("_StreamUnaryMultiCallable._blocking", False),
)
_ENTRY: Final = "grpc: record a call"


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _body(multicallable: Any, request: object) -> bytes | None:
    """The serialized unary request, or None (a serializer that fails or returns no bytes)."""
    if isinstance(request, bytes):
        return request
    serializer = getattr(multicallable, "_request_serializer", None)
    if serializer is None:
        return None
    try:
        body = serializer(request)
    except Exception:  # grpcio reports it to the caller itself
        return None
    return body if isinstance(body, bytes) else None


def _open(multicallable: Any, body: bytes | None) -> Attempt | None:
    """The send of one call, entered (None outside a logical request)."""
    scope = current_scope()
    if scope is None or not is_instrumentation_enabled():
        return None  # (suppressed: an exporter's own call, e.g. OTLP over gRPC)
    path = _text(multicallable._method)
    service, _, method = path.lstrip("/").partition("/")
    attrs: dict[str, AttributeValue] = {
        v.RPC_SYSTEM_KEY: "grpc",
        v.RPC_SERVICE_KEY: service,
        v.RPC_METHOD_KEY: method,
    }
    parent = scope.attempt
    return scope.request.send(
        parent.route if parent is not None else ROUTE,
        SendEvidence(digest=send_digest("POST", path, body)),
        route_release=parent.route_release if parent is not None else None,
        attributes=attrs,
        name=path,
    ).__enter__()


def outcome_attributes(code: object, exc: BaseException | None) -> dict[str, AttributeValue]:
    """Status code, outcome and ``error.type`` of a finished call: by its
    ``grpc.StatusCode`` (:data:`~retryscope.http_rules.GRPC_STATUS_KINDS`), else by the
    exception it raised."""
    attrs: dict[str, AttributeValue] = {}
    kind: OutcomeKind | None = None
    if isinstance(code, grpc.StatusCode):
        number = int(code.value[0])
        attrs[v.RPC_GRPC_STATUS_CODE_KEY] = number
        kind = classify_grpc_status(number)
        if kind is not None:
            attrs[v.ERROR_TYPE.key] = code.name
    elif exc is not None:
        kind = classify_exception(exc)
        attrs[v.ERROR_TYPE.key] = error_type(exc)
    if kind is not None:
        attrs[v.OUTCOME_KIND.key] = kind.value
    attrs[v.OUTCOME.key] = kind.family.value if kind is not None else "success"
    return attrs


def _close(send: Attempt, code: object, exc: BaseException | None) -> None:
    try:
        close_attempt(send, outcome_attributes(code, exc), exc)
    except Exception as error:
        note(_ENTRY, error)


def _recorder(unary: bool) -> Callable[..., Any]:
    """The wrapper of a multicallable's ``_blocking`` (``unary``: its first argument is the
    request itself, not a request iterator)."""

    def blocking(
        wrapped: Callable[..., Any],
        instance: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        try:
            request = args[0] if args else None
            send = _open(instance, _body(instance, request) if unary else None)
        except Exception as exc:  # the call still goes out
            note(_ENTRY, exc)
            send = None
        if send is None:
            return wrapped(*args, **kwargs)
        try:
            state, call = wrapped(*args, **kwargs)
        except BaseException as exc:
            code = exc.code() if isinstance(exc, grpc.RpcError) else None
            _close(send, code, exc)
            raise
        _close(send, getattr(state, "code", None), None)
        return state, call

    return blocking


def instrument() -> None:
    """Record every blocking unary-unary and stream-unary call of every grpcio channel."""
    from wrapt import wrap_function_wrapper

    for name, unary in _TARGETS:
        wrap_function_wrapper("grpc._channel", name, _recorder(unary))


def uninstrument() -> None:
    """Undo :func:`instrument`."""
    from grpc import _channel
    from opentelemetry.instrumentation.utils import unwrap

    for name, _ in _TARGETS:
        cls, _, method = name.partition(".")
        unwrap(getattr(_channel, cls), method)
