"""A model kept in memory is compressed only as far as the memory limit needs: rows within
the budget stay uncompressed (no checkpoint runs while the store takes them), beyond it
the store checkpoints. Either way the model holds the same rows and gives the same
report, and the database's checkpoint setting is put back. Consecutive time partitions
are built together up to a number of span rows; built one by one (the requests across
partitions reconciled) or together, the model is the same."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest

from retryscope.analytics import build_report, connect
from retryscope.analytics.model import _build, _store
from retryscope.analytics.model._time_partitions import TimePartition, grouped, merged
from tests.model_support import model_differences, model_rows
from tests.test_analytics_incremental import _flat_copy, _traffic


@pytest.fixture(scope="module")
def hours(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Requests over three hourly partitions, some running across an hour's end."""
    return _traffic(tmp_path_factory.mktemp("store") / "data", seed=7, per_hour=30, hours=2)


def _methods(con: duckdb.DuckDBPyConnection, table: str) -> set[str]:
    """The compression methods of the stored segments of the model table ``table``."""
    rows = con.execute(
        f"SELECT DISTINCT compression FROM pragma_storage_info('{_store.ALIAS}.main.{table}')"
    ).fetchall()
    return {str(m) for (m,) in rows}


def test_the_uncompressed_budget_is_a_share_of_the_memory_limit() -> None:
    assert _store.uncompressed_budget(4 * 2**30) == int(4 * 2**30 * _store.UNCOMPRESSED_SHARE)
    assert _store.uncompressed_budget(None) == 0  # no known limit: compress everything
    assert _store.uncompressed_budget(0) == 0


def test_the_store_compresses_only_what_the_budget_needs() -> None:
    due = _store.checkpoint_due
    assert due(1, 0, 0)  # no budget: everything is compressed
    assert not due(60, 40, 100)  # everything fits
    assert due(60, 41, 100)  # the rest (41) fits alone: compress the 60 now
    assert due(101, 500, 100)  # over the budget already
    assert not due(100, 500, 100)  # within it, and the rest would not fit alone anyway
    assert not due(0, 0, 100)


def test_consecutive_partitions_are_built_together_up_to_a_number_of_rows() -> None:
    parts = [TimePartition(f"hour={h}", (f"{h}.parquet",), n) for h, n in enumerate((4, 6, 1, 9))]
    assert [len(g) for g in grouped(parts, 10)] == [2, 2]  # 4 + 6 = 10 fits, 1 + 9 too
    assert [len(g) for g in grouped(parts, 9)] == [1, 2, 1]
    assert [len(g) for g in grouped(parts, 1)] == [1, 1, 1, 1]  # larger ones alone
    assert grouped([], 10) == ()
    together = merged(parts[:2])
    assert together.files == ("0.parquet", "1.parquet")
    assert together.rows == 10
    assert together.key == "hour=0..hour=1"
    assert merged(parts[2:3]) is parts[2]


def test_partitions_built_together_give_the_model_built_one_by_one(
    hours: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    together, _ = connect(hours)
    report = json.dumps(build_report(together), sort_keys=True, default=str)
    stats = together.stats
    assert stats["partitions"] >= 3
    assert stats["straddlers"] == 0  # one build: no request is in two
    monkeypatch.setattr(_build, "BUILD_SPAN_ROWS", 1)
    apart, _ = connect(hours)
    assert json.dumps(build_report(apart), sort_keys=True, default=str) == report
    stats = apart.stats
    assert stats["straddlers"] > 0
    assert model_differences(together, apart) == {}
    assert model_rows(apart)["all_attempt_facts"] > 0


def test_an_uncompressed_model_holds_the_compressed_models_rows(
    hours: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_build, "BUILD_SPAN_ROWS", 1)  # each partition its own build
    plain, _ = connect(hours)
    # every commit of the build would checkpoint (and compress) the model
    plain.execute("SET checkpoint_threshold = '1KB'")
    report = json.dumps(build_report(plain), sort_keys=True, default=str)
    stats = plain.stats
    assert stats["partitions"] >= 3
    assert stats["straddlers"] > 0
    assert model_differences(plain, connect(_flat_copy(hours, tmp_path / "flat"))[0]) == {}
    assert plain.execute("SELECT current_setting('checkpoint_threshold')").fetchall() == [
        ("1000 bytes",)
    ]

    # each partition's rows exceed the budget: the store compresses after each one
    monkeypatch.setattr(_store, "UNCOMPRESSED_BYTES_PER_SPAN_ROW", 2**40)
    packed, _ = connect(hours)
    assert model_differences(plain, packed) == {}
    assert model_rows(packed)["all_attempt_facts"] > 0
    assert json.dumps(build_report(packed), sort_keys=True, default=str) == report
    assert _methods(plain, "all_attempt_facts") == {"Uncompressed"}
    assert _methods(packed, "all_attempt_facts") - {"Uncompressed"}
