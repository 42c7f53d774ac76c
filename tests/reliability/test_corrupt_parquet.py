"""Corrupt, truncated, zero-byte and foreign Parquet files among good ones: the report names
and skips each and still answers from the rest (the UI's warning is tested with the UI)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retryscope.analytics import build_report, connect, findings
from retryscope.cli import main
from retryscope.instrumentation import ParquetSpanExporter
from tests.export_support import make_spans
from tests.reliability.support import flip_bytes, visible_files


def _good_data(root: Path, writers: int = 3) -> list[Path]:
    for _ in range(writers):
        exporter = ParquetSpanExporter(root)
        exporter.export(make_spans(4))
        exporter.shutdown()
    return visible_files(root)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("template") / "data"
    _good_data(root)
    return root


def test_report_names_and_skips_every_bad_file_and_answers(
    template: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "data"
    shutil.copytree(template, root)
    good = visible_files(root)
    reference = build_report(connect(root)[0])
    part = good[0].parent
    bad = {
        "zero.parquet": b"",
        "truncated.parquet": good[0].read_bytes()[: good[0].stat().st_size // 2],
        "no-footer.parquet": good[0].read_bytes()[:-1],
        "magic-only.parquet": b"PAR1PAR1",
    }
    for name, data in bad.items():
        (part / name).write_bytes(data)
    pages = part / "pages-corrupt.parquet"  # footer intact, column pages garbled
    shutil.copy(good[0], pages)
    flip_bytes(pages, 200, 1200)
    foreign = part / "foreign.parquet"
    pq.write_table(pa.table({"x": [1, 2]}), foreign)
    names = {*bad, pages.name, foreign.name}

    con, _ = connect(root)
    report = build_report(con)  # reading finds the file whose pages do not decode
    skipped = con.skipped_files()
    assert {Path(s.path).name for s in skipped} == names
    assert all(s.reason for s in skipped)
    # the good files (the copy of good[0] with garbled pages is not one) answer unchanged
    for key in ("logical_requests", "physical_attempts", "receiver_attempts", "completed"):
        assert report[key] == reference[key], key
    assert findings(con).num_rows == findings(connect(template)[0]).num_rows

    assert main(["report", str(root), "--format", "json"]) == 0
    err = capsys.readouterr().err
    for name in names:
        assert f"warning: skipped {part / name}: " in err, name
    assert main(["findings", str(root)]) == 0


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_any_damage_to_one_file_never_stops_the_report(
    template: Path, tmp_path_factory: Any, data: Any
) -> None:
    root = tmp_path_factory.mktemp("damage") / "data"
    shutil.copytree(template, root)
    victim = visible_files(root)[0]
    size = victim.stat().st_size
    if data.draw(st.booleans(), label="truncate"):
        victim.write_bytes(victim.read_bytes()[: data.draw(st.integers(0, size - 1))])
        must_skip = True
    else:
        start = data.draw(st.integers(0, size - 1))
        flip_bytes(victim, start, start + data.draw(st.integers(1, 64)))
        must_skip = False
    con, _ = connect(root)
    report = build_report(con)  # never raises
    skipped = {s.path for s in con.skipped_files()}
    assert skipped <= {str(victim)}
    if must_skip:
        assert skipped == {str(victim)}
    if skipped:
        assert report["logical_requests"] == 2 * 4  # the two untouched files


@pytest.mark.parametrize("column", ["name", "parent_span_id", "trace_id"])
def test_damage_to_one_column_only_is_found_by_whichever_statement_reads_it(
    template: Path, tmp_path: Path, column: str
) -> None:
    """Garbled pages of a single column (the footer intact) are found by whichever part of
    the model first reads that column, e.g. the telemetry checks for `name`; the file is
    skipped and named, the rest answers."""
    root = tmp_path / "data"
    shutil.copytree(template, root)
    victim = visible_files(root)[0]
    meta = pq.read_metadata(victim)
    chunks = [
        meta.row_group(g).column(c)
        for g in range(meta.num_row_groups)
        for c in range(meta.num_columns)
        if meta.row_group(g).column(c).path_in_schema.split(".")[0] == column
    ]
    assert chunks, column
    for chunk in chunks:
        start = chunk.dictionary_page_offset or chunk.data_page_offset
        flip_bytes(victim, start + 8, start + chunk.total_compressed_size)
    con, _ = connect(root)
    report = build_report(con)
    assert [Path(s.path) for s in con.skipped_files()] == [victim]
    reference = build_report(connect(template)[0])
    assert 0 < report["logical_requests"] < reference["logical_requests"]
    assert findings(con).num_rows <= findings(connect(template)[0]).num_rows
