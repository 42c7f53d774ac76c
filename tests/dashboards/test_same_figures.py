"""The UI and the CLI show one number for one figure, on the same data set: retry
amplification (receiver attempts per distinct operation) and sends per request overall and
per route, attempts per request per layer, and the counts the pages and the findings give
for the same requests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from retryscope.cli import main
from tests import ui_fixture
from tests.dashboards.conftest import follow, kpi_links, metrics, open_page, start_app, table


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

    for page in ("overview", "amplification"):
        open_page(app, page)
        shown = metrics(app)
        assert shown["Retry amplification"] == f"{report['amplification_ratio']:.2f}×"
        assert shown["Sends / request"] == f"{report['sends_per_request']:.2f}×"
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


def test_retry_amplification_divides_by_distinct_operations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Distinct calls are no retries: the Overview's two figures are the report's and
    differ, and each KPI opens the requests it counts (only the resent one repeated)."""
    data = ui_fixture.build_operations(tmp_path / "spans")
    report = json.loads(_cli(capsys, "report", str(data), "--format", "json"))
    assert (report["receiver_attempts"], report["operations"]) == (4, 3)
    at = start_app(data, monkeypatch)
    shown = metrics(at)
    assert shown["Retry amplification"] == f"{report['amplification_ratio']:.2f}×" == "1.33×"
    assert shown["Sends / request"] == f"{report['sends_per_request']:.2f}×" == "2.00×"
    links = kpi_links(at)
    follow(at, "requests", links["Retry amplification"])
    rows = table(at)
    assert rows[["logical_request_id", "excess_attempts", "amplification_ratio"]].to_dict(
        "records"
    ) == [{"logical_request_id": "resent", "excess_attempts": 1, "amplification_ratio": 2.0}]
    open_page(at, "overview")
    follow(at, "requests", links["Sends / request"])
    rows = table(at)
    assert dict(zip(rows["logical_request_id"], rows["amplification_ratio"], strict=True)) == {
        "multi": 1.0,
        "resent": 2.0,
    }
    assert dict(zip(rows["logical_request_id"], rows["operations"], strict=True)) == {
        "multi": 2,
        "resent": 1,
    }
    follow(at, "request", {"id": "multi"})
    shown = metrics(at)
    assert (shown["Receiver attempts"], shown["Retry amplification"]) == ("2", "1.00×")
    assert next(m for m in at.metric if m.label == "Retry amplification").delta == (
        "2 distinct operations"
    )
    sends = table(at, -1)  # the attempts table (no findings table before it here)
    sends = sends[sends["layer"] == "transport"]
    assert list(sends["attempt_ordinal"]) == ["1", "2"]
    assert list(sends["operation_ordinal"]) == ["1", "2"]  # two calls, neither a retry
    follow(at, "request", {"id": "resent"})
    assert metrics(at)["Retry amplification"] == "2.00×"
    sends = table(at, -1)  # the attempts table (no findings table before it here)
    assert list(sends[sends["layer"] == "transport"]["operation_ordinal"]) == ["1", "1"]
    open_page(at, "amplification")
    (primary,) = table(at, 0).to_dict("records")
    (route,) = report["routes"]
    assert (primary["amplification_ratio"], primary["sends_per_request"]) == pytest.approx(
        (route["amplification_ratio"], route["sends_per_request"])
    )
    assert primary["excess_attempts"] == 1
