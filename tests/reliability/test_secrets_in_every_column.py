"""No secret in any column, by either writer: one set of secrets (URL userinfo, an
``api_key=`` query, Authorization and x-api-key headers, an ``sk-…`` key in an exception
message, a status message, a span name, gRPC and Connect metadata, a link and a resource
attribute) goes through the Parquet exporter and through ``retryscope ingest`` (OTLP JSON
and protobuf); no row, no file byte and no model cache file holds any of them, and both
writers write the same rows. The contrib requests instrumentation's status message on a
refused connection and the SDK's around ``raise_for_status()`` are redacted too."""

from __future__ import annotations

import re
import socket
import string
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests
from opentelemetry.instrumentation.requests import RequestsInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, Status, StatusCode

from retryscope.analytics import build_report, connect
from retryscope.instrumentation import ParquetSpanExporter
from retryscope.instrumentation._redaction import MAY_HOLD_SECRET
from retryscope.instrumentation.export._gaps import GapReason
from retryscope.instrumentation.ingest._run import ingest
from retryscope.vocabulary import SpanRole
from tests.conftest import loopback_http_server
from tests.export_support import otlp_json_line, otlp_proto, read_rows

USERINFO = "pw-USERINFO-7d1e"
QUERY = "QUERY-KEY-55aa"
BEARER = "HEADER-TOKEN-9b2c3d4e5f"
X_API_KEY = "XAPI-KEY-66cc"
SK = "sk-EXCEPTION0123456789abcd"
STATUS = "STATUS-KEY-77dd"
NAME = "NAME-KEY-88ee"
GRPC = "GRPC-TOKEN-99ff00112233"
CONNECT = "CONNECT-KEY-aa11"
LINKED = "LINK-SECRET-cc33"
RESOURCE = "RESOURCE-PW-bb22"
SECRETS = (USERINFO, QUERY, BEARER, X_API_KEY, SK, STATUS, NAME, GRPC, CONNECT, LINKED, RESOURCE)


def _spans() -> list[ReadableSpan]:
    """Real spans from a real TracerProvider carrying every secret."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": "svc", "deploy.note": f"password={RESOURCE}"})
    )
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("secrets-test", "1.0")
    url = f"https://user:{USERINFO}@api.example.com/v1/chat?model=m&api_key={QUERY}"
    with tracer.start_as_current_span("linked") as linked:
        pass
    with tracer.start_as_current_span(
        f"GET /v1/models?api_key={NAME}",
        attributes={
            "url.full": url,
            "http.request.header.authorization": (f"Bearer {BEARER}",),
            "http.request.header.x-api-key": (X_API_KEY,),
            "rpc.grpc.request.metadata.authorization": (f"Bearer {GRPC}",),
            "rpc.connect_rpc.request.metadata.x-api-key": (CONNECT,),
            "server.address": "api.example.com",
        },
        links=[Link(linked.get_span_context(), {"note": f"token={LINKED}"})],
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        span.record_exception(ValueError(f"rejected key {SK} for {url}"))
        span.set_status(Status(StatusCode.ERROR, f"HTTPError: 401 for url: {url}&token={STATUS}"))
        span.set_attribute("note", f"api_key={STATUS}")
    provider.shutdown()
    return list(memory.get_finished_spans())


def _scan(*roots: Path) -> list[str]:
    """The secrets found in any byte of any file under ``roots``."""
    raw = b"\0".join(p.read_bytes() for root in roots for p in root.rglob("*") if p.is_file())
    return [s for s in SECRETS if s.encode() in raw]


def _export(spans: Sequence[ReadableSpan], directory: Path) -> None:
    exporter = ParquetSpanExporter(directory)
    exporter.export(spans)
    exporter.shutdown()


@pytest.mark.parametrize("encoding", ["json-lines", "protobuf"])
def test_no_secret_in_any_column_and_both_writers_agree(tmp_path: Path, encoding: str) -> None:
    spans = _spans()
    assert all(s in otlp_json_line(spans) for s in SECRETS)  # each secret is there to find
    _export(spans, tmp_path / "exported")
    source = tmp_path / "collector" / ("traces.json" if encoding == "json-lines" else "traces.pb")
    source.parent.mkdir()
    if encoding == "json-lines":
        source.write_text(otlp_json_line(spans) + "\n")
    else:
        source.write_bytes(otlp_proto(spans))
    summary = ingest([source], tmp_path / "ingested")
    assert (summary.rows_written, summary.skipped) == (2, 0)
    exported, ingested = read_rows(tmp_path / "exported"), read_rows(tmp_path / "ingested")
    for rows in (exported, ingested):
        text = str(rows.to_pylist())
        assert [s for s in SECRETS if s in text] == []
        assert "REDACTED" in text
    assert ingested.equals(exported)
    assert _scan(tmp_path / "exported", tmp_path / "ingested") == []
    row = next(r for r in exported.to_pylist() if r["name"].startswith("GET"))
    attributes = dict(row["attributes"])
    assert attributes["server.address"] == '"api.example.com"'  # what names no secret is kept
    assert attributes["url.full"] == (
        '"https://REDACTED:REDACTED@api.example.com/v1/chat?model=m&api_key=REDACTED"'
    )
    assert attributes["rpc.grpc.request.metadata.authorization"] == '["REDACTED"]'
    assert row["name"] == "GET /v1/models?api_key=REDACTED"


def test_gap_rows_hold_no_secret_of_the_resource(tmp_path: Path) -> None:
    """The telemetry-gap rows the exporter writes itself carry the writer's resource
    attributes: redacted as the span rows' are."""
    exporter = ParquetSpanExporter(tmp_path / "data")
    exporter.export(_spans())
    exporter.record_gap(GapReason.QUEUE_OVERFLOW, 3)
    exporter.shutdown()
    rows = read_rows(tmp_path / "data").to_pylist()
    gaps = [r for r in rows if r["span_role"] == SpanRole.TELEMETRY_GAP.value]
    assert gaps
    assert dict(gaps[0]["resource_attributes"])["deploy.note"] == '"password=REDACTED"'
    assert _scan(tmp_path / "data") == []


def test_no_hex_id_can_match_the_prefilter() -> None:
    """scrub never searches the id columns (lowercase hex by construction): each
    alternative of MAY_HOLD_SECRET needs a character that is not a hex digit."""
    for alternative in MAY_HOLD_SECRET.split("|"):
        literal = re.sub(r"\[[^]]*\]", "", alternative)
        assert set(literal) - set(string.hexdigits), alternative


def test_no_secret_in_the_model_cache(tmp_path: Path) -> None:
    _export(_spans(), tmp_path / "data")
    con, _ = connect(tmp_path / "data", model_cache=tmp_path / "cache")
    build_report(con)
    con.close()
    assert [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    assert _scan(tmp_path / "cache") == []


class _Unauthorized(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(401)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def unauthorized() -> Iterator[ThreadingHTTPServer]:
    with loopback_http_server(_Unauthorized) as server:
        yield server


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _get_and_raise(url: str) -> None:
    requests.get(url, timeout=5).raise_for_status()


def test_requests_status_messages_hold_no_key(
    tmp_path: Path, unauthorized: ThreadingHTTPServer
) -> None:
    """A refused connection under the contrib requests instrumentation, and the SDK's
    ``start_as_current_span`` around ``raise_for_status()``: both status messages carry
    the URL with its key."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    exporter = ParquetSpanExporter(tmp_path / "data")
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = RequestsInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        with pytest.raises(requests.ConnectionError):
            requests.get(f"http://127.0.0.1:{_closed_port()}/v1?api_key={QUERY}", timeout=5)
        port = unauthorized.server_address[1]
        with (
            pytest.raises(requests.HTTPError),
            provider.get_tracer("app").start_as_current_span("call"),
        ):
            _get_and_raise(f"http://127.0.0.1:{port}/v1?api_key={STATUS}")
    finally:
        instrumentor.uninstrument()
    provider.shutdown()
    messages = [s.status.description or "" for s in memory.get_finished_spans()]
    assert any(QUERY in m for m in messages)
    assert any(STATUS in m for m in messages)
    rows = read_rows(tmp_path / "data").to_pylist()
    written = [r["status_message"] or "" for r in rows]
    assert sum("api_key=REDACTED" in m for m in written) >= 2
    assert _scan(tmp_path / "data") == []
    assert [s for s in SECRETS if s in str(rows)] == []
