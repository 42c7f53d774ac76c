"""Files of schema 1 (whose logical request spans carried ``attempt_count``,
``attempts_<layer>`` and ``retried_layers``) read next to files of the current schema, which
have no such columns: the old columns stay visible, and no figure reads them."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from retryscope.analytics import build_report, connect, findings, request_detail
from retryscope.analytics.model import _build
from retryscope.schema import SCHEMA_VERSION_KEY, SPAN_SCHEMA, schema_version_of
from retryscope.vocabulary import SCHEMA_VERSION, Layer
from tests.recorder import Recorder
from tests.test_analytics_randomized import _generate

OLD_COLUMNS = ("attempt_count", "retried_layers", *(f"attempts_{layer}" for layer in Layer))


def _as_schema_1(table: pa.Table) -> pa.Table:
    """``table`` as a schema-1 writer wrote it: the request span's summary columns (with
    values no analysis may use: 99 attempts, every layer retried) and version 1."""
    is_request = pc.equal(table["span_role"], "logical_request").to_pylist()
    n = table.num_rows
    count = pa.array([99 if r else None for r in is_request], pa.int32())
    layers = pa.array([[x.value for x in Layer] if r else None for r in is_request])
    old = table.append_column("attempt_count", count).append_column("retried_layers", layers)
    for layer in Layer:
        old = old.append_column(f"attempts_{layer.value}", pa.repeat(pa.scalar(99, pa.int32()), n))
    return old.replace_schema_metadata({SCHEMA_VERSION_KEY: b"1"})


@pytest.fixture(scope="module")
def spans(tmp_path_factory: pytest.TempPathFactory) -> pa.Table:
    rec = Recorder(tmp_path_factory.mktemp("recorded") / "data")
    _generate(rec, 120, seed=11)
    rec.connect()
    files = sorted(rec.directory.rglob("*.parquet"))
    assert all(schema_version_of(pq.read_metadata(f).metadata) == SCHEMA_VERSION for f in files)
    table = pa.concat_tables(pq.read_table(f, schema=SPAN_SCHEMA) for f in files)
    assert not set(OLD_COLUMNS) & set(table.column_names)
    return table


def _report(root: Path, cache: Path | None = None) -> str:
    con, _ = connect(root, model_cache=cache)
    report = build_report(con)
    assert report["logical_requests"] > 0
    rows = findings(con).to_pylist()
    return json.dumps([report, rows], sort_keys=True, default=str)


def test_old_and_new_files_read_as_one_data_set(spans: pa.Table, tmp_path: Path) -> None:
    half = spans.num_rows // 2
    old, new = _as_schema_1(spans.slice(0, half)), spans.slice(half)
    mixed, current, only_old = tmp_path / "mixed", tmp_path / "current", tmp_path / "old"
    for d in (mixed, current, only_old):
        d.mkdir()
    pq.write_table(old, mixed / "spans-v1.parquet")
    pq.write_table(new, mixed / "spans-v2.parquet")
    pq.write_table(spans.slice(0, half), current / "spans-a.parquet")
    pq.write_table(new, current / "spans-b.parquet")
    pq.write_table(old, only_old / "spans-a.parquet")
    pq.write_table(_as_schema_1(new), only_old / "spans-b.parquet")

    expected = _report(current)
    assert _report(mixed) == expected  # files of two schemas (union by name)
    assert _report(mixed, tmp_path / "cache") == expected  # built into a model cache
    assert _report(mixed, tmp_path / "cache") == expected  # and read from it
    assert _report(only_old) == expected  # files of one older schema

    con, _ = connect(mixed)
    requests_in_old = pc.sum(pc.equal(old["span_role"], "logical_request")).as_py()
    assert con.execute(
        "SELECT count(attempt_count), max(attempts_harness) FROM spans"
    ).fetchall() == [(requests_in_old, 99)]
    rid = old.filter(pc.equal(old["span_role"], "logical_request"))["logical_request_id"][0]
    summary, attempts = request_detail(con, rid.as_py())
    want_summary, want_attempts = request_detail(connect(current)[0], rid.as_py())
    assert summary.to_pylist() == want_summary.to_pylist()
    assert attempts.to_pylist() == want_attempts.to_pylist()


def test_units_built_from_files_of_two_schemas_read_as_one_model(
    spans: pa.Table, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model cache's units are read as one table of the first unit's columns (no union
    by name): a unit built while the data set held only schema-1 files (their extra
    columns visible in ``spans``) and one built after current files arrived have the same
    columns, so the model read from the cache is the one built in one pass."""
    monkeypatch.setattr(_build, "CACHE_SPAN_ROWS", 0)  # each hour a unit of its own
    half = spans.num_rows // 2
    root, current, cache = tmp_path / "data", tmp_path / "current", tmp_path / "cache"
    old_hour, new_hour = root / "date=2026-01-01" / "hour=00", root / "date=2026-01-01" / "hour=01"
    for d in (old_hour, new_hour, current):
        d.mkdir(parents=True)
    pq.write_table(_as_schema_1(spans.slice(0, half)), old_hour / "spans-v1.parquet")
    assert _report(root, cache)  # the schema-1 hour built alone
    pq.write_table(spans.slice(half), new_hour / "spans-v2.parquet")
    pq.write_table(spans, current / "spans.parquet")
    model, _ = connect(root, model_cache=cache)
    assert model.build().stats["built"] == 1  # the new hour only
    assert _report(root, cache) == _report(current)
