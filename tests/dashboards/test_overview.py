"""Overview page and app shell: KPI row against the known data set, change vs the previous
period, storm windows in the trends, missing/empty/unreadable data."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from retryscope.analytics._dataset import MEMORY_LIMIT_ENV
from retryscope.analytics.model._partitions import PARTITIONS_ENV
from retryscope.dashboards._serve import APP, DATA_ENV
from tests.dashboards.conftest import charts, deltas, metrics, start_app, type_text

WHOLE = {
    "Logical requests": "9",
    "Amplification": "2.33×",  # 21 receiver attempts / 9 requests
    "Cost amplification": "–",  # no costs recorded
    "Fallback rate": "33.3%",
    "Deadline exhausted": "11.1%",
    "Violations": "9",  # errors and warnings: nested, widening, mismatch, late, 5 storm windows
}


def test_kpis_of_the_whole_data_set(app: AppTest) -> None:
    assert metrics(app) == WHOLE
    assert all(d is None for d in deltas(app).values())
    assert "Set a time range" in app.caption[0].value


def test_model_cache_serves_the_same_figures(
    ui_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With $RETRYSCOPE_MODEL_CACHE the first start saves the built model and the next one
    (the data set opened anew) reads it instead of rebuilding; same figures."""
    data, cache = tmp_path / "spans", tmp_path / "cache"
    shutil.copytree(ui_data, data)
    assert metrics(start_app(data, monkeypatch, model_cache=cache)) == WHOLE
    (manifest,) = cache.glob("model-*/manifest.json")
    written = manifest.stat().st_mtime_ns
    st.cache_resource.clear()  # as a restarted server: the data set is opened again
    assert metrics(start_app(data, monkeypatch, model_cache=cache)) == WHOLE
    assert manifest.stat().st_mtime_ns == written  # read, not rebuilt and saved again


def test_memory_limit_from_the_environment(
    ui_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """$RETRYSCOPE_MEMORY_LIMIT caps DuckDB (same figures, built into a cache under it);
    a size DuckDB does not accept is named on the page instead of a traceback."""
    data = tmp_path / "spans"
    shutil.copytree(ui_data, data)
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "128MB")
    assert metrics(start_app(data, monkeypatch, model_cache=tmp_path / "cache")) == WHOLE
    st.cache_resource.clear()
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "plenty")
    at = start_app(data, monkeypatch)
    assert [e.value for e in at.error] == [
        f"Cannot open {data}: memory limit 'plenty' is not a size DuckDB accepts "
        "(e.g. 1.5GB, 800MB): Parser Error: Memory must have a number (e.g. 1GB)"
    ]
    assert not at.metric


def test_a_model_built_in_partitions_serves_the_same_figures(
    ui_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a cache, a model built in request partitions serves the same figures, and
    the app's connection keeps reading it across reruns."""
    data = tmp_path / "spans"
    shutil.copytree(ui_data, data)
    monkeypatch.setenv(PARTITIONS_ENV, "3")
    at = start_app(data, monkeypatch)
    assert metrics(at) == WHOLE
    st.cache_data.clear()  # the next run asks DuckDB again, on the same connection
    at.run()
    assert metrics(at) == WHOLE


def test_trends_mark_the_storm_windows(app: AppTest) -> None:
    layered = [spec for spec, _ in charts(app)]
    assert len(layered) == 3
    spec, data = charts(app)[0]
    bands = data[spec["layer"][0]["data"]["name"]]
    # each 60 s window holding a request that retried is over the 10 % retry budget
    assert bands.num_rows == 5
    line = data[spec["layer"][1]["data"]["name"]].to_pydict()
    assert sum(line["logical_requests"]) == 9
    assert max(line["amplification_ratio"]) == 9.0  # the nested request's bucket


def test_change_vs_previous_period(app: AppTest) -> None:
    type_text(app, "filter_since", "2026-09-21T14:13:20Z")
    type_text(app, "filter_until", "2026-09-21T14:23:20Z")
    shown = metrics(app)
    assert shown["Logical requests"] == "7"
    assert shown["Amplification"] == "2.71×"  # 19 / 7
    assert shown["Fallback rate"] == "42.9%"
    change = deltas(app)
    assert change["Logical requests"] == "+5"  # vs prev1, prev2
    assert change["Amplification"] == "+1.71×"  # vs 1.00×
    assert change["Fallback rate"] == "+42.9%"
    assert "previous period 2026-09-21 14:03:20 – 2026-09-21 14:13:20" in app.caption[0].value


def test_hostile_time_text_is_an_error_not_sql(app: AppTest) -> None:
    type_text(app, "filter_since", "'; DROP TABLE spans; --")
    assert "Since (UTC): invalid time" in app.sidebar.error[0].value
    type_text(app, "filter_until", "read_csv('/etc/passwd')")
    assert len(app.sidebar.error) == 2
    assert metrics(app) == WHOLE  # the bounds are ignored, the data intact


def _run_on(monkeypatch: pytest.MonkeyPatch, data: Path | None) -> AppTest:
    if data is None:
        monkeypatch.delenv(DATA_ENV, raising=False)
    else:
        monkeypatch.setenv(DATA_ENV, str(data))
    at = AppTest.from_file(str(APP), default_timeout=30).run()
    assert not at.exception
    return at


def test_missing_and_empty_data_show_a_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "No data directory" in _run_on(monkeypatch, tmp_path / "nope").info[0].value
    assert "No span files" in _run_on(monkeypatch, tmp_path).info[0].value
    assert "No data directory" in _run_on(monkeypatch, None).info[0].value


def test_unreadable_files_are_listed_and_the_rest_shown(
    ui_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "copy"
    shutil.copytree(ui_data, data)
    (data / "broken.parquet").write_bytes(b"PAR1 not really")
    at = _run_on(monkeypatch, data)
    assert "1 unreadable file(s) skipped" in at.warning[0].value
    assert "broken.parquet" in at.warning[0].value
    assert metrics(at) == WHOLE


def test_only_unreadable_files_say_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "broken.parquet").write_bytes(b"")
    at = _run_on(monkeypatch, tmp_path)
    assert "broken.parquet" in at.warning[0].value
    assert "No readable span files" in at.info[0].value
