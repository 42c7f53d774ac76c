"""The maintained model holds every figure of a cold build: after any sequence of new
hours, late files landing in older hours, files rewritten in place and spans copied twice,
the model a cache brings up to date step by step holds the rows of a model built from
nothing over the same files, table by table, and the report JSON is the same."""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from retryscope.analytics import build_report, connect
from retryscope.analytics.model import _build
from tests.model_support import model_differences
from tests.recorder import MS, Recorder
from tests.test_analytics_incremental import FIRST_HOUR, HOUR, _partition_dirs, _traffic
from tests.test_analytics_randomized import _generate

HOURS = 5


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], list[Path]]:
    """Hourly partitions of traffic whose last requests run across each hour's end (in
    hour order), and late files: spans of other requests of each hour, written later."""
    base = tmp_path_factory.mktemp("sources")
    hours = _partition_dirs(_traffic(base / "traffic", seed=21, per_hour=12, hours=HOURS))
    rng = random.Random(22)
    late = Recorder(base / "late")
    starts = sorted(FIRST_HOUR + h * HOUR + rng.randint(1, 50) * 60_000 * MS for h in range(HOURS))
    _generate(late, len(starts), seed=23, starts=starts)
    late.provider.shutdown()
    return hours, sorted((base / "late").rglob("*.parquet"))


_STEP = st.one_of(
    st.tuples(st.just("hour")),
    st.tuples(st.just("late"), st.integers(0, HOURS - 1)),
    st.tuples(st.just("rewrite"), st.integers(0, 50), st.floats(0.2, 0.9)),
    st.tuples(st.just("copy"), st.integers(0, 50)),
)


def _apply(step: tuple[object, ...], root: Path, hours: list[Path], late: list[Path]) -> None:
    """One change to the data set, made as a writer makes it (a file closed under a hidden
    name and renamed into place)."""
    kind = step[0]
    present = sorted(root.rglob("*.parquet"))
    if kind == "hour" or not present:
        # the next hour of traffic not yet here (its folder may hold late files already)
        for source in hours:
            target = root / source.relative_to(source.parents[1])
            if not all((target / f.name).exists() for f in source.glob("*.parquet")):
                shutil.copytree(source, target, dirs_exist_ok=True)
                return
        return
    if kind == "late":
        source = late[int(str(step[1])) % len(late)]
        target = root / source.parent.relative_to(source.parents[2])
        target.mkdir(parents=True, exist_ok=True)
        _close(target / f"late-{len(present)}.parquet", pq.read_table(source))
    elif kind == "rewrite":
        victim = present[int(str(step[1])) % len(present)]
        table = pq.read_table(victim, partitioning=None)
        _close(victim, table.slice(0, int(table.num_rows * float(str(step[2])))))
    else:  # the same spans delivered twice, in another file of their hour
        source = present[int(str(step[1])) % len(present)]
        _close(source.with_name(f"again-{len(present)}.parquet"), pq.read_table(source))


def _close(path: Path, table: object) -> None:
    temp = path.with_name(f".{path.name}.inprogress")
    pq.write_table(table, temp)  # type: ignore[arg-type]
    os.replace(temp, path)


def _report(con: object) -> str:
    return json.dumps(build_report(con), sort_keys=True, default=str)  # type: ignore[arg-type]


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(steps=st.lists(_STEP, min_size=2, max_size=5), grain=st.sampled_from([0, 150]))
@example(steps=[("hour",), ("late", 3), ("hour",)], grain=0)  # late files before their hour
def test_the_maintained_model_equals_a_cold_build(
    sources: tuple[list[Path], list[Path]], steps: list[tuple[object, ...]], grain: int
) -> None:
    """``grain``: the fewest span rows a cache unit holds (0: each hour a unit of its own;
    150: a few hours of this traffic together, so a change rebuilds its run)."""
    hours, late = sources
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as patch:
        patch.setattr(_build, "CACHE_SPAN_ROWS", grain)
        root, cache = Path(tmp) / "data", Path(tmp) / "cache"
        for step in [("hour",), *steps]:
            _apply(step, root, hours, late)
            maintained, _ = connect(root, model_cache=cache)
            cold, _ = connect(root)
            assert model_differences(maintained, cold) == {}, step
            assert _report(maintained) == _report(cold), step
