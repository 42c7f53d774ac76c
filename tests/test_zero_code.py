"""Zero-code: ``opentelemetry-instrument`` with the ``retryscope_parquet`` exporter and the
``retryscope`` configurator, in a real subprocess running a small app."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from retryscope.analytics import connect

from .export_support import run_ok

APP = """
import sys
from opentelemetry import trace
import retryscope

tracer = trace.get_tracer("zero_code_app")
with retryscope.logical_request(operation="chat", tenant="acme", idempotency_key="k-1",
                                request={"q": 1}, retry_owner="harness") as req:
    with req.attempt(route="primary", layer="harness") as attempt:
        with tracer.start_as_current_span("app.child"):
            pass
        attempt.set_outcome("success")
for i in range(int(sys.argv[1])):
    tracer.start_span(f"burst-{i}").end()
"""

INSTRUMENT = Path(sys.executable).with_name("opentelemetry-instrument")


def _run(tmp_path: Path, configurator: str, burst: int, **extra: str) -> Path:
    app = tmp_path / "app.py"
    app.write_text(APP)
    out = tmp_path / f"data-{configurator}"
    env = {
        **os.environ,
        "OTEL_TRACES_EXPORTER": "retryscope_parquet",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_PYTHON_CONFIGURATOR": configurator,
        "OTEL_SERVICE_NAME": "zero-code-app",
        "RETRYSCOPE_PARQUET_DIR": str(out),
        **extra,
    }
    run_ok([str(INSTRUMENT), sys.executable, str(app), str(burst)], env=env)
    return out


@pytest.mark.skipif(not INSTRUMENT.exists(), reason="opentelemetry-instrument not installed")
def test_exporter_and_configurator_entry_points(tmp_path: Path) -> None:
    out = _run(tmp_path, "retryscope", 0)
    con, dataset = connect(out)
    assert dataset.files
    rows = dict(
        con.sql(
            "SELECT name, logical_request_id FROM spans WHERE service_name = 'zero-code-app'"
        ).fetchall()
    )
    logical = next(v for k, v in rows.items() if k.startswith("logical_request"))
    assert logical
    assert rows["app.child"] == logical  # the configurator put the stamping processor first


@pytest.mark.skipif(not INSTRUMENT.exists(), reason="opentelemetry-instrument not installed")
def test_exporter_alone_with_the_standard_configurator(tmp_path: Path) -> None:
    out = _run(tmp_path, "configurator", 0)
    con, _ = connect(out)
    rows = dict(con.sql("SELECT name, logical_request_id FROM spans").fetchall())
    assert rows["app.child"] is None  # no stamping processor without the retryscope configurator
    assert any(k.startswith("logical_request") and v for k, v in rows.items())


@pytest.mark.skipif(not INSTRUMENT.exists(), reason="opentelemetry-instrument not installed")
def test_configurator_persists_queue_overflow_as_gaps(tmp_path: Path) -> None:
    burst = 5000
    out = _run(
        tmp_path,
        "retryscope",
        burst,
        OTEL_BSP_MAX_QUEUE_SIZE="16",
        OTEL_BSP_MAX_EXPORT_BATCH_SIZE="16",
        RETRYSCOPE_PARQUET_ROTATE_ROWS="64",
    )
    con, _ = connect(out)
    (kept,) = con.sql(
        "SELECT count(*) FROM spans WHERE span_role IS DISTINCT FROM 'telemetry_gap'"
    ).fetchall()[0]
    (lost,) = con.sql(
        "SELECT coalesce(sum(gap_dropped_spans), 0) FROM spans "
        "WHERE span_role = 'telemetry_gap' AND gap_reason = 'queue_overflow'"
    ).fetchall()[0]
    assert lost > 0
    assert kept + lost == burst + 3  # every span is either in the data set or counted lost
