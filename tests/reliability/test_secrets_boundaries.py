"""Secrets and boundaries: what retryscope writes holds no raw idempotency key, prompt or API
key; its context leaves the process only when explicitly injected; its files are
owner-only. (The exporter's own umask test is tests/test_export_layout.py::
test_owner_only_permissions_whatever_the_umask; httpx Authorization headers and hooks are
covered by tests/instrumentation/test_privacy.py.)"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest
import requests
from opentelemetry import propagate
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
from opentelemetry.instrumentation.requests import RequestsInstrumentor
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.propagators.textmap import TextMapPropagator
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

import retryscope
from retryscope.analytics import build_report, connect
from retryscope.control._journal import Journal
from retryscope.demo._scenarios import idempotency_key, prompt_text
from retryscope.instrumentation import inject
from retryscope.instrumentation.integrations.httpx import RetryscopeTransport
from tests.conftest import loopback_http_server
from tests.reliability.support import audit

API_KEYS = {
    "OPENAI_API_KEY": "sk-proj-RELIABILITY-7Hq2xV9-do-not-record",
    "ANTHROPIC_API_KEY": "sk-ant-RELIABILITY-Zk31-do-not-record",
}
DEMO_REQUESTS = 40
DIGEST_KEY = "digest-key-RELIABILITY-0123456789"


def _owner_only(root: Path) -> list[str]:
    """Paths under ``root`` (and root) whose mode is not 0700 (dirs) / 0600 (files)."""
    wrong = []
    for path in [root, *root.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode != (0o700 if path.is_dir() else 0o600):
            wrong.append(f"{path}: {oct(mode)}")
    return wrong


def test_demo_data_holds_no_raw_secret_and_is_owner_only(tmp_path: Path) -> None:
    out = tmp_path / "demo-data"
    # with a deployment key: the control plane's policies (plain SHA-256 pins) still bind,
    # and the key itself is never written
    env = {**os.environ, **API_KEYS, "RETRYSCOPE_DIGEST_KEY": DIGEST_KEY}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "retryscope.cli",
            "demo",
            "--no-ui",
            "--out",
            str(out),
            "--requests",
            str(DEMO_REQUESTS),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        preexec_fn=lambda: os.umask(0),  # the most permissive umask: modes must still hold
    )
    assert done.returncode == 0, done.stderr
    secrets = [
        *(idempotency_key(i) for i in range(DEMO_REQUESTS)),
        *(prompt_text(i) for i in range(DEMO_REQUESTS)),
        *API_KEYS.values(),
        DIGEST_KEY,
    ]
    files = [p for p in out.rglob("*") if p.is_file()]
    raw = b"\0".join(p.read_bytes() for p in files)  # every byte, hidden files included
    # Parquet pages are zstd-compressed: scan the decoded values too.
    decoded = "\0".join(
        json.dumps(pq.read_table(p, partitioning=None).to_pylist(), default=str)
        for p in files
        if p.suffix == ".parquet"
    )
    assert b"idempotency_digest" in raw  # the raw scan sees plain bytes (column names)
    assert "private-primary" in decoded  # the decoded scan sees values (a route id)
    for secret in secrets:
        assert secret.encode() not in raw, secret
        assert secret not in decoded, secret
    assert _owner_only(out) == []
    con, _ = connect(out)
    assert build_report(con)["digests"]["unkeyed_requests"] == 0


class _Recorder(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.server.seen.append(dict(self.headers))  # type: ignore[attr-defined]
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    with loopback_http_server(_Recorder, seen=[]) as srv:
        yield srv


@pytest.fixture
def w3c_propagators() -> Iterator[None]:
    """The propagators most deployments set globally: trace context and Baggage."""
    previous: TextMapPropagator = propagate.get_global_textmap()
    propagate.set_global_textmap(
        CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])
    )
    yield
    propagate.set_global_textmap(previous)


SECRET_KEY = "idem-RELIABILITY-secret-key"
TENANT = "tenant-RELIABILITY"


def test_context_leaves_the_process_only_when_injected(
    tmp_path: Path, server: ThreadingHTTPServer, w3c_propagators: None
) -> None:
    url = f"http://127.0.0.1:{server.server_address[1]}/v1/chat"
    with audit(tmp_path / "data") as a:
        HTTPXClientInstrumentor().instrument(tracer_provider=a.provider)
        RequestsInstrumentor().instrument(tracer_provider=a.provider)
        try:
            with (
                retryscope.logical_request(
                    operation="chat",
                    tenant=TENANT,
                    idempotency_key=SECRET_KEY,
                    request={"prompt": "p"},
                    tracer_provider=a.provider,
                ) as req,
                req.attempt("primary"),
            ):
                with httpx.Client() as client:
                    client.post(url, json={})  # OTel httpx instrumentation
                requests.post(url, json={}, timeout=10)  # OTel requests instrumentation
                with httpx.Client(transport=RetryscopeTransport()) as client:
                    client.post(url, json={})  # retryscope's own transport
                carrier: dict[str, str] = {}
                inject(carrier)  # the explicit, documented way to carry it
                requests.post(url, json={}, headers=carrier, timeout=10)
        finally:
            HTTPXClientInstrumentor().uninstrument()
            RequestsInstrumentor().uninstrument()
        a.close()
    *implicit, explicit = server.seen  # type: ignore[attr-defined]
    assert len(implicit) == 3
    for headers in implicit:
        text = json.dumps(headers).lower()
        assert "traceparent" in {k.lower() for k in headers}  # OTel's own, expected
        assert "baggage" not in {k.lower() for k in headers}
        for leak in ("retryscope", req.id, TENANT.lower(), SECRET_KEY.lower()):
            assert leak not in text, (leak, headers)
    carried = json.loads({k.lower(): v for k, v in explicit.items()}["retryscope"])
    assert carried["id"] == req.id
    assert SECRET_KEY not in json.dumps(explicit)  # even injected: the digest, not the key


def test_journal_is_owner_only_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        journal = Journal(tmp_path / "journal.sqlite")
        journal.close()
        custom = Journal(tmp_path / "shared.sqlite", file_mode=0o640)
        custom.close()
    finally:
        os.umask(old)
    for path in tmp_path.glob("journal.sqlite*"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE((tmp_path / "shared.sqlite").stat().st_mode) == 0o640
