"""A small audit data set with known numbers for the UI tests, made by the real pipeline
(context API, TracerProvider, AttemptStampingProcessor, ParquetSpanExporter) on virtual
clocks. Nine logical requests; seven start in the ten minutes from T0 (``PERIOD``), two in
the ten minutes before (the previous period).

- ``nested``: acme; harness 3 × transport 3 (9 receiver attempts), 100 ms backoffs with
  not_before, deadline T0 + 5 s, idempotency key; 290 ms long.
- ``widening``: the hostile tenant; falls back to the hostile route on an external
  provider although the request allows private services only (boundary widening).
- ``degraded``: acme; the fallback answers with another behavior class.
- ``mismatch``: globex; the fallback binds another capability digest.
- ``deadline``: globex; 1 s deadline; harness attempt 1 (unavailable) over a transport send
  rate limited (429, reserved $0.001, an exception event with credentials in its message);
  the retry, dispatched with 50 ms left, sends once more (a GenAI span beneath, billed
  $0.0025) and succeeds at 1350 ms: deadline exhausted, one late success (the harness
  attempt and its send are one answer), doomed dispatch.
- ``ok1`` (acme, billed $0.002), ``ok2`` (globex, operation ``embed``): one successful
  attempt each.
- ``prev1``, ``prev2``: acme, before T0, one successful attempt each.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from retryscope import vocabulary as v
from tests.recorder import MS, T0, Clock, Recorder
from tests.test_analytics_fallback import REQUIRED, _route

LEAKY_ERROR = "429 from https://svc:hunter2@api.example/v1?api_key=sk-live-abcdef123456"
"""An error message carrying credentials: the drill-down shows it redacted."""
HOSTILE_TENANT = "o'brien\"; DROP TABLE spans; --"
HOSTILE_ROUTE = "ext'); SELECT * FROM read_csv('/etc/passwd'); --"
CAPABILITY_NAME = "incident-severity *json* v3"
"""The name the fallback requests record beside their required capability ``cap-1`` (with
markdown in it: pages show it verbatim); ``cap-2`` has none."""
BEHAVIOR_NAME = "Incident severity v3"
"""The name their primary attempts record beside the behavior class ``incident-severity@v3``
(the fallbacks' ``cheaper@v1`` has none)."""
START = datetime.fromtimestamp(T0 / 1e9, UTC).replace(tzinfo=None)
PERIOD = (START, START + timedelta(minutes=10))


def _nested(rec: Recorder) -> None:
    clock = Clock(T0)
    with rec.request(
        clock,
        tenant="acme",
        logical_request_id="nested",
        deadline=T0 + 5000 * MS,
        idempotency_key="order-42",
    ) as req:
        for h in range(3):
            last = h == 2
            with req.attempt("primary", layer="harness") as outer:
                if h:
                    outer.set_backoff(delay_ms=100, not_before=clock.now)
                for t in range(3):
                    rec.attempt(
                        req,
                        "primary",
                        layer="transport",
                        ms=10,
                        outcome="success" if last and t == 2 else "unavailable",
                    )
                outer.set_outcome("success" if last else "unavailable")
            if not last:
                clock.advance_ms(100)


def _fallback(rec: Recorder, rid: str, at_s: int, tenant: str, route: str, **kw: str) -> None:
    clock = Clock(T0 + at_s * 1000 * MS)
    named = {**REQUIRED, v.REQUIRED_CAPABILITY_NAME.key: CAPABILITY_NAME}
    with rec.request(clock, tenant=tenant, logical_request_id=rid, attributes=named) as req:
        primary = {**_route(), v.ROUTE_BEHAVIOR_CLASS_NAME.key: BEHAVIOR_NAME}
        rec.attempt(req, "primary", outcome="unavailable", attributes=primary, gap_ms=200)
        rec.attempt(req, route, priority=1, attributes=_route(**kw))


def _cost(rid: str) -> int | None:
    """``ok1`` is billed $0.002 (so cost amplification has accepted cost to divide by)."""
    return 2_000 if rid == "ok1" else None


def _single(rec: Recorder, rid: str, at_s: int, tenant: str, **kw: Any) -> None:
    clock = Clock(T0 + at_s * 1000 * MS)
    with rec.request(clock, tenant=tenant, logical_request_id=rid, **kw) as req:
        rec.attempt(req, "primary", ms=100 if rid != "ok1" else 200, actual=_cost(rid))


def _deadline(rec: Recorder) -> None:
    clock = Clock(T0 + 240_000 * MS)
    with rec.request(
        clock, tenant="globex", logical_request_id="deadline", deadline=clock.now + 1000 * MS
    ) as req:
        with req.attempt("primary", layer="harness") as first:
            with req.attempt("primary", layer="transport") as send:
                clock.advance_ms(600)
                send.set_cost(reserved=1_000)
                send.span.add_event(
                    "exception",
                    {"exception.type": "RateLimitError", "exception.message": LEAKY_ERROR},
                    timestamp=clock(),
                )
                send.set_outcome("rate_limited", error="RateLimitError", http_status=429)
            first.set_outcome("unavailable")
        clock.advance_ms(350)
        with req.attempt("primary", layer="harness") as second:
            with req.attempt("primary", layer="transport") as send:
                with rec.genai_span(clock, ms=400):
                    pass
                send.set_cost(actual=2_500)
                send.set_outcome("success")
            second.set_outcome("success")


def build(directory: Path) -> Path:
    """Write the data set into ``directory`` and return it."""
    rec = Recorder(directory)
    _nested(rec)
    _fallback(rec, "widening", 60, HOSTILE_TENANT, HOSTILE_ROUTE, boundary="external_provider")
    _fallback(rec, "degraded", 120, "acme", "fb-cheap", behavior="cheaper@v1")
    _fallback(rec, "mismatch", 180, "globex", "fb-other", cap="cap-2")
    _deadline(rec)
    _single(rec, "ok1", 300, "acme")
    _single(rec, "ok2", 360, "globex", operation="embed")
    _single(rec, "prev1", -300, "acme")
    _single(rec, "prev2", -240, "acme")
    rec.connect()  # flushes and shuts the pipeline down
    return directory


def build_operations(directory: Path) -> Path:
    """Two requests of one harness attempt each, two sends each, through the stamping
    processor's send grouping: ``multi`` embeds and chats (two distinct operations, sent
    once each: no retry), ``resent`` sends one request twice (503, then 200). Sends per
    request 2.0 (4 / 2), retry amplification 1.33 (4 sends / 3 operations)."""
    rec = Recorder(directory)
    clock = Clock(T0)
    with (
        rec.request(clock, tenant="acme", logical_request_id="multi") as req,
        req.attempt("primary", layer="harness"),
    ):
        with rec.http_span(clock, 200, url="http://127.0.0.1/v1/embeddings"):
            pass
        with rec.http_span(clock, 200, url="http://127.0.0.1/v1/chat"):
            pass
    clock.advance_ms(1000)
    with (
        rec.request(clock, tenant="acme", logical_request_id="resent") as req,
        req.attempt("primary", layer="harness"),
    ):
        with rec.http_span(clock, 503):
            pass
        clock.advance_ms(5)
        with rec.http_span(clock, 200):
            pass
    rec.connect()  # flushes and shuts the pipeline down
    return directory


POLICY_REQUESTS = ("a" * 32, "b" * 32, "e" * 32, "d" * 32)
"""The requests of :func:`build_with_policies` (see there)."""


def build_with_policies(directory: Path) -> Path:
    """A data set with policy side files, made by the real ``RetryController`` and a hand
    loop on virtual clocks (``tests/whatif/harness.py``), with known replay figures:

    - ``a…``: 503, 503, fallback success billed 250,000 → complete, 3 attempts.
    - ``b…``: 503 then success billed 100,000 → complete, 2 attempts.
    - ``e…``: 503 × 2 under a 2-attempt policy → stop_attempt_budget (unknown when a
      replay allows more attempts).
    - ``d…``: a hand loop stamping the reference policy's digest that retries on a rogue
      route (policy drift: ``route_id`` observed ``"rogue"``).
    """
    from retryscope.control._calls import CallResult
    from retryscope.vocabulary import OutcomeKind
    from tests.whatif.harness import Traffic, policy_with

    a, b, e, d = POLICY_REQUESTS
    fail = CallResult(kind=OutcomeKind.UNAVAILABLE, cost_actual_micros=0)
    t = Traffic(directory)
    script = [(100, fail), (100, fail), (100, CallResult(value="ok", cost_actual_micros=250_000))]
    t.controlled(script, request_id=a, start_ms=2_000)
    t.controlled(
        [(100, fail), (100, CallResult(value="ok", cost_actual_micros=100_000))], request_id=b
    )
    t.controlled([(100, fail)] * 2, request_id=e, policy=policy_with(max_total_attempts=2))
    t.by_hand(
        request_id=d,
        steps=[("private-primary", 0, OutcomeKind.UNAVAILABLE), ("rogue", 200, None)],
    )
    t.close()
    return directory
