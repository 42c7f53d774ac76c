"""The model kept per time partition and brought up to date as data arrives holds exactly
the rows of the model built in one pass over the same spans: partitions added one at a
time, requests straddling hour boundaries, a partition rewritten by a later ingest, spans
copied into another partition, a corrupt new file."""

from __future__ import annotations

import json
import logging
import random
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from retryscope.analytics import build_report, connect, findings
from retryscope.analytics._dataset import new_connection
from retryscope.analytics.model import _build, model_directory
from retryscope.cli import main
from tests.model_support import model_differences, model_rows
from tests.recorder import MS, T0, Clock, Recorder
from tests.test_analytics_model_cache import model_stats
from tests.test_analytics_randomized import _generate

HOUR = 3_600 * 10**9
FIRST_HOUR = T0 // HOUR * HOUR  # 2026-09-21T14:00Z


@pytest.fixture(autouse=True, scope="module")
def hourly_units() -> Iterator[None]:
    """A cache keeping each hour apart, however few rows it holds: these tests are about
    the time partitions a cache keeps and brings up to date (their data is a few rows an
    hour, which a cache would otherwise keep in one unit)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_build, "CACHE_SPAN_ROWS", 0)
        yield


def _traffic(directory: Path, seed: int, per_hour: int, hours: int = 3) -> Path:
    """Requests of random retry structure (``_generate``), a cluster of ``per_hour``
    20 ms apart ending just before each of ``hours`` hour boundaries: a request lasts up
    to a second or so, so each cluster's last requests run across the boundary and their
    spans land in two partitions."""
    rng = random.Random(seed)
    starts = sorted(
        FIRST_HOUR + (h + 1) * HOUR - rng.randint(0, 300) * MS - k * 20 * MS
        for h in range(hours)
        for k in range(per_hour)
    )
    rec = Recorder(directory)
    _generate(rec, len(starts), seed=seed, starts=starts)
    rec.connect()
    return directory


def _partition_dirs(root: Path) -> list[Path]:
    return sorted({p.parent for p in root.rglob("*.parquet")})


def _flat_copy(root: Path, flat: Path) -> Path:
    """Every file of ``root`` in one directory: a data set of one time partition, whose
    model is built in one pass."""
    flat.mkdir(parents=True)
    for i, f in enumerate(sorted(root.rglob("*.parquet"))):
        shutil.copy2(f, flat / f"{i:04d}-{f.name}")
    return flat


def _report(con: duckdb.DuckDBPyConnection) -> str:
    return json.dumps(build_report(con), sort_keys=True, default=str)


def _assert_same_model(root: Path, one_pass: Path, cache: Path) -> dict[str, int]:
    """The cached model of ``root`` against the one-pass model of ``one_pass``: the
    same rows table by table, the same report and findings. Returns the stats."""
    con, _ = connect(root, model_cache=cache)
    whole, _ = connect(one_pass)
    assert model_differences(con, whole) == {}
    assert _report(con) == _report(whole)
    assert (
        findings(con)
        .sort_by("logical_request_id")
        .equals(findings(whole).sort_by("logical_request_id"))
    )
    return model_stats(con)


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(min_value=0, max_value=2**16), per_hour=st.integers(15, 40))
def test_partitions_added_one_at_a_time_give_the_one_pass_model(seed: int, per_hour: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        source = _traffic(base / "source", seed, per_hour)
        parts = _partition_dirs(source)
        assert len(parts) >= 3
        root, cache = base / "data", base / "cache"
        for k, part in enumerate(parts, start=1):  # the data set grows by one hour
            shutil.copytree(part, root / part.relative_to(source))
            so_far = _flat_copy(root, base / f"flat-{k}")
            stats = _assert_same_model(root, so_far, cache)
            assert stats["built"] == 1  # only the new partition
            assert stats["partitions"] == k
        assert stats["straddlers"] > 0
        assert model_rows(connect(root, model_cache=cache)[0])["all_attempt_facts"] > 0


def test_a_request_across_an_hour_counts_once(tmp_path: Path) -> None:
    """A request whose request span starts at 14:59:59.9 and whose attempts run after
    15:00 has spans in two partitions; it is one request with all its attempts, in the
    cached model as in one pass."""
    root = _traffic(tmp_path / "data", seed=7, per_hour=30, hours=1)
    assert len(_partition_dirs(root)) == 2
    flat = _flat_copy(root, tmp_path / "flat")
    stats = _assert_same_model(root, flat, tmp_path / "cache")
    assert stats["straddlers"] > 0
    con, _ = connect(root, model_cache=tmp_path / "cache")
    report = build_report(con)
    assert report["logical_requests"] == 30
    across = con.execute(
        "SELECT count(*) FROM request_base WHERE started_at < ? AND ended_at >= ?",
        [_ts(FIRST_HOUR + HOUR), _ts(FIRST_HOUR + HOUR)],
    ).fetchall()[0][0]
    assert across >= stats["straddlers"] > 0


def _ts(ns: int) -> object:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ns / 1e9, UTC).replace(tzinfo=None)


def test_a_partition_rewritten_by_a_later_ingest_is_built_again(tmp_path: Path) -> None:
    """A later ingest replaces a file of an older partition (more spans of its requests):
    that partition, and only it, is built again."""
    source = _traffic(tmp_path / "source", seed=11, per_hour=25)
    root = tmp_path / "data"
    shutil.copytree(source, root)
    cache = tmp_path / "cache"
    first = _assert_same_model(root, _flat_copy(root, tmp_path / "flat-0"), cache)
    older = _partition_dirs(root)[0]
    victim = sorted(older.glob("*.parquet"))[0]
    table = duckdb.connect().sql(f"SELECT * FROM read_parquet('{victim}')").to_arrow_table()
    kept = table.slice(0, table.num_rows // 2)  # the rewrite holds half the rows
    victim.unlink()
    import pyarrow.parquet as pq

    pq.write_table(kept, older / "rewritten.parquet")
    stats = _assert_same_model(root, _flat_copy(root, tmp_path / "flat-1"), cache)
    assert (stats["built"], stats["partitions"]) == (1, first["partitions"])


def test_spans_copied_into_another_partition_count_once(tmp_path: Path) -> None:
    """The same spans in two partitions (a second source that partitions by request
    start): each is counted once, as in the data set without the copy, and reported."""
    source = _traffic(tmp_path / "source", seed=3, per_hour=25)
    root = tmp_path / "data"
    shutil.copytree(source, root)
    first, second = _partition_dirs(root)[:2]
    copied = sorted(first.glob("*.parquet"))[0]
    shutil.copy2(copied, second / f"again-{copied.name}")
    cache = tmp_path / "cache"
    con, _ = connect(root, model_cache=cache)
    original, _ = connect(source)
    assert model_differences(con, original).keys() <= {"duplicate_spans"}
    report, plain = build_report(con), build_report(original)
    copies = report["violations"].pop("duplicate_span")
    plain["violations"].pop("duplicate_span")
    report.pop("findings")
    plain.pop("findings")
    assert report == plain
    rows = duckdb.connect().sql(f"SELECT count(*) FROM read_parquet('{copied}')").fetchall()[0][0]
    assert copies == rows
    ((n,),) = con.execute("SELECT min(copies) FROM duplicate_spans").fetchall()
    assert n == 2


def test_a_corrupt_new_file_is_named_and_the_rest_is_used(tmp_path: Path) -> None:
    source = _traffic(tmp_path / "source", seed=5, per_hour=20)
    root = tmp_path / "data"
    shutil.copytree(source, root)
    cache = tmp_path / "cache"
    reference = _report(connect(source)[0])
    assert _report(connect(root, model_cache=cache)[0]) == reference
    newest = _partition_dirs(root)[-1]
    bad = newest / "spans-torn.parquet"
    bad.write_bytes(b"PAR1" + b"\0" * 64)
    con, _ = connect(root, model_cache=cache)
    assert _report(con) == reference
    assert [Path(s.path).name for s in con.skipped_files()] == [bad.name]
    assert model_stats(con)["built"] == 0  # the unreadable file is not part of a partition


def test_the_model_command_updates_only_new_partitions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RETRYSCOPE_MODEL_CACHE", raising=False)
    source = _traffic(tmp_path / "source", seed=9, per_hour=20)
    parts = _partition_dirs(source)
    root, cache = tmp_path / "data", tmp_path / "cache"
    for part in parts[:-1]:
        shutil.copytree(part, root / part.relative_to(source))
    assert main(["model", str(root), "--model-cache", str(cache)]) == 0
    assert capsys.readouterr().out.startswith("built: ")
    shutil.copytree(parts[-1], root / parts[-1].relative_to(source))
    assert main(["model", str(root), "--model-cache", str(cache)]) == 0
    out = capsys.readouterr().out
    directory = model_directory(str(root), cache)
    assert out.startswith(f"updated: {directory} (")
    assert f"1 of {len(parts)} time partitions built" in out
    assert "requests across partitions" in out
    assert main(["model", str(root), "--model-cache", str(cache)]) == 0
    assert capsys.readouterr().out.startswith("up to date: ")


def _keyed(rec: Recorder, start_ns: int, key: str, payload: int, *, across: bool = False) -> str:
    """A request with an idempotency key and a payload; ``across``: it starts 50 ms before
    ``start_ns``'s hour ends and its second attempt starts in the next hour."""
    clock = Clock(start_ns)
    with rec.request(clock, idempotency_key=key, request={"payload": payload}) as req:
        rec.attempt(req, ms=100, outcome="unavailable" if across else "success")
        if across:
            rec.attempt(req, ms=100)
    return req.id


def _conflicts(con: duckdb.DuckDBPyConnection) -> list[int]:
    con.build()
    return [
        n for (n,) in con.execute("SELECT digests FROM idempotency_conflicts ORDER BY 1").fetchall()
    ]


def test_idempotency_conflicts_follow_added_and_rewritten_partitions(tmp_path: Path) -> None:
    """Idempotency keys reused for different payloads across hours: a conflict that a new
    hour brings (k1), one through a request straddling the hour boundary (k3), a key
    reused for the same payload (k2, no conflict), and a rewrite of the newer hour that
    takes one request away, and its conflict with it. At every step the cached model,
    brought up to date from the previous one, holds the one-pass model's rows."""
    rec = Recorder(tmp_path / "source")
    _keyed(rec, FIRST_HOUR + 10 * 60_000 * MS, "k1", 1)
    _keyed(rec, FIRST_HOUR + 20 * 60_000 * MS, "k2", 1)
    _keyed(rec, FIRST_HOUR + 30 * 60_000 * MS, "k3", 1)
    _keyed(rec, FIRST_HOUR + HOUR - 50 * MS, "k3", 2, across=True)
    reused = _keyed(rec, FIRST_HOUR + HOUR + 10 * 60_000 * MS, "k1", 2)
    _keyed(rec, FIRST_HOUR + HOUR + 20 * 60_000 * MS, "k2", 1)
    rec.connect()
    source = tmp_path / "source"
    first, second = _partition_dirs(source)
    root, cache = tmp_path / "data", tmp_path / "cache"
    shutil.copytree(first, root / first.relative_to(source))
    _assert_same_model(root, _flat_copy(root, tmp_path / "flat-1"), cache)
    assert _conflicts(connect(root, model_cache=cache)[0]) == [2]  # k3, within the hour

    shutil.copytree(second, root / second.relative_to(source))
    stats = _assert_same_model(root, _flat_copy(root, tmp_path / "flat-2"), cache)
    assert (stats["built"], stats["straddlers"]) == (1, 1)
    assert _conflicts(connect(root, model_cache=cache)[0]) == [2, 2]  # k1 and k3

    newer = root / second.relative_to(source)
    (victim,) = sorted(newer.glob("*.parquet"))
    rows = duckdb.connect().sql(
        f"SELECT * FROM read_parquet('{victim}') WHERE logical_request_id <> '{reused}'"
    )
    kept = rows.to_arrow_table()
    victim.unlink()
    import pyarrow.parquet as pq

    pq.write_table(kept, newer / "rewritten.parquet")
    stats = _assert_same_model(root, _flat_copy(root, tmp_path / "flat-3"), cache)
    assert (stats["built"], stats["straddlers"]) == (1, 1)
    assert _conflicts(connect(root, model_cache=cache)[0]) == [2]  # k1's reuse is gone


def _concurrent_builds(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, int]]:
    """Build time partitions two at a time (whatever the cores), recording each build's
    partition, thread and the DuckDB threads its statements had."""
    monkeypatch.setattr(_build, "_workers", lambda con: 2)
    build = _build._build_units
    seen: list[tuple[str, int, int]] = []

    def recorded(job: Any, keys: bool) -> None:
        build(job, keys)
        ((threads,),) = job.cursor.execute("SELECT current_setting('threads')").fetchall()
        seen.append((job.part.key, threading.get_ident(), threads))

    monkeypatch.setattr(_build, "_build_units", recorded)
    return seen


def test_partitions_built_two_at_a_time_give_the_one_pass_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model cache builds two time partitions at once, each on its own cursor in a
    thread running its statements alone (DuckDB's threads are 1 while they run, and as
    they were afterwards); a file whose pages do not decode, met by one build while the
    other runs, is named and skipped and its partition built again from the rest."""
    from tests.reliability.support import garbled_copy

    root = _traffic(tmp_path / "data", seed=11, per_hour=20, hours=4)
    reference = _report(connect(root)[0])
    victim = sorted(_partition_dirs(root)[1].glob("*.parquet"))[0]
    pages = garbled_copy(victim)
    seen = _concurrent_builds(monkeypatch)
    con, _ = connect(root, con=new_connection(threads=3), model_cache=tmp_path / "cache")
    assert _report(con) == reference  # the garbled copy holds copies of counted spans
    assert {threads for _, _, threads in seen} == {1}
    assert con.execute("SELECT current_setting('threads')").fetchall() == [(3,)]
    assert [Path(s.path).name for s in con.skipped_files()] == [pages.name]
    parts = len(_partition_dirs(root))
    assert model_stats(con) | {"built": parts, "partitions": parts} == model_stats(con)
    assert len({thread for _, thread, _ in seen}) == 2  # two threads built
    assert sorted(key for key, _, _ in seen) == sorted(
        str(d.relative_to(root)) for d in _partition_dirs(root)
    )
    whole, _ = connect(_flat_copy(root, tmp_path / "flat"))
    assert model_differences(connect(root, model_cache=tmp_path / "cache")[0], whole) == {}


@pytest.mark.parametrize(
    ("threads", "memory_limit", "builds"), [(3, "4GB", 3), (3, "1.1GB", 2), (3, "1GB", 1)]
)
def test_a_cache_builds_one_partition_per_thread_each_with_its_share_of_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: int, memory_limit: str, builds: int
) -> None:
    """One build at a time per thread the connection may use (each then runs on its own
    thread), and no more than leave each build 512 MiB of the memory limit."""
    root = _traffic(tmp_path / "data", seed=13, per_hour=5, hours=4)
    build = _build._build_units
    seen: set[int] = set()

    def recorded(job: Any, keys: bool) -> None:
        seen.add(threading.get_ident())
        build(job, keys)

    monkeypatch.setattr(_build, "_build_units", recorded)
    con = new_connection(threads=threads, memory_limit=memory_limit)
    connect(root, con=con, model_cache=tmp_path / "c")[0].build()
    assert len(seen) == builds


def test_partitions_build_side_by_side_under_a_locked_configuration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection whose configuration is locked keeps its threads: its partitions are
    still built two at a time, with the same answers."""
    root = _traffic(tmp_path / "data", seed=14, per_hour=5, hours=3)
    reference = _report(connect(root)[0])
    monkeypatch.setattr(_build, "_workers", lambda con: 2)
    con, _ = connect(root, con=new_connection(threads=2), model_cache=tmp_path / "cache")
    con.execute("SET lock_configuration = true")
    assert _report(con) == reference
    assert con.execute("SELECT current_setting('threads')").fetchall() == [(2,)]


def test_a_failed_build_stops_the_one_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """When one of two builds running at once fails (here its disk is full), the other is
    stopped, neither is kept, and the failure is named: the model is built in memory
    instead and the answers do not change. The next run builds the cache."""
    root = _traffic(tmp_path / "data", seed=12, per_hour=15, hours=3)
    reference = _report(connect(root)[0])
    monkeypatch.setattr(_build, "_workers", lambda con: 2)
    build = _build._build_units
    started = threading.Barrier(2, timeout=10)
    failed = threading.Event()

    def failing(job: Any, keys: bool) -> None:
        if not failed.is_set():
            started.wait()  # both builds are running
            if job.index == 0:
                failed.set()
                raise OSError("no space left on device")
        build(job, keys)

    monkeypatch.setattr(_build, "_build_units", failing)
    cache = tmp_path / "cache"
    directory = model_directory(str(root), cache)
    with caplog.at_level(logging.WARNING, logger="retryscope.analytics.model._build"):
        con, _ = connect(root, con=new_connection(threads=3), model_cache=cache)
        assert _report(con) == reference
    assert "not written (OSError: no space left on device)" in caplog.text
    assert con.execute("SELECT current_setting('threads')").fetchall() == [(3,)]
    assert not (directory / "manifest.json").exists()
    assert not (directory / "units").exists() or list((directory / "units").iterdir()) == []
    monkeypatch.setattr(_build, "_build_units", build)
    con, _ = connect(root, model_cache=cache)
    assert _report(con) == reference
    assert model_stats(con)["built"] == len(_partition_dirs(root))
