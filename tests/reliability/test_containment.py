"""Nothing raises into the application: hypothesis drives the whole public recording API —
the context API, propagation, streaming, pricing on the request path, the describer, the
processors and the exporter — with hostile values, and asserts that no exception escapes,
that every request and attempt the application opened is still recorded with what was
valid, that the OpenTelemetry context is restored, and that the spans still export.

The values the issue measured are pinned one by one through real Parquet: ``request=``
with bytes, NaN, an int key or a deep payload, ``idempotency_key=42`` and
``set_cost(actual=-1)`` (which used to make the attempt ``unknown_provider_acceptance``)."""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import retryscope
import retryscope.instrumentation as api
from retryscope.instrumentation import (
    Attempt,
    AttemptStampingProcessor,
    GapCountingBatchSpanProcessor,
    LogicalRequest,
    LowerLayerConfig,
    ParquetSpanExporter,
    Price,
    PriceTable,
    astream,
    current_scope,
    describe_client,
    extract,
    inject,
    logical_request,
    stream,
)
from retryscope.instrumentation._containment import contained_errors
from retryscope.vocabulary import Layer
from tests.reliability.support import audit, visible_files


class Hostile:
    """Fails at everything an implementation might ask of a value (but its ``repr``, which
    hypothesis needs to report an example)."""

    def __str__(self) -> str:
        raise RuntimeError("hostile __str__")

    def __repr__(self) -> str:
        return "Hostile()"

    def __format__(self, spec: str) -> str:
        raise RuntimeError("hostile __format__")

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("hostile __eq__")

    def __hash__(self) -> int:
        raise RuntimeError("hostile __hash__")

    def __bool__(self) -> bool:
        raise RuntimeError("hostile __bool__")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # (protocol probes: hypothesis's, copy's)
            raise AttributeError(name)
        raise RuntimeError(f"hostile .{name}")

    def __iter__(self) -> Iterator[Any]:
        raise RuntimeError("hostile __iter__")

    def __len__(self) -> int:
        raise RuntimeError("hostile __len__")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("hostile __call__")


class HostileMapping(Mapping[str, Any]):
    def __getitem__(self, key: str) -> Any:
        raise RuntimeError("hostile mapping")

    def __iter__(self) -> Iterator[str]:
        raise RuntimeError("hostile mapping")

    def __len__(self) -> int:
        return 3


def _deep(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def _cycle() -> list[Any]:
    value: list[Any] = []
    value.append(value)
    return value


HOSTILE_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 1e308]),
    st.text(max_size=20),
    st.sampled_from(["\ud800", "x" * 100_000, "", "primary", "harness", "success"]),
    st.binary(max_size=10),
    st.sampled_from([b"\xff\xfe", bytearray(b"ab"), object()]),
    st.builds(Hostile),
    st.builds(HostileMapping),
    st.sampled_from([datetime(2026, 1, 1), datetime(9999, 12, 31, tzinfo=UTC)]),
    st.sampled_from([timedelta(seconds=1), Layer.SDK, 3 + 4j, frozenset({1})]),
)
HOSTILE = st.one_of(
    HOSTILE_SCALARS,
    st.lists(HOSTILE_SCALARS, max_size=3),
    st.dictionaries(st.one_of(st.text(max_size=5), st.integers()), HOSTILE_SCALARS, max_size=3),
    st.builds(_deep, st.sampled_from([300, 5_000])),
    st.builds(_cycle),
)


def _maybe(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A valid value or a hostile one."""
    return st.one_of(valid, HOSTILE)


TABLE = PriceTable("v1", "USD", {"rel@1": Price(1_000, 2_000)})
LOWER = LowerLayerConfig(Layer.SDK, 2, 30_000, "client")
REQUEST_KWARGS: dict[str, st.SearchStrategy[Any]] = {
    "operation": _maybe(st.just("chat")),
    "tenant": _maybe(st.just("acme")),
    "idempotency_key": _maybe(st.just("order-42")),
    "request": _maybe(st.just({"prompt": "hi", "n": [1, 2.5]})),
    "deadline": _maybe(st.just(4_000_000_000_000_000_000)),
    "retry_owner": _maybe(st.just("harness")),
    "logical_request_id": _maybe(st.just("req-1")),
    "policy_digest": _maybe(st.just("ab" * 32)),
    "clock": _maybe(st.just(lambda: 1_800_000_000_000_000_000)),
    "attributes": _maybe(st.just({"app.k": "v"})),
    "max_string_bytes": _maybe(st.just(64)),
}
ATTEMPT_KWARGS: dict[str, st.SearchStrategy[Any]] = {
    "route_release": _maybe(st.just("rel@1")),
    "layer": _maybe(st.sampled_from(["harness", "sdk", "transport"])),
    "route_priority": _maybe(st.just(1)),
    "attributes": _maybe(st.just({"app.a": 1})),
    "name": _maybe(st.just("try")),
    "hedge_ordinal": _maybe(st.just(1)),
    "hedge_owner": _maybe(st.just("harness")),
    "breaker_state": _maybe(st.just("closed")),
    "breaker_generation": _maybe(st.just(2)),
    "lower": _maybe(st.just(LOWER)),
}
ATTEMPT_CALLS: dict[str, dict[str, st.SearchStrategy[Any]]] = {
    "set_backoff": {
        "delay_ms": _maybe(st.just(10)),
        "retry_after_ms": _maybe(st.just(20)),
        "not_before": _maybe(st.just(datetime(2027, 1, 1, tzinfo=UTC))),
    },
    "set_cost": {
        "reserved": _maybe(st.just(5)),
        "actual": _maybe(st.just(3)),
        "currency": _maybe(st.just("EUR")),
        "estimated": _maybe(st.just(False)),
    },
    "set_outcome": {
        "outcome": _maybe(st.sampled_from(["success", "rate_limited", "retryable"])),
        "kind": _maybe(st.sampled_from(["rate_limited", "rejected"])),
        "error": _maybe(st.just("E")),
        "http_status": _maybe(st.just(429)),
    },
    "set_decision": {"decision": _maybe(st.just("retry"))},
    "set_attributes": {"attributes": _maybe(st.just({"app.b": "c"}))},
    "set_gen_ai": {
        "provider": _maybe(st.just("openai")),
        "request_model": _maybe(st.just("m")),
        "response_id": _maybe(st.just("r")),
    },
    "set_usage": {
        "input_tokens": _maybe(st.just(10)),
        "output_tokens": _maybe(st.just(5)),
        "cached_input_tokens": _maybe(st.just(2)),
    },
    "set_error_type": {"error": _maybe(st.just("Timeout"))},
    "price": {"table": _maybe(st.just(TABLE)), "reserved": _maybe(st.just(50))},
    "commit_hedge": {},
    "cancel_hedge": {"cost_actual": _maybe(st.just(4)), "currency": _maybe(st.just("USD"))},
    "set_breaker": {"state": _maybe(st.just("open")), "generation": _maybe(st.just(1))},
    "declare_lower_layer": {"config": _maybe(st.just(LOWER))},
    "scope": {},
    "stamps": {},
}
REQUEST_CALLS: dict[str, dict[str, st.SearchStrategy[Any]]] = {
    "schedule_backoff": {
        "delay_ms": _maybe(st.just(10)),
        "retry_after_ms": _maybe(st.just(20)),
        "attributes": _maybe(st.just({"app.c": 1})),
    },
    "record_reconciliation": {
        "result": _maybe(st.just("no_effect")),
        "method": _maybe(st.just("readback")),
        "attempt": _maybe(st.none()),
    },
    "ordinals": {},
    "set_terminal": {"terminal": _maybe(st.just("complete"))},
    "remaining_ms": {},
    "count_prior_attempt": {"route": _maybe(st.just("primary")), "layer": _maybe(st.just("sdk"))},
    "scope": {},
    "stamps": {},
    "transport_attempt_values": {"parent": st.none()},
    "note_retry_after": {"delay_ms": _maybe(st.just(1_000)), "at": _maybe(st.none())},
    "send_ended": {"span_id": _maybe(st.just(1))},
    "send_opened": {"attempt": st.none()},
}
POSITIONAL = {"set_outcome": ("outcome",), "set_breaker": ("state", "generation")}
"""Calls whose first arguments are positional (the rest are keywords)."""


def _public_methods(cls: type) -> set[str]:
    return {
        name
        for name, member in vars(cls).items()
        if not name.startswith("_")
        and (inspect.isfunction(member) or hasattr(member, "__wrapped__"))
    }


CONFIGURATION = {
    "AttemptStampingProcessor",  # constructor arguments: validated at setup
    "GapCountingBatchSpanProcessor",
    "ParquetSpanExporter",
    "ExportConfig",
    "Partitioning",
    "LowerLayerConfig",
    "Price",
    "PriceTable",
    "Usage",
    "Cost",
    "Scope",
    "AttributeHook",
    "CarrierError",
    "Attempt",  # (their methods are driven below)
    "LogicalRequest",
    "RetryscopeInstrumentor",  # setup; each integration it enables is contained on its own
    # a span processor whose callbacks contain their own failures
    # (tests/metrics/test_metrics_processor.py); its settings are validated at setup
    "AttemptMetricsProcessor",
    "MetricsConfig",
}
PURE_FUNCTIONS = {
    # the analyst's helpers, not on the request path: they raise TypeError or
    # CanonicalJSONError naming the invalid input
    "bound_attributes",
    "digest_key_id",
    "idempotency_digest",
    "idempotency_sha256",
    "request_digest",
    "request_sha256",
}
HARNESS_HELPERS = {
    # what harness code that catches an attempt's exception itself records (the control
    # plane does, tests/control_plane): the exception's type, its kind, its redacted event
    "classify_exception",
    "error_type",
    "record_exception",
}
DRIVEN = {"logical_request", "current_scope", "inject", "extract", "stream", "astream"}
DRIVEN |= {"describe_client"}


def test_every_public_name_is_driven_or_declared_configuration() -> None:
    """A new public entry point must join the hypothesis run below (or say why not)."""
    assert set(api.__all__) == CONFIGURATION | PURE_FUNCTIONS | HARNESS_HELPERS | DRIVEN
    assert _public_methods(Attempt) == set(ATTEMPT_CALLS)
    # ``attempt`` is driven on its own; ``send`` is the client integrations' (always called
    # through ``start_send``, which contains it and is driven by the client tests)
    assert _public_methods(LogicalRequest) == set(REQUEST_CALLS) | {"attempt", "send"}


def _call(target: object, name: str, kwargs: dict[str, Any]) -> Any:
    positional = [kwargs.pop(p) for p in POSITIONAL.get(name, ()) if p in kwargs]
    return getattr(target, name)(*positional, **kwargs)


@st.composite
def _script(draw: st.DrawFn) -> dict[str, Any]:
    """One hostile session: the request's arguments, then its attempts, each with calls."""
    request = {k: v for k, s in REQUEST_KWARGS.items() if draw(st.booleans()) for v in [draw(s)]}
    attempts = []
    for _ in range(draw(st.integers(0, 3))):
        route = draw(_maybe(st.just("primary")))
        kwargs = {k: draw(s) for k, s in ATTEMPT_KWARGS.items() if draw(st.booleans())}
        calls = [
            (name, {k: draw(s) for k, s in ATTEMPT_CALLS[name].items() if draw(st.booleans())})
            for name in draw(st.lists(st.sampled_from(sorted(ATTEMPT_CALLS)), max_size=5))
        ]
        request_calls = [
            (name, {k: draw(s) for k, s in REQUEST_CALLS[name].items() if draw(st.booleans())})
            for name in draw(st.lists(st.sampled_from(sorted(REQUEST_CALLS)), max_size=3))
        ]
        attempts.append((route, kwargs, calls, request_calls))
    return {
        "request": request,
        "attempts": attempts,
        "carrier": draw(_maybe(st.just({}))),
        "delivery": draw(_maybe(st.just(2))),
        "context": draw(_maybe(st.none())),
        "chunks": draw(st.lists(HOSTILE_SCALARS, max_size=4)),
        "client": draw(HOSTILE),
    }


class Pipeline:
    def __init__(self) -> None:
        self.memory = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(AttemptStampingProcessor())
        self.provider.add_span_processor(SimpleSpanProcessor(self.memory))


@pytest.fixture(scope="module")
def pipeline() -> Iterator[Pipeline]:
    p = Pipeline()
    yield p
    p.provider.shutdown()


@pytest.fixture(scope="module")
def parquet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ParquetSpanExporter]:
    exporter = ParquetSpanExporter(tmp_path_factory.mktemp("contained") / "data")
    yield exporter
    exporter.shutdown()


@settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(script=_script())
def test_hostile_values_never_escape_and_every_span_is_still_recorded(
    pipeline: Pipeline, parquet: ParquetSpanExporter, script: dict[str, Any]
) -> None:
    pipeline.memory.clear()
    opened = 0
    with logical_request(**script["request"], tracer_provider=pipeline.provider) as req:
        for route, kwargs, calls, request_calls in script["attempts"]:
            with req.attempt(route, **kwargs) as a:
                opened += 1
                for name, call_kwargs in calls:
                    _call(a, name, dict(call_kwargs))
                for name, call_kwargs in request_calls:
                    _call(req, name, dict(call_kwargs))
                inject(script["carrier"], context=script["context"])
                current_scope(script["context"])
                assert list(stream(a, script["chunks"])) == script["chunks"]
                describe_client(script["client"], layer=script["client"])
            inject({})  # outside any attempt, inside the request
    assert current_scope() is None  # every context attached was detached
    continued = extract(script["carrier"], delivery_count=script["delivery"])
    with continued:
        pass
    spans = pipeline.memory.get_finished_spans()
    roles = [(s.attributes or {}).get("retryscope.span.role") for s in spans]
    assert roles.count("logical_request") == 1
    assert roles.count("attempt") == opened
    assert parquet.export(spans) is SpanExportResult.SUCCESS


def test_streams_hand_over_the_sources_items_and_exceptions_unchanged(
    pipeline: Pipeline,
) -> None:
    class AppError(Exception):
        pass

    def failing() -> Iterator[object]:
        yield b"x"
        raise AppError("the application's own failure")

    with logical_request(operation="s", tracer_provider=pipeline.provider) as req:
        for attempt in (Hostile(), None, req):  # not attempts at all: recording fails, contained
            assert list(stream(attempt, [1, "a", b"b"])) == [1, "a", b"b"]  # type: ignore[arg-type]
            with pytest.raises(AppError):
                list(stream(attempt, failing()))  # type: ignore[arg-type]

            async def drain(source: Any, target: Any) -> list[Any]:
                async def items() -> Any:
                    for item in source:
                        yield item

                return [item async for item in astream(target, items())]

            assert asyncio.run(drain([1, 2], attempt)) == [1, 2]


def test_the_batch_processor_and_exporter_contain_garbage(tmp_path: Path) -> None:
    exporter = ParquetSpanExporter(tmp_path / "data")
    batch = GapCountingBatchSpanProcessor(exporter)
    before = sum(contained_errors().values())
    assert exporter.export([Hostile(), None, 42]) is SpanExportResult.SUCCESS  # type: ignore[list-item]
    assert exporter.dropped_spans == 3  # each rejected and counted (a span it cannot hold)
    exporter.record_gap(Hostile(), Hostile())  # type: ignore[arg-type]
    stamping = AttemptStampingProcessor()
    stamping.on_start(Hostile())  # type: ignore[arg-type]
    stamping.on_end(Hostile())  # type: ignore[arg-type]
    assert stamping.errors == 0  # (no scope in the context: nothing to stamp)
    with logical_request(operation="garbage") as req, req.attempt("primary"):
        stamping.on_start(Hostile())  # type: ignore[arg-type]
    assert stamping.errors == 1
    assert batch.force_flush() in (True, False)
    batch.shutdown()
    assert sum(contained_errors().values()) > before


def _rows(root: Path) -> list[dict[str, Any]]:
    columns = [
        "span_role",
        "idempotency_digest",
        "logical_request_digest",
        "outcome",
        "outcome_kind",
        "cost_reserved_micros",
        "cost_actual_micros",
        "cost_estimated",
        "attributes",
    ]
    return [
        row for f in visible_files(root) for row in pq.read_table(f, columns=columns).to_pylist()
    ]


@pytest.mark.parametrize(
    "payload",
    [b"bytes", {"temperature": math.nan}, {1: "int key"}, _deep(100_000), _cycle()],
    ids=["bytes", "nan", "int-key", "deep", "cycle"],
)
def test_a_bad_payload_loses_only_its_digest(tmp_path: Path, payload: Any) -> None:
    root = tmp_path / "data"
    with audit(root) as pipeline:
        with (
            logical_request(
                operation="chat",
                idempotency_key="k-1",
                request=payload,
                tracer_provider=pipeline.provider,
            ) as req,
            req.attempt("primary"),
        ):
            pass
        pipeline.close()
    rows = {row["span_role"]: row for row in _rows(root)}
    assert set(rows) == {"logical_request", "attempt"}
    for row in rows.values():
        assert row["idempotency_digest"] is not None  # what was valid
        assert row["logical_request_digest"] is None
    assert dict(rows["logical_request"]["attributes"])["retryscope.contained_errors"] == (
        '["logical_request"]'
    )


def test_a_non_string_idempotency_key_loses_only_its_digest(tmp_path: Path) -> None:
    root = tmp_path / "data"
    with audit(root) as pipeline:
        with logical_request(
            operation="chat",
            idempotency_key=42,  # type: ignore[arg-type]
            request={"p": 1},
            tracer_provider=pipeline.provider,
        ) as req:
            with req.attempt("primary"):
                pass
        pipeline.close()
    (request,) = [r for r in _rows(root) if r["span_role"] == "logical_request"]
    assert request["idempotency_digest"] is None
    assert request["logical_request_digest"] is not None


def test_an_invalid_cost_keeps_the_reservation_and_the_outcome(tmp_path: Path) -> None:
    """set_cost(actual=-1) used to raise out of the attempt, which then recorded
    unknown_provider_acceptance: now the attempt succeeds, with its reservation."""
    root = tmp_path / "data"
    with audit(root) as pipeline:
        with logical_request(operation="chat", tracer_provider=pipeline.provider) as req:
            with req.attempt("primary") as a:
                a.set_cost(reserved=5_000, actual=-1)
        pipeline.close()
    (attempt,) = [r for r in _rows(root) if r["span_role"] == "attempt"]
    assert (attempt["outcome"], attempt["outcome_kind"]) == ("success", None)
    assert attempt["cost_reserved_micros"] == 5_000
    assert attempt["cost_actual_micros"] is None
    assert attempt["cost_estimated"] is True  # the reservation stands
    assert dict(attempt["attributes"])["retryscope.contained_errors"] == '["Attempt.set_cost"]'


def test_an_invalid_outcome_is_never_taken_for_a_success(tmp_path: Path) -> None:
    root = tmp_path / "data"
    with audit(root) as pipeline:
        with logical_request(operation="chat", tracer_provider=pipeline.provider) as req:
            with req.attempt("primary") as a:
                a.set_outcome("on_fire")
        pipeline.close()
    (attempt,) = [r for r in _rows(root) if r["span_role"] == "attempt"]
    assert attempt["outcome"] is None
    assert retryscope.Outcome.SUCCESS.value not in str(attempt)
