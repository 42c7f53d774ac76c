"""Fixtures for the instrumentation tests: a real local HTTP server and a real pipeline.

The server binds 127.0.0.1 on a free port and answers from a script of responses; it records
every request's path and headers so tests can check what left the process.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from retryscope.analytics import AuditModel, connect, request_detail
from retryscope.instrumentation import AttemptStampingProcessor, ParquetSpanExporter


@dataclass(frozen=True)
class Reply:
    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b"ok"
    chunks: tuple[bytes, ...] = ()
    """When set, the body is sent as these chunks (chunked encoding)."""
    cut_after_chunks: bool = False
    """Close the connection after the chunks without the terminating chunk."""


@dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]


@dataclass
class LocalServer:
    url: str
    reply: Callable[[Recorded], Reply]
    requests: list[Recorded] = field(default_factory=list)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        return None

    def _serve(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        if length:
            self.rfile.read(length)
        rec = Recorded(self.command, self.path, {k.lower(): v for k, v in self.headers.items()})
        state = self.server.state
        with self.server.lock:
            state.requests.append(rec)
        reply = state.reply(rec)
        self.send_response(reply.status)
        for name, value in reply.headers:
            self.send_header(name, value)
        if reply.chunks:
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for chunk in reply.chunks:
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                self.wfile.flush()
            if reply.cut_after_chunks:
                self.close_connection = True
                return
            self.wfile.write(b"0\r\n\r\n")
            return
        self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        self.wfile.write(reply.body)

    do_GET = _serve
    do_POST = _serve


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # socketserver's 5 overflows when 16 clients connect at once

    def __init__(self, state: LocalServer) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.state = state
        self.lock = threading.Lock()


@pytest.fixture
def server() -> Iterator[LocalServer]:
    """A server that answers 200 "ok" until a test sets ``server.reply``."""
    yield from serve()


def serve() -> Iterator[LocalServer]:
    """Run a :class:`LocalServer` on 127.0.0.1 until the generator is closed."""
    state = LocalServer("", lambda _req: Reply())
    httpd = _Server(state)
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield state
    httpd.shutdown()
    httpd.server_close()


class VirtualClockLike:
    """A hand-advanced clock (unix ns) for exact span times."""

    def __init__(self, start_ns: int = 1_800_000_000_000_000_000) -> None:
        self.now = start_ns

    def __call__(self) -> int:
        return self.now

    def advance_ms(self, ms: int) -> None:
        self.now += ms * 1_000_000


@pytest.fixture
def clock() -> VirtualClockLike:
    return VirtualClockLike()


@dataclass
class Audit:
    provider: TracerProvider
    processor: AttemptStampingProcessor
    exporter: ParquetSpanExporter
    directory: Path

    def connect(self) -> AuditModel:
        assert self.provider.force_flush()  # drains the batch processor into the exporter
        assert self.exporter.force_flush()  # writes the exporter's buffer as a file
        con, _ = connect(self.directory)
        return con

    def rows(self, sql: str) -> list[tuple[object, ...]]:
        return self.connect().execute(sql).fetchall()

    def analysed(self, request_id: str | None = None) -> tuple[dict[str, int], list[str]]:
        """What the analytics make of one logical request (the only one when not named): its
        attempts per layer and the layers that retried."""
        con = self.connect()
        if request_id is None:
            ((request_id,),) = con.execute(
                "SELECT DISTINCT logical_request_id FROM spans WHERE logical_request_id NOT NULL"
            ).fetchall()
        summary, attempts = request_detail(con, str(request_id))
        (row,) = summary.to_pylist()
        return dict(Counter(attempts.column("layer").to_pylist())), list(row["retried_layers"])


def make_audit(directory: Path, processor: AttemptStampingProcessor) -> Audit:
    provider = TracerProvider(resource=Resource.create({"service.name": "retryscope-test"}))
    provider.add_span_processor(processor)
    exporter = ParquetSpanExporter(directory)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return Audit(provider, processor, exporter, directory)


@pytest.fixture
def audit(tmp_path: Path) -> Iterator[Audit]:
    """A real TracerProvider: stamping processor, BatchSpanProcessor, Parquet exporter."""
    a = make_audit(tmp_path / "spans", AttemptStampingProcessor())
    yield a
    a.provider.shutdown()
