"""Foundation acceptance: real httpx + contrib instrumentation, privacy, temp files, CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

from retryscope import logical_request
from retryscope.analytics import build_report, connect, discover

from .conftest import Pipeline, loopback_http_server


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", 0))
        self.rfile.read(length)
        self.server.seen_headers.append(dict(self.headers))  # type: ignore[attr-defined]
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    with loopback_http_server(_Handler, seen_headers=[]) as srv:
        yield srv


SECRET_KEY = "idem-key-7f3a-SECRET-do-not-log"
SECRET_PROMPT = "my bank password is hunter2-PROMPT"


def test_httpx_span_inside_attempt_carries_request_and_ordinal(
    pipeline: Pipeline, server: ThreadingHTTPServer
) -> None:
    url = f"http://127.0.0.1:{server.server_address[1]}/v1/chat"
    instrumentor = HTTPXClientInstrumentor()
    instrumentor.instrument(tracer_provider=pipeline.provider)
    try:
        with logical_request(
            operation="chat",
            tenant="acme",
            idempotency_key=SECRET_KEY,
            request={"prompt": SECRET_PROMPT},
            tracer_provider=pipeline.provider,
        ) as req:
            with req.attempt("primary") as a, httpx.Client() as client:
                a.set_outcome("rate_limited")
            with req.attempt("primary"), httpx.Client() as client:
                client.post(url, json={"prompt": SECRET_PROMPT})
    finally:
        instrumentor.uninstrument()
    con = pipeline.connect()
    # The processor classifies the contrib HTTP span as a transport attempt (issue 4): its
    # own transport ordinal, the enclosing harness attempt's ordinal as its parent.
    rows = con.execute(
        "SELECT logical_request_id, parent_attempt_ordinal, parent_layer, attempt_ordinal,"
        " route_id, http_status_code, http_method, idempotency_digest IS NOT NULL FROM spans"
        " WHERE kind = 'CLIENT' AND span_role = 'attempt' AND layer = 'transport'"
    ).fetchall()
    assert rows == [(req.id, 2, "harness", 1, "primary", 200, "POST", True)]
    # nothing of ours leaked into the outgoing request's headers
    (headers,) = server.seen_headers  # type: ignore[attr-defined]
    assert not any("retryscope" in (k + v).lower() for k, v in headers.items())
    assert "baggage" not in {k.lower() for k in headers}

    written = b"".join(p.read_bytes() for p in pipeline.directory.rglob("*") if p.is_file())
    assert written
    for secret in (SECRET_KEY, SECRET_PROMPT, "hunter2"):
        assert secret.encode() not in written


def test_unfinished_temp_file_is_never_read(pipeline: Pipeline, clock) -> None:
    with logical_request(operation="chat", tracer_provider=pipeline.provider, clock=clock) as req:
        with req.attempt("r"):
            pass
    pipeline.flush()
    (done,) = pipeline.directory.rglob("*.parquet")  # under its date=/hour= partition
    # a writer that died mid-file leaves only its hidden temporary name behind
    partial = done.parent / f".{done.name}.inprogress"
    partial.write_bytes(done.read_bytes()[: done.stat().st_size // 2])
    (pipeline.directory / "nested").mkdir()
    (pipeline.directory / "nested" / ".x.parquet.inprogress").write_bytes(b"PAR1")
    dataset = discover(pipeline.directory)
    assert dataset.files == (str(done),)
    assert dataset.skipped == ()
    con, _ = connect(dataset)
    assert build_report(con)["physical_attempts"] == 1


def test_corrupt_file_is_named_and_skipped(pipeline: Pipeline, clock) -> None:
    with logical_request(operation="chat", tracer_provider=pipeline.provider, clock=clock) as req:
        with req.attempt("r"):
            pass
    pipeline.flush()
    (pipeline.directory / "zero.parquet").write_bytes(b"")
    (pipeline.directory / "garbage.parquet").write_bytes(b"PAR1 not really")
    dataset = discover(pipeline.directory)
    assert sorted(Path(s.path).name for s in dataset.skipped) == ["garbage.parquet", "zero.parquet"]
    con, _ = connect(dataset)
    assert build_report(con)["logical_requests"] == 1


def test_empty_and_missing_data(tmp_path: Path) -> None:
    con, _ = connect(tmp_path)
    report = build_report(con)
    assert report["logical_requests"] == 0
    assert report["amplification_ratio"] == 0.0
    with pytest.raises(FileNotFoundError, match="no audit data"):
        discover(tmp_path / "missing")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "retryscope.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_demo_no_ui_writes_data_and_report_json_is_stable(tmp_path: Path) -> None:
    out = tmp_path / "data"
    done = _cli("demo", "--out", str(out), "--no-ui", "--requests", "200", "--seed", "3")
    assert done.returncode == 0, done.stderr
    assert "retry amplification" in done.stdout
    report = json.loads(_cli("report", str(out), "--format", "json").stdout)
    assert report["logical_requests"] == 200
    assert report["physical_attempts"] > 200
    assert {
        "report_version",
        "logical_requests",
        "physical_attempts",
        "amplification_ratio",
        "completed",
        "requests_with_fallback",
        "fallback_rate",
        "deadline_exhausted",
        "deadline_exhausted_rate",
        "terminals",
        "routes",
    } <= report.keys()
    # sends per request = what the receiver saw per logical request, amplification = per
    # distinct operation; the demo's transport attempts sit beneath harness attempts, so
    # physical attempts count both layers
    assert report["sends_per_request"] == pytest.approx(
        report["receiver_attempts"] / report["logical_requests"]
    )
    assert report["amplification_ratio"] == pytest.approx(
        report["receiver_attempts"] / report["operations"]
    )
    assert report["physical_attempts"] > report["receiver_attempts"]
    assert report["requests_with_fallback"] > 0
    assert report["deadline_exhausted"] > 0
    # a second run replaces the first run's files instead of doubling the data
    again = _cli("demo", "--out", str(out), "--no-ui", "--requests", "200", "--seed", "3")
    assert again.returncode == 0, again.stderr
    assert json.loads(_cli("report", str(out), "--format", "json").stdout) == report


def test_demo_refuses_to_clear_a_foreign_directory(tmp_path: Path) -> None:
    (tmp_path / "precious.txt").write_text("keep me")
    done = _cli("demo", "--out", str(tmp_path), "--no-ui", "--requests", "5")
    assert done.returncode == 2
    assert "not written by `retryscope demo`" in done.stderr
    assert (tmp_path / "precious.txt").read_text() == "keep me"
