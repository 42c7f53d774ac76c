"""The grain of a model cache follows the data: consecutive time partitions are kept in one
unit until it holds enough span rows (a dense hour is a unit of its own, sparse hours share
one), and the grain recorded in the cache is kept by later runs (a partition that
changed rebuilds its own unit, new hours continue the last unit)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest

from retryscope.analytics import connect
from retryscope.analytics.model import _build, model_directory
from retryscope.analytics.model._time_partitions import TimePartition, kept_together
from tests.test_analytics_incremental import (
    _assert_same_model,
    _flat_copy,
    _partition_dirs,
    _traffic,
)


def _hours(*rows: int) -> list[TimePartition]:
    return [TimePartition(f"hour={h:02d}", (f"{h}.parquet",), n) for h, n in enumerate(rows)]


def _keys(runs: Sequence[Sequence[TimePartition]]) -> list[list[str]]:
    return [[p.key for p in run] for run in runs]


def test_a_unit_is_closed_once_it_holds_the_fewest_rows() -> None:
    parts = _hours(4, 5, 1, 10, 3)
    sizes = [len(run) for run in kept_together(parts, 10)]
    assert sizes == [3, 1, 1]  # 4 + 5 = 9 goes on, 4 + 5 + 1 = 10 is closed; 10 alone
    assert [len(run) for run in kept_together(parts, 9)] == [2, 2, 1]
    assert [len(run) for run in kept_together(parts, 11)] == [4, 1]
    assert [len(run) for run in kept_together(parts, 1)] == [1] * 5  # dense: hourly
    assert [len(run) for run in kept_together(parts, 1_000)] == [5]  # sparse: one unit
    assert kept_together([], 10) == ()


def test_the_recorded_grain_stands_and_new_hours_continue_its_last_unit() -> None:
    parts = _hours(4, 5, 1, 10, 3)
    recorded = [["hour=00", "hour=01"], ["hour=02", "hour=03"], ["hour=04"]]
    assert _keys(kept_together(parts, 10, recorded)) == recorded  # not 3 + 1 + 1
    whole = [[p.key for p in parts]]  # one unit recorded, of more than 10 rows
    assert _keys(kept_together(parts, 10, whole)) == whole
    # a partition's rows grew: its unit is rebuilt, no boundary moves
    grown = [*parts[:1], TimePartition("hour=01", ("1.parquet",), 500), *parts[2:]]
    assert _keys(kept_together(grown, 10, recorded)) == recorded
    # later hours: the last unit (3 rows) goes on until it holds 10, then new units
    later = [*parts, *_hours(0, 0, 0, 0, 0, 2, 20, 1)[5:]]
    assert _keys(kept_together(later, 10, recorded)) == [
        *recorded[:2],
        ["hour=04", "hour=05", "hour=06"],
        ["hour=07"],
    ]
    # a partition new among the recorded ones joins the unit before it; one removed
    # leaves its unit's boundary where it was
    between = [TimePartition("hour=01b", ("1b.parquet",), 50)]
    mixed = [parts[0], parts[1], *between, parts[3], parts[4]]
    assert _keys(kept_together(mixed, 10, recorded)) == [
        ["hour=00", "hour=01", "hour=01b"],
        ["hour=03"],
        ["hour=04"],
    ]


def _grain(root: Path, cache: Path) -> list[list[str]]:
    manifest = model_directory(str(root), cache) / "manifest.json"
    grain: list[list[str]] = json.loads(manifest.read_text())["grain"]
    return grain


def test_a_cache_keeps_sparse_hours_in_one_unit_and_reuses_its_grain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hours of a few rows each are one unit (one build, the same model as in one pass);
    the grain is recorded, and a later run keeps it even where the threshold would now
    split it; a new hour continues the open unit."""
    source = _traffic(tmp_path / "source", seed=21, per_hour=10, hours=3)
    hours = _partition_dirs(source)
    root, cache = tmp_path / "data", tmp_path / "cache"
    for hour in hours[:-1]:
        shutil.copytree(hour, root / hour.relative_to(source))
    stats = _assert_same_model(root, _flat_copy(root, tmp_path / "flat-0"), cache)
    keys = [str(h.relative_to(source)) for h in hours]
    assert (stats["built"], stats["partitions"], stats["straddlers"]) == (1, 1, 0)
    assert _grain(root, cache) == [keys[:-1]]

    monkeypatch.setattr(_build, "CACHE_SPAN_ROWS", 0)  # every hour would be a unit now
    model, _ = connect(root, model_cache=cache)
    model.build()
    assert model.stats["built"] == 0  # the grain recorded stands
    assert _grain(root, cache) == [keys[:-1]]
    monkeypatch.undo()
    shutil.copytree(hours[-1], root / hours[-1].relative_to(source))
    stats = _assert_same_model(root, _flat_copy(root, tmp_path / "flat-1"), cache)
    assert (stats["built"], stats["partitions"]) == (1, 1)  # the open unit took the hour
    assert _grain(root, cache) == [keys]


def test_hours_added_one_at_a_time_to_units_of_several_give_the_one_pass_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Units of about two hours each, requests straddling them, hours added one at a time:
    the cached model is the one-pass model after every step."""
    source = _traffic(tmp_path / "source", seed=23, per_hour=12, hours=5)
    hours = _partition_dirs(source)
    rows = connect(source)[0].execute("SELECT count(*) FROM spans").fetchall()[0][0]
    monkeypatch.setattr(_build, "CACHE_SPAN_ROWS", 2 * rows // len(hours))
    root, cache = tmp_path / "data", tmp_path / "cache"
    for k, hour in enumerate(hours, start=1):
        shutil.copytree(hour, root / hour.relative_to(source))
        stats = _assert_same_model(root, _flat_copy(root, tmp_path / f"flat-{k}"), cache)
        assert stats["built"] == 1
    grain = _grain(root, cache)
    assert [key for unit in grain for key in unit] == [str(h.relative_to(source)) for h in hours]
    assert 1 < len(grain) < len(hours)
    assert stats["straddlers"] > 0
