"""The whole-data-set figures the UI keeps beside its model cache: a restarted UI reads them
instead of computing them again; any change of the data set's files makes new ones (and
removes the old); filtered figures and values JSON would alter are never kept."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
import streamlit as st

from retryscope.analytics import _figures, amplification, build_report, connect
from retryscope.analytics._figures import FOLDER, REPORT_SLICES, FigureStore
from retryscope.cli import main
from retryscope.dashboards import _data
from tests.dashboards.conftest import metrics, select, start_app
from tests.dashboards.test_overview import WHOLE


def _sets(cache: Path) -> list[Path]:
    return sorted(p for p in (cache / FOLDER).iterdir() if p.is_dir())


def _restart(data: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    st.cache_data.clear()
    st.cache_resource.clear()  # as a restarted server: the data set is opened again
    return metrics(start_app(data, monkeypatch, model_cache=cache))


@pytest.fixture
def started(ui_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A copy of the known data set whose first start kept its figures in a model cache."""
    data, cache = tmp_path / "spans", tmp_path / "cache"
    shutil.copytree(ui_data, data)
    st.cache_data.clear()
    assert metrics(start_app(data, monkeypatch, model_cache=cache)) == WHOLE
    return data, cache


def test_a_restarted_ui_reads_the_kept_figures(
    started: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    data, cache = started
    (kept,) = _sets(cache)
    (headline,) = kept.glob("headline-*.json")  # the Overview's first row
    figures = json.loads(headline.read_text())
    assert figures["logical_requests"] == 9
    figures["logical_requests"] = 12_345  # what the restarted page shows, if it reads it
    headline.write_text(json.dumps(figures))
    assert _restart(data, cache, monkeypatch)["Logical requests"] == "12,345"


def test_a_ui_started_after_the_report_reads_the_figures_it_kept(
    ui_data: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``retryscope report`` with a model cache keeps its report and the slices it
    computed as the UI's figures of that version: the UI's first start reads them."""
    data, cache = tmp_path / "spans", tmp_path / "cache"
    shutil.copytree(ui_data, data)
    assert main(["report", str(data), "--model-cache", str(cache), "--format", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    (kept,) = _sets(cache)
    names = {p.name.rsplit("-", 1)[0] for p in kept.iterdir()}
    assert names >= {
        "finding_counts",
        "load",
        "report",
        "headline",
        *(name for name, _ in REPORT_SLICES),
    }
    store = FigureStore(kept)
    assert store.get("report", ()) == printed
    con, _ = connect(data)
    assert store.get("amplification", ("route",)).equals(amplification(con, by="route"))
    assert store.get("finding_counts", ()) == build_report(con)["violations"]
    (headline,) = kept.glob("headline-*.json")  # the Overview's first row
    figures = json.loads(headline.read_text())
    figures["logical_requests"] = 12_345  # what the page shows, if it reads the kept set
    headline.write_text(json.dumps(figures))
    assert _restart(data, cache, monkeypatch)["Logical requests"] == "12,345"


def _kept(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def _computing(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the UI's queries computed from now on (not read from a kept set)."""
    computed: list[str] = []
    for name, query in list(_data.QUERIES.items()):

        def recorded(con: object, f: object, a: object, name: str = name, query=query) -> object:
            computed.append(name)
            return query(con, f, a)  # type: ignore[arg-type]

        monkeypatch.setitem(_data.QUERIES, name, recorded)
    return computed


@pytest.mark.parametrize("command", ["model", "report"])
def test_the_cli_keeps_the_figures_the_ui_first_page_computes(
    started: tuple[Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
) -> None:
    """``retryscope model`` and ``retryscope report`` with a model cache keep every figure
    the UI's first start computes, the same bytes (and the report's slices other pages
    read): a UI started after either computes nothing."""
    data, cache = started
    (by_ui,) = _sets(cache)
    computed_by_ui = _kept(by_ui)
    shutil.rmtree(cache / FOLDER)
    assert main([command, str(data), "--model-cache", str(cache)]) == 0
    capsys.readouterr()
    (by_cli,) = _sets(cache)
    assert by_cli.name == by_ui.name  # the same data set, model and code
    kept = _kept(by_cli)
    assert {name: kept.get(name) for name in computed_by_ui} == computed_by_ui
    computed = _computing(monkeypatch)
    assert _restart(data, cache, monkeypatch) == WHOLE
    assert computed == []


def test_figures_kept_by_the_model_command_are_not_served_for_changed_data(
    ui_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data, cache = tmp_path / "spans", tmp_path / "cache"
    shutil.copytree(ui_data, data)
    assert main(["model", str(data), "--model-cache", str(cache)]) == 0
    (old,) = _sets(cache)
    (report,) = old.glob("report-*.json")
    report.write_text(report.read_text().replace('"logical_requests": 9', '"logical_requests": 1'))
    first = sorted(data.rglob("*.parquet"))[0]
    stat = first.stat()
    os.utime(first, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # rewritten in place
    computed = _computing(monkeypatch)
    assert _restart(data, cache, monkeypatch) == WHOLE  # computed, not the old set's
    assert "report" in computed
    (new,) = _sets(cache)
    assert new != old


def test_a_filtered_report_keeps_no_figures(
    ui_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, cache = tmp_path / "spans", tmp_path / "cache"
    shutil.copytree(ui_data, data)
    argv = ["report", str(data), "--model-cache", str(cache), "--tenant", "acme"]
    assert main(argv) == 0
    assert not (cache / FOLDER).exists()


def test_changed_data_makes_new_figures(
    started: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    data, cache = started
    (old,) = _sets(cache)
    (report,) = old.glob("report-*.json")
    report.write_text(report.read_text().replace('"logical_requests": 9', '"logical_requests": 1'))
    first = sorted(data.rglob("*.parquet"))[0]
    stat = first.stat()
    os.utime(first, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # rewritten in place
    assert _restart(data, cache, monkeypatch) == WHOLE  # computed, not the old set's
    (new,) = _sets(cache)
    assert new != old  # the old set removed


def test_filtered_figures_are_not_kept(
    started: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    data, cache = started
    (kept,) = _sets(cache)
    before = sorted(p.name for p in kept.iterdir())
    at = start_app(data, monkeypatch, model_cache=cache)
    select(at, "filter_tenant", "acme")
    assert metrics(at)["Logical requests"] != WHOLE["Logical requests"]
    assert sorted(p.name for p in kept.iterdir()) == before


def test_store_round_trips_tables_and_json_dicts(tmp_path: Path) -> None:
    store = FigureStore(tmp_path / "set")
    table = pa.table({"value": ["a", None], "n": [1, 2]})
    store.put("amplification", ("route",), table)
    store.put("report", (), {"logical_requests": 3, "rate": 0.5, "by": [{"x": None}]})
    assert store.get("amplification", ("route",)).equals(table)
    assert store.get("amplification", ("tenant",)) is None  # other arguments, other figure
    assert store.get("report", ()) == {"logical_requests": 3, "rate": 0.5, "by": [{"x": None}]}


def test_store_keeps_nothing_json_or_its_list_would_alter(tmp_path: Path) -> None:
    store = FigureStore(tmp_path / "set")
    store.put("report", (), {"pair": (1, 2)})  # a tuple would come back a list
    store.put("finding_counts", (), {"nan": float("nan")})  # NaN != NaN
    store.put("request_attempts", ("id",), pa.table({"n": [1]}))  # a per-request lookup
    store.put("whatif", (), [pa.table({"n": [1]})])  # neither a table, a pair nor a dict
    store.put("request_list", (), (True, pa.table({"n": [1]})))  # the count not an int
    assert not (tmp_path / "set").exists()


def test_store_round_trips_a_count_and_its_page(tmp_path: Path) -> None:
    store = FigureStore(tmp_path / "set")
    page = pa.table({"logical_request_id": ["a", "b"]}).replace_schema_metadata({"k": "v"})
    store.put("request_list", ("excess_attempts", 50), (1234, page))
    count, kept = store.get("request_list", ("excess_attempts", 50))
    assert count == 1234
    assert kept.equals(page)
    assert kept.schema.metadata == {b"k": b"v"}  # the table's own metadata, not the count
    assert store.get("request_list", ("duration_ms", 50)) is None


def test_store_key_covers_the_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    version = (("a.parquet", 1, 2),)
    one = FigureStore.of(tmp_path, "/data", version, [])
    assert FigureStore.of(tmp_path, "/data", version, []).directory == one.directory
    assert FigureStore.of(tmp_path, "/data", (("a.parquet", 1, 3),), []).directory != (
        one.directory
    )
    monkeypatch.setattr(_figures, "code_digest", lambda: "other code")
    assert FigureStore.of(tmp_path, "/data", version, []).directory != one.directory
