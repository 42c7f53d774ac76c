"""Failed writes, the bounded retry buffer, recovery, and telemetry-gap rows."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from opentelemetry.sdk.environment_variables import OTEL_BSP_MAX_QUEUE_SIZE
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SpanExportResult

from retryscope.analytics import connect
from retryscope.instrumentation import GapCountingBatchSpanProcessor, ParquetSpanExporter
from retryscope.instrumentation.export._batch import QUEUE_SIZE
from retryscope.instrumentation.export._exporter import spans_to_columns
from retryscope.instrumentation.export._gaps import GAP_SPAN_ID, GAP_TRACE_ID

from .export_support import Collect, last_json_line, make_spans, run_ok

LOGGER = "retryscope.instrumentation.export._exporter"


def _gap_rows(root: Path) -> list[tuple[str, int, str, str]]:
    con, _ = connect(root)
    return con.sql(
        "SELECT gap_reason, gap_dropped_spans, trace_id, span_id FROM spans "
        "WHERE span_role = 'telemetry_gap' ORDER BY gap_reason"
    ).fetchall()


def _span_rows(root: Path) -> int:
    con, _ = connect(root)
    (count,) = con.sql(
        "SELECT count(*) FROM spans WHERE span_role IS DISTINCT FROM 'telemetry_gap'"
    ).fetchall()[0]
    return int(count)


def _episode(
    exporter: ParquetSpanExporter, spans: Sequence[ReadableSpan], exports: int
) -> list[SpanExportResult]:
    return [exporter.export(spans) for _ in range(exports)]


def test_unwritable_directory_failure_buffer_recovery_and_exact_loss(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The data directory's place is taken by a file (works as root, unlike chmod): writes
    fail, the buffer keeps the newest rows up to its bound, the loss is exact, one log line
    per episode, and the next good write stores the buffer and a gap row."""
    root = tmp_path / "data"
    root.write_text("not a directory")
    spans = make_spans(1)  # 3 spans
    exporter = ParquetSpanExporter(root, rotate_rows=3, buffer_rows=10, retry_s=0)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        results = _episode(exporter, spans, 6)  # 18 spans, room for 10
    assert results == [SpanExportResult.FAILURE] * 6
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "cannot write spans" in errors[0].getMessage()
    assert "data" in errors[0].getMessage()
    assert exporter.dropped_spans == 8
    assert exporter.gaps.pending == 8

    root.unlink()  # the directory recovers
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert exporter.export(spans) == SpanExportResult.SUCCESS
    assert [r.levelno for r in caplog.records] == [logging.INFO]  # "works again"
    exporter.shutdown()
    # the new batch joined the bounded buffer before the write: 3 more of the oldest went
    assert _span_rows(root) == 10
    assert exporter.dropped_spans == 11
    assert _gap_rows(root) == [("buffer_full", 11, GAP_TRACE_ID, GAP_SPAN_ID)]

    # the same exporter failing again later is a new episode: one more line
    other = tmp_path / "other"
    other.write_text("x")
    again = ParquetSpanExporter(other, rotate_rows=3, retry_s=0)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        _episode(again, spans, 3)
        other.unlink()
        assert again.export(spans) == SpanExportResult.SUCCESS
        shutil.rmtree(other)
        other.write_text("x")
        _episode(again, spans, 3)
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 2


_READ_ONLY_SCRIPT = """
import json, subprocess, sys
from pathlib import Path
from opentelemetry.sdk.trace.export import SpanExportResult
from export_support import error_lines, make_spans
from retryscope.instrumentation import ParquetSpanExporter

mount = Path(sys.argv[1])
subprocess.run(["mount", "-t", "tmpfs", "-o", "ro", "tmpfs", str(mount)], check=True)
errors = error_lines()
exporter = ParquetSpanExporter(mount / "data", rotate_rows=3, retry_s=0)
spans = make_spans(1)
failed = [exporter.export(spans) == SpanExportResult.FAILURE for _ in range(3)]
subprocess.run(["mount", "-o", "remount,rw", str(mount)], check=True)
flushed = exporter.force_flush()
rows = sum(
    __import__("pyarrow.parquet").parquet.read_metadata(p).num_rows
    for p in (mount / "data").rglob("*.parquet") if not p.name.startswith(".")
)
print(json.dumps({"failed": failed, "errors": errors, "flushed": flushed, "rows": rows}))
"""


def _can_mount_read_only(tmp_path: Path) -> bool:
    probe = tmp_path / "probe"
    probe.mkdir()
    if shutil.which("unshare") is None:
        return False
    done = subprocess.run(
        ["unshare", "-rm", "mount", "-t", "tmpfs", "-o", "ro", "tmpfs", str(probe)],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


def test_read_only_file_system_then_recovery(tmp_path: Path) -> None:
    """A real read-only mount (a private mount namespace; works as root too): FAILURE with
    the buffer kept and one log line, then after a read-write remount the buffer is written."""
    if not _can_mount_read_only(tmp_path):
        pytest.skip("cannot create a private read-only mount here (unshare -rm)")
    mount = tmp_path / "mnt"
    mount.mkdir()
    script = tmp_path / "ro_writer.py"
    script.write_text(_READ_ONLY_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent)}
    result = last_json_line(
        run_ok(["unshare", "-rm", sys.executable, str(script), str(mount)], env=env)
    )
    assert result["failed"] == [True, True, True]
    assert len(result["errors"]) == 1
    assert "Read-only file system" in result["errors"][0]
    assert result["flushed"] is True
    assert result["rows"] == 9


def test_shutdown_while_failing_counts_what_is_lost(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "data"
    root.write_text("x")
    exporter = ParquetSpanExporter(root, rotate_rows=3, retry_s=0)
    exporter.export(make_spans(1))
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        exporter.shutdown()
    assert exporter.dropped_spans == 3
    assert "3 spans" in caplog.records[-1].getMessage()
    assert exporter.export(make_spans(1)) == SpanExportResult.FAILURE


def test_retry_waits_between_failed_attempts(tmp_path: Path) -> None:
    root = tmp_path / "data"
    root.write_text("x")
    exporter = ParquetSpanExporter(root, rotate_rows=3, retry_s=60)
    spans = make_spans(1)
    exporter.export(spans)
    root.unlink()
    assert exporter.export(spans) == SpanExportResult.FAILURE  # within retry_s: not tried
    assert not root.exists()
    assert exporter.force_flush()  # an explicit flush always tries
    assert _span_rows(root) == 6


def test_force_flush_honours_its_timeout(tmp_path: Path) -> None:
    exporter = ParquetSpanExporter(tmp_path, rotate_rows=3)
    exporter._lock.acquire()  # a write in progress elsewhere
    try:
        started = time.monotonic()
        assert exporter.force_flush(timeout_millis=100) is False
        assert time.monotonic() - started < 2
    finally:
        exporter._lock.release()
    exporter._buffer(spans_to_columns(make_spans(2)).to_table())
    assert exporter.force_flush(timeout_millis=0) is False  # deadline passed: nothing started
    assert exporter.force_flush()
    assert _span_rows(tmp_path) == 6


class _Door:
    """Holds an exporter's ``export`` until opened, so the batch queue behind it fills up."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.opened = threading.Event()

    def hold(self) -> None:
        self.entered.set()
        self.opened.wait(30)


class _GatedExporter(ParquetSpanExporter):
    """The real exporter behind a door."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.door = _Door()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.door.hold()
        return super().export(spans)


class _GatedCollect(Collect):
    """An exporter without ``record_gap`` behind a door."""

    def __init__(self) -> None:
        super().__init__()
        self.door = _Door()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.door.hold()
        return super().export(spans)


def _overflow(
    exporter: _GatedExporter | _GatedCollect, queue: int, extra: int
) -> tuple[GapCountingBatchSpanProcessor, TracerProvider]:
    """Fill the processor's queue while the exporter is held, then offer ``extra`` more."""
    processor = GapCountingBatchSpanProcessor(
        exporter, max_queue_size=queue, max_export_batch_size=queue, schedule_delay_millis=60_000
    )
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    for i in range(queue):
        tracer.start_span(f"first-{i}").end()  # wakes the worker, which blocks in export
    assert exporter.door.entered.wait(10)
    for i in range(queue + extra):
        tracer.start_span(f"second-{i}").end()  # ``queue`` fill it, ``extra`` overflow
    exporter.door.opened.set()
    return processor, provider


def test_batch_queue_overflow_is_counted_exactly_and_persisted(tmp_path: Path) -> None:
    processor, provider = _overflow(_GatedExporter(tmp_path), 8, 5)
    assert provider.force_flush()
    assert processor.dropped_spans == 5  # settled by the flush
    provider.shutdown()
    assert processor.dropped_spans == 5
    assert _gap_rows(tmp_path) == [("queue_overflow", 5, GAP_TRACE_ID, GAP_SPAN_ID)]
    assert _span_rows(tmp_path) == 16


def test_a_forked_child_counts_no_loss_for_the_queue_it_inherits() -> None:
    """The SDK empties the batch queue in a forked child (the parent exports those spans):
    neither way of counting takes them for lost."""
    if not hasattr(os, "fork"):
        pytest.skip("no fork on this platform")
    sink = Collect()
    processor = GapCountingBatchSpanProcessor(
        sink, max_queue_size=64, max_export_batch_size=64, schedule_delay_millis=60_000
    )
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    for i in range(10):
        tracer.start_span(f"parent-{i}").end()  # queued: fewer than a batch
    pid = os.fork()
    if pid == 0:
        code = 2
        try:
            tracer.start_span("child").end()
            provider.shutdown()
            code = 0 if (processor.dropped_spans, len(sink.spans)) == (0, 1) else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    provider.shutdown()
    assert os.waitstatus_to_exitcode(status) == 0
    assert (processor.dropped_spans, len(sink.spans)) == (0, 10)


@pytest.mark.parametrize(
    ("variable", "argument", "capacity"),
    [(None, None, QUEUE_SIZE), ("100", None, 100), ("100", 50, 50), (" ", None, QUEUE_SIZE)],
)
def test_the_queue_holds_its_default_unless_told_otherwise(
    monkeypatch: pytest.MonkeyPatch,
    variable: str | None,
    argument: int | None,
    capacity: int,
) -> None:
    """The queue holds ``QUEUE_SIZE`` spans, ``OTEL_BSP_MAX_QUEUE_SIZE`` when set, the
    argument above both: exactly ``capacity`` wait behind a held export, one more is lost."""
    if variable is None:
        monkeypatch.delenv(OTEL_BSP_MAX_QUEUE_SIZE, raising=False)
    else:
        monkeypatch.setenv(OTEL_BSP_MAX_QUEUE_SIZE, variable)
    sink = _GatedCollect()
    processor = GapCountingBatchSpanProcessor(
        sink, argument, max_export_batch_size=16, schedule_delay_millis=60_000
    )
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("t")
    for i in range(16):
        tracer.start_span(f"first-{i}").end()  # one batch: the worker blocks exporting it
    assert sink.door.entered.wait(10)
    for i in range(capacity + 1):
        tracer.start_span(f"queued-{i}").end()
    sink.door.opened.set()
    provider.shutdown()
    assert processor.dropped_spans == 1
    assert len(sink.spans) == 16 + capacity


def test_shutdown_honours_its_timeout(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    exporter = ParquetSpanExporter(tmp_path)
    exporter._lock.acquire()  # a write in progress elsewhere
    try:
        started = time.monotonic()
        with caplog.at_level(logging.ERROR, logger=LOGGER):
            exporter.shutdown(timeout_millis=100)
        assert time.monotonic() - started < 2
    finally:
        exporter._lock.release()
    assert "timed out" in caplog.records[-1].getMessage()
    assert exporter.export(make_spans(1)) == SpanExportResult.FAILURE


def test_queue_drops_without_a_gap_sink_are_counted_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sink = _GatedCollect()
    processor, provider = _overflow(sink, 4, 3)
    with caplog.at_level(logging.WARNING, logger="retryscope.instrumentation.export._batch"):
        provider.shutdown()
    assert processor.dropped_spans == 3
    assert len(sink.spans) == 8
    assert "dropped 3 spans" in caplog.records[-1].getMessage()
