"""The UI shows a model build's progress (stage, partition k of K, elapsed, estimate) in a
native ``st.status`` with an ``st.progress`` bar, fed by the build's progress callback; quick
work shows nothing."""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from retryscope._environment import CACHE_ENV
from retryscope.analytics import connect
from retryscope.analytics.model import model_directory
from retryscope.analytics.model._progress import STAGE_DONE, STAGE_PARTITIONS, Progress
from retryscope.dashboards import _data, _progress
from retryscope.dashboards import serve as serve_module
from tests.dashboards.conftest import metrics, start_app
from tests.dashboards.test_overview import WHOLE
from tests.model_support import hold_model_lock


def _reports(*reports: tuple[str, int, int, float, float | None]) -> None:
    """An app script feeding ``reports`` (stage, done, total, elapsed, remaining) to the
    display, as a build does."""
    import streamlit as st

    from retryscope.analytics.model._progress import Progress
    from retryscope.dashboards._progress import StatusProgress

    display = StatusProgress()
    for stage, done, total, elapsed, remaining in reports:
        display(Progress(stage, done, total, elapsed, remaining, "date=2026-09-21/hour=10"))
    st.write("page")


def test_running_build_shows_stage_partition_elapsed_and_estimate() -> None:
    at = AppTest.from_function(
        _reports,
        args=(
            (STAGE_PARTITIONS, 1, 8, 0.4, 3.0),  # before the threshold: nothing yet
            (STAGE_PARTITIONS, 3, 8, 75.0, 125.0),
        ),
    ).run()
    assert not at.exception
    (status,) = at.status
    assert status.state == "running"
    assert status.label == _progress.TITLE
    (bar,) = at.progress
    assert bar.value == 37  # 3 of 8
    assert bar.text == (
        "building time partitions (date=2026-09-21/hour=10): 3 of 8 (38%), "
        "1 min 15 s elapsed, about 2 min 05 s left"
    )


def test_finished_build_is_marked_complete() -> None:
    at = AppTest.from_function(
        _reports,
        args=((STAGE_PARTITIONS, 8, 8, 5.0, 0.0), (STAGE_DONE, 8, 8, 6.0, None)),
    ).run()
    (status,) = at.status
    assert status.state == "complete"
    assert status.label == "Audit model ready (6 s)"
    assert at.progress[0].value == 100


def test_quick_work_shows_nothing() -> None:
    at = AppTest.from_function(
        _reports,
        args=((STAGE_PARTITIONS, 1, 1, 0.2, 0.0), (STAGE_DONE, 1, 1, 0.3, None)),
    ).run()
    assert not at.status
    assert not at.progress
    assert at.markdown[0].value == "page"


def test_the_app_shows_its_model_build(
    ui_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first page of a data set whose model is not built shows the build's progress
    above the page (every report shown: no threshold), then the page's figures; the next
    run reads the built model and shows none."""
    data = tmp_path / "spans"
    shutil.copytree(ui_data, data)
    monkeypatch.setattr(_progress, "SHOWN_AFTER_S", 0.0)
    at = start_app(data, monkeypatch, model_cache=tmp_path / "cache")
    (status,) = at.status
    assert status.state == "complete"
    assert status.label.startswith("Audit model ready (")
    (bar,) = at.progress
    assert bar.value == 100
    assert bar.text.startswith(f"{STAGE_DONE}: ")
    assert metrics(at) == WHOLE
    at.run()
    assert not at.status
    assert metrics(at) == WHOLE


def test_a_session_waiting_for_another_build_shows_its_progress(ui_data: Path) -> None:
    """While one session builds the model (holding the store's lock), another shows the
    latest progress that build reported, and once it is ready uses it without building."""
    con, _ = connect(ui_data)
    store = _data.Store(con, threading.Lock())
    store.relay(Progress(STAGE_PARTITIONS, 2, 5, 3.0, 4.0))  # the builder's latest report
    seen: list[Progress] = []
    with store.lock:
        waiter = threading.Thread(target=_data._ready, args=(store, (), seen.append))
        waiter.start()
        for _ in range(200):
            if seen:
                break
            time.sleep(0.05)
        store.ready.set()  # the builder is done
    waiter.join(10)
    assert not waiter.is_alive()
    assert seen
    assert (seen[0].done, seen[0].total) == (2, 5)
    assert store.figures is None  # not prepared a second time
    assert not con.built


def test_the_app_shows_a_build_of_another_process(
    ui_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While another process builds the cached model (the UI's background watcher, a
    ``retryscope model --watch`` beside the writer), the first page shows that build's
    progress, then the figures of the model it built."""
    data, cache = tmp_path / "spans", tmp_path / "cache"
    shutil.copytree(ui_data, data)
    monkeypatch.setattr(_progress, "SHOWN_AFTER_S", 0.0)
    shown: list[str] = []
    line = _progress.line
    monkeypatch.setattr(_progress, "line", lambda p: shown.append(line(p)) or shown[-1])
    holder = hold_model_lock(model_directory(str(data), cache), seconds=1.5)
    at = start_app(data, monkeypatch, model_cache=cache)
    assert holder.wait(10) == 0
    (status,) = at.status
    assert status.state == "complete"
    assert metrics(at) == WHOLE
    (bar,) = at.progress
    assert bar.text.startswith(f"{STAGE_DONE}: ")
    assert "building time partitions (another process: date=2026-09-21/hour=15): 2 of 5" in (
        " ".join(shown)
    )


def test_serve_keeps_the_model_current_in_the_background(ui_data: Path, tmp_path: Path) -> None:
    """``retryscope ui --model-cache`` runs a watcher process beside the server: the model
    is built without a page asking, and the watcher stops with the server."""
    data, cache = tmp_path / "spans", tmp_path / "cache"
    shutil.copytree(ui_data, data)
    for f in data.rglob("*.parquet"):  # closed an hour ago: past the watcher's settle time
        os.utime(f, (time.time() - 3600, time.time() - 3600))
    watcher = serve_module.keep_current(str(data), dict(os.environ, **{CACHE_ENV: str(cache)}))
    manifest = model_directory(str(data), cache) / "manifest.json"
    for _ in range(600):
        if manifest.exists() or watcher.poll() is not None:
            break
        time.sleep(0.1)
    serve_module.stop_process(watcher)
    assert watcher.returncode == 130
    assert manifest.exists()
    con, _ = connect(data, model_cache=cache)
    assert con.build().stats["built"] == 0
