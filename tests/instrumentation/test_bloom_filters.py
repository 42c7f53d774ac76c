"""Written span files carry Parquet Bloom filters on the lookup columns, sized per row group,
and they admit every value the row group holds (read back by DuckDB and by
``analytics.bloom_probe``, which must agree)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retryscope.analytics._bloom_probe import filter_may_contain
from retryscope.instrumentation import ParquetSpanExporter
from retryscope.instrumentation.export._bloom_filters import (
    FALSE_POSITIVE_RATE,
    bloom_filter_options,
)
from retryscope.schema import LOOKUP_COLUMNS
from tests.export_support import make_spans


def test_options_sized_per_row_group_and_only_for_columns_with_values() -> None:
    rows = 1_000
    table = pa.table(
        {
            "logical_request_id": [f"r{i // 4}" for i in range(rows)],  # 250 distinct
            "trace_id": [f"t{i % 100}" for i in range(rows)],  # 100 distinct
            "idempotency_digest": pa.nulls(rows, pa.string()),
            "span_id": [f"s{i}" for i in range(rows)],
        }
    )
    options = bloom_filter_options(table, 100)
    assert options == {
        "logical_request_id": {"ndv": 25, "fpp": FALSE_POSITIVE_RATE},
        "trace_id": {"ndv": 10, "fpp": FALSE_POSITIVE_RATE},
    }
    assert bloom_filter_options(table, 10_000)["logical_request_id"]["ndv"] == 250
    assert bloom_filter_options(table.slice(0, 0), 100) == {}
    assert bloom_filter_options(table.select(["span_id"]), 100) == {}


def test_exported_files_carry_filters_that_admit_every_value(tmp_path: Path) -> None:
    exporter = ParquetSpanExporter(tmp_path, rotate_rows=40, row_group_rows=16)
    exporter.export(make_spans(30))
    exporter.shutdown()
    files = sorted(tmp_path.rglob("*.parquet"))
    assert len(files) >= 2
    con = duckdb.connect()
    checked = 0
    for path in files:
        meta = pq.read_metadata(path)
        index = {meta.schema.column(i).path: i for i in range(meta.num_columns)}
        table = pq.read_table(path)
        start = 0
        with open(path, "rb") as fd:
            for g in range(meta.num_row_groups):
                group = meta.row_group(g)
                rows = table.slice(start, group.num_rows)
                start += group.num_rows
                for name in LOOKUP_COLUMNS:
                    values = {v for v in rows.column(name).to_pylist() if v is not None}
                    chunk = group.column(index[name])
                    if not values:
                        assert chunk.bloom_filter_offset is None
                        continue
                    offset, length = chunk.bloom_filter_offset, chunk.bloom_filter_length
                    assert offset is not None
                    assert length
                    for value in values:
                        assert filter_may_contain(fd.fileno(), offset, length, value)
                        (duckdb_excludes,) = con.execute(
                            "SELECT bloom_filter_excludes FROM parquet_bloom_probe($f, $c, $v) "
                            "WHERE row_group_id = $g",
                            {"f": str(path), "c": name, "v": value, "g": g},
                        ).fetchone() or (None,)
                        assert duckdb_excludes is False
                        checked += 1
    con.close()
    assert checked > 0


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    values=st.lists(st.text(min_size=1, max_size=40), min_size=1, max_size=300, unique=True),
    probes=st.lists(st.text(max_size=40), min_size=1, max_size=30),
)
def test_probe_agrees_with_duckdb(
    tmp_path_factory: pytest.TempPathFactory, values: list[str], probes: list[str]
) -> None:
    path = tmp_path_factory.mktemp("bloom") / "values.parquet"
    table = pa.table({"logical_request_id": values})
    pq.write_table(table, path, bloom_filter_options=bloom_filter_options(table, len(values)))
    chunk = pq.read_metadata(path).row_group(0).column(0)
    assert chunk.bloom_filter_offset is not None
    assert chunk.bloom_filter_length
    con = duckdb.connect()
    with open(path, "rb") as fd:
        for value in [*values[:30], *probes]:
            mine = filter_may_contain(
                fd.fileno(), chunk.bloom_filter_offset, chunk.bloom_filter_length, value
            )
            (excludes,) = con.execute(
                "SELECT bloom_filter_excludes FROM "
                "parquet_bloom_probe($f, 'logical_request_id', $v)",
                {"f": str(path), "v": value},
            ).fetchone() or (None,)
            assert mine == (not excludes), value
            if value in values:
                assert mine
    con.close()
