"""The UI and the CLI show one number for one figure, on the same data set: amplification
(receiver attempts per logical request) overall and per route, attempts per request per
layer, and the counts the pages and the findings give for the same requests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from retryscope.cli import main
from tests.dashboards.conftest import metrics, open_page, table


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    capsys.readouterr()
    assert main(list(args)) == 0
    return capsys.readouterr().out


@pytest.fixture
def report(ui_data: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    shown: dict[str, object] = json.loads(_cli(capsys, "report", str(ui_data), "--format", "json"))
    return shown


def test_ui_and_cli_show_the_same_amplification(
    app: AppTest, ui_data: Path, report: dict[str, object], capsys: pytest.CaptureFixture[str]
) -> None:
    text = _cli(capsys, "report", str(ui_data))
    routes = report["routes"]
    assert isinstance(routes, list)
    cli = {r["route_id"]: r["amplification_ratio"] for r in routes}
    # on this data the primary route's attempts at every layer per request differ from its
    # receiver attempts per request, so the two definitions cannot pass for one another
    primary = next(r for r in routes if r["route_id"] == "primary")
    assert primary["attempts"] != primary["receiver_attempts"]

    assert metrics(app)["Amplification"] == f"{report['amplification_ratio']:.2f}×"  # Overview
    open_page(app, "amplification")
    assert metrics(app)["Amplification"] == f"{report['amplification_ratio']:.2f}×"
    by_route, by_layer = table(app, 0), table(app, 1)
    ui = dict(zip(by_route["value"], by_route["amplification_ratio"], strict=True))
    assert ui == pytest.approx(cli)
    section = text.split("\nROUTES\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert len(section) == len(cli)
    for (route, ratio), line in zip(cli.items(), section, strict=True):
        assert line.strip().startswith(route)
        assert f"x{ratio:.2f}," in line
    amplification = report["amplification"]
    assert isinstance(amplification, dict)
    layers = {r["layer"]: r["attempts_per_request"] for r in amplification["by_layer"]}
    assert dict(zip(by_layer["value"], by_layer["attempts_per_request"], strict=True)) == (
        pytest.approx(layers)
    )
    assert layers["harness"] > 1  # the harness multiplies though it reaches no receiver


def test_pages_and_findings_count_the_same_requests(
    app: AppTest, report: dict[str, object]
) -> None:
    violations = report["violations"]
    fallback, deadline = report["fallback"], report["deadline"]
    assert isinstance(violations, dict)
    assert isinstance(fallback, dict)
    assert isinstance(deadline, dict)
    assert violations["late_success"] == deadline["late_successes"] == 1
    assert violations["deadline_exhausted"] == report["deadline_exhausted"] == 1
    assert violations["degraded_fallback"] == fallback["degraded_fallbacks"] == 1
    assert violations["fallback_boundary_widening"] == fallback["boundary_widened_requests"]
    open_page(app, "deadlines")
    assert metrics(app)["Late successes"] == str(deadline["late_successes"])
    open_page(app, "fallbacks")
    shown = metrics(app)
    assert shown["Degraded"] == str(violations["degraded_fallback"])
    assert shown["Incompatible"] == str(violations["fallback_capability_mismatch"])
    open_page(app, "findings")
    found = table(app)
    assert (found["rule_id"] == "late_success").sum() == deadline["late_successes"]
