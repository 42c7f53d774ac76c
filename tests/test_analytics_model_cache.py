"""The audit model cached between connections: reused only while the data set, the model's
SQL and the versions are unchanged; stale, damaged or unwritable caches never change an
answer; the files a build skipped stay named; drill-downs are unaffected."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import duckdb
import pytest

from retryscope.analytics import (
    Filters,
    build_report,
    connect,
    findings,
    request_detail,
    skipped_files,
)
from retryscope.analytics._dataset import discover
from retryscope.analytics.model._cache import MODEL_TABLES, configured, model_cache
from retryscope.cli import main
from retryscope.instrumentation import ParquetSpanExporter
from tests.export_support import make_spans
from tests.recorder import Recorder
from tests.reliability.support import garbled_copy, visible_files
from tests.test_analytics_randomized import _generate


def _attached(con: duckdb.DuckDBPyConnection) -> bool:
    rows = con.execute("SELECT count(*) FROM duckdb_databases() WHERE database_name = 'rs_model'")
    return bool(rows.fetchall()[0][0])


def _reused(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether ``con`` attached a cached model (rather than building one)."""
    return bool(con.execute("SELECT getvariable('rs_model_reused')").fetchall()[0][0])


def _report(root: Path, cache: Path | None, filters: Filters | None = None) -> tuple[str, bool]:
    """The report on ``root`` as JSON, and whether it came from a cached model."""
    con, _ = connect(root, model_cache=cache)
    text = json.dumps(build_report(con, filters), sort_keys=True, default=str)
    # a model built into the cache is attached from it, like a reused one
    assert _attached(con) is (cache is not None and any(cache.glob("model-*.duckdb")))
    return text, _reused(con)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    rec = Recorder(tmp_path / "data")
    _generate(rec, 120, seed=5)
    rec.connect()
    return rec.directory


def test_an_unchanged_data_set_reuses_the_saved_model(data: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    reference, _ = _report(data, None)
    first, attached = _report(data, cache)
    assert (first, attached) == (reference, False)  # built into the cache
    (saved,) = cache.glob("model-*.duckdb")
    assert [p.name for p in cache.iterdir()] == [saved.name]  # no temporary file left
    with duckdb.connect(str(saved), read_only=True) as stored:
        rows = stored.execute("SELECT table_name FROM duckdb_tables()").fetchall()
    tables = {name for (name,) in rows}
    assert tables == {*MODEL_TABLES, "model_info"}  # every table the model's scripts leave
    second, attached = _report(data, cache)
    assert (second, attached) == (reference, True)
    # filters scope the cached model like a built one
    tenant = Filters(tenant="a")
    assert _report(data, cache, tenant) == (_report(data, None, tenant)[0], True)
    con, _ = connect(data, model_cache=cache)
    assert findings(con).equals(findings(connect(data)[0]))


def test_a_changed_data_set_rebuilds_and_replaces_the_model(data: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    before, _ = _report(data, cache)
    old = model_cache(str(data), discover(data).files, cache)
    exporter = ParquetSpanExporter(data)  # one more file arrives
    exporter.export(make_spans(6))
    exporter.shutdown()
    new = model_cache(str(data), discover(data).files, cache)
    assert old is not None
    assert new is not None
    assert (new.path, new.fingerprint != old.fingerprint) == (old.path, True)
    after, attached = _report(data, cache)
    assert (after, attached) == (_report(data, None)[0], False)
    assert after != before
    assert _report(data, cache) == (after, True)


def test_a_damaged_cache_is_named_and_rebuilt(
    data: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = tmp_path / "cache"
    reference, _ = _report(data, cache)
    (saved,) = cache.glob("model-*.duckdb")
    saved.write_bytes(b"not a duckdb file" * 100)
    with caplog.at_level(logging.WARNING, logger="retryscope.analytics.model._cache"):
        assert _report(data, cache) == (reference, False)
    assert f"model cache {saved} is unreadable" in caplog.text
    assert _report(data, cache) == (reference, True)  # replaced by a good one


def test_a_cache_that_cannot_be_written_changes_nothing(
    data: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with caplog.at_level(logging.WARNING, logger="retryscope.analytics.model._cache"):
        assert _report(data, blocker / "cache") == (_report(data, None)[0], False)
    assert "not written" in caplog.text


def test_a_build_that_stops_leaves_no_file_and_changes_no_answer(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A build into the cache that fails for another reason than the data (here a full
    disk, raised once the tables are written) is named and the model built in memory; one
    interrupted (Ctrl-C) leaves nothing behind either. Both later build the cache."""
    from retryscope.analytics.model import _build as model_build

    reference, _ = _report(data, None)
    cache = tmp_path / "cache"
    build = model_build._build_persistent

    def disk_full(con: duckdb.DuckDBPyConnection) -> None:
        build(con)
        raise duckdb.IOException("could not write block: No space left on device")

    def interrupted(con: duckdb.DuckDBPyConnection) -> None:
        build(con)
        raise KeyboardInterrupt

    monkeypatch.setattr(model_build, "_build_persistent", disk_full)
    with caplog.at_level(logging.WARNING, logger="retryscope.analytics.model._cache"):
        con, _ = connect(data, model_cache=cache)
        text = json.dumps(build_report(con), sort_keys=True, default=str)
    assert (text, _attached(con)) == (reference, False)
    assert "not written (IOException: could not write block: No space left" in caplog.text
    assert list(cache.iterdir()) == []
    monkeypatch.setattr(model_build, "_build_persistent", interrupted)
    con, _ = connect(data, model_cache=cache)
    with pytest.raises(KeyboardInterrupt):
        build_report(con)
    assert list(cache.iterdir()) == []
    databases = con.execute("SELECT database_name FROM duckdb_databases() WHERE NOT internal")
    assert sorted(name for (name,) in databases.fetchall()) == ["memory"]
    where = con.execute("SELECT current_database(), current_setting('search_path')")
    assert where.fetchall() == [("memory", "")]  # names resolve as before the build
    monkeypatch.setattr(model_build, "_build_persistent", build)
    assert _report(data, cache) == (reference, False)  # on the same data: built, then
    assert _report(data, cache) == (reference, True)  # reused


def test_files_the_build_skipped_stay_skipped(data: Path, tmp_path: Path) -> None:
    root = tmp_path / "damaged"
    shutil.copytree(data, root)
    victim = visible_files(root)[0]
    pages = garbled_copy(victim)
    cache = tmp_path / "cache"
    for expect_attached in (False, True):
        con, dataset = connect(root, model_cache=cache)
        report = build_report(con)
        assert _attached(con)  # built into the cache, then reused
        assert _reused(con) is expect_attached
        assert [Path(s.path).name for s in skipped_files(con, dataset)] == [pages.name]
        assert report["logical_requests"] == 120
        # findings read the files directly: the skipped file is not read again
        assert findings(con).num_rows == findings(connect(data)[0]).num_rows


def test_drill_downs_and_object_stores_do_not_use_the_cache(data: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _report(data, cache)
    con, _ = connect(data, model_cache=cache)
    assert configured(con) is not None
    assert configured(con.cursor()) is None  # a drill-down builds its request's own model
    ident = con.execute("SELECT min(logical_request_id) FROM spans").fetchall()[0][0]
    summary, attempts = request_detail(con, ident)
    plain, plain_attempts = request_detail(connect(data)[0], ident)
    assert (summary.equals(plain), attempts.equals(plain_attempts)) == (True, True)
    assert not _attached(con)
    assert model_cache("s3://bucket/audit", ("s3://bucket/audit/**/*.parquet",), cache) is None


def test_cli_model_cache_flag_and_environment(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"
    assert main(["report", str(data), "--format", "json"]) == 0
    plain = capsys.readouterr().out
    assert main(["report", str(data), "--format", "json", "--model-cache", str(cache)]) == 0
    assert capsys.readouterr().out == plain
    assert len(list(cache.glob("model-*.duckdb"))) == 1
    monkeypatch.setenv("RETRYSCOPE_MODEL_CACHE", str(cache))
    assert main(["report", str(data), "--format", "json"]) == 0
    assert capsys.readouterr().out == plain
    assert main(["findings", str(data), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) is not None


def test_cli_memory_limit_spills_instead_of_changing_answers(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--memory-limit`` (or its environment variable) caps DuckDB, with or without a
    model cache; a limit the analysis cannot live within, and a size DuckDB does not
    accept, are named (exit 2)."""
    monkeypatch.delenv("RETRYSCOPE_MODEL_CACHE", raising=False)
    monkeypatch.delenv("RETRYSCOPE_MEMORY_LIMIT", raising=False)
    assert main(["report", str(data), "--format", "json"]) == 0
    plain = capsys.readouterr().out
    cache = str(tmp_path / "cache")
    limited = ["report", str(data), "--format", "json", "--memory-limit", "64MB"]
    for extra in ([], ["--model-cache", cache], ["--model-cache", cache]):
        assert main([*limited, *extra]) == 0
        assert capsys.readouterr().out == plain
    starved = tmp_path / "starved"
    assert main([*limited[:-1], "1MB", "--model-cache", str(starved)]) == 2
    assert "the analysis needs more memory than 1MB allows" in capsys.readouterr().err
    assert not starved.exists() or not any(starved.iterdir())
    monkeypatch.setenv("RETRYSCOPE_MEMORY_LIMIT", "a lot")
    assert main(["findings", str(data)]) == 2
    err = capsys.readouterr().err
    assert "memory limit 'a lot' is not a size DuckDB accepts (e.g. 1.5GB" in err
    assert main(["ui", str(data)]) == 2  # refused before a server starts
    assert "memory limit 'a lot' is not a size" in capsys.readouterr().err
    assert main(["model", str(data), "--model-cache", cache, "--memory-limit", "1GB"]) == 0
    assert capsys.readouterr().out.startswith("up to date: ")


def test_model_command_builds_once_then_finds_it_up_to_date(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("RETRYSCOPE_MODEL_CACHE", raising=False)
    cache = tmp_path / "cache"
    assert main(["model", str(data), "--model-cache", str(cache)]) == 0
    (saved,) = cache.glob("model-*.duckdb")
    assert capsys.readouterr().out.startswith(f"built: {saved} (")
    assert main(["model", str(data), "--model-cache", str(cache)]) == 0
    assert capsys.readouterr().out.startswith(f"up to date: {saved} (")
    assert _report(data, cache) == (_report(data, None)[0], True)
    assert main(["model", str(data)]) == 2  # no cache directory named
    assert "give --model-cache DIR" in capsys.readouterr().err


def test_a_connection_reused_for_another_data_set_switches_models(
    data: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Built in memory for one data set, attached from the cache for the next, built again
    for a third: each report is that data set's, with no warning."""
    other = Recorder(tmp_path / "other")
    _generate(other, 40, seed=9)
    other.connect()
    cache = tmp_path / "cache"
    _report(other.directory, cache)  # other's model is now cached
    con, _ = connect(data)
    with caplog.at_level(logging.WARNING, logger="retryscope.analytics.model._cache"):
        assert build_report(con)["logical_requests"] == 120
        connect(other.directory, con=con, model_cache=cache)
        assert build_report(con)["logical_requests"] == 40
        assert _reused(con)
        connect(data, con=con)
        assert build_report(con)["logical_requests"] == 120
        assert not _attached(con)
    assert caplog.text == ""
