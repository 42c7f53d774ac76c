"""How the UI writes numbers: deltas Streamlit reads as decreases, percentage points,
milliseconds, money, readable evidence and redacted error text."""

from __future__ import annotations

import pandas as pd
import pytest
from streamlit.elements.metric import _determine_delta_color_and_direction
from streamlit.proto.Metric_pb2 import Metric

from retryscope.dashboards import _format as fmt

DOWN, UP = Metric.MetricDirection.DOWN, Metric.MetricDirection.UP
RED, GREEN = Metric.MetricColor.RED, Metric.MetricColor.GREEN


@pytest.mark.parametrize(
    ("delta", "direction", "inverse_colour"),
    [
        (fmt.delta_ratio(1.16, 2.40), DOWN, GREEN),  # amplification fell: good, arrow down
        (fmt.delta_ratio(2.40, 1.16), UP, RED),
        (fmt.delta_count(3, 8), DOWN, GREEN),
        (fmt.delta_pp(0.10, 0.32), DOWN, GREEN),
        (fmt.delta_pp(0.32, 0.10), UP, RED),
    ],
)
def test_a_decrease_points_down(delta: str | None, direction: int, inverse_colour: int) -> None:
    """Streamlit reads a leading ASCII ``-`` as a decrease (U+2212 as an increase)."""
    assert delta is not None
    assert "\u2212" not in delta
    shown = _determine_delta_color_and_direction("inverse", delta)
    assert (shown.direction, shown.color) == (direction, inverse_colour)


def test_deltas_and_their_units() -> None:
    assert fmt.delta_ratio(1.16, 2.40) == "-1.24×"
    assert fmt.delta_count(12, 7) == "+5"
    assert fmt.delta_pp(0.429, 0.0) == "+42.9 pp"  # a rate changes in percentage points
    assert fmt.delta_pp(0.10, 0.125) == "-2.5 pp"
    assert fmt.delta_count(None, 3) is None
    assert all(fmt.is_zero(d) for d in ("+0.0 pp", "+0", "+0.00×", None))
    assert not fmt.is_zero("-0.1 pp")


def test_units() -> None:
    assert fmt.ms(1461.0) == "1,461 ms"  # no ".0" on a count of milliseconds
    assert fmt.ms(3.25) == "3.2 ms"
    assert fmt.ms(12_345.0) == "12.3 s"
    assert fmt.ms(float("nan")) == fmt.ms(None) == "–"
    assert fmt.pct(0.3204) == "32.0%"
    assert fmt.pct(0.9688) == "96.9%"
    assert fmt.ratio(2.4) == "2.40×"
    assert fmt.count(1234567) == "1,234,567"
    assert fmt.money(1_051_600, "USD") == "$1.05"
    assert fmt.money(1_704, "USD") == "$0.0017"
    assert fmt.money(750_000, "USD") == "$0.75"
    assert fmt.money(1_000, "USD") == "$0.001"
    assert fmt.money(0, "USD") == "$0.00"
    assert fmt.money(2_500_000, "CHF") == "CHF 2.50"
    assert fmt.money(-1_000_000, "EUR") == "-€1.00"
    assert fmt.money(None, "USD") == "–"


def test_tables_get_headers_and_units() -> None:
    frame = pd.DataFrame(
        {
            "fallback_rate": [0.32, None],
            "logical_requests": [300, 4],
            "cost_micros": [1_704, None],
            "cost_currency": ["USD", None],
            "unused": [1, 2],
        }
    )
    shown, config = fmt.shown(
        frame,
        [
            fmt.Column("logical_requests", "Requests", fmt.Unit.COUNT),
            fmt.Column("fallback_rate", "Fallback rate", fmt.Unit.PCT),
            fmt.Column("cost_micros", "Cost", fmt.Unit.MONEY),
            fmt.Column("absent", "Absent"),
        ],
    )
    assert list(shown.columns) == ["logical_requests", "fallback_rate", "cost_micros"]
    assert shown["fallback_rate"].iloc[0] == pytest.approx(32.0)  # shown as 32.0%
    assert config["fallback_rate"]["label"] == "Fallback rate"
    assert config["fallback_rate"]["type_config"]["format"] == "%.1f%%"
    assert list(shown["cost_micros"]) == ["$0.0017", "–"]
    text, _ = fmt.shown(
        frame,
        [fmt.Column("fallback_rate", "Rate", fmt.Unit.PCT), fmt.Column("unused", "U")],
        as_text=True,
    )
    assert list(text["fallback_rate"]) == ["32.0%", "–"]  # never "None"


def test_evidence_reads_as_text() -> None:
    assert (
        fmt.evidence_text({"retry_fraction": 0.0654, "late_ms": 350.0, "layers": ["a", "b"]})
        == "retry fraction: 0.0654 · late ms: 350.0 · layers: a, b"
    )


@pytest.mark.parametrize(
    ("raw", "secret"),
    [
        ("POST https://svc:hunter2@api.example/v1 failed", "hunter2"),
        ("GET /v1?api_key=abc123def&model=x", "abc123def"),
        ("401: Authorization: Bearer eyJhbGciOi.J9x", "eyJhbGciOi"),
        ("invalid key sk-live-abcdef123456", "abcdef123456"),
    ],
)
def test_error_text_is_redacted(raw: str, secret: str) -> None:
    shown = fmt.redacted(raw)
    assert secret not in shown
    assert "REDACTED" in shown


def test_long_error_text_is_cut() -> None:
    shown = fmt.redacted("x" * 10_000)
    assert len(shown) == fmt.ERROR_MAX_CHARS + 2
    assert shown.endswith(" …")


def test_a_class_by_its_name_else_as_recorded() -> None:
    digest = "ab" * 32
    names = {digest: "generic-assistant/v0", "cheaper@v1": "Cheaper v1"}
    assert fmt.class_label(digest, names) == "generic-assistant/v0"
    assert fmt.class_detail(digest, names) == f"generic-assistant/v0 ({digest})"
    assert fmt.class_label("cd" * 32, names) == "cd" * 6  # a digest: its first 12 digits
    assert fmt.class_label("cd" * 32 + "0", names) == "cd" * 32 + "0"  # not a digest: whole
    assert fmt.class_label("cheaper@v2", names) == fmt.class_detail("cheaper@v2", names)
    assert fmt.class_label(None, names) is fmt.class_detail(pd.NA, names) is None
    evidence = {"route_id": digest, "route_behavior_class": digest, "required_behavior_class": 1}
    assert fmt.evidence_text(evidence, names) == (
        f"route id: {digest} · route behavior class: generic-assistant/v0 ({digest}) · "
        "required behavior class: 1"
    )
    assert fmt.evidence_text(evidence) == fmt.evidence_text(evidence, {})  # no names: as is
