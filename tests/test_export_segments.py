"""The durable path of the exporter: every accepted batch is in a segment before ``export``
returns, a segment goes once its rows are in Parquet, and recovery takes only what dead
writers on this host left, with their settings. The SIGKILL reconciliation is
tests/reliability/test_sigkill_durability.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from opentelemetry.sdk.trace.export import SpanExportResult

from retryscope.instrumentation import ParquetSpanExporter
from retryscope.instrumentation.export import recover_segments
from retryscope.instrumentation.export._segments import SEGMENT_DIR, segment_files
from retryscope.instrumentation.export._writer_lock import hold, take

from .export_support import make_spans

DIES_WITHOUT_SHUTDOWN = r"""
import os, sys
sys.path.insert(0, sys.argv[3])
from tests.export_support import make_spans
from retryscope.instrumentation import ParquetSpanExporter
exporter = ParquetSpanExporter(sys.argv[1], partitioning=sys.argv[2])
spans = make_spans(5)
for _ in range(3):
    assert exporter.export(spans).name == "SUCCESS"
print(len(spans) * 3, flush=True)
os._exit(0)  # no shutdown, no atexit: as a crash leaves it
"""


def _parquet_rows(root: Path) -> int:
    return sum(
        pq.read_metadata(p).num_rows
        for p in root.rglob("*.parquet")
        if not any(part.startswith(".") for part in p.relative_to(root).parts)
    )


def _segment_rows(root: Path) -> int:
    rows = 0
    for path in segment_files(root):
        with pa.memory_map(str(path)) as source:
            rows += pa.ipc.open_stream(source).read_all().num_rows
    return rows


def _dead_writer(root: Path, partitioning: str = "hour") -> int:
    """Rows a real process accepted before it died without a shutdown."""
    script = root.parent / "dies.py"
    script.write_text(DIES_WITHOUT_SHUTDOWN)
    repo = str(Path(__file__).resolve().parent.parent)
    done = subprocess.run(
        [sys.executable, str(script), str(root), partitioning, repo],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return int(done.stdout.split()[-1])


def test_accepted_batches_are_in_a_segment_until_their_file_is_written(tmp_path: Path) -> None:
    root = tmp_path / "data"
    exporter = ParquetSpanExporter(root)
    spans = make_spans(4)
    for _ in range(3):
        assert exporter.export(spans) is SpanExportResult.SUCCESS
    assert _parquet_rows(root) == 0  # the buffer holds them: no file yet
    assert _segment_rows(root) == 3 * len(spans)
    mode = os.stat(next(segment_files(root))).st_mode & 0o777
    assert mode == exporter.config.file_mode
    assert exporter.force_flush()
    assert _parquet_rows(root) == 3 * len(spans)
    assert list(segment_files(root)) == []  # written: its segment is gone
    assert exporter.export(spans) is SpanExportResult.SUCCESS  # a new segment starts
    assert _segment_rows(root) == len(spans)
    exporter.shutdown()
    assert list(segment_files(root)) == []
    assert _parquet_rows(root) == 4 * len(spans)


def test_memory_only_writes_no_segment(tmp_path: Path) -> None:
    root = tmp_path / "data"
    exporter = ParquetSpanExporter(root, durable=False)
    assert exporter.export(make_spans(2)) is SpanExportResult.SUCCESS
    assert not (root / SEGMENT_DIR).exists()
    exporter.shutdown()


def test_a_dead_writers_segments_are_recovered_once_with_its_settings(tmp_path: Path) -> None:
    root = tmp_path / "data"
    accepted = _dead_writer(root, partitioning="none")
    assert _parquet_rows(root) == 0
    assert _segment_rows(root) == accepted
    found = recover_segments(root)  # default settings: the segment's own ones apply
    assert (found.rows, found.duplicates, found.torn, found.failed) == (accepted, 0, (), ())
    assert all(f.parent == root for f in found.files)  # partitioning "none", as it wrote
    assert _parquet_rows(root) == accepted
    assert list(segment_files(root)) == []
    again = recover_segments(root)
    assert (again.rows, again.segments) == (0, 0)


def test_the_next_exporter_on_the_directory_recovers(tmp_path: Path) -> None:
    root = tmp_path / "data"
    accepted = _dead_writer(root)
    exporter = ParquetSpanExporter(root)
    assert _parquet_rows(root) == accepted
    assert list(segment_files(root)) == []
    exporter.shutdown()


def test_live_and_other_hosts_writers_are_left_alone_unless_forced(tmp_path: Path) -> None:
    root = tmp_path / "data"
    live = ParquetSpanExporter(root)
    spans = make_spans(2)
    assert live.export(spans) is SpanExportResult.SUCCESS
    assert recover_segments(root).segments == 0  # this process is alive: its segment stays
    (own,) = list(segment_files(root))
    foreign = own.with_name("elsewhere-" + own.name)  # another host on shared storage
    shutil.copy2(own, foreign)
    live.shutdown()  # written: its own segment is gone
    assert list(segment_files(root)) == [foreign]
    assert recover_segments(root).segments == 0
    forced = recover_segments(root, force=True)  # once that host is known to be gone
    assert (forced.segments, forced.rows) == (1, len(spans))
    assert all("-elsewhere-" in f.name for f in forced.files)  # under its writer's name
    assert list(segment_files(root)) == []


def test_a_claim_whose_claimer_died_is_taken_over(tmp_path: Path) -> None:
    root = tmp_path / "data"
    accepted = _dead_writer(root)
    (segment,) = list(segment_files(root))
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    claimed = segment.with_name(f".claimed-{dead.stdout.strip()}-{segment.name}")
    segment.rename(claimed)
    found = recover_segments(root)
    assert (found.segments, found.rows) == (1, accepted)
    assert not claimed.exists()
    mine = segment.with_name(f".claimed-{os.getpid()}-{segment.name}")  # a live claimer
    mine.write_bytes(b"")
    assert recover_segments(root).segments == 0
    assert mine.exists()


def _locks(root: Path) -> list[Path]:
    return sorted((root / SEGMENT_DIR).glob("*.lock"))


def test_a_writer_is_alive_while_it_holds_its_lock_whatever_its_pid(tmp_path: Path) -> None:
    root = tmp_path / "data"
    live = ParquetSpanExporter(root)
    spans = make_spans(2)
    assert live.export(spans) is SpanExportResult.SUCCESS
    (own,) = list(segment_files(root))
    (lock,) = _locks(root)
    for force in (False, True):  # never underneath a live writer, even forced
        found = recover_segments(root, force=force)
        assert (found.segments, found.rows) == (0, 0)
        ((path, why),) = found.left
        assert path == own
        assert f"pid {os.getpid()}" in why
        assert lock.name in why
        assert f"{own}: left in place: " in found.kept()[0]
    live.shutdown()
    assert list(segment_files(root)) == []
    assert _locks(root) == []  # a writer closing with nothing left takes its lock file along

    # a dead writer whose pid is now a live process's (this one): its lock is free
    accepted = _dead_writer(root)
    (segment,) = list(segment_files(root))
    (lock,) = _locks(root)
    dead_pid = segment.name.split("-")[-4]
    for path in (segment, lock):
        path.rename(path.with_name(path.name.replace(f"-{dead_pid}-", f"-{os.getpid()}-")))
    found = recover_segments(root)
    assert (found.segments, found.rows, found.left) == (1, accepted, ())
    assert list(segment_files(root)) == []
    assert _locks(root) == []


def test_a_recovery_at_work_holds_off_the_others(tmp_path: Path) -> None:
    root = tmp_path / "data"
    accepted = _dead_writer(root)
    (segment,) = list(segment_files(root))
    (lock,) = _locks(root)
    fd = take(lock)  # as a recovery working on this writer's segments does
    assert fd is not None
    assert take(lock) is None  # a second open is refused, in the same process too
    try:
        found = recover_segments(root)
        assert (found.segments, found.left[0][0]) == (0, segment)
        assert segment.exists()
    finally:
        os.close(fd)
    found = recover_segments(root)
    assert (found.segments, found.rows) == (1, accepted)
    assert _locks(root) == []


def test_lock_files_of_dead_writers_without_segments_are_swept(tmp_path: Path) -> None:
    root = tmp_path / "data"
    directory = root / SEGMENT_DIR
    directory.mkdir(parents=True)
    host = ParquetSpanExporter(root, durable=False)._namer.host
    dead = directory / f"{host}-4242-abc123.lock"
    dead.write_bytes(b"")
    held = directory / f"{host}-4243-abc124.lock"
    fd = hold(held, 0o600)  # a live writer between two segments
    elsewhere = directory / "otherhost-4244-abc125.lock"
    elsewhere.write_bytes(b"")
    try:
        assert recover_segments(root).segments == 0
        assert _locks(root) == sorted([held, elsewhere])
    finally:
        os.close(fd)
    recover_segments(root)
    assert _locks(root) == [elsewhere]  # another host's: its own business
