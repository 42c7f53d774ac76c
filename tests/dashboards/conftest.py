"""Fixtures of the UI tests: the known data set (tests/ui_fixture.py) and AppTest helpers."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pyarrow as pa
import pytest
from streamlit.testing.v1 import AppTest

from retryscope.analytics.model._cache import CACHE_ENV
from retryscope.dashboards.serve import APP, DATA_ENV, TRACE_URL_ENV
from tests import ui_fixture


@pytest.fixture(scope="session")
def ui_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ui_fixture.build(tmp_path_factory.mktemp("ui") / "spans")


def start_app(
    data: Path, monkeypatch: pytest.MonkeyPatch, *, model_cache: Path | None = None
) -> AppTest:
    """The app over ``data`` (its model cached in ``model_cache``), after its first run
    (Overview)."""
    monkeypatch.setenv(DATA_ENV, str(data))
    monkeypatch.delenv(TRACE_URL_ENV, raising=False)
    if model_cache is None:
        monkeypatch.delenv(CACHE_ENV, raising=False)
    else:
        monkeypatch.setenv(CACHE_ENV, str(model_cache))
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    assert not at.exception, at.exception
    return at


@pytest.fixture
def app(ui_data: Path, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    """The app over the known data set, after its first run (Overview)."""
    return start_app(ui_data, monkeypatch)


def open_page(at: AppTest, page: str) -> AppTest:
    at.switch_page(f"views/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


_ESCAPED = re.compile(r"\\([!-/:-@\[-`{-~])")
_CODE = re.compile(r"(?<!\\)(`+) ?(.*?) ?\1")


def rendered(markdown: str) -> str:
    """The text a message's markdown shows (its escapes and code spans undone): what a
    reader sees of the values the page echoes."""
    return _ESCAPED.sub(r"\1", _CODE.sub(r"\2", markdown))


def metrics(at: AppTest) -> dict[str, str]:
    """The KPI cards: label → the value they show."""
    return {m.label: rendered(m.value) for m in at.metric}


def deltas(at: AppTest) -> dict[str, str | None]:
    return {m.label: (m.delta or None) for m in at.metric}


def select(at: AppTest, key: str, value: Any) -> AppTest:
    at.selectbox(key=key).set_value(value).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def type_text(at: AppTest, key: str, text: str) -> AppTest:
    at.text_input(key=key).input(text).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def charts(at: AppTest) -> list[tuple[dict[str, Any], dict[str, pa.Table]]]:
    """Every Altair chart shown: its Vega-Lite spec and its data sets (by name)."""
    out = []
    for element in at.get("vega_lite_chart"):
        proto = element.proto
        data = {d.name: pa.ipc.open_stream(d.data.data).read_all() for d in proto.datasets}
        out.append((json.loads(proto.spec), data))
    return out


def subheaders(at: AppTest) -> list[str]:
    return [s.value for s in at.subheader]


def links(at: AppTest) -> dict[str, tuple[str, dict[str, str]]]:
    """Every ``st.page_link`` shown: label → (target page url path, query parameters)."""
    out = {}
    for link in at.page_link:
        query = {k: v[-1] for k, v in parse_qs(link.proto.query_string).items()}
        out[link.proto.label] = (link.proto.page, query)
    return out


def kpi_links(at: AppTest) -> dict[str, dict[str, str]]:
    """The query each KPI card's link opens the Requests explorer with, by KPI label (the
    cards' metrics and links come in the same order)."""
    cards = [m.label for m in at.metric]
    shown = [link for link in at.page_link if link.proto.label == "Show requests"]
    helps = {link.proto.help.removeprefix("Requests behind "): link for link in shown}
    out = {}
    for label in cards:
        link = helps.get(label)
        if link is not None:
            assert link.proto.page == "requests"
            out[label] = {k: v[-1] for k, v in parse_qs(link.proto.query_string).items()}
    return out


PAGE_SCRIPTS = {"": "overview", "requests": "requests", "request": "request"}


def follow(at: AppTest, page: str, query: dict[str, str]) -> AppTest:
    """Open ``page`` (a url path) with ``query`` as a link does: the URL holds exactly
    ``query``."""
    at.query_params.clear()
    at.query_params.update(query)
    at.switch_page(f"views/{PAGE_SCRIPTS.get(page, page)}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def select_row(at: AppTest, key: str, row: int) -> AppTest:
    """Select row ``row`` of the ``st.dataframe`` with ``key`` (as a click on it does)."""
    at.session_state[key] = {"selection": {"rows": [row], "columns": [], "cells": []}}
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def select_chart(at: AppTest, key: str, selection: dict[str, Any]) -> AppTest:
    """Make the selections ``selection`` (param name → value) on the chart with ``key``
    (as a click or a brush in the browser does)."""
    at.session_state[key] = {"selection": selection}
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def table(at: AppTest, index: int = 0) -> Any:
    """The data of the ``index``-th ``st.dataframe`` shown."""
    return at.dataframe[index].value
