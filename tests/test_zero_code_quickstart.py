"""The quick start: a real OpenAI (and Anthropic) client, in a process that never calls
retryscope, run under ``opentelemetry-instrument`` against the hit-counting fake provider
of ``examples/zero_code``. The report's figures equal the provider's truth:

* with the documented zero-code environment (retryscope's configurator and Parquet
  exporter);
* with no retryscope in the producing process at all — the contrib httpx and GenAI
  instrumentations exporting OTLP to a Collector stand-in on 127.0.0.1 that writes the
  Collector file exporter's ``proto`` format — after ``retryscope ingest``.
"""

from __future__ import annotations

import gzip
import os
import sys
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from retryscope.analytics import build_report, connect
from retryscope.cli import main as cli

from .conftest import loopback_http_server
from .export_support import run_ok

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "zero_code"
INSTRUMENT = Path(sys.executable).with_name("opentelemetry-instrument")
CALLS = 5

sys.path.insert(0, str(EXAMPLE))
from fake_provider import serve  # noqa: E402

sys.path.remove(str(EXAMPLE))

pytestmark = pytest.mark.skipif(not INSTRUMENT.exists(), reason="opentelemetry-instrument")


def _environment(provider_url: str, **otel: str) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "RETRYSCOPE_"))}
    return {
        **keep,
        "CALLS": str(CALLS),
        "OPENAI_BASE_URL": f"{provider_url}/v1",
        "OPENAI_API_KEY": "sk-fake",
        "ANTHROPIC_BASE_URL": provider_url,
        "ANTHROPIC_API_KEY": "sk-ant-fake",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_SERVICE_NAME": "quickstart",
        **otel,
    }


def _run_app(sdk: str, env: dict[str, str]) -> None:
    run_ok([str(INSTRUMENT), sys.executable, str(EXAMPLE / "app.py"), sdk], env=env)


def _figures(data: Path) -> dict[str, Any]:
    model, _ = connect(data)
    report = build_report(model)
    return {
        "logical_requests": report["logical_requests"],
        "implicit_requests": report["implicit_requests"],
        "receiver_attempts": report["receiver_attempts"],
        "amplification_ratio": report["amplification_ratio"],
        "hidden_attempts": report["amplification"]["hidden_attempts"],
        "completed": report["completed"],
    }


def _truth(hits: int) -> dict[str, Any]:
    """What the provider saw: CALLS calls, ``hits`` sends, every call answered at last."""
    return {
        "logical_requests": CALLS,
        "implicit_requests": CALLS,
        "receiver_attempts": hits,
        "amplification_ratio": hits / CALLS,
        "hidden_attempts": hits - CALLS,
        "completed": CALLS,
    }


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_zero_code_report_equals_the_providers_truth(sdk: str, tmp_path: Path) -> None:
    data = tmp_path / "data"
    with serve() as provider:
        env = _environment(
            provider.url,
            OTEL_PYTHON_CONFIGURATOR="retryscope",
            OTEL_TRACES_EXPORTER="retryscope_parquet",
            RETRYSCOPE_PARQUET_DIR=str(data),
        )
        _run_app(sdk, env)
        hits = provider.hits
    assert hits == 3 * CALLS  # 503, 503, 200 for each call
    assert _figures(data) == _truth(hits)


class _Collector(BaseHTTPRequestHandler):
    """An OTLP/HTTP receiver writing what it receives as the Collector's file exporter does
    with ``format: proto``: each export request behind a 4-byte big-endian length."""

    server: Any

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        with self.server.out.open("ab") as out:
            out.write(len(body).to_bytes(4, "big") + body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        return None


@pytest.fixture
def collector(tmp_path: Path) -> Iterator[ThreadingHTTPServer]:
    with loopback_http_server(_Collector, out=tmp_path / "collector" / "traces.pb") as server:
        server.out.parent.mkdir()  # type: ignore[attr-defined]
        yield server


def test_traces_without_retryscope_give_the_same_figures_after_ingest(
    tmp_path: Path, collector: ThreadingHTTPServer
) -> None:
    port = collector.server_address[1]
    with serve() as provider:
        env = _environment(
            provider.url,
            OTEL_PYTHON_CONFIGURATOR="configurator",  # the distro's, not retryscope's
            OTEL_PYTHON_DISABLED_INSTRUMENTATIONS="retryscope",
            OTEL_TRACES_EXPORTER="otlp",
            OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="http/protobuf",
            OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=f"http://127.0.0.1:{port}/v1/traces",
        )
        _run_app("openai", env)
        hits = provider.hits
    data = tmp_path / "data"
    assert cli(["ingest", str(collector.out), "--out", str(data)]) == 0  # type: ignore[attr-defined]
    model, _ = connect(data)
    ((scopes,),) = model.execute(
        "SELECT list(DISTINCT scope_name ORDER BY scope_name) FROM spans"
    ).fetchall()
    assert not any(s.startswith("retryscope") for s in scopes)  # plain spans only
    assert _figures(data) == _truth(hits)
