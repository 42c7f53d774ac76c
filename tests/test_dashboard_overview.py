"""The Streamlit overview page, run with Streamlit's AppTest over real data."""

from __future__ import annotations

from pathlib import Path

import pytest
from retryscope.dashboards.serve import APP, DATA_ENV
from streamlit.testing.v1 import AppTest

from retryscope import logical_request

from .conftest import Pipeline


def _metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_overview_shows_the_report_figures(
    pipeline: Pipeline, clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(4):
        with logical_request(
            operation="chat", tracer_provider=pipeline.provider, clock=clock
        ) as req:
            with req.attempt("primary") as a:
                a.set_outcome("unavailable" if i < 2 else "success")
            if i < 2:
                with req.attempt("fallback", route_priority=1):
                    pass
    pipeline.flush()
    monkeypatch.setenv(DATA_ENV, str(pipeline.directory))
    at = AppTest.from_file(str(APP), default_timeout=30).run()
    assert not at.exception
    assert _metrics(at) == {
        "Logical requests": "4",
        "Physical attempts": "6",
        "Amplification": "1.50×",
        "Fallback rate": "50.0%",
        "Deadline exhausted": "0",
    }


def test_missing_and_empty_data_show_a_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DATA_ENV, str(tmp_path / "nope"))
    at = AppTest.from_file(str(APP), default_timeout=30).run()
    assert not at.exception
    assert "No data directory" in at.info[0].value
    monkeypatch.setenv(DATA_ENV, str(tmp_path))
    at = AppTest.from_file(str(APP), default_timeout=30).run()
    assert not at.exception
    assert "No span files" in at.info[0].value
