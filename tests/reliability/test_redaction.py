"""Redaction by pattern: a query key or header naming a token, key, secret, password,
signature or auth — any separator, any case, after ``&`` or ``;`` — never reaches Parquet,
through retryscope's own URL and exception events (the exception an application raises out
of an attempt carries the URL with its API key) or through any other instrumentation's spans
(the exporter redacts URLs, captured headers and exception events of every span it writes)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

import retryscope
from retryscope.instrumentation._redaction import (
    MARK,
    is_secret_name,
    redact_text,
    redact_url,
)
from retryscope.instrumentation.integrations.httpx import RetryscopeTransport
from tests.conftest import loopback_http_server
from tests.reliability.support import audit, visible_files

NAMED_IN_THE_ISSUE = (
    "api_key",
    "auth_token",
    "refresh_token",
    "id_token",
    "x-api-key",
    "private_token",
    "apiKey",
    "X-Api-Key",
    "client_secret",
    "password",
    "Signature",
    "sig",
    "Authorization",
    "X-Amz-Security-Token",
)
SECRET_VALUE = "sk-live-RELIABILITY-4f9a8b7c6d5e"


def _scan(root: Path) -> tuple[bytes, str]:
    """Every byte under ``root`` and every decoded value of its Parquet files."""
    files = [p for p in root.rglob("*") if p.is_file()]
    raw = b"\0".join(p.read_bytes() for p in files)
    decoded = "\0".join(
        json.dumps(pq.read_table(p, partitioning=None).to_pylist(), default=str)
        for p in visible_files(root)
    )
    return raw, decoded


@pytest.mark.parametrize("name", NAMED_IN_THE_ISSUE)
@pytest.mark.parametrize("separator", ["&", ";"])
def test_every_named_key_is_redacted_after_either_separator(name: str, separator: str) -> None:
    url = f"https://api.example.com/v1?model=m{separator}{name}={SECRET_VALUE}{separator}n=2"
    assert redact_url(url) == (
        f"https://api.example.com/v1?model=m{separator}{name}={MARK}{separator}n=2"
    )


_WORDS = st.sampled_from(["token", "key", "secret", "password", "signature", "auth"])
_AFFIX = st.sampled_from(["", "api", "x", "refresh", "private", "client", "access", "id", "my"])
_SEPARATOR = st.sampled_from(["_", "-", ".", "", "__"])


@st.composite
def _secret_names(draw: st.DrawFn) -> str:
    parts = [draw(_AFFIX), draw(_WORDS), draw(_AFFIX)]
    joined = draw(_SEPARATOR).join(p for p in parts if p)
    return "".join(c.upper() if draw(st.booleans()) else c for c in joined)


_VALUES = st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=12, max_size=30)


@given(_secret_names(), _VALUES, st.sampled_from(["&", ";"]))
def test_any_secret_name_in_any_form_is_redacted_in_urls_and_text(
    name: str, value: str, separator: str
) -> None:
    assert is_secret_name(name)
    url = f"https://h.example/p?q=hello{separator}{name}={value}"
    assert value not in redact_url(url)
    assert "q=hello" in redact_url(url)
    for text in (
        f"request to {url} failed",
        f"{name}={value}",
        f"{name}: {value}",
        json.dumps({name: value, "model": "m"}),
    ):
        assert value not in redact_text(text), text


def test_harmless_names_and_values_are_kept() -> None:
    url = "https://h.example/v1/chat?model=gpt&stream=true&max=5#section"
    assert redact_url(url) == "https://h.example/v1/chat?model=gpt&stream=true&max=5"
    assert redact_text("KeyError: 'choices'") == "KeyError: 'choices'"
    for name in ("model", "gen_ai.request.model", "stream", "user", "q"):
        assert not is_secret_name(name)


class _Unauthorized(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(401)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return None


@pytest.fixture
def unauthorized() -> Iterator[ThreadingHTTPServer]:
    with loopback_http_server(_Unauthorized) as server:
        yield server


def test_an_api_key_in_a_failing_url_never_reaches_parquet(
    tmp_path: Path, unauthorized: ThreadingHTTPServer
) -> None:
    """The application raises httpx's HTTPStatusError (its message holds the URL with the
    key) out of the attempt and the request: both record it as an exception event."""
    port = unauthorized.server_address[1]
    url = f"http://127.0.0.1:{port}/v1/chat?model=m;api_key={SECRET_VALUE}&x-api-key={SECRET_VALUE}"
    root = tmp_path / "data"
    with audit(root) as pipeline:
        client = httpx.Client(transport=RetryscopeTransport(tracer_provider=pipeline.provider))
        with pytest.raises(httpx.HTTPStatusError) as raised:
            with (
                retryscope.logical_request(
                    operation="chat", tracer_provider=pipeline.provider
                ) as req,
                req.attempt("primary"),
            ):
                client.post(url, json={}).raise_for_status()
        assert SECRET_VALUE in str(raised.value)  # what would have leaked
        pipeline.close()
    raw, decoded = _scan(root)
    assert SECRET_VALUE.encode() not in raw
    assert SECRET_VALUE not in decoded
    rows = [
        row
        for f in visible_files(root)
        for row in pq.read_table(f, columns=["span_role", "layer", "events"]).to_pylist()
    ]
    messages = {
        (row["span_role"], row["layer"]): event["attributes"]
        for row in rows
        for event in row["events"] or []
        if event["name"] == "exception"
    }
    assert set(messages) == {("attempt", "harness"), ("logical_request", None)}
    for attributes in messages.values():
        attrs = dict(attributes)
        assert attrs["exception.type"] == '"httpx.HTTPStatusError"'
        assert "api_key=REDACTED" in attrs["exception.message"]
        assert "x-api-key=REDACTED" in attrs["exception.stacktrace"]


class _Ok(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-length", "2")
        self.send_header("x-session-token", SECRET_VALUE)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        return None


def test_other_instrumentations_spans_are_redacted_by_the_exporter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """opentelemetry-instrumentation-httpx capturing every header, and an SDK
    ``record_exception`` with a password in the message: the exporter is the last line."""
    monkeypatch.setenv("OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_CLIENT_REQUEST", ".*")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_CLIENT_RESPONSE", ".*")
    root = tmp_path / "data"
    with loopback_http_server(_Ok) as server, audit(root) as pipeline:
        client = httpx.Client()
        instrumentor = HTTPXClientInstrumentor()
        instrumentor.instrument_client(client, tracer_provider=pipeline.provider)
        try:
            port = server.server_address[1]
            client.get(
                f"http://127.0.0.1:{port}/v1?access_token={SECRET_VALUE}",
                headers={"X-Api-Key": SECRET_VALUE, "Authorization": f"Bearer {SECRET_VALUE}"},
            )
        finally:
            instrumentor.uninstrument_client(client)
        span = pipeline.provider.get_tracer("app").start_span("db")
        span.record_exception(RuntimeError(f"login failed: password={SECRET_VALUE}"))
        span.end()
        pipeline.close()
    raw, decoded = _scan(root)
    assert SECRET_VALUE.encode() not in raw
    assert SECRET_VALUE not in decoded
    (http,) = [
        dict(row["attributes"])
        for f in visible_files(root)
        for row in pq.read_table(f, columns=["name", "attributes"]).to_pylist()
        if row["name"] == "GET"
    ]
    assert http["http.request.header.x_api_key"] == '["REDACTED"]'
    assert http["http.response.header.x_session_token"] == '["REDACTED"]'
    assert "http.request.header.host" in http  # a harmless header is kept as captured
    assert "REDACTED" not in http["http.request.header.host"]
