"""inject/extract: a queue redelivery joins the same logical request with the next ordinal."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry import baggage
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import TracerProvider

import retryscope
from tests.containment import contains
from tests.instrumentation.conftest import Audit, VirtualClockLike

DEADLINE = 1_800_000_060_000_000_000


def _produce(audit: Audit, clock: VirtualClockLike) -> tuple[str, dict[str, str]]:
    carrier: dict[str, str] = {}
    token = otel_context.attach(baggage.set_baggage("user", "secret-user"))
    try:
        with (
            retryscope.logical_request(
                operation="embed",
                tenant="acme",
                idempotency_key="raw-key-1",
                request={"doc": "raw payload"},
                deadline=DEADLINE,
                tracer_provider=audit.provider,
                clock=clock,
            ) as req,
            req.attempt("enqueue", layer="harness"),
        ):
            retryscope.inject(carrier)
    finally:
        otel_context.detach(token)
    return req.id, carrier


def test_redelivered_message_joins_the_request_with_next_queue_ordinal(
    audit: Audit, clock: VirtualClockLike
) -> None:
    request_id, carrier = _produce(audit, clock)
    assert set(carrier) == {"traceparent", "retryscope"}  # never baggage
    for needle in ("raw-key-1", "raw payload", "secret-user"):
        assert needle not in json.dumps(carrier)
    for delivery in (1, 2, 3):
        clock.advance_ms(10_000)
        with (
            retryscope.extract(
                carrier, delivery_count=delivery, tracer_provider=audit.provider, clock=clock
            ) as req,
            req.attempt("worker", layer="queue") as a,
        ):
            assert req.id == request_id
            assert req.deadline == DEADLINE
            if delivery < 3:
                a.set_outcome("unavailable")
    con = audit.connect()
    rows = con.execute(
        "SELECT attempt_ordinal, deadline_remaining_ms, idempotency_digest IS NOT NULL, "
        "trace_id FROM attempts WHERE layer = 'queue' AND logical_request_id = ? "
        "ORDER BY attempt_ordinal",
        [request_id],
    ).fetchall()
    assert [r[0] for r in rows] == [1, 2, 3]
    assert [r[1] for r in rows] == [50_000, 40_000, 30_000]  # absolute deadline, not reset
    assert all(r[2] for r in rows)
    origin_trace = con.execute(
        "SELECT trace_id FROM logical_requests WHERE logical_request_id = ?", [request_id]
    ).fetchone()
    assert {r[3] for r in rows} == {origin_trace[0]}
    assert con.execute(
        "SELECT count(*) FROM logical_requests WHERE logical_request_id = ?", [request_id]
    ).fetchone() == (1,)
    assert con.execute(
        "SELECT count(*) FROM spans WHERE span_role = 'continuation' AND logical_request_id = ?",
        [request_id],
    ).fetchone() == (3,)
    # the producer's harness attempt and three deliveries of one queue attempt each: the
    # analytics count three queue attempts over the processes' spans, so the queue retried
    assert audit.analysed(request_id) == ({"harness": 1, "queue": 3}, ["queue"])


def test_consumer_in_another_process(audit: Audit, clock: VirtualClockLike, tmp_path: Path) -> None:
    """The carrier crosses a real process boundary; the consumer writes its own Parquet."""
    request_id, carrier = _produce(audit, clock)
    out = tmp_path / "consumer"
    script = textwrap.dedent(
        f"""
        import json, sys
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        import retryscope
        exporter = retryscope.ParquetSpanExporter({str(out)!r})
        tp = TracerProvider()
        tp.add_span_processor(retryscope.AttemptStampingProcessor())
        tp.add_span_processor(SimpleSpanProcessor(exporter))
        carrier = json.loads(sys.stdin.read())
        with retryscope.extract(carrier, delivery_count=2, tracer_provider=tp) as req:
            with req.attempt("worker", layer="queue"):
                pass
        exporter.force_flush()
        """
    )
    subprocess.run([sys.executable, "-c", script], input=json.dumps(carrier), text=True, check=True)
    from retryscope.analytics import connect

    con, _ = connect(out)
    assert con.execute(
        "SELECT logical_request_id, attempt_ordinal FROM attempts WHERE layer = 'queue'"
    ).fetchone() == (request_id, 2)


def test_inject_needs_a_logical_request() -> None:
    carrier: dict[str, str] = {}
    with contains("inject", "LookupError: .*no logical request"):
        assert retryscope.inject(carrier) is False
    assert carrier == {}


@pytest.mark.parametrize(
    ("carrier", "message"),
    [
        ({}, "no 'retryscope' field"),
        ({"retryscope": "{"}, "not JSON"),
        ({"retryscope": '{"v":2}'}, "unsupported version"),
        ({"retryscope": '{"v":1,"id":"x"}'}, "'operation' must be strings"),
        ({"retryscope": '{"v":1,"id":"x","operation":"o","deadline":"soon"}'}, "unix ns"),
        ({"retryscope": '{"v":1,"id":"x","operation":"o","ordinals":{"moon":1}}'}, "layer"),
        ({"retryscope": "x" * 5000}, "at most"),
        ({"retryscope": '{"v":1,"id":"x","operation":"o","parent":["harness",1]}'}, "'parent'"),
        ({"retryscope": '{"v":1,"id":"x","operation":"o","parent":["moon",1,null]}'}, "layer"),
        ({"retryscope": '{"v":1,"id":"x","operation":"o","parent":["harness",0,null]}'}, ">= 1"),
        ({"retryscope": '{"v":1,"id":"x","operation":"o","parent":["harness",1,2]}'}, "string"),
    ],
)
def test_extract_rejects_bad_carriers(carrier: dict[str, str], message: str, audit: Audit) -> None:
    """The CarrierError names the problem (counted, logged once); the consumer's work is
    still recorded, under a continuation of an unidentified request that says so."""
    with contains("extract", f"CarrierError: .*{message}"):
        continued = retryscope.extract(carrier, tracer_provider=audit.provider)
    with continued as req, req.attempt("worker", layer="queue"):
        pass
    rows = audit.rows(
        "SELECT span_role, operation, attributes['retryscope.contained_errors'] FROM spans "
        "ORDER BY span_role"
    )
    assert rows == [("attempt", "unknown", None), ("continuation", "unknown", '["extract"]')]


def test_extract_with_a_bad_delivery_count_keeps_the_carried_request(audit: Audit) -> None:
    carrier = {"retryscope": '{"v":1,"id":"x","operation":"o"}'}
    with contains("extract", "delivery_count"):
        continued = retryscope.extract(carrier, delivery_count=0, tracer_provider=audit.provider)
    with continued as req, req.attempt("worker", layer="queue"):
        pass
    assert audit.rows(
        "SELECT span_role, logical_request_id, attempt_ordinal FROM spans ORDER BY span_role"
    ) == [("attempt", "x", 1), ("continuation", "x", None)]


@given(
    operation=st.text(min_size=1, max_size=40),
    tenant=st.none() | st.text(max_size=40),
    key=st.none() | st.text(max_size=40),
    deadline=st.none() | st.integers(0, 2**62),
    harness=st.integers(0, 50),
    queue=st.integers(0, 50),
    delivery=st.integers(1, 20),
)
def test_inject_extract_round_trip(
    operation: str,
    tenant: str | None,
    key: str | None,
    deadline: int | None,
    harness: int,
    queue: int,
    delivery: int,
) -> None:
    provider = TracerProvider()
    carrier: dict[str, str] = {}
    with retryscope.logical_request(
        operation=operation,
        tenant=tenant,
        idempotency_key=key,
        deadline=deadline,
        tracer_provider=provider,
    ) as req:
        for _ in range(harness):
            with req.attempt("h"):
                pass
        for _ in range(queue):
            with req.attempt("q", layer="queue"):
                pass
        retryscope.inject(carrier)
    out = retryscope.extract(carrier, delivery_count=delivery, tracer_provider=provider)
    assert (out.id, out.operation, out.tenant, out.deadline) == (
        req.id,
        operation,
        tenant,
        deadline,
    )
    assert (out.idempotency_digest, out.request_digest) == (req.idempotency_digest, None)
    with out, out.attempt("w", layer="queue") as a:
        assert a.ordinal == queue + delivery
    with out, out.attempt("h2") as b:
        assert b.ordinal == harness + 1


def test_a_continuation_names_the_attempt_it_continues_under(audit: Audit) -> None:
    """The carrier names the attempt it was injected in; each extract is a continuation of
    its own, whose outermost attempts are nested in that attempt and whose inner attempts
    in its own; a carrier injected outside any attempt of a continuation passes on the
    attempt it continues under."""
    with retryscope.logical_request(operation="o", tracer_provider=audit.provider) as req:
        outside: dict[str, str] = {}
        retryscope.inject(outside)
        with req.attempt("h"), req.attempt("h2"):
            inside: dict[str, str] = {}
            retryscope.inject(inside)
    assert "parent" not in json.loads(outside["retryscope"])
    assert json.loads(inside["retryscope"])["parent"] == ["harness", 2, None]
    ids = []
    for _ in range(2):
        with retryscope.extract(inside, tracer_provider=audit.provider) as cont:
            relayed: dict[str, str] = {}
            retryscope.inject(relayed)
            assert json.loads(relayed["retryscope"])["parent"] == ["harness", 2, None]
            with cont.attempt("a", layer="adapter") as a, cont.attempt("t", layer="transport"):
                nested: dict[str, str] = {}
                retryscope.inject(nested)
            ids.append(cont.continuation)
            assert json.loads(nested["retryscope"])["parent"] == ["transport", 1, ids[-1]]
            assert a.ordinal == 1
    assert len(set(ids)) == 2
    rows = audit.rows(
        "SELECT layer, attempt_ordinal, continuation, parent_layer, parent_attempt_ordinal, "
        "parent_continuation FROM attempts WHERE continuation IS NOT NULL ORDER BY start_time"
    )
    assert rows == [
        (layer, 1, cont, parent, n, parent_cont)
        for cont in ids
        for layer, parent, n, parent_cont in (
            ("adapter", "harness", 2, None),
            ("transport", "adapter", 1, cont),
        )
    ]
