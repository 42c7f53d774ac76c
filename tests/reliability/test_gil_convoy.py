"""The exporter beside a CPU-bound thread: a file is cut by the exporter's helper thread, so
the export that makes it due never waits for seconds of sorting and writing while the batch
queue fills. What that buys (drops and export latency at 5,000 spans/s beside a busy
thread) is measured by ``python -m bench convoy``, not by a timed test."""

from __future__ import annotations

import sys
import threading
from collections.abc import Sequence
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

from retryscope.instrumentation import ParquetSpanExporter

from ..export_support import make_spans


def test_an_export_that_makes_a_file_due_does_not_wait_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The helper thread cuts the file: the export that made it due returns at once, exports
    during the cut are buffered behind it (and in the next file), a flush waits for it."""
    from retryscope.instrumentation.export import _exporter

    held, writing = threading.Event(), threading.Event()
    write = _exporter.write_partitioned

    def slow_write(*args: object, **kwargs: object) -> list[Path]:
        writing.set()
        held.wait(30)
        return write(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(_exporter, "write_partitioned", slow_write)
    exporter = ParquetSpanExporter(tmp_path, rotate_rows=6, partitioning="none")
    first, during = make_spans(2), make_spans(1)  # 6 spans (a file), then 3
    done: list[SpanExportResult] = []
    exporting = threading.Thread(target=lambda: done.append(exporter.export(first)))
    exporting.start()
    exporting.join(10)
    assert done == [SpanExportResult.SUCCESS]  # returned while nothing was written yet
    assert writing.wait(10)  # the helper thread is cutting the file
    assert exporter.export(during) is SpanExportResult.SUCCESS  # buffered behind the cut
    flushed: list[bool] = []
    flushing = threading.Thread(target=lambda: flushed.append(exporter.force_flush()))
    flushing.start()
    flushing.join(0.3)
    assert flushed == []  # waits for the cut in progress
    held.set()
    flushing.join(30)
    assert flushed == [True]
    exporter.shutdown()
    files = list(exporter.files_written)
    assert [pq.read_metadata(f).num_rows for f in files] == [6, 3]
    ids = {s.context.span_id for s in during}
    assert {int(i, 16) for i in pq.read_table(files[1])["span_id"].to_pylist()} == ids


def test_exporting_leaves_the_interpreters_switch_interval_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing interpreter-wide changes while batches are converted, buffered and cut into
    files (the helper thread's cut, and a flush's)."""
    from retryscope.instrumentation.export import _exporter

    own = sys.getswitchinterval()
    seen: list[float] = []
    write, convert = _exporter.write_partitioned, _exporter.spans_by_shape

    def watched_write(*args: object, **kwargs: object) -> list[Path]:
        seen.append(sys.getswitchinterval())
        return write(*args, **kwargs)  # type: ignore[arg-type]

    def watched_convert(spans: Sequence[ReadableSpan]) -> object:
        seen.append(sys.getswitchinterval())
        return convert(spans)

    monkeypatch.setattr(_exporter, "write_partitioned", watched_write)
    monkeypatch.setattr(_exporter, "spans_by_shape", watched_convert)
    exporter = ParquetSpanExporter(tmp_path, rotate_rows=6, partitioning="none")
    assert exporter.export(make_spans(2)) is SpanExportResult.SUCCESS  # a file is due
    assert exporter.export(make_spans(1)) is SpanExportResult.SUCCESS
    assert exporter.force_flush()
    exporter.shutdown()
    assert len(seen) >= 4  # two conversions, the cut and the flush's write
    assert seen == [own] * len(seen)
    assert sys.getswitchinterval() == own
