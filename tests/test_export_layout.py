"""Parquet layout: partitions, names, rotation, row groups, permissions, schema versions."""

from __future__ import annotations

import dataclasses
import itertools
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from opentelemetry.sdk.trace import TracerProvider

from retryscope.analytics import connect
from retryscope.instrumentation import ExportConfig, ParquetSpanExporter, Partitioning
from retryscope.instrumentation.export._columns import SpanColumns
from retryscope.instrumentation.export._exporter import spans_to_columns
from retryscope.schema import SPAN_SCHEMA, schema_version_of
from retryscope.vocabulary import SCHEMA_VERSION

from .export_support import make_spans

HOUR_NS = 3600 * 10**9
T0 = 1_764_453_600 * 10**9  # 2025-11-29T22:00:00Z


def _rows(n: int, *, start_ns: int = T0, step_ns: int = 10**6, requests: int = 50) -> pa.Table:
    cols = SpanColumns()
    for i in range(n):
        cols.append(
            trace_id=f"{i:032x}",
            span_id=f"{i + 1:016x}",
            parent_span_id=None,
            name="attempt",
            kind="CLIENT",
            start_ns=start_ns + i * step_ns,
            end_ns=start_ns + i * step_ns + 1000,
            status_code="UNSET",
            status_message=None,
            attributes={
                "retryscope.span.role": "attempt",
                "retryscope.logical_request.id": f"req-{(i * 7919) % requests:05d}",
            },
            resource={"service.name": "svc"},
            scope_name="t",
            scope_version=None,
        )
    return cols.to_table()


def _visible(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.parquet") if not p.name.startswith("."))


def test_hive_partitions_by_start_hour_and_unique_names(tmp_path: Path) -> None:
    config = ExportConfig(directory=tmp_path, rotate_rows=1000, buffer_rows=1000)
    exporter = ParquetSpanExporter(config=config)
    exporter._buffer(_rows(10, start_ns=T0 - 5 * 10**9, step_ns=10**9))  # straddles 22:00
    assert exporter.force_flush()
    files = _visible(tmp_path)
    assert [f.parent.relative_to(tmp_path).as_posix() for f in files] == [
        "date=2025-11-29/hour=21",
        "date=2025-11-29/hour=22",
    ]
    host_pid = f"-{os.getpid()}-"
    assert all(host_pid in f.name and f.name.startswith("spans-") for f in files)
    con, _ = connect(tmp_path)
    # each file sits in the partition of its rows' start hour
    got = con.sql(
        "SELECT hour(start_time) AS h, count(*), count(DISTINCT filename) FROM read_parquet("
        f"'{tmp_path}/**/*.parquet', filename = true, hive_partitioning = true) "
        "WHERE hour = hour(start_time) GROUP BY h ORDER BY h"
    ).fetchall()
    assert got == [(21, 5, 1), (22, 5, 1)]
    day = ParquetSpanExporter(tmp_path / "d", partitioning="day")
    day._buffer(_rows(3))
    day.shutdown()
    assert [f.parent.name for f in _visible(tmp_path / "d")] == ["date=2025-11-29"]
    none = ParquetSpanExporter(tmp_path / "n", partitioning=Partitioning.NONE)
    none._buffer(_rows(3))
    none.shutdown()
    assert [f.parent for f in _visible(tmp_path / "n")] == [tmp_path / "n"]


def test_many_writers_one_directory_never_collide(tmp_path: Path) -> None:
    writers = [ParquetSpanExporter(tmp_path, rotate_rows=5) for _ in range(3)]
    for w in writers:
        w._buffer(_rows(12))
        w.shutdown()
    files = _visible(tmp_path)
    assert len(files) == 9
    assert len({f.name for f in files}) == 9
    assert sum(pq.read_metadata(f).num_rows for f in files) == 36


def _eventually(condition: Callable[[], bool], seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert condition()


def test_rotation_by_rows_bytes_and_age(tmp_path: Path) -> None:
    spans = make_spans(1)  # 3 spans per export call
    by_rows = ParquetSpanExporter(tmp_path / "rows", rotate_rows=6)
    for _ in range(2):
        by_rows.export(spans)
    _eventually(lambda: bool(_visible(tmp_path / "rows")))  # the helper thread cuts it
    by_rows.export(spans)
    assert [pq.read_metadata(f).num_rows for f in _visible(tmp_path / "rows")] == [6]
    by_rows.shutdown()
    assert len(by_rows.files_written) == len(_visible(tmp_path / "rows")) == 2

    by_bytes = ParquetSpanExporter(tmp_path / "bytes", rotate_bytes=1)
    by_bytes.export(spans)
    _eventually(lambda: len(_visible(tmp_path / "bytes")) == 1)
    by_bytes.shutdown()
    assert len(_visible(tmp_path / "bytes")) == 1

    by_age = ParquetSpanExporter(tmp_path / "age", rotate_age_s=0.2)
    by_age.export(spans)
    assert _visible(tmp_path / "age") == []
    deadline = time.monotonic() + 10
    while not _visible(tmp_path / "age") and time.monotonic() < deadline:
        time.sleep(0.05)  # no new spans arrive: the age thread cuts the file
    assert len(_visible(tmp_path / "age")) == 1
    by_age.shutdown()


def test_zstd_row_groups_and_schema_version_metadata(tmp_path: Path) -> None:
    exporter = ParquetSpanExporter(tmp_path, rotate_rows=5000, row_group_rows=1000)
    exporter._buffer(_rows(5000))
    exporter.shutdown()
    (path,) = _visible(tmp_path)
    meta = pq.read_metadata(path)
    assert meta.num_row_groups == 5
    assert meta.row_group(0).column(0).compression == "ZSTD"
    assert meta.metadata[b"retryscope.schema_version"] == str(SCHEMA_VERSION).encode()
    assert pq.read_schema(path).remove_metadata().equals(SPAN_SCHEMA.remove_metadata())


def test_sort_order_lets_row_group_statistics_prune_a_request(tmp_path: Path) -> None:
    exporter = ParquetSpanExporter(tmp_path, rotate_rows=20_000, row_group_rows=1000)
    exporter._buffer(_rows(20_000, requests=400))  # requests interleaved in arrival order
    exporter.shutdown()
    (path,) = _visible(tmp_path)
    meta = pq.read_metadata(path)
    column = SPAN_SCHEMA.get_field_index("logical_request_id")
    ranges = [
        (
            meta.row_group(i).column(column).statistics.min,
            meta.row_group(i).column(column).statistics.max,
        )
        for i in range(meta.num_row_groups)
    ]
    assert ranges == sorted(ranges)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(ranges))
    target = "req-00123"
    touched = [i for i, (lo, hi) in enumerate(ranges) if lo <= target <= hi]
    assert len(touched) <= 2 < meta.num_row_groups
    table = pq.read_table(path, filters=[("logical_request_id", "=", target)])
    starts = table.column("start_time").to_pylist()
    assert table.num_rows == 50
    assert starts == sorted(starts)


def test_owner_only_permissions_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        exporter = ParquetSpanExporter(tmp_path / "new" / "root")
        exporter._buffer(_rows(2))
        exporter.shutdown()
        custom = ParquetSpanExporter(tmp_path / "custom", file_mode=0o640, dir_mode=0o750)
        custom._buffer(_rows(2))
        custom.shutdown()
    finally:
        os.umask(old)
    for path in (tmp_path / "new").rglob("*"):
        assert (path.stat().st_mode & 0o777) == (0o700 if path.is_dir() else 0o600), path
    (file,) = _visible(tmp_path / "custom")
    assert file.stat().st_mode & 0o777 == 0o640
    assert file.parent.stat().st_mode & 0o777 == 0o750


def test_env_configuration_and_clear_errors(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("RETRYSCOPE_PARQUET_DIR", str(tmp_path / "env"))
    monkeypatch.setenv("RETRYSCOPE_PARQUET_ROTATE_ROWS", "7")
    monkeypatch.setenv("RETRYSCOPE_PARQUET_PARTITIONING", "day")
    monkeypatch.setenv("RETRYSCOPE_PARQUET_FILE_MODE", "640")
    exporter = ParquetSpanExporter()
    assert exporter.config.directory == tmp_path / "env"
    assert (exporter.config.rotate_rows, exporter.config.file_mode) == (7, 0o640)
    assert exporter.config.partitioning is Partitioning.DAY
    monkeypatch.setenv("RETRYSCOPE_PARQUET_ROTATE_ROWS", "-3")
    with pytest.raises(ValueError, match="RETRYSCOPE_PARQUET_ROTATE_ROWS='-3'"):
        ExportConfig.from_env()
    with pytest.raises(ValueError, match="RETRYSCOPE_PARQUET_FILE_MODE='rw'"):
        ExportConfig.from_env({"RETRYSCOPE_PARQUET_FILE_MODE": "rw"})
    with pytest.raises(ValueError, match="buffer_rows"):
        ExportConfig(rotate_rows=10, buffer_rows=5)


def test_every_setting_is_a_keyword_argument_and_a_variable(tmp_path: Path) -> None:
    custom = ExportConfig(
        directory=tmp_path / "custom",
        partitioning=Partitioning.NONE,
        rotate_rows=3,
        rotate_bytes=9,
        rotate_age_s=0.5,
        row_group_rows=2,
        buffer_rows=4,
        retry_s=0.0,
        compression="snappy",
        file_mode=0o640,
        dir_mode=0o750,
    )
    for config in (ExportConfig(), custom):
        assert ExportConfig.from_env(config.to_env()) == config
    settings = {f.name: getattr(custom, f.name) for f in dataclasses.fields(ExportConfig)}
    exporter = ParquetSpanExporter(config=ExportConfig(), **settings)
    assert exporter.config == custom
    exporter.shutdown()


def test_v0_file_reads_alongside_v1_with_union_by_name(tmp_path: Path) -> None:
    provider = TracerProvider()
    span = provider.get_tracer("t").start_span("s", attributes={"retryscope.span.role": "attempt"})
    span.end()
    v1 = spans_to_columns([span]).to_table()
    exporter = ParquetSpanExporter(tmp_path, partitioning="none")
    exporter._buffer(v1)
    exporter.shutdown()
    # a v0 file: fewer columns (no per-layer ordinals, no gap columns), no version metadata
    dropped = {"parent_attempt_ordinal", "parent_layer", "gap_dropped_spans", "gap_reason"}
    v0 = pa.table(
        {
            "trace_id": ["a" * 32],
            "span_id": ["b" * 16],
            "name": ["old"],
            "kind": ["CLIENT"],
            "start_time": pa.array([T0], pa.timestamp("ns")),
            "end_time": pa.array([T0 + 1], pa.timestamp("ns")),
            "span_role": ["attempt"],
            "attempt_ordinal": pa.array([1], pa.int32()),
        }
    )
    assert not dropped & set(v0.column_names)
    pq.write_table(v0, tmp_path / "v0.parquet")
    assert schema_version_of(pq.read_metadata(tmp_path / "v0.parquet").metadata) == 0
    assert schema_version_of(pq.read_metadata(next(tmp_path.glob("spans-*"))).metadata) == (
        SCHEMA_VERSION
    )
    with pytest.raises(ValueError, match="malformed"):
        schema_version_of({b"retryscope.schema_version": b"v2"})
    assert b"retryscope.schema_version" not in (
        pq.read_metadata(tmp_path / "v0.parquet").metadata or {}
    )
    con, dataset = connect(tmp_path)
    assert len(dataset.files) == 2
    rows = con.sql(
        "SELECT name, attempt_ordinal, gap_reason, parent_layer FROM attempts ORDER BY name"
    ).fetchall()
    assert rows == [("old", 1, None, None), ("s", None, None, None)]
    with duckdb.connect() as raw_con:
        raw = raw_con.sql(
            f"SELECT count(*) FROM read_parquet('{tmp_path}/*.parquet', union_by_name=true)"
        ).fetchall()
    assert raw == [(2,)]


def test_dead_writers_temporary_files_are_removed(tmp_path: Path) -> None:
    from retryscope.instrumentation.export._files import local_host_tag

    host = local_host_tag()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    part = tmp_path / "date=2025-11-29" / "hour=22"
    part.mkdir(parents=True)
    stale = part / f".spans-20251129T220000Z-{host}-{dead.pid}-abcdef-000001.parquet.inprogress"
    live = part / f".spans-20251129T220000Z-{host}-{os.getpid()}-abcdef-000002.parquet.inprogress"
    other = part / f".spans-20251129T220000Z-otherhost-{dead.pid}-abcdef-000003.parquet.inprogress"
    for path in (stale, live, other):
        path.write_bytes(b"partial")
    exporter = ParquetSpanExporter(tmp_path)
    exporter._buffer(_rows(2))
    exporter.shutdown()
    assert not stale.exists()
    assert live.exists()
    assert other.exists()
