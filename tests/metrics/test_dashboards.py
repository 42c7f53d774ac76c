"""The Grafana dashboard and the Prometheus rules name only what the instruments export.

Every ``retryscope_*`` name in a query is a series or a label of an instrument of the
catalog (as the OpenTelemetry Prometheus exporter names them: ``test_prometheus.py``
checks that against a real scrape), every label belongs to a metric of its query, every
instrument is on the dashboard, and the alert thresholds are the report's. With
``promtool`` (``make prometheus-deps``) the rules are checked and their alerts unit-tested.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from retryscope.analytics._metrics import DEFAULT_THRESHOLDS
from retryscope.instrumentation.metrics import (
    INSTRUMENTS,
    Dimension,
    prometheus_label,
    prometheus_names,
)

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "dashboards" / "grafana" / "retryscope.json"
RULES = ROOT / "dashboards" / "prometheus" / "retryscope-rules.yaml"
RULES_TEST = Path(__file__).with_name("retryscope-rules-test.yaml")
SERIES = {name: inst for inst in INSTRUMENTS for name in prometheus_names(inst)}
OPTIONAL_LABELS = {prometheus_label(d.key) for d in Dimension}
LABELS = {
    name: {prometheus_label(k) for k in inst.attributes} | OPTIONAL_LABELS
    for name, inst in SERIES.items()
}
ALL_LABELS = set().union(*LABELS.values())
TOKEN = re.compile(r"\bretryscope_[a-z_]+")
PROMTOOL = shutil.which("promtool")


def _dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return data


def _rules() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return data


def _queries() -> Iterator[tuple[str, str]]:
    """(where, PromQL) of every query of the dashboard and the rules."""
    dash = _dashboard()
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            yield f"panel {panel['title']!r}", target["expr"]
    for variable in dash["templating"]["list"]:
        if variable["type"] == "query":
            yield f"variable {variable['name']!r}", variable["definition"]
    for group in _rules()["groups"]:
        for rule in group["rules"]:
            yield f"rule {rule.get('record') or rule.get('alert')}", rule["expr"]


def test_every_name_in_a_query_is_a_series_or_label_of_an_instrument() -> None:
    for where, expr in _queries():
        tokens = set(TOKEN.findall(expr))
        unknown = tokens - set(SERIES) - ALL_LABELS
        assert not unknown, f"{where}: {sorted(unknown)} are not exported by any instrument"
        metrics = tokens & set(SERIES)
        labels = tokens - metrics
        constant = expr == "vector($retry_budget)"  # the budget line drawn beside a ratio
        assert metrics or "retryscope:" in expr or constant, f"{where} reads no retryscope series"
        for label in labels:
            assert any(label in LABELS[m] for m in metrics), (
                f"{where}: label {label} belongs to none of {sorted(metrics)}"
            )


def test_every_instrument_is_on_the_dashboard() -> None:
    shown = "\n".join(expr for where, expr in _queries() if where.startswith("panel"))
    missing = [i.name for i in INSTRUMENTS if not any(n in shown for n in prometheus_names(i))]
    assert missing == []


def test_recording_rules_are_used_and_defined_once() -> None:
    rules = [r for g in _rules()["groups"] for r in g["rules"]]
    recorded = [r["record"] for r in rules if "record" in r]
    assert len(recorded) == len(set(recorded))
    alerts = " ".join(r["expr"] for r in rules if "alert" in r)
    assert all(name in alerts for name in recorded)


def test_the_alerts_the_issue_names_exist_with_the_reports_retry_budget() -> None:
    alerts = {r["alert"]: r for g in _rules()["groups"] for r in g["rules"] if "alert" in r}
    assert set(alerts) == {
        "RetryscopeAmplificationHigh",
        "RetryscopeRetryBudgetExceeded",
        "RetryscopeDeadlineExhaustion",
        "RetryscopeDataBoundaryWidened",
    }
    storm = re.fullmatch(
        r"retryscope:retry_fraction:1m > ([0-9.]+) and on\(\) retryscope:resends:1m > ([0-9]+)",
        alerts["RetryscopeRetryBudgetExceeded"]["expr"],
    )
    assert storm is not None
    assert float(storm[1]) == DEFAULT_THRESHOLDS.retry_budget
    assert int(storm[2]) == DEFAULT_THRESHOLDS.retry_budget_min_retries
    constant = next(v for v in _dashboard()["templating"]["list"] if v["name"] == "retry_budget")
    assert float(constant["query"]) == DEFAULT_THRESHOLDS.retry_budget
    assert alerts["RetryscopeDataBoundaryWidened"]["expr"].endswith("> 0")
    for alert in alerts.values():
        assert alert["labels"]["severity"] in {"warning", "critical"}
        assert alert["annotations"]["summary"]


def test_the_dashboard_is_laid_out_on_one_datasource() -> None:
    dash = _dashboard()
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dash["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0, panel["title"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        for target in panel.get("targets", []):
            assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    cells = {
        (x, y)
        for p in dash["panels"]
        for x in range(p["gridPos"]["x"], p["gridPos"]["x"] + p["gridPos"]["w"])
        for y in range(p["gridPos"]["y"], p["gridPos"]["y"] + p["gridPos"]["h"])
    }
    area = sum(p["gridPos"]["w"] * p["gridPos"]["h"] for p in dash["panels"])
    assert len(cells) == area, "panels overlap"


def test_the_files_ship_as_package_data() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    data = config["package-data"]["retryscope.dashboards"]
    root = ROOT / "dashboards"
    for path in (DASHBOARD, RULES):
        assert any(path.match(str(root / pattern)) for pattern in data), path


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (make prometheus-deps)")
def test_promtool_checks_the_rules() -> None:
    assert PROMTOOL is not None
    done = subprocess.run(
        [PROMTOOL, "check", "rules", str(RULES)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 8 rules found" in done.stdout + done.stderr


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (make prometheus-deps)")
def test_promtool_fires_the_alerts_on_synthetic_series(tmp_path: Path) -> None:
    assert PROMTOOL is not None
    shutil.copy(RULES, tmp_path / RULES.name)
    shutil.copy(RULES_TEST, tmp_path / RULES_TEST.name)
    done = subprocess.run(
        [PROMTOOL, "test", "rules", RULES_TEST.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
