"""The live instruments through the real Prometheus exporter, scraped over HTTP.

``opentelemetry-exporter-prometheus`` (the ``prometheus`` extra) serves a MeterProvider's
metrics on 127.0.0.1; the scrape holds exactly the catalog's Prometheus names with the
figures the in-memory reader collects. Zero-code: ``opentelemetry-instrument`` with the
``retryscope`` configurator and ``OTEL_METRICS_EXPORTER=prometheus`` serves them from an
application process, and ``RETRYSCOPE_METRICS=off`` leaves them out.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.parser import text_string_to_metric_families

from retryscope.instrumentation import AttemptMetricsProcessor, MetricsConfig
from retryscope.instrumentation.metrics import INSTRUMENTS, prometheus_label, prometheus_names
from retryscope.instrumentation.metrics import _instruments as i
from tests.metrics.support import collected, live_figures
from tests.recorder import Recorder
from tests.test_analytics_amplification import _nested
from tests.test_analytics_cost_effectiveness import _costs
from tests.test_analytics_deadline import _fixture as _deadlines
from tests.test_analytics_fallback import _fixture as _fallbacks
from tests.test_analytics_violations import _early_retry

INSTRUMENT = Path(sys.executable).with_name("opentelemetry-instrument")


def _scrape(port: int) -> dict[str, list[tuple[dict[str, str], float]]]:
    """The retryscope samples of one scrape: series name → (labels, value)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode("utf-8")
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.startswith("retryscope_"):
                samples.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return samples


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[int, InMemoryMetricReader, Recorder]]:
    """A MeterProvider read by a Prometheus exporter on 127.0.0.1 and an in-memory reader,
    recording traffic that exercises every instrument."""
    registry = CollectorRegistry()
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    memory = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry), memory])
    recorder = Recorder(tmp_path / "data")
    recorder.provider.add_span_processor(
        AttemptMetricsProcessor(meter_provider=meters, config=MetricsConfig())
    )
    for scenario in (_nested, _deadlines, _fallbacks, _costs, _early_retry):
        scenario(recorder)
    try:
        yield server.server_port, memory, recorder
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
        meters.shutdown()


def test_the_scrape_holds_the_catalogs_names_and_labels(
    served: tuple[int, InMemoryMetricReader, Recorder],
) -> None:
    port, _, _ = served
    samples = _scrape(port)
    expected = {name for inst in INSTRUMENTS for name in prometheus_names(inst)}
    assert set(samples) == expected
    scope_labels = {"otel_scope_name", "otel_scope_version", "otel_scope_schema_url", "le"}
    for inst in INSTRUMENTS:
        allowed = {prometheus_label(key) for key in inst.attributes} | scope_labels
        for name in prometheus_names(inst):
            for labels, _ in samples[name]:
                assert set(labels) <= allowed, (name, labels)
                assert labels["otel_scope_name"] == "retryscope"


def test_the_scrape_holds_the_figures_the_sdk_collects(
    served: tuple[int, InMemoryMetricReader, Recorder],
) -> None:
    port, memory, _ = served
    samples = _scrape(port)
    live = live_figures(collected(memory))

    def total(inst: i.Instrument, suffix: str = "", **labels: str) -> float:
        name = prometheus_names(inst)[0] if not suffix else prometheus_names(inst)[0] + suffix
        return sum(v for got, v in samples[name] if labels.items() <= got.items())

    assert total(i.ATTEMPTS) == live["physical_attempts"] == 37
    assert total(i.SENDS) == live["receiver_attempts"]
    assert total(i.SENDS, retryscope_send_resend="true") == live["resends"]
    assert total(i.LOGICAL_REQUESTS) == live["logical_requests"]
    per_request = prometheus_names(i.ATTEMPTS_PER_REQUEST)
    assert sum(v for _, v in samples[per_request[2]]) == live["histogram_requests"]
    assert sum(v for _, v in samples[per_request[1]]) == live["histogram_attempts"]
    assert total(i.DEADLINE_EXHAUSTED) == live["deadline_exhausted"] == 2
    assert total(i.FALLBACKS) == live["requests_with_fallback"] == 5
    assert total(i.BOUNDARY_WIDENED) == live["boundary_widened_requests"] == 1
    assert total(i.NOT_BEFORE_VIOLATIONS) == live["not_before_ignored"] == 1
    assert total(i.COST, retryscope_cost_wasted="true") == live["cost_wasted"]["USD"] == 1200


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


APP = """
import sys
import retryscope

with retryscope.logical_request(operation="chat", tenant="acme", retry_owner="harness") as req:
    with req.attempt(route="primary", layer="harness") as attempt:
        attempt.set_outcome("rate_limited")
    with req.attempt(route="primary", layer="harness") as attempt:
        attempt.set_backoff(delay_ms=200)
        attempt.set_outcome("success")
print("ready", flush=True)
sys.stdin.readline()
"""


def _zero_code(tmp_path: Path, **extra: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Run APP under opentelemetry-instrument with the Prometheus metrics exporter; scrape it
    once it has recorded its request."""
    app = tmp_path / "app.py"
    app.write_text(APP)
    port = _free_port()
    env = {
        **os.environ,
        "OTEL_PYTHON_CONFIGURATOR": "retryscope",
        "OTEL_TRACES_EXPORTER": "none",
        "OTEL_METRICS_EXPORTER": "prometheus",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_EXPORTER_PROMETHEUS_HOST": "127.0.0.1",
        "OTEL_EXPORTER_PROMETHEUS_PORT": str(port),
        **extra,
    }
    with subprocess.Popen(
        [str(INSTRUMENT), sys.executable, str(app)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None
            assert proc.stdin is not None
            line = proc.stdout.readline()
            assert line.strip() == "ready", proc.stderr.read() if proc.stderr else line
            samples = _scrape(port)
            proc.stdin.write("\n")
            proc.stdin.flush()
            assert proc.wait(timeout=60) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
    return samples


@pytest.mark.skipif(not INSTRUMENT.exists(), reason="opentelemetry-instrument not installed")
def test_zero_code_serves_the_instruments(tmp_path: Path) -> None:
    samples = _zero_code(tmp_path)
    attempts = {
        labels["retryscope_attempt_retry"]: value
        for labels, value in samples[prometheus_names(i.ATTEMPTS)[0]]
    }
    assert attempts == {"false": 1.0, "true": 1.0}
    assert samples[prometheus_names(i.BACKOFF_DELAY)[2]][0][1] == 1.0


@pytest.mark.skipif(not INSTRUMENT.exists(), reason="opentelemetry-instrument not installed")
def test_zero_code_metrics_switched_off(tmp_path: Path) -> None:
    assert _zero_code(tmp_path, RETRYSCOPE_METRICS="off") == {}
