"""Helpers of the reliability suite: a production-shaped pipeline writing real Parquet."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from retryscope.instrumentation import (
    AttemptStampingProcessor,
    GapCountingBatchSpanProcessor,
    ParquetSpanExporter,
)


@dataclass
class Audit:
    """Real TracerProvider → AttemptStampingProcessor → (Gap-counting) BatchSpanProcessor →
    ParquetSpanExporter, plus the SDK's in-memory exporter as the record of what the
    application created."""

    provider: TracerProvider
    exporter: ParquetSpanExporter
    batch: GapCountingBatchSpanProcessor
    created: InMemorySpanExporter | None
    directory: Path

    def close(self) -> None:
        assert self.provider.force_flush(60_000)
        assert self.exporter.force_flush(60_000)
        self.provider.shutdown()


@contextmanager
def audit(
    directory: Path,
    *,
    record_created: bool = True,
    max_queue_size: int = 2048,
    **exporter_options: Any,
) -> Iterator[Audit]:
    exporter = ParquetSpanExporter(directory, **exporter_options)
    provider = TracerProvider(resource=Resource.create({"service.name": "reliability"}))
    provider.add_span_processor(AttemptStampingProcessor())
    created = InMemorySpanExporter() if record_created else None
    if created is not None:
        provider.add_span_processor(SimpleSpanProcessor(created))
    batch = GapCountingBatchSpanProcessor(exporter, max_queue_size=max_queue_size)
    provider.add_span_processor(batch)
    a = Audit(provider, exporter, batch, created, directory)
    try:
        yield a
    finally:
        a.provider.shutdown()


def visible_files(directory: Path) -> list[Path]:
    return sorted(
        p for p in directory.rglob("*.parquet") if not any(x.startswith(".") for x in p.parts)
    )


def rows(directory: Path) -> pa.Table:
    """Every row written under ``directory`` (schema columns only)."""
    tables = [pq.read_table(f, partitioning=None) for f in visible_files(directory)]
    return pa.concat_tables(tables) if tables else pa.table({})


def json_round_trip(value: Any) -> Any:
    """What a JSON reader gets back for ``value`` (JSON itself joins adjacent surrogates)."""
    return json.loads(json.dumps(value, allow_nan=True))


def flip_bytes(path: Path, start: int, stop: int) -> None:
    """Garble ``path`` in place: XOR its bytes ``start``..``stop`` (cut to its length)."""
    data = bytearray(path.read_bytes())
    for i in range(start, min(stop, len(data))):
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))


def garbled_copy(victim: Path) -> Path:
    """A copy of ``victim`` beside it, ``pages-corrupt.parquet``, whose footer reads but
    whose first pages are garbled (DuckDB fails only when it decodes them)."""
    pages = victim.with_name("pages-corrupt.parquet")
    pages.write_bytes(victim.read_bytes())
    flip_bytes(pages, 200, 1200)
    return pages


def span_ids(root: Path) -> list[str]:
    """The application's spans in the data set (not telemetry-gap rows)."""
    ids: list[str] = []
    for f in visible_files(root):
        table = pq.read_table(f, columns=["span_id", "span_role"])
        ids += table.filter(table.column("span_role").is_null()).column("span_id").to_pylist()
    return ids


def recover_cli(root: Path) -> subprocess.CompletedProcess[str]:
    """``retryscope recover ROOT`` in its own process."""
    return subprocess.run(
        [sys.executable, "-m", "retryscope.cli", "recover", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def run_script(code: str, *args: str, env: dict[str, str] | None = None) -> str:
    """Run ``code`` in a fresh interpreter with ``args`` (and ``env`` added to this
    process's environment); its standard output (it must exit 0)."""
    run = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env={**os.environ, **(env or {})},
    )
    assert run.returncode == 0, run.stderr
    return run.stdout
