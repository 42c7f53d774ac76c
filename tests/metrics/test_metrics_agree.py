"""The live instruments equal the Parquet report on the same traffic.

Each scenario of the analytics tests, and the demo's traffic, runs once through a real
TracerProvider with the stamping processor, the Parquet exporter and the metrics processor
recording into a real MeterProvider; the figures an in-memory reader collects must be the
report's, exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from retryscope.analytics import connect
from retryscope.cli import build_parser
from retryscope.demo._run import generate
from tests.metrics.support import Metered, differences, live_figures, report_figures
from tests.recorder import Recorder
from tests.test_analytics_amplification import _nested
from tests.test_analytics_cost_effectiveness import _costs, _effectiveness_fixture
from tests.test_analytics_deadline import _fixture as _deadlines
from tests.test_analytics_fallback import _fixture as _fallbacks
from tests.test_analytics_load import _hedged, _storm
from tests.test_analytics_randomized import _generate
from tests.test_analytics_violations import _early_retry

DEMO_REQUESTS = build_parser().parse_args(["demo"]).requests

SCENARIOS: dict[str, Callable[[Recorder], object]] = {
    "nested retries and HTTP sends": _nested,
    "deadlines": _deadlines,
    "fallbacks": _fallbacks,
    "costs": _costs,
    "retry effectiveness": _effectiveness_fixture,
    "synchronized retries": _storm,
    "hedges, breakers, opaque ownership": _hedged,
    "a retry before its not_before": _early_retry,
    "randomized, seed 1": lambda rec: _generate(rec, 300, 1),
    "randomized, seed 2": lambda rec: _generate(rec, 300, 2),
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_live_figures_equal_the_report(tmp_path: Path, scenario: str) -> None:
    recorder = Recorder(tmp_path / "data")
    metered = Metered.on(recorder.provider)
    SCENARIOS[scenario](recorder)
    live = live_figures(metered.points())
    report = report_figures(recorder.connect())
    assert list(differences(live, report)) == []
    assert metered.processor.errors == 0
    assert metered.processor.open_requests() == 0
    assert live["logical_requests"] > 0


def test_live_figures_equal_the_report_on_the_demo_traffic(tmp_path: Path) -> None:
    """``retryscope demo``'s traffic (its default 300 requests over the five scenarios)."""
    out = tmp_path / "demo"
    metered = Metered.on_meter_provider()
    generate(out, DEMO_REQUESTS, seed=7, progress=False, meter_provider=metered.meter_provider)
    con, _ = connect(out)
    live = live_figures(metered.points())
    report = report_figures(con)
    assert list(differences(live, report)) == []
    # the demo shows every kind of figure
    for name in (
        "resends",
        "nested_retry_requests",
        "requests_with_fallback",
        "boundary_widened_requests",
        "deadline_exhausted",
        "late_successes",
        "doomed_dispatches",
        "backoff_delay",
    ):
        assert live[name], name
