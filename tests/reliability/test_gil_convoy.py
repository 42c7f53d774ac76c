"""The exporter beside a CPU-bound thread: while a batch is converted and written the GIL
switch interval is at most ``switch_interval_s``, so the export thread gets the GIL back
within it after each release (``instrumentation/export/_gil.py``); the interpreter's own
interval is back after every export, and an application's change made meanwhile is kept.
A file is cut by the exporter's helper thread, so the export that makes it due never waits
for seconds of sorting and writing while the batch queue fills. What it buys (drops and
export latency at 5,000 spans/s beside a busy thread, before and after) is measured by
``python -m bench convoy``, not by a timed test."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

from retryscope.instrumentation import ParquetSpanExporter

from ..export_support import make_spans

OWN = 0.005  # the interpreter's default


@pytest.fixture(autouse=True)
def _interpreter_interval() -> Iterator[None]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(OWN)
    yield
    sys.setswitchinterval(before)


class Watching(ParquetSpanExporter):
    """Records the switch interval in force while each batch is converted and written."""

    def __init__(self, *args: object, during: list[float], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.during = during

    def _export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.during.append(sys.getswitchinterval())
        return super()._export(spans)


def test_an_export_lowers_the_interval_and_puts_it_back(tmp_path: Path) -> None:
    during: list[float] = []
    exporter = Watching(tmp_path, during=during)
    assert exporter.export(make_spans(2)) is SpanExportResult.SUCCESS
    assert during == [pytest.approx(exporter.config.switch_interval_s)]
    assert exporter.config.switch_interval_s < OWN
    assert sys.getswitchinterval() == pytest.approx(OWN)
    exporter.shutdown()


def test_zero_leaves_the_interpreters_interval(tmp_path: Path) -> None:
    during: list[float] = []
    exporter = Watching(tmp_path, during=during, switch_interval_s=0)
    exporter.export(make_spans(1))
    assert during == [pytest.approx(OWN)]
    exporter.shutdown()


def test_an_interval_the_application_sets_meanwhile_is_kept(tmp_path: Path) -> None:
    class Changing(ParquetSpanExporter):
        def _export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            sys.setswitchinterval(0.02)  # the application's own choice, mid-export
            return super()._export(spans)

    exporter = Changing(tmp_path)
    exporter.export(make_spans(1))
    assert sys.getswitchinterval() == pytest.approx(0.02)
    exporter.shutdown()


def test_overlapping_exports_restore_the_interval_once_the_last_ends(tmp_path: Path) -> None:
    inside, first_done = threading.Barrier(3), threading.Event()
    during: list[float] = []

    class First(ParquetSpanExporter):
        def _export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            inside.wait(10)  # both exports (and the test) are here
            return super()._export(spans)

    class Second(ParquetSpanExporter):
        def _export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            inside.wait(10)
            first_done.wait(10)  # the first export has ended: this one still runs
            during.append(sys.getswitchinterval())
            return super()._export(spans)

    first, second = First(tmp_path / "a"), Second(tmp_path / "b")
    spans = make_spans(1)
    a = threading.Thread(target=first.export, args=(spans,))
    b = threading.Thread(target=second.export, args=(spans,))
    a.start()
    b.start()
    inside.wait(10)
    assert sys.getswitchinterval() < OWN
    a.join(10)
    first_done.set()
    b.join(10)
    assert len(during) == 1
    assert during[0] < OWN
    assert sys.getswitchinterval() == pytest.approx(OWN)
    first.shutdown()
    second.shutdown()


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
