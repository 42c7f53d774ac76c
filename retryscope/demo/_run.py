"""``retryscope demo``: scenario traffic through the real pipeline, then the report and UI.

Each scenario (``retryscope.demo._scenarios``) drives real harness code — the
``RetryController`` (or, for ``unsafe-fallback``, a hand-written loop that bypasses it) and
the httpx integration — against a simulated provider on 127.0.0.1 (``demo_provider``), over
real HTTP, on a virtual clock. Spans go through the ``AttemptStampingProcessor``, the SDK's
``BatchSpanProcessor`` and the ``ParquetSpanExporter``; the policies are written as side
files (``_policies/``). The same ``--seed`` gives the same data.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

from opentelemetry.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from retryscope._fs import make_dirs
from retryscope.analytics.replay import POLICY_DIR
from retryscope.demo._provider import SimulatedProvider
from retryscope.demo._scenarios import (
    SCENARIOS,
    START_NS,
    VirtualClock,
    World,
    arrivals,
    idempotency_key,
    prompt_text,
    run_one,
)
from retryscope.instrumentation import (
    AttemptMetricsProcessor,
    AttemptStampingProcessor,
    ExportConfig,
    ParquetSpanExporter,
)

__all__ = [
    "MARKER",
    "SCENARIOS",
    "VirtualClock",
    "generate",
    "idempotency_key",
    "prepare_out_dir",
    "prompt_text",
    "run_demo",
]

MARKER = ".retryscope-demo"
_SCENARIO_SPACING_NS = 3_600 * 1_000_000_000  # each scenario in its own hour


def split(requests: int, scenario: str) -> dict[str, int]:
    """Requests per scenario: all to one, or ``all`` shared evenly (first ones get the rest)."""
    if requests < 1:
        raise ValueError("--requests must be at least 1")
    if scenario != "all":
        if scenario not in SCENARIOS:
            raise ValueError(f"unknown scenario {scenario!r}; choose all or {', '.join(SCENARIOS)}")
        return {scenario: requests}
    share, rest = divmod(requests, len(SCENARIOS))
    counts = {name: share + (1 if i < rest else 0) for i, name in enumerate(SCENARIOS)}
    return {name: n for name, n in counts.items() if n > 0}


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
    for old in (out / POLICY_DIR).glob("*.json"):
        old.unlink()
    fd = os.open(out / MARKER, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, modes.file_mode)
    with os.fdopen(fd, "w") as marker:
        marker.write("written by retryscope demo; its files are replaced on each run\n")


def generate(
    out: Path,
    requests: int,
    seed: int,
    *,
    scenario: str = "all",
    progress: bool = True,
    meter_provider: MeterProvider | None = None,
) -> ParquetSpanExporter:
    """Simulate ``requests`` logical requests of ``scenario`` into Parquet under ``out``;
    with ``meter_provider``, the live metrics of the same traffic are recorded there."""
    counts = split(requests, scenario)
    prepare_out_dir(out)
    rng = random.Random(seed)
    exporter = ParquetSpanExporter(out)
    provider = TracerProvider(resource=Resource.create({"service.name": "retryscope-demo"}))
    metrics = (
        AttemptMetricsProcessor(meter_provider=meter_provider)
        if meter_provider is not None
        else None
    )
    provider.add_span_processor(AttemptStampingProcessor(metrics=metrics))
    provider.add_span_processor(BatchSpanProcessor(exporter))
    done, total = 0, sum(counts.values())
    step = max(1, total // 20)
    try:
        with SimulatedProvider(seed) as sim:
            sim.requests.update(counts)
            world = World.open(provider, sim, out, seed)
            try:
                for k, name in enumerate(SCENARIOS):
                    n = counts.get(name, 0)
                    start = START_NS + k * _SCENARIO_SPACING_NS
                    for i, at in enumerate(arrivals(name, n, start, rng)):
                        run_one(world, name, i, at, rng, number=done)
                        done += 1
                        if progress and (done % step == 0 or done == total):
                            print(f"\rsimulating  {done:>6}/{total} logical requests", end="")
            finally:
                world.client.close()
    finally:
        provider.shutdown()
    if progress:
        print(file=sys.stdout)
    return exporter


def run_demo(
    *, out: str, requests: int, seed: int, serve_ui: bool, port: int, scenario: str = "all"
) -> int:
    """Generate, report, and (unless told not to) serve the UI. Returns an exit code."""
    from retryscope.analytics import build_report, connect, format_text

    out_dir = Path(out)
    exporter = generate(out_dir, requests, seed, scenario=scenario)
    print(f"wrote {len(exporter.files_written)} Parquet file(s) to {out_dir}/\n")
    con, _ = connect(out_dir)
    print(format_text(build_report(con)))
    if not serve_ui:
        return 0
    from retryscope.dashboards.serve import serve

    return serve(str(out_dir), port=port, address="127.0.0.1")
