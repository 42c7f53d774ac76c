"""``retryscope demo``: simulated harness traffic through the real pipeline.

A harness with one retry owner sends logical requests to a private primary route and, when
that route's attempts are spent, to an external fallback. The simulated primary rate-limits
with Retry-After, has an outage window and slow tails; some callers have tight deadlines.
Every request goes through the real context API, the ``AttemptStampingProcessor``, the SDK's
``BatchSpanProcessor`` and the ``ParquetSpanExporter``; then the DuckDB report is printed and
the Streamlit UI served. Time is simulated (a virtual clock), so the run takes seconds and
the same seed gives the same traffic.
"""

from __future__ import annotations

import os
import random
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from retryscope.instrumentation import (
    AttemptStampingProcessor,
    ParquetSpanExporter,
    logical_request,
)
from retryscope.instrumentation.config import ExportConfig
from retryscope.instrumentation.parquet_files import make_dirs
from retryscope.vocabulary import Decision, OutcomeKind, Terminal

MARKER = ".retryscope-demo"
_MS = 1_000_000
_START_NS = 1_790_000_000_000_000_000  # 2026-09-21T13:46:40Z: fixed so runs are comparable


@dataclass(frozen=True, slots=True)
class Route:
    route_id: str
    release: str
    priority: int
    max_attempts: int
    cost_micros: int  # worst-case reservation per attempt
    latency_ms: float  # median latency of a successful call


PRIMARY = Route("private-primary", "llama-3.3-70b@2026-10", 0, 3, 2_000, 700.0)
FALLBACK = Route("external-fallback", "gpt-4.1@2026-09", 1, 2, 12_000, 1_100.0)
BASE_BACKOFF_MS, MAX_BACKOFF_MS, RETRY_AFTER_CAP_MS = 200, 1_500, 5_000


def idempotency_key(index: int) -> str:
    """The raw idempotency key of demo request ``index`` (only its digest is recorded)."""
    return f"demo-key-{index}"


def prompt_text(index: int) -> str:
    """The prompt of demo request ``index`` (only the request digest is recorded)."""
    return f"summarise ticket {index}"


class VirtualClock:
    """A clock the simulation advances by hand (unix ns)."""

    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance_ms(self, ms: float) -> None:
        self.now += int(ms * _MS)


def _observe(
    route: Route, at_s: float, rng: random.Random
) -> tuple[OutcomeKind | None, int, float]:
    """What one attempt on ``route`` observes: (failure kind or None, retry-after ms, latency)."""
    latency = rng.lognormvariate(0, 0.35) * route.latency_ms
    if route is PRIMARY:
        if 120 <= at_s < 200 and rng.random() < 0.85:  # outage window
            return OutcomeKind.UNAVAILABLE, 0, rng.uniform(30, 120)
        if rng.random() < 0.18:
            return OutcomeKind.RATE_LIMITED, rng.choice((250, 500, 1_000, 2_000)), 40.0
        if rng.random() < 0.03:
            return OutcomeKind.TIMEOUT_BEFORE_RESPONSE, 0, 2_500.0
        if rng.random() < 0.01:
            return OutcomeKind.INVALID_REQUEST, 0, 60.0
    elif rng.random() < 0.06:
        return OutcomeKind.UNAVAILABLE, 0, rng.uniform(50, 200)
    return None, 0, latency


def simulate_request(
    provider: TracerProvider, index: int, clock: VirtualClock, rng: random.Random
) -> None:
    """One logical request under a harness-owned capped-exponential retry/fallback policy."""
    arrival_s = (clock.now - _START_NS) / 1e9
    tight = rng.random() < 0.2
    deadline = clock.now + (2_500 if tight else 9_000) * _MS
    tenant = rng.choice(("acme", "globex", "initech"))
    request = {"messages": [{"role": "user", "content": prompt_text(index)}]}
    lrid = uuid.UUID(int=rng.getrandbits(128), version=4).hex
    with logical_request(
        operation="chat",
        tenant=tenant,
        idempotency_key=idempotency_key(index),
        request=request,
        deadline=deadline,
        retry_owner="harness",
        logical_request_id=lrid,
        tracer_provider=provider,
        clock=clock,
    ) as req:
        delay_ms, retry_after_ms = 0, 0
        for route in (PRIMARY, FALLBACK):
            for route_attempt in range(1, route.max_attempts + 1):
                if clock.now >= deadline:
                    req.set_terminal(Terminal.STOP_DEADLINE)
                    return
                with req.attempt(
                    route.route_id, route_release=route.release, route_priority=route.priority
                ) as attempt:
                    attempt.set_backoff(
                        delay_ms=delay_ms,
                        retry_after_ms=retry_after_ms or None,
                        not_before=clock.now,
                    )
                    kind, hint_ms, latency = _observe(route, arrival_s, rng)
                    clock.advance_ms(latency)
                    # usage is billed on success, nothing on a refused call, unknown on timeout
                    actual = (
                        int(route.cost_micros * rng.uniform(0.4, 1.0))
                        if kind is None
                        else None
                        if kind is OutcomeKind.TIMEOUT_BEFORE_RESPONSE
                        else 0
                    )
                    attempt.set_cost(reserved=route.cost_micros, actual=actual)
                    last_on_route = route_attempt == route.max_attempts
                    if kind is None:
                        attempt.set_outcome("success", http_status=200)
                        attempt.set_decision(Decision.COMPLETE)
                        return  # the request derives complete, or stop_deadline if late
                    status = {
                        OutcomeKind.RATE_LIMITED: 429,
                        OutcomeKind.UNAVAILABLE: 503,
                        OutcomeKind.INVALID_REQUEST: 400,
                    }.get(kind)
                    attempt.set_outcome(kind, http_status=status)
                    if kind.family.value != "retryable":
                        attempt.set_decision(Decision.STOP)
                        req.set_terminal(Terminal.STOP_NON_RETRYABLE)
                        return
                    attempt.set_decision(
                        Decision.FALLBACK
                        if last_on_route and route is PRIMARY
                        else Decision.STOP
                        if last_on_route
                        else Decision.RETRY
                    )
                # capped exponential backoff, raised to a bounded Retry-After hint
                retry_after_ms = min(hint_ms, RETRY_AFTER_CAP_MS)
                backoff = min(BASE_BACKOFF_MS * 2 ** (route_attempt - 1), MAX_BACKOFF_MS)
                delay_ms = max(BASE_BACKOFF_MS if last_on_route else backoff, retry_after_ms)
                clock.advance_ms(delay_ms)
        req.set_terminal(Terminal.STOP_ROUTE_EXHAUSTED)


def prepare_out_dir(out: Path) -> None:
    """Make ``out`` ready for a fresh demo run; refuse to clear a directory it did not make."""
    if out.exists() and any(out.iterdir()) and not (out / MARKER).exists():
        raise ValueError(
            f"{out} exists and was not written by `retryscope demo`; choose another --out"
        )
    modes = ExportConfig.from_env()  # owner-only by default, like the exporter's own files
    make_dirs(out, modes.dir_mode)
    for old in out.rglob("*.parquet"):
        old.unlink()
    fd = os.open(out / MARKER, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, modes.file_mode)
    with os.fdopen(fd, "w") as marker:
        marker.write("written by retryscope demo; its files are replaced on each run\n")


def generate(out: Path, requests: int, seed: int, *, progress: bool = True) -> ParquetSpanExporter:
    """Simulate ``requests`` logical requests into Parquet files under ``out``."""
    if requests < 1:
        raise ValueError("--requests must be at least 1")
    prepare_out_dir(out)
    rng = random.Random(seed)
    exporter = ParquetSpanExporter(out)
    provider = TracerProvider(resource=Resource.create({"service.name": "retryscope-demo"}))
    provider.add_span_processor(AttemptStampingProcessor())
    provider.add_span_processor(BatchSpanProcessor(exporter))
    arrival = _START_NS
    step = max(1, requests // 20)
    try:
        for i in range(requests):
            arrival += int(rng.expovariate(1.0) * 1_000 * _MS)  # ~1 request per second
            simulate_request(provider, i, VirtualClock(arrival), rng)
            if progress and ((i + 1) % step == 0 or i + 1 == requests):
                print(f"\rsimulating  {i + 1:>6}/{requests} logical requests", end="", flush=True)
    finally:
        provider.shutdown()
    if progress:
        print(file=sys.stdout)
    return exporter


def run_demo(*, out: str, requests: int, seed: int, serve_ui: bool, port: int) -> int:
    """Generate, report, and (unless told not to) serve the UI. Returns an exit code."""
    from retryscope.analytics import build_report, connect, format_text

    out_dir = Path(out)
    exporter = generate(out_dir, requests, seed)
    print(f"wrote {len(exporter.files_written)} Parquet file(s) to {out_dir}/\n")
    con, _ = connect(out_dir)
    print(format_text(build_report(con)))
    if not serve_ui:
        return 0
    from retryscope.dashboards.serve import serve

    return serve(str(out_dir), port=port, address="127.0.0.1")
