"""The UI and the CLI show one number for one figure: amplification (receiver attempts per
logical request) overall and per route, on the same data set."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from retryscope.cli import main
from tests.dashboards.conftest import metrics, open_page


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    capsys.readouterr()
    assert main(list(args)) == 0
    return capsys.readouterr().out


def test_ui_and_cli_show_the_same_amplification(
    app: AppTest, ui_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = json.loads(_cli(capsys, "report", str(ui_data), "--format", "json"))
    text = _cli(capsys, "report", str(ui_data))
    cli = {r["route_id"]: r["amplification_ratio"] for r in report["routes"]}
    # on this data the primary route's attempts at every layer per request differ from its
    # receiver attempts per request, so the two definitions cannot pass for one another
    primary = next(r for r in report["routes"] if r["route_id"] == "primary")
    assert primary["attempts"] != primary["receiver_attempts"]

    assert metrics(app)["Amplification"] == f"{report['amplification_ratio']:.2f}×"  # Overview
    open_page(app, "amplification")
    assert metrics(app)["Amplification"] == f"{report['amplification_ratio']:.2f}×"
    _, by_route, _ = (d.value for d in app.dataframe)
    ui = {
        route: ratio
        for route, ratio in zip(by_route["route"], by_route["amplification_ratio"], strict=True)
        if route is not None
    }
    assert ui == pytest.approx(cli)
    section = text.split("\nROUTES\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert len(section) == len(cli)
    for (route, ratio), line in zip(cli.items(), section, strict=True):
        assert line.strip().startswith(route)
        assert f"x{ratio:.2f}," in line
