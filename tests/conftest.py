"""Shared fixtures: a real TracerProvider wired like production, writing real Parquet."""

from __future__ import annotations

import os

# LiteLLM fetches its model cost map from the network at import unless told not to; tests
# (and the processes they start) never touch the network.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import hypothesis
import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from retryscope.analytics import AuditModel, connect
from retryscope.demo._scenarios import VirtualClock
from retryscope.instrumentation import AttemptStampingProcessor, ParquetSpanExporter
from retryscope.instrumentation._sdk import public_paths
from tests.recorder import Recorder

# Property tests check behaviour, not speed: a shared two-core machine makes an example
# take 300 ms now and 70 ms on the replay, which hypothesis' default deadline reports as a
# flaky failure. Speed is measured by the benchmarks under bench/.
hypothesis.settings.register_profile("retryscope", deadline=None)
hypothesis.settings.load_profile("retryscope")


@dataclass
class Pipeline:
    provider: TracerProvider
    exporter: ParquetSpanExporter
    directory: Path

    def flush(self) -> None:
        # BatchSpanProcessor.force_flush exports its queue but does not call the exporter's
        # force_flush, so the exporter's buffer is flushed explicitly.
        assert self.provider.force_flush()
        assert self.exporter.force_flush()

    def connect(self) -> AuditModel:
        self.flush()
        con, _ = connect(self.directory)
        return con


@pytest.fixture
def pipeline(tmp_path: Path) -> Iterator[Pipeline]:
    directory = tmp_path / "spans"
    exporter = ParquetSpanExporter(directory)
    provider = TracerProvider(resource=Resource.create({"service.name": "retryscope-test"}))
    provider.add_span_processor(AttemptStampingProcessor())
    provider.add_span_processor(BatchSpanProcessor(exporter))
    yield Pipeline(provider, exporter, directory)
    provider.shutdown()


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(1_800_000_000_000_000_000)


@contextmanager
def loopback_http_server(
    handler: type[BaseHTTPRequestHandler], **state: object
) -> Iterator[ThreadingHTTPServer]:
    """A threaded HTTP server on 127.0.0.1 (a free port) with ``state`` set as attributes."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    for name, value in state.items():
        setattr(server, name, value)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def recorder(tmp_path: Path) -> Recorder:
    """A real pipeline on a virtual clock for analytics fixtures (tests/recorder.py)."""
    return Recorder(tmp_path / "data")


@pytest.fixture(params=["fast", "public"])
def sdk_path(request: pytest.FixtureRequest) -> Iterator[str]:
    """The test once with the SDK shortcuts this process allows (none when
    RETRYSCOPE_SDK_PUBLIC_ONLY is set) and once with every public path."""
    if request.param == "public":
        with public_paths():
            yield "public"
    else:
        yield "fast"
