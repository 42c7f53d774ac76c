"""grpcio against a real gRPC server on 127.0.0.1 (generic handlers, bytes messages): what the
report shows of grpcio's retries next to what the server counted.

grpcio retries in its C core (a ``retryPolicy`` in the service config); the server sees each
attempt, numbered by the ``grpc-previous-rpc-attempts`` request metadata, and no Python
hook on the client does. So each call is one send, with or without the contrib gRPC
instrumentation, and the report's figures fall short of the server's by exactly the hidden
attempts: the limit the clients guide states, measured here.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field

import duckdb
import grpc
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.instrumentation.grpc import aio_client_interceptors, client_interceptor
from opentelemetry.instrumentation.grpc.grpcext import intercept_channel
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import TracerProvider

import retryscope
from retryscope import http_rules
from retryscope.analytics import request_detail
from retryscope.analytics._macros import install_macros
from retryscope.instrumentation import RetryscopeInstrumentor
from retryscope.instrumentation.integrations import grpc as grpc_integration
from tests.clients.conftest import seen
from tests.instrumentation.conftest import Audit

SERVICE = "retryscope.test.Echo"
METHOD = f"/{SERVICE}/Say"
UPLOAD = f"/{SERVICE}/Upload"
RETRY_POLICY = {
    "maxAttempts": 4,
    "initialBackoff": "0.01s",
    "maxBackoff": "0.05s",
    "backoffMultiplier": 2,
    "retryableStatusCodes": ["UNAVAILABLE"],
}
HEDGING_POLICY = {"maxAttempts": 3, "hedgingDelay": "0.02s", "nonFatalStatusCodes": ["UNAVAILABLE"]}


@dataclass
class EchoServer:
    """A gRPC server whose replies are scripted: each hit takes the next status code of
    ``script`` (OK once it is empty) and records its ``grpc-previous-rpc-attempts``."""

    port: int = 0
    script: list[grpc.StatusCode] = field(default_factory=list)
    attempts: list[str | None] = field(default_factory=list)
    delay_first_s: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def say(self, request: bytes, context: grpc.ServicerContext) -> bytes:
        metadata = dict(context.invocation_metadata())
        with self.lock:
            self.attempts.append(metadata.get("grpc-previous-rpc-attempts"))
            first = len(self.attempts) == 1
            code = self.script.pop(0) if self.script else grpc.StatusCode.OK
        if first and self.delay_first_s:
            threading.Event().wait(self.delay_first_s)
        if code is not grpc.StatusCode.OK:
            context.abort(code, "scripted")
        return b"echo:" + request

    def upload(self, requests: Iterator[bytes], context: grpc.ServicerContext) -> bytes:
        return self.say(b"".join(requests), context)

    contrib: TracerProvider | None = None
    """Where the contrib gRPC instrumentation's spans go (None: no contrib spans)."""

    def channel(self, method_config: dict[str, object] | None = None) -> grpc.Channel:
        """A channel with ``method_config`` for the service, through the contrib client
        interceptor when ``contrib`` is set (as ``GrpcInstrumentorClient`` wraps every
        channel; its ``instrument(tracer_provider=...)`` does not reach the spans)."""
        config = {"methodConfig": [{"name": [{"service": SERVICE}], **(method_config or {})}]}
        channel = grpc.insecure_channel(
            f"127.0.0.1:{self.port}", options=[("grpc.service_config", json.dumps(config))]
        )
        if self.contrib is None:
            return channel
        return intercept_channel(channel, client_interceptor(tracer_provider=self.contrib))


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    state = EchoServer()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    handlers = {
        "Say": grpc.unary_unary_rpc_method_handler(state.say),
        "Upload": grpc.stream_unary_rpc_method_handler(state.upload),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    state.port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield state
    server.stop(None).wait()


@pytest.fixture(params=["contrib", "retryscope", "both"])
def recorders(request: pytest.FixtureRequest, audit: Audit, echo: EchoServer) -> Iterator[str]:
    """Which recorders see the calls: the contrib gRPC instrumentation, retryscope's grpcio
    integration (through RetryscopeInstrumentor), or both."""
    mode: str = request.param
    if mode in ("contrib", "both"):
        echo.contrib = audit.provider
    instrumentor = RetryscopeInstrumentor()
    if mode in ("retryscope", "both"):
        instrumentor.instrument()
    yield mode
    if mode in ("retryscope", "both"):
        instrumentor.uninstrument()


def _calls(audit: Audit) -> int:
    ((calls,),) = audit.rows("SELECT count(*) FROM spans WHERE span_role = 'call'")
    return int(calls)


def _outcomes(audit: Audit, layer: str = "transport") -> list[tuple[object, ...]]:
    """(outcome, kind) of the request's attempts of ``layer`` in the model, in order."""
    con = audit.connect()
    ((request_id,),) = con.execute(
        "SELECT DISTINCT logical_request_id FROM spans WHERE logical_request_id NOT NULL"
    ).fetchall()
    _, attempts = request_detail(con, str(request_id))
    rows = sorted(
        (a["start_time"], a["outcome"], a["outcome_kind"])
        for a in attempts.to_pylist()
        if a["layer"] == layer
    )
    return [(outcome, kind) for _, outcome, kind in rows]


def test_retry_policy_attempts_are_hidden_in_one_send(
    audit: Audit, echo: EchoServer, recorders: str
) -> None:
    """UNAVAILABLE twice, then OK, retried by the channel's retryPolicy: the server saw 3
    attempts (previous attempts none, 1, 2); the report shows 1 send, a success."""
    echo.script = [grpc.StatusCode.UNAVAILABLE] * 2
    with echo.channel({"retryPolicy": RETRY_POLICY}) as channel:
        say = channel.unary_unary(METHOD)
        with retryscope.logical_request(operation="say", tracer_provider=audit.provider) as req:
            with req.attempt("echo"):
                assert say(b"hi") == b"echo:hi"
    assert echo.attempts == [None, "1", "2"]
    got = seen(audit)
    assert got.report["receiver_attempts"] == 1  # of the server's 3: 2 hidden in the C core
    assert [(p, op, resend) for p, op, resend, *_ in got.sends] == [(1, 1, 0)]
    assert got.layers == {"harness": 1, "transport": 1}
    assert _outcomes(audit) == [("success", None)]
    assert _calls(audit) == (1 if recorders == "both" else 0)  # the contrib span, a call
    ((code,),) = audit.rows(
        "SELECT attributes['rpc.grpc.status_code'] FROM spans WHERE span_role = 'attempt' "
        "AND layer = 'transport'"
    )
    assert code == "0"


def test_harness_retry_over_an_exhausted_retry_policy(
    audit: Audit, echo: EchoServer, recorders: str
) -> None:
    """Always UNAVAILABLE, maxAttempts 3, and a harness that tries twice: the server saw 6
    attempts; the report shows one send per harness attempt, each unavailable, the harness
    the only layer that retried, and its attempts classified by the RpcError's code."""
    echo.script = [grpc.StatusCode.UNAVAILABLE] * 6
    policy = {**RETRY_POLICY, "maxAttempts": 3}
    with echo.channel({"retryPolicy": policy}) as channel:
        say = channel.unary_unary(METHOD)
        with retryscope.logical_request(operation="say", tracer_provider=audit.provider) as req:
            for _ in range(2):
                with pytest.raises(grpc.RpcError) as raised, req.attempt("echo"):
                    say(b"hi")
                assert raised.value.code() is grpc.StatusCode.UNAVAILABLE
    assert echo.attempts == [None, "1", "2"] * 2
    got = seen(audit)
    assert got.report["receiver_attempts"] == 2
    assert [(p, op, resend) for p, op, resend, *_ in got.sends] == [(1, 1, 0), (2, 1, 0)]
    assert _outcomes(audit) == [("retryable", "unavailable")] * 2
    assert _outcomes(audit, "harness") == [("retryable", "unavailable")] * 2
    assert got.retried_layers == ["harness"]


def test_repeat_after_failure_within_one_attempt(audit: Audit, echo: EchoServer) -> None:
    """A loop that repeats the same call after UNAVAILABLE (no retry policy): 2 hits, 2
    sends of one operation, the second a resend; a different message is a new operation."""
    echo.script = [grpc.StatusCode.UNAVAILABLE]
    instrumentor = RetryscopeInstrumentor()
    instrumentor.instrument()
    try:
        with echo.channel() as channel:
            say = channel.unary_unary(METHOD)
            with retryscope.logical_request(operation="say", tracer_provider=audit.provider) as r:
                with r.attempt("echo"):
                    with pytest.raises(grpc.RpcError):
                        say(b"hi")
                    assert say(b"hi") == b"echo:hi"
                    _, call = say.with_call(b"another")
                    assert call.code() is grpc.StatusCode.OK
    finally:
        instrumentor.uninstrument()
    assert echo.attempts == [None, None, None]
    got = seen(audit)
    assert got.report["receiver_attempts"] == 3
    assert [(op, resend) for _, op, resend, *_ in got.sends] == [(1, 0), (1, 1), (2, 0)]
    assert got.report["amplification_ratio"] == pytest.approx(1.5)


def test_hedging_policy_sends_one_attempt(audit: Audit, echo: EchoServer, recorders: str) -> None:
    """grpcio's core does not implement hedgingPolicy: with the first attempt held 0.3 s
    past the hedging delay, the server still saw 1 attempt, and the report shows 1 send."""
    echo.delay_first_s = 0.3
    with echo.channel({"hedgingPolicy": HEDGING_POLICY}) as channel:
        say = channel.unary_unary(METHOD)
        with retryscope.logical_request(operation="say", tracer_provider=audit.provider) as req:
            with req.attempt("echo"):
                assert say(b"hi") == b"echo:hi"
    assert echo.attempts == [None]
    assert seen(audit).report["receiver_attempts"] == 1


def test_stream_unary_call_and_calls_outside_a_request(audit: Audit, echo: EchoServer) -> None:
    """A client-streaming call is one send too (its request iterator is never read for a
    digest); a call outside a logical request records nothing and still works."""
    instrumentor = RetryscopeInstrumentor()
    instrumentor.instrument()
    try:
        assert "grpc" in instrumentor.enabled
        with echo.channel() as channel:
            upload = channel.stream_unary(UPLOAD)
            say = channel.unary_unary(METHOD)
            assert say(b"outside") == b"echo:outside"
            with retryscope.logical_request(operation="up", tracer_provider=audit.provider) as r:
                with r.attempt("echo"):
                    assert upload(iter([b"a", b"b"])) == b"echo:ab"
    finally:
        instrumentor.uninstrument()
    assert echo.attempts == [None, None]
    assert audit.rows(
        "SELECT name, attributes['rpc.method'] FROM spans WHERE layer = 'transport'"
    ) == [(UPLOAD, '"Upload"')]
    # uninstrumented again: grpcio's own methods are back
    assert not hasattr(grpc._channel._UnaryUnaryMultiCallable._blocking, "__wrapped__")


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (grpc.StatusCode.OK, None),
        (grpc.StatusCode.UNAVAILABLE, "unavailable"),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, "rate_limited"),
        (grpc.StatusCode.INVALID_ARGUMENT, "invalid_request"),
        (grpc.StatusCode.DEADLINE_EXCEEDED, "unknown_provider_acceptance"),
        (grpc.StatusCode.PERMISSION_DENIED, "policy_denied"),
    ],
)
def test_status_codes_classify_a_send(code: grpc.StatusCode, kind: str | None) -> None:
    """The integration's outcome of a call by its status code (GRPC_STATUS_KINDS)."""
    attrs = grpc_integration.outcome_attributes(code, None)
    assert attrs.get("retryscope.outcome.kind") == kind
    assert attrs["rpc.grpc.status_code"] == code.value[0]


def test_status_code_macros_match_the_rule() -> None:
    """The analytics' rs_grpc_outcome(_kind) answer as GRPC_STATUS_KINDS for every code, an
    unknown one and none."""
    con = duckdb.connect()
    install_macros(con)
    for code in [*range(17), 99, None]:
        kind = None if code is None else http_rules.classify_grpc_status(code)
        family = None if code is None else kind.family.value if kind else "success"
        got = con.execute("SELECT rs_grpc_outcome($1), rs_grpc_outcome_kind($1)", [code]).fetchall()
        assert got == [(family, kind.value if kind else None)], code


def test_an_exporters_own_grpc_calls_are_not_sends(audit: Audit, echo: EchoServer) -> None:
    """The OTLP gRPC exporter behind a SimpleSpanProcessor exports inside the attempt's
    context, with instrumentation suppressed: its calls reach the server (which does not
    implement the trace service) and are no sends of the request."""
    exporter = OTLPSpanExporter(endpoint=f"127.0.0.1:{echo.port}", insecure=True, timeout=5)
    audit.provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = RetryscopeInstrumentor()
    instrumentor.instrument()
    try:
        with retryscope.logical_request(operation="say", tracer_provider=audit.provider) as req:
            with req.attempt("echo"):
                pass
    finally:
        instrumentor.uninstrument()
    got = seen(audit)
    assert got.sends == []
    assert got.report["receiver_attempts"] == 1  # the harness attempt


def test_grpc_aio_call_is_one_send_through_the_contrib_interceptor(
    audit: Audit, echo: EchoServer
) -> None:
    """grpc.aio under the same retryPolicy: the server saw 3 attempts; the contrib aio
    interceptor's span is the one send the report shows (the integration records no aio
    call)."""
    echo.script = [grpc.StatusCode.UNAVAILABLE] * 2
    config = {"methodConfig": [{"name": [{"service": SERVICE}], "retryPolicy": RETRY_POLICY}]}

    async def run() -> bytes:
        async with grpc.aio.insecure_channel(
            f"127.0.0.1:{echo.port}",
            options=[("grpc.service_config", json.dumps(config))],
            interceptors=aio_client_interceptors(tracer_provider=audit.provider),
        ) as channel:
            say = channel.unary_unary(METHOD)
            with retryscope.logical_request(operation="say", tracer_provider=audit.provider) as r:
                with r.attempt("echo"):
                    reply: bytes = await say(b"hi")
                    return reply

    instrumentor = RetryscopeInstrumentor()
    instrumentor.instrument()
    try:
        assert asyncio.run(run()) == b"echo:hi"
    finally:
        instrumentor.uninstrument()
    assert echo.attempts == [None, "1", "2"]
    got = seen(audit)
    assert got.report["receiver_attempts"] == 1
    assert [(p, op, resend) for p, op, resend, *_ in got.sends] == [(1, 1, 0)]
    assert _outcomes(audit) == [("success", None)]
