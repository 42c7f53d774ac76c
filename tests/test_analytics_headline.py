"""The headline read from the rollups a model cache keeps per time partition equals the
report's figures from the full model, under every filter the rollups' grain covers; the
filters it does not cover, and models without rollups, read the model's tables."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from retryscope.analytics import Filters, build_report, connect, headline
from retryscope.analytics._headline import REQUEST_KEYS, from_rollups, split_hours
from retryscope.analytics.model import _build, model_directory
from retryscope.demo._run import generate
from tests.test_analytics_incremental import FIRST_HOUR, HOUR, _traffic

START = datetime.fromtimestamp(FIRST_HOUR // 10**9, UTC)


@pytest.fixture(scope="module", autouse=True)
def hourly_units() -> Iterator[None]:
    """Each hour a unit of its own, so requests straddle units."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_build, "CACHE_SPAN_ROWS", 0)
        yield


@pytest.fixture(scope="module")
def random_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Requests of random retry structure, the last of each hour running into the next."""
    return _traffic(tmp_path_factory.mktemp("random") / "data", seed=31, per_hour=40, hours=3)


@pytest.fixture(scope="module")
def demo_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demo") / "data"
    generate(out, 400, 7, progress=False)
    return out


def _reported(report: dict[str, Any]) -> dict[str, Any]:
    """The report's figures the headline holds."""
    return {
        **{k: report[k] for k in REQUEST_KEYS},
        "cost": {"by_currency": report["cost"]["by_currency"]},
    }


def _filters(root: Path) -> list[Filters]:
    """No filter, time ranges on whole hours and within them, each value of tenant,
    operation and route, and combinations."""
    model, _ = connect(root)
    values = {
        dim: [
            v
            for (v,) in model.build()
            .con.execute(f"SELECT DISTINCT {col} FROM {table} WHERE {col} IS NOT NULL")
            .fetchall()
        ][:3]
        for dim, col, table in (
            ("tenant", "tenant", "request_base"),
            ("operation", "operation", "request_base"),
            ("route", "route_id", "all_attempt_facts"),
        )
    }
    ((first, last),) = model.con.execute(
        "SELECT min(started_at), max(started_at) FROM request_base"
    ).fetchall()
    first = first.replace(minute=0, second=0, microsecond=0)
    mid = first + (last - first) / 2
    mid = mid.replace(minute=0, second=0, microsecond=0)
    assert first < mid < last
    odd = mid + timedelta(minutes=17, seconds=3, microseconds=500)  # within an hour
    found = [Filters()]
    found += [Filters(since=first, until=mid), Filters(since=mid), Filters(until=mid)]
    found += [Filters(since=odd), Filters(until=odd), Filters(since=first, until=odd)]
    found += [Filters(since=odd - timedelta(hours=1), until=odd)]  # no whole hour within
    found += [Filters(since=odd, until=odd + timedelta(minutes=5), tenant=values["tenant"][0])]
    found += [Filters(**{dim: v}) for dim, vs in values.items() for v in vs]  # type: ignore[arg-type]
    found += [
        Filters(since=mid, route=values["route"][0], tenant=values["tenant"][0]),
        Filters(until=mid, operation=values["operation"][0], route=values["route"][-1]),
        Filters(tenant="no such tenant"),
    ]
    return found


@pytest.mark.parametrize("data", ["random_data", "demo_data"])
def test_the_headline_from_rollups_is_the_reports(
    data: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    root = request.getfixturevalue(data)
    maintained, _ = connect(root, model_cache=tmp_path / "cache")
    full, _ = connect(root)
    if data == "random_data":
        assert maintained.build().stats["straddlers"] > 0  # the corrections are exercised
    for f in _filters(root):
        rolled = from_rollups(maintained, f)
        assert rolled is not None, f
        assert rolled == _reported(build_report(full, f)), f
        assert rolled == headline(full, f), f  # a model in memory reads its tables


def test_a_maintained_model_keeps_its_rollups_current(tmp_path: Path) -> None:
    """Hours added one by one (each build adds its rollups; the requests across hours are
    corrected anew): the headline stays the report's."""
    whole = _traffic(tmp_path / "whole", seed=32, per_hour=30, hours=3)
    root, cache = tmp_path / "data", tmp_path / "cache"
    for hour in sorted({p.parent for p in whole.rglob("*.parquet")}):
        target = root / hour.relative_to(whole)
        target.mkdir(parents=True)
        for f in hour.glob("*.parquet"):
            (target / f.name).write_bytes(f.read_bytes())
        maintained, _ = connect(root, model_cache=cache)
        assert from_rollups(maintained, Filters()) == _reported(build_report(connect(root)[0]))


def test_a_range_is_split_into_whole_hours_and_the_parts_left() -> None:
    """The rollups are read for the whole hours within a time range; the parts of hours
    at its ends are rolled up from the model's facts (at each boundary: a bound on the
    hour leaves no part; one a microsecond off leaves one)."""
    h = START.replace(tzinfo=None)
    hour, us = timedelta(hours=1), timedelta(microseconds=1)
    assert split_hours(None, None) == ((None, None), [])
    assert split_hours(h, h + 2 * hour) == ((h, h + 2 * hour), [])
    assert split_hours(h + us, None) == ((h + hour, None), [(h + us, h + hour)])
    assert split_hours(h - us, None) == ((h, None), [(h - us, h)])
    assert split_hours(None, h + us) == ((None, h), [(h, h + us)])
    assert split_hours(None, h - us) == ((None, h - hour), [(h - hour, h - us)])
    half = timedelta(minutes=30)
    assert split_hours(h + half, h + 2 * hour + half) == (
        (h + hour, h + 2 * hour),
        [(h + half, h + hour), (h + 2 * hour, h + 2 * hour + half)],
    )
    # no whole hour within: one part, the range itself
    assert split_hours(h + half, h + hour + half) == (
        (h + hour, h + hour),
        [(h + half, h + hour + half)],
    )
    assert split_hours(h + us, h + hour) == ((h + hour, h + hour), [(h + us, h + hour)])


def test_bounds_within_an_hour_add_the_requests_of_their_part(
    random_data: Path, tmp_path: Path
) -> None:
    """A time bound inside an hour: the whole hours from the rollups, the requests
    started in the rest rolled up from the model's facts; the headline equals the report
    (a bound a moment later or earlier moves requests between the parts, not the sum)."""
    maintained, _ = connect(random_data, model_cache=tmp_path / "cache")
    for since in (
        START + timedelta(minutes=59, seconds=59, milliseconds=500),
        START + timedelta(hours=1, microseconds=1),
        START + timedelta(hours=1) - timedelta(microseconds=1),
        # 14:30 UTC given at +00:30: the hour split in UTC
        (START + timedelta(minutes=30)).astimezone(timezone(timedelta(minutes=30))),
    ):
        within = Filters(since=since)
        rolled = from_rollups(maintained, within)
        assert rolled is not None
        assert rolled == _reported(build_report(maintained, within))
        assert rolled["logical_requests"] > 0


def test_a_damaged_rollup_is_built_again(random_data: Path, tmp_path: Path) -> None:
    """A unit's rollup removed: the unit no longer holds what it wrote, so it is built
    again, rollups and all; a model in memory has none and reads its tables."""
    cache = tmp_path / "cache"
    connect(random_data, model_cache=cache)[0].build()
    units = model_directory(str(random_data), cache) / "units"
    next(units.glob("*/rollup_cost.parquet")).unlink()
    maintained, _ = connect(random_data, model_cache=cache)
    assert maintained.build().stats["built"] == 1
    assert from_rollups(maintained, Filters()) == _reported(build_report(maintained))
    in_memory, _ = connect(random_data)
    assert from_rollups(in_memory, Filters()) is None


def test_the_rollups_are_small(random_data: Path, tmp_path: Path) -> None:
    """Fewer rows than requests: an hour's requests of one tenant, operation and routes
    are one row."""
    maintained, _ = connect(random_data, model_cache=tmp_path / "cache")
    rollup = maintained.build().rollups["rollup_requests"]
    ((rows,),) = maintained.con.execute(f"SELECT count(*) FROM {rollup}").fetchall()
    assert 0 < rows < headline(maintained)["logical_requests"] + maintained.stats["straddlers"] * 2
    assert HOUR  # the traffic's hours
