"""Target 2: ``ParquetSpanExporter`` against OTLP protobuf encoding, and bytes per span.

Identical batches of 512 finished SDK spans with 20 attributes each (logical request,
attempt and third-party HTTP spans of a harness's traffic, with real random trace and span
ids) go through

* ``ParquetSpanExporter.export`` for every batch, then ``force_flush()`` — the exporter
  buffers, so the write is part of the measured work; the exporter has its production
  (default) configuration;
* OTLP: ``encode_spans(batch).SerializeToString()`` for every batch (what the OTLP exporter
  does before compressing and sending);
* the same exporter with ``durable=False``: what appending each accepted batch to its crash
  segment (``export/_segments.py``) costs, side by side.

Bytes per span is the size of the Parquet file a round writes divided by its spans. The
exporter also runs on the public OpenTelemetry API only
(``retryscope.instrumentation._sdk.public_paths``, as with ``RETRYSCOPE_SDK_PUBLIC_ONLY=1``),
interleaved with the rest, to show what its direct reads of SDK span fields buy.
"""

from __future__ import annotations

import random
import shutil
import tempfile
from pathlib import Path

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode, set_span_in_context
from opentelemetry.util.types import AttributeValue

from bench.harness import Result, Target, interleave, micros
from bench.settings import Settings
from retryscope import ParquetSpanExporter
from retryscope.instrumentation._sdk import public_paths

BATCH = 512
ATTRIBUTES = 20
ROUTES = (
    ("private-primary", "llama-3.3-70b@2026-10", 0),
    ("private-secondary", "qwen-3-72b@2026-09", 0),
    ("external-fallback", "gpt-4.1@2026-09", 1),
)
TENANTS = ("acme", "globex", "initech", "umbrella", "hooli", "stark")
_MS = 1_000_000


def _hex(rng: random.Random, n_bytes: int) -> str:
    return rng.getrandbits(8 * n_bytes).to_bytes(n_bytes, "big").hex()


def _stamp(rng: random.Random) -> dict[str, AttributeValue]:
    return {
        "retryscope.logical_request.id": _hex(rng, 16),
        "retryscope.idempotency.digest": _hex(rng, 32),
        "retryscope.tenant": rng.choice(TENANTS),
        "retryscope.operation": "chat",
    }


def _padded(attrs: dict[str, AttributeValue], rng: random.Random) -> dict[str, AttributeValue]:
    """``attrs`` filled up to exactly 20 attributes with typical extra span attributes."""
    extras: list[tuple[str, AttributeValue]] = [
        ("gen_ai.provider.name", "openai"),
        ("gen_ai.operation.name", "chat"),
        ("gen_ai.request.model", "gpt-4.1"),
        ("gen_ai.usage.input_tokens", rng.randint(50, 4_000)),
        ("gen_ai.usage.output_tokens", rng.randint(10, 1_000)),
        ("gen_ai.response.id", "chatcmpl-" + _hex(rng, 12)),
        ("server.address", "llm.internal.example"),
        ("server.port", 443),
        ("user_agent.original", "OpenAI/Python 1.99.0"),
        ("app.conversation.turn", rng.randint(1, 30)),
        ("app.feature", rng.choice(("summarise", "classify", "draft", "search"))),
        ("app.cache.hit", rng.random() < 0.2),
        ("app.prompt.template", rng.choice(("v7", "v8", "v9"))),
        ("app.region", rng.choice(("eu-west-1", "us-east-1"))),
    ]
    out = dict(attrs)
    for key, value in extras:
        if len(out) >= ATTRIBUTES:
            break
        out.setdefault(key, value)
    if len(out) != ATTRIBUTES:
        raise RuntimeError(f"span has {len(out)} attributes, expected {ATTRIBUTES}")
    return out


def make_spans(count: int, seed: int) -> list[ReadableSpan]:
    """``count`` finished spans of a harness's traffic, each with exactly 20 attributes."""
    rng = random.Random(seed)
    memory = InMemorySpanExporter()
    resource = Resource.create(
        {"service.name": "harness-api", "deployment.environment.name": "prod", "host.name": "h-7"}
    )
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("retryscope", "0.1.0")
    http = provider.get_tracer("opentelemetry.instrumentation.httpx", "0.66b2")
    now = 1_790_000_000_000_000_000
    made = 0
    while made < count:
        stamp = _stamp(rng)
        now += rng.randint(1, 50) * _MS
        start, deadline = now, now + 30_000 * _MS
        tries = rng.choices((1, 2, 3), weights=(80, 15, 5))[0]
        root = tracer.start_span(
            "logical_request chat",
            start_time=start,
            attributes=_padded(
                {
                    **stamp,
                    "retryscope.span.role": "logical_request",
                    "retryscope.retry.owner": "harness",
                    "retryscope.deadline": deadline,
                    "retryscope.logical_request.digest": _hex(rng, 32),
                },
                rng,
            ),
        )
        t = start
        for ordinal in range(1, tries + 1):
            route, release, priority = ROUTES[2] if ordinal == 3 else rng.choice(ROUTES[:2])
            ok = ordinal == tries
            latency = int(rng.lognormvariate(6.5, 0.4) * _MS)
            attempt = tracer.start_span(
                f"attempt {route}",
                context=set_span_in_context(root),
                kind=SpanKind.CLIENT,
                start_time=t,
                attributes=_padded(
                    {
                        **stamp,
                        "retryscope.span.role": "attempt",
                        "retryscope.attempt.layer": "harness",
                        "retryscope.attempt.ordinal": ordinal,
                        "retryscope.attempt.route_ordinal": 1,
                        "retryscope.route.id": route,
                        "retryscope.route.release": release,
                        "retryscope.route.priority": priority,
                        "retryscope.route.fallback": priority > 0,
                        "retryscope.deadline.remaining_ms": (deadline - t) // _MS,
                        "retryscope.cost.reserved_micros": 12_000,
                        "retryscope.cost.actual_micros": rng.randint(2_000, 12_000) if ok else 0,
                        "retryscope.outcome": "success" if ok else "retryable",
                        "retryscope.decision": "complete" if ok else "retry",
                        "http.response.status_code": 200 if ok else 429,
                    },
                    rng,
                ),
            )
            child = http.start_span(
                "POST",
                context=set_span_in_context(attempt),
                kind=SpanKind.CLIENT,
                start_time=t + _MS,
                attributes=_padded(
                    {
                        **stamp,
                        "retryscope.attempt.ordinal": ordinal,
                        "retryscope.route.id": route,
                        "http.request.method": "POST",
                        "url.full": "https://llm.internal.example/v1/chat/completions",
                        "http.response.status_code": 200 if ok else 429,
                    },
                    rng,
                ),
            )
            if not ok:
                child.set_status(Status(StatusCode.ERROR))
                attempt.set_status(Status(StatusCode.ERROR, "rate_limited"))
            child.end(end_time=t + latency - _MS)
            attempt.end(end_time=t + latency)
            t += latency + rng.randint(100, 2_000) * _MS
        root.end(end_time=t)
        made += 1 + 2 * tries
    provider.shutdown()
    return list(memory.get_finished_spans())[:count]


def run(settings: Settings) -> list[Result]:
    n_batches = settings.scaled(40, 2)
    spans = make_spans(n_batches * BATCH, settings.seed)
    batches = [spans[i : i + BATCH] for i in range(0, len(spans), BATCH)]
    n = len(spans)
    workdir = Path(tempfile.mkdtemp(prefix="retryscope-bench-export-"))
    exporter = ParquetSpanExporter(workdir / "spans")
    memory_only = ParquetSpanExporter(workdir / "memory-only", durable=False)
    written: list[int] = []

    def clear() -> None:
        shutil.rmtree(workdir / "spans", ignore_errors=True)
        shutil.rmtree(workdir / "memory-only", ignore_errors=True)

    def through(target: ParquetSpanExporter) -> None:
        for batch in batches:
            target.export(batch)
        if not target.force_flush():
            raise RuntimeError("ParquetSpanExporter.force_flush failed")

    def parquet() -> None:
        through(exporter)

    def parquet_memory_only() -> None:
        through(memory_only)

    def parquet_public() -> None:
        with public_paths():
            parquet()

    otlp_bytes: list[int] = []

    def otlp() -> None:
        otlp_bytes.append(sum(len(encode_spans(batch).SerializeToString()) for batch in batches))

    def measure_file() -> None:
        files = list((workdir / "spans").rglob("*.parquet"))
        written.append(sum(f.stat().st_size for f in files))

    try:
        timings = interleave(
            {
                "otlp": otlp,
                "parquet": parquet,
                "parquet public": parquet_public,
                "parquet memory only": parquet_memory_only,
            },
            rounds=settings.rounds,
            setup=clear,
        )
        clear()
        parquet()
        measure_file()
    finally:
        exporter.shutdown()
        memory_only.shutdown()
        shutil.rmtree(workdir, ignore_errors=True)
    t_otlp, t_parquet = timings.median("otlp"), timings.median("parquet")
    bytes_per_span = written[-1] / n

    def both(case: str) -> str:
        """Wall and CPU (every thread's) time per span of ``case``."""
        return f"{micros(timings.median(case), n)} (CPU {micros(timings.cpu_median(case), n)})"

    return [
        Result(
            "export",
            f"speed-up of ParquetSpanExporter over OTLP encode ({n:,} spans)",
            t_otlp / t_parquet,
            "×",
            Target(at_least=6.0, text="≥ 6×"),
            {
                "parquet": both("parquet"),
                "otlp": both("otlp"),
                "CPU speed-up": f"{timings.cpu_ratio('otlp', 'parquet'):.2f}×",
            },
        ),
        Result(
            "export",
            "Parquet bytes per span on disk",
            bytes_per_span,
            "B",
            Target(at_most=100.0, text="≤ 100 B"),
            {"OTLP protobuf": f"{otlp_bytes[-1] / n:,.0f} B/span uncompressed"},
        ),
        Result(
            "export",
            "ParquetSpanExporter: public SDK paths / fast paths",
            timings.ratio("parquet public", "parquet"),
            "×",
            None,
            {"fast": both("parquet"), "public": both("parquet public")},
        ),
        Result(
            "export",
            "ParquetSpanExporter: durable segments / memory only (durable=False)",
            timings.ratio("parquet", "parquet memory only"),
            "×",
            Target(at_most=1.25, text="≤ 1.25×"),
            {
                "durable": both("parquet"),
                "memory only": both("parquet memory only"),
                "CPU": f"{timings.cpu_ratio('parquet', 'parquet memory only'):.2f}×",
            },
        ),
    ]
