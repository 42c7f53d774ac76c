"""A time partition built in request partitions (large for the memory limit) holds exactly
the rows of the one built in one pass, whatever the number of partitions; the number
follows from the span count and the memory limit or from the environment."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import duckdb
import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from retryscope import vocabulary as v
from retryscope.analytics import build_report, connect, findings
from retryscope.analytics._dataset import new_connection
from retryscope.analytics.model import _partitions as mp
from retryscope.analytics.model._partition import (
    PER_REQUEST_TABLES,
    PROJECTIONS,
    REQUEST_BASE,
    REQUEST_BASE_COLUMNS,
    SOURCE,
    Place,
    build_tables,
)
from retryscope.cli import main
from retryscope.instrumentation import ParquetSpanExporter
from tests.model_support import model_differences, model_rows
from tests.recorder import Recorder
from tests.reliability.support import garbled_copy, visible_files
from tests.test_analytics_randomized import _generate

LOGGER = "retryscope.analytics.model._build"


def _message(partitions: int) -> str:
    return f"in {partitions} request partitions"


def _pass_tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    """Temp tables of a partition's build still on ``con``."""
    temps = con.execute("SELECT table_name FROM duckdb_tables() WHERE temporary").fetchall()
    passes = {*PER_REQUEST_TABLES, REQUEST_BASE, "attempt_rows", "attempt_groups", "span_copies"}
    return {name for (name,) in temps} & passes


@pytest.fixture(scope="module")
def randomized(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Data sets of the randomized ledger test: retries, fallbacks, unmarked HTTP sends,
    marked transport attempts, costs, terminals."""
    roots = []
    for seed in (3, 11):
        rec = Recorder(tmp_path_factory.mktemp(f"seed{seed}") / "data")
        _generate(rec, 400, seed=seed)
        rec.connect()
        roots.append(rec.directory)
    return roots


def test_request_base_is_kept_as_the_projection_of_request_facts_it_is(
    randomized: list[Path],
) -> None:
    con, _ = connect(randomized[0])
    con.execute(f"CREATE TEMP TABLE {SOURCE} AS SELECT * FROM spans")
    build_tables(con)  # the build's own request_base, a table
    built = [name for (name, *_) in con.execute("DESCRIBE temp.main.request_base").fetchall()]
    table, columns = PROJECTIONS[REQUEST_BASE].table, PROJECTIONS[REQUEST_BASE].columns
    facts = [name for (name, *_) in con.execute(f"DESCRIBE temp.main.{table}").fetchall()]
    assert built == list(REQUEST_BASE_COLUMNS) == facts[: len(built)]
    assert len(facts) > len(built)
    listed = ", ".join(columns)
    ((only_built, only_kept, rows),) = con.execute(
        f"SELECT (SELECT count(*) FROM (FROM temp.main.request_base EXCEPT ALL"
        f"  SELECT {listed} FROM temp.main.{table})),"
        f" (SELECT count(*) FROM (SELECT {listed} FROM temp.main.{table} EXCEPT ALL"
        f"  FROM temp.main.request_base)),"
        f" (SELECT count(*) FROM temp.main.request_base)"
    ).fetchall()
    assert (only_built, only_kept) == (0, 0)
    assert rows > 100
    # the model built for the data set names it a view of what it keeps
    model, _ = connect(randomized[0])
    model.build()
    assert model.execute("SELECT count(*) FROM request_base").fetchall() == [(rows,)]
    views = model.execute(
        "SELECT view_name FROM duckdb_views() WHERE temporary AND view_name = 'request_base'"
    ).fetchall()
    assert views == [("request_base",)]


@pytest.mark.parametrize("partitions", [2, 7])
def test_partitioned_model_holds_the_rows_of_the_one_pass_model(
    randomized: list[Path],
    partitions: int,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    for root in randomized:
        monkeypatch.delenv(mp.PARTITIONS_ENV, raising=False)
        whole, _ = connect(root)
        one_pass = json.dumps(build_report(whole), sort_keys=True, default=str)
        one_pass_findings = findings(whole).sort_by("logical_request_id")
        monkeypatch.setenv(mp.PARTITIONS_ENV, str(partitions))
        with caplog.at_level(logging.INFO, logger=LOGGER):
            con, _ = connect(root)
            text = json.dumps(build_report(con), sort_keys=True, default=str)
        assert _message(partitions) in caplog.text
        assert model_differences(whole, con) == {}
        assert model_rows(con)["all_attempt_facts"] > 0
        assert text == one_pass
        assert findings(con).sort_by("logical_request_id").equals(one_pass_findings)
        # nothing of the passes is left on the connection
        assert _pass_tables(con) == set()
        caplog.clear()


def test_a_cache_built_in_request_partitions_holds_the_one_pass_model(
    randomized: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Into a model cache each request partition's tables are written straight to their
    own files (``<table>-<i>.parquet``), which the build's later statements read back: the
    same rows as the one-pass model, table by table."""
    root = randomized[0]
    monkeypatch.delenv(mp.PARTITIONS_ENV, raising=False)
    whole, _ = connect(root)
    monkeypatch.setenv(mp.PARTITIONS_ENV, "3")
    con, _ = connect(root, model_cache=tmp_path / "cache")
    assert model_differences(whole, con) == {}
    assert json.dumps(build_report(con), sort_keys=True, default=str) == json.dumps(
        build_report(whole), sort_keys=True, default=str
    )
    names = {p.name for p in (tmp_path / "cache").rglob("units/*/*.parquet")}
    for table in PER_REQUEST_TABLES:
        assert {f"{table}.parquet", f"{table}-1.parquet", f"{table}-2.parquet"} <= names
    assert _pass_tables(con) == set()


def test_a_partitioned_build_that_stops_leaves_nothing(
    randomized: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C in the second pass: no manifest, no shadow view of ``spans``, no temp
    tables; the connection's next build is complete."""
    from retryscope.analytics.model import _build as model_build

    root = randomized[0]
    reference = json.dumps(build_report(connect(root)[0]), sort_keys=True, default=str)
    passes = []
    build = model_build.build_tables

    def interrupted(con: duckdb.DuckDBPyConnection, place: Place | None = None) -> None:
        passes.append(con.execute("SELECT count(*) FROM unit_spans").fetchall()[0][0])
        build(con, place)
        if len(passes) == 2:
            raise KeyboardInterrupt

    monkeypatch.setenv(mp.PARTITIONS_ENV, "3")
    monkeypatch.setattr(model_build, "build_tables", interrupted)
    cache = tmp_path / "cache"
    con, _ = connect(root, model_cache=cache)
    with pytest.raises(KeyboardInterrupt):
        build_report(con)
    assert list(cache.glob("*/manifest.json")) == []
    assert list(cache.glob("*/units/*")) == []
    assert _pass_tables(con) == set()
    views = con.execute("SELECT view_name FROM duckdb_views() WHERE temporary AND NOT internal")
    assert "spans" not in {name for (name,) in views.fetchall()}
    total = con.execute("SELECT count(*) FROM spans").fetchall()[0][0]
    assert all(0 < seen < total for seen in passes)  # each pass saw its share
    monkeypatch.setattr(model_build, "build_tables", build)
    con, _ = connect(root, model_cache=cache)
    assert json.dumps(build_report(con), sort_keys=True, default=str) == reference


def test_the_memory_limit_chooses_the_partitions(
    randomized: list[Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Without the environment variable, the span count and ``--memory-limit`` decide:
    here one partition may hold 2 000 span rows per GiB, so a 1GB limit splits the data
    set and a limit near the machine's memory does not."""
    monkeypatch.delenv(mp.PARTITIONS_ENV, raising=False)
    monkeypatch.delenv("RETRYSCOPE_MODEL_CACHE", raising=False)
    monkeypatch.setattr(mp, "SPAN_ROWS_PER_GIB", 2_000)
    root = str(randomized[1])
    assert main(["report", root, "--format", "json"]) == 0
    plain = capsys.readouterr().out
    con, _ = connect(root)
    rows = con.execute("SELECT count(*) FROM spans").fetchall()[0][0]
    expected = -(-rows // 1862)  # 1GB is 0.93 GiB: 1 862 rows a partition
    with caplog.at_level(logging.INFO, logger=LOGGER):
        args = ["report", root, "--format", "json", "--memory-limit", "1GB"]
        assert main([*args, "--model-cache", str(tmp_path / "limited")]) == 0
    assert capsys.readouterr().out == plain
    assert _message(expected) in caplog.text
    assert expected > 1
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=LOGGER):  # no cache: the same partitions
        assert main(["report", root, "--format", "json", "--memory-limit", "1GB"]) == 0
    assert capsys.readouterr().out == plain
    assert _message(expected) in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        args = ["report", root, "--format", "json", "--memory-limit", "1TB"]
        assert main([*args, "--model-cache", str(tmp_path / "roomy")]) == 0
    assert capsys.readouterr().out == plain
    assert "request partitions" not in caplog.text


@pytest.mark.parametrize("cached", [True, False])
def test_an_undecodable_file_is_skipped_by_a_partitioned_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cached: bool
) -> None:
    """A file whose footer reads but whose pages do not fails a pass; the build starts
    again over the other files and names the skipped one, as a one-pass build does."""
    rec = Recorder(tmp_path / "damaged")
    _generate(rec, 120, seed=5)  # its first file's pages fail to decode once garbled
    rec.connect()
    root = rec.directory
    victim = visible_files(root)[0]
    pages = garbled_copy(victim)
    monkeypatch.delenv(mp.PARTITIONS_ENV, raising=False)
    one_pass, _ = connect(root)
    reference = json.dumps(build_report(one_pass), sort_keys=True, default=str)
    assert [Path(f.path).name for f in one_pass.skipped_files()] == [pages.name]
    monkeypatch.setenv(mp.PARTITIONS_ENV, "3")
    con, _ = connect(root, model_cache=tmp_path / "cache" if cached else None)
    assert json.dumps(build_report(con), sort_keys=True, default=str) == reference
    assert [Path(f.path).name for f in con.skipped_files()] == [pages.name]


def test_a_bad_partition_count_is_named(
    randomized: list[Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cache = tmp_path / "cache"
    for bad in ("zero", "0", "-3", "2.5"):
        monkeypatch.setenv(mp.PARTITIONS_ENV, bad)
        assert main(["report", str(randomized[0]), "--model-cache", str(cache)]) == 2
        err = capsys.readouterr().err
        assert f"{mp.PARTITIONS_ENV}={bad!r} is not a positive integer" in err
        assert not cache.exists() or list(cache.iterdir()) == []
    monkeypatch.setenv(mp.PARTITIONS_ENV, "4")
    assert main(["model", str(randomized[0]), "--model-cache", str(cache)]) == 0
    out = capsys.readouterr().out
    assert out.endswith(" built, the largest in 4 request partitions)\n")
    assert main(["model", str(randomized[0]), "--model-cache", str(cache)]) == 0
    assert capsys.readouterr().out.endswith(" MiB, 1 time partitions)\n")  # not built now


def _attempt(
    tracer: trace.Tracer, request: str, layer: str, ordinal: int, **extra: object
) -> trace.Span:
    attributes: dict[str, object] = {
        v.SPAN_ROLE.key: "attempt",
        v.LOGICAL_REQUEST_ID.key: request,
        v.LAYER.key: layer,
        v.ATTEMPT_ORDINAL.key: ordinal,
        v.ROUTE_ID.key: "primary",
        v.OUTCOME.key: "success",
        **extra,
    }
    return tracer.start_span(f"{layer} attempt", attributes=attributes)  # type: ignore[arg-type]


def test_an_attempt_encloses_only_attempts_of_its_own_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transport attempt that names no enclosing attempt gets its parent span's layer
    and ordinal when that span is an attempt of the same logical request; beneath another
    request's attempt it is its own request's top level (in one pass as in partitions)."""
    exporter = ParquetSpanExporter(tmp_path / "data")
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("hand-made")
    outer = _attempt(tracer, "req-a", "harness", 1)
    with trace.use_span(outer, end_on_exit=True):
        _attempt(tracer, "req-a", "transport", 1).end()
        _attempt(tracer, "req-b", "transport", 1).end()
    provider.shutdown()
    for partitions in ("1", "2", "5"):
        monkeypatch.setenv(mp.PARTITIONS_ENV, partitions)
        con, _ = connect(tmp_path / "data", model_cache=tmp_path / f"cache{partitions}")
        build_report(con)
        rows = con.execute(
            "SELECT logical_request_id, layer, parent_layer, parent_attempt_ordinal"
            " FROM physical_attempts ORDER BY ALL"
        ).fetchall()
        assert rows == [
            ("req-a", "harness", None, None),
            ("req-a", "transport", "harness", 1),
            ("req-b", "transport", None, None),
        ]


@given(
    rows=st.integers(min_value=0, max_value=10**10),
    limit=st.one_of(st.none(), st.integers(min_value=-1, max_value=2**42)),
)
def test_partitions_cover_the_rows_within_the_budget(rows: int, limit: int | None) -> None:
    k = mp.partitions_for(rows, limit)
    assert k >= 1
    if limit is None or limit <= 0 or rows == 0:
        assert k == 1
        return
    budget = max(1, int(mp.SPAN_ROWS_PER_GIB * limit / 2**30))
    assert k * budget >= rows  # every partition within the budget ...
    assert (k - 1) * budget < rows  # ... and no more partitions than that needs
    assert mp.partitions_for(rows * 2, limit) >= k


@pytest.mark.parametrize("size", ["64MB", "1.5GB", "2GB", "900MiB", "3TB", "100KB"])
def test_duckdb_memory_limits_read_back_as_bytes(size: str) -> None:
    con = new_connection(memory_limit=size)
    setting = con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0]
    got = mp.memory_limit_bytes(setting)
    number, unit = float(size.rstrip("KMGTiB")), size.lstrip("0123456789.")
    scale = {"KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "MiB": 2**20}[unit]
    assert got is not None
    assert abs(got - number * scale) <= 0.1 * number * scale  # DuckDB prints 1 decimal


def test_the_span_count_comes_from_the_footers(
    randomized: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``connect`` records the footers' row count (what ``count(*)`` would read); an
    object-store data set has none, so it is built in one pass unless told otherwise."""
    monkeypatch.delenv(mp.PARTITIONS_ENV, raising=False)
    con, dataset = connect(randomized[0])
    assert dataset.rows == con.execute("SELECT count(*) FROM spans").fetchall()[0][0] > 0
    assert sum(dataset.file_rows) == dataset.rows
    monkeypatch.setattr(mp, "SPAN_ROWS_PER_GIB", 1)
    assert mp.configured_partitions(con, dataset.rows) > 1
    unknown = new_connection(memory_limit="64MB")
    assert mp.configured_partitions(unknown, None) == 1
    monkeypatch.setenv(mp.PARTITIONS_ENV, "6")
    assert mp.configured_partitions(unknown, None) == 6


def test_an_unknown_memory_limit_rendering_means_one_partition() -> None:
    assert mp.memory_limit_bytes("unlimited") is None
    assert mp.memory_limit_bytes("12 parsecs") is None
    assert mp.partitions_for(10**9, mp.memory_limit_bytes("unlimited")) == 1
