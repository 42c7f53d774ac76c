"""The audit model cached between connections per time partition: a partition is reused
only while its files, the model's SQL and the versions are unchanged; stale, damaged or
unwritable caches never change an answer; the files a build skipped stay named;
drill-downs are unaffected."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pytest

from retryscope.analytics import (
    AuditModel,
    DataSet,
    Filters,
    build_report,
    connect,
    findings,
    request_detail,
)
from retryscope.analytics.model import MODEL_TABLES, model_directory
from retryscope.analytics.model._cache import UNIT_FILES, model_fingerprint
from retryscope.cli import main
from retryscope.instrumentation import ParquetSpanExporter
from tests.export_support import make_spans
from tests.recorder import Recorder
from tests.reliability.support import garbled_copy, visible_files
from tests.test_analytics_randomized import _generate


def model_stats(con: AuditModel) -> dict[str, Any]:
    """What the model build on ``con`` did: time partitions built now and in all."""
    return dict(con.stats)


def _report(root: Path, cache: Path | None, filters: Filters | None = None) -> tuple[str, int]:
    """The report on ``root`` as JSON, and how many time partitions were built for it."""
    con, _ = connect(root, model_cache=cache)
    text = json.dumps(build_report(con, filters), sort_keys=True, default=str)
    return text, model_stats(con)["built"]


def _units(cache: Path, root: Path) -> list[Path]:
    return sorted((model_directory(str(root), cache) / "units").iterdir())


@pytest.fixture
def data(tmp_path: Path) -> Path:
    rec = Recorder(tmp_path / "data")
    _generate(rec, 120, seed=5)
    rec.connect()
    return rec.directory


def test_an_unchanged_data_set_reuses_the_saved_model(data: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    reference, _ = _report(data, None)
    first, built = _report(data, cache)
    assert (first, built) == (reference, 1)  # one time partition, built into the cache
    directory = model_directory(str(data), cache)
    assert sorted(p.name for p in directory.iterdir()) == [
        "across",
        "lock",
        "manifest.json",
        "progress.json",
        "units",
    ]
    (unit,) = _units(cache, data)
    assert {p.stem for p in unit.glob("*.parquet")} == set(UNIT_FILES)
    second, built = _report(data, cache)
    assert (second, built) == (reference, 0)
    # filters scope the cached model like a built one
    tenant = Filters(tenant="a")
    assert _report(data, cache, tenant) == (_report(data, None, tenant)[0], 0)
    con, _ = connect(data, model_cache=cache)
    assert findings(con).equals(findings(connect(data)[0]))
    names = {name for (name,) in con.execute("SELECT view_name FROM duckdb_views()").fetchall()}
    assert set(MODEL_TABLES) <= names


def test_a_new_file_rebuilds_only_its_partition(data: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    before, _ = _report(data, cache)
    (old,) = _units(cache, data)
    exporter = ParquetSpanExporter(data)  # one more file arrives (in the same hour)
    exporter.export(make_spans(6))
    exporter.shutdown()
    after, built = _report(data, cache)
    assert (after, built) == (_report(data, None)[0], 1)
    assert after != before
    assert old not in _units(cache, data) or len(_units(cache, data)) == 2
    assert _report(data, cache) == (after, 0)


def test_a_new_model_version_rebuilds_everything(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from retryscope.analytics.model import _build

    cache = tmp_path / "cache"
    reference, _ = _report(data, cache)
    monkeypatch.setattr(_build, "model_fingerprint", lambda: "another model")
    assert _report(data, cache) == (reference, 1)
    assert len(_units(cache, data)) == 1  # the other model's folders are removed
    assert _report(data, cache) == (reference, 0)
    assert model_fingerprint() != "another model"


def test_a_damaged_cache_is_rebuilt(data: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    reference, _ = _report(data, cache)
    directory = model_directory(str(data), cache)
    (directory / "manifest.json").write_text("not json")
    assert _report(data, cache) == (reference, 0)  # the partition itself is intact
    (unit,) = _units(cache, data)
    (unit / "all_attempt_facts.parquet").write_bytes(b"not a parquet file" * 100)
    assert _report(data, cache) == (reference, 1)  # its footer does not read: built again
    assert _report(data, cache) == (reference, 0)


def test_a_folder_is_checked_by_its_recorded_sizes_or_else_its_footers(
    data: Path, tmp_path: Path
) -> None:
    """A unit records its files' sizes when written: a later run checks it by a ``stat``
    of each (a file of another size is rebuilt) and, in a folder without the record, by
    reading each footer."""
    cache = tmp_path / "cache"
    reference, _ = _report(data, cache)
    (unit,) = _units(cache, data)
    sizes = json.loads((unit / "sizes.json").read_text(encoding="utf-8"))
    assert sizes == {p.name: p.stat().st_size for p in unit.glob("*.parquet")}
    facts = unit / "all_attempt_facts.parquet"
    facts.write_bytes(facts.read_bytes() + b"\0")  # one byte more: not the file written
    assert _report(data, cache) == (reference, 1)
    (unit,) = _units(cache, data)
    (unit / "sizes.json").unlink()
    assert _report(data, cache) == (reference, 0)  # footers read: intact
    facts = unit / "all_attempt_facts.parquet"
    facts.write_bytes(b"PAR1" + b"\0" * (facts.stat().st_size - 4))
    assert _report(data, cache) == (reference, 1)


def test_a_cache_that_cannot_be_written_changes_nothing(
    data: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with caplog.at_level(logging.WARNING, logger="retryscope.analytics.model._build"):
        assert _report(data, blocker / "cache") == (_report(data, None)[0], 1)
    assert "not written" in caplog.text


def test_a_build_that_stops_leaves_no_half_model(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A build into the cache that fails for another reason than the data (here a full
    disk, once the partition's tables are written) is named and the model built in
    memory; one interrupted (Ctrl-C) writes no manifest either. Both leave only hidden
    staging folders, removed by the next build."""
    from retryscope.analytics.model import _build

    reference, _ = _report(data, None)
    cache = tmp_path / "cache"
    directory = model_directory(str(data), cache)
    write = _build._write_across

    def disk_full(*args: Any) -> int:
        write(*args)
        raise duckdb.IOException("could not write block: No space left on device")

    def interrupted(*args: Any) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(_build, "_write_across", disk_full)
    with caplog.at_level(logging.WARNING, logger="retryscope.analytics.model._build"):
        con, _ = connect(data, model_cache=cache)
        text = json.dumps(build_report(con), sort_keys=True, default=str)
    assert text == reference
    assert "not written (IOException: could not write block: No space left" in caplog.text
    assert not (directory / "manifest.json").exists()
    monkeypatch.setattr(_build, "_write_across", interrupted)
    con, _ = connect(data, model_cache=cache)
    with pytest.raises(KeyboardInterrupt):
        build_report(con)
    assert not (directory / "manifest.json").exists()
    where = con.execute("SELECT current_database(), current_setting('search_path')")
    assert where.fetchall() == [("memory", "")]  # names resolve as before the build
    monkeypatch.setattr(_build, "_write_across", write)
    assert _report(data, cache) == (reference, 0)  # the partition written before is reused
    assert [p.name for p in directory.iterdir() if p.name.startswith(".")] == []
    assert _report(data, cache) == (reference, 0)


def test_files_the_build_skipped_stay_skipped(data: Path, tmp_path: Path) -> None:
    root = tmp_path / "damaged"
    shutil.copytree(data, root)
    victim = visible_files(root)[0]
    pages = garbled_copy(victim)
    cache = tmp_path / "cache"
    for expect_built in (1, 0):
        con, _ = connect(root, model_cache=cache)
        report = build_report(con)
        assert model_stats(con)["built"] == expect_built
        assert [Path(s.path).name for s in con.skipped_files()] == [pages.name]
        assert report["logical_requests"] == 120
        assert findings(con).num_rows == findings(connect(data)[0]).num_rows


def test_drill_downs_and_object_stores_do_not_use_the_cache(data: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _report(data, cache)
    con, _ = connect(data, model_cache=cache)
    ident = con.execute("SELECT min(logical_request_id) FROM spans").fetchall()[0][0]
    summary, attempts = request_detail(con, ident)
    plain, plain_attempts = request_detail(connect(data)[0], ident)
    assert (summary.equals(plain), attempts.equals(plain_attempts)) == (True, True)
    # a drill-down builds its request's own model on a cursor, not the data set's
    assert not con.built
    remote, _ = connect(DataSet("s3://bucket/audit", ()), model_cache=cache)
    assert remote.cache is None


def test_cli_model_cache_flag_and_environment(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "cache"
    assert main(["report", str(data), "--format", "json"]) == 0
    plain = capsys.readouterr().out
    assert main(["report", str(data), "--format", "json", "--model-cache", str(cache)]) == 0
    assert capsys.readouterr().out == plain
    assert len(_units(cache, data)) == 1
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
    assert not list(starved.glob("*/manifest.json"))
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
    directory = model_directory(str(data), cache)
    assert main(["model", str(data), "--model-cache", str(cache)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"built: {directory} (")
    assert "1 of 1 time partitions built" in out
    assert main(["model", str(data), "--model-cache", str(cache)]) == 0
    assert capsys.readouterr().out.startswith(f"up to date: {directory} (")
    assert _report(data, cache) == (_report(data, None)[0], 0)
    assert main(["model", str(data)]) == 2  # no cache directory named
    assert "give --model-cache DIR" in capsys.readouterr().err


def test_a_connection_reused_for_another_data_set_switches_models(
    data: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Built in memory for one data set, read from the cache for the next, built again
    for a third: each report is that data set's, with no warning."""
    other = Recorder(tmp_path / "other")
    _generate(other, 40, seed=9)
    other.connect()
    cache = tmp_path / "cache"
    _report(other.directory, cache)  # other's model is now cached
    con, _ = connect(data)
    with caplog.at_level(logging.WARNING, logger="retryscope.analytics.model._build"):
        assert build_report(con)["logical_requests"] == 120
        con, _ = connect(other.directory, con=con.con, model_cache=cache)
        assert build_report(con)["logical_requests"] == 40
        assert model_stats(con)["built"] == 0
        con, _ = connect(data, con=con.con)
        assert build_report(con)["logical_requests"] == 120
    assert caplog.text == ""
