"""Fixtures of the control-plane tests: a virtual clock, real spans, a counting receiver."""

from __future__ import annotations

import importlib.util
import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


class VirtualClock:
    """Unix-ns clock advanced by hand or by the controller's sleep."""

    def __init__(self, start_ms: int) -> None:
        self.now = start_ms * 1_000_000
        self.slept_ms: list[int] = []

    def __call__(self) -> int:
        return self.now

    def advance_ms(self, ms: int) -> None:
        self.now += ms * 1_000_000

    def sleep(self, seconds: float) -> None:
        ms = round(seconds * 1000)
        self.slept_ms.append(ms)
        self.advance_ms(ms)


@pytest.fixture
def clock() -> VirtualClock:
    """A virtual clock at 1,000 ms after the epoch (the lab's time base)."""
    return VirtualClock(1_000)


@dataclass
class Spans:
    provider: TracerProvider
    exporter: InMemorySpanExporter


@pytest.fixture
def spans() -> Iterator[Spans]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield Spans(provider, exporter)
    provider.shutdown()


@dataclass
class Receiver:
    """A real HTTP receiver on 127.0.0.1 that counts submissions and status polls.

    ``script`` is the list of (status, headers) answers for successive submissions; a
    submission past the script succeeds. ``hold`` makes submissions block after they are
    counted and their effect recorded (to crash a worker mid-call). A status poll answers
    the key's status and, for a success, the stored result.

    Jobs: ``POST /jobs`` submits one (counted in ``jobs``) and answers its id;
    ``GET /jobs/<id>`` answers ``running`` for the first ``job_running_polls`` polls, then
    ``done`` with the result.
    """

    url: str = ""
    submits: Counter[str] = field(default_factory=Counter)
    polls: Counter[str] = field(default_factory=Counter)
    effects: dict[str, str] = field(default_factory=dict)
    script: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    hold: threading.Event | None = None
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    jobs: Counter[str] = field(default_factory=Counter)
    job_polls: Counter[str] = field(default_factory=Counter)
    job_running_polls: int = 2


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return

        def _reply(self, status: int, body: dict[str, str], headers: dict[str, str]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            key = self.headers.get("Idempotency-Key", "")
            length = int(self.headers.get("Content-Length", "0"))
            self.rfile.read(length)
            if self.path.startswith("/jobs"):
                with state.lock:
                    state.jobs[key] += 1
                    job = f"job-{sum(state.jobs.values())}"
                self._reply(202, {"id": job}, {})
                return
            with state.lock:
                state.submits[key] += 1
                answer = state.script.pop(0) if state.script else (200, {})
                if answer[0] == 200:
                    state.effects[key] = "succeeded"
            if state.hold is not None:
                state.hold.set()
                state.release.wait(30)
            self._reply(answer[0], {"result": "ok" if answer[0] == 200 else "error"}, answer[1])

        def do_GET(self) -> None:
            if self.path.startswith("/jobs/"):
                job = self.path.split("/")[2]
                with state.lock:
                    state.job_polls[job] += 1
                    running = state.job_polls[job] <= state.job_running_polls
                body = {"status": "running"} if running else {"status": "done", "result": job}
                self._reply(200, body, {})
                return
            key = parse_qs(urlparse(self.path).query).get("key", [""])[0]
            with state.lock:
                state.polls[key] += 1
                status = state.effects.get(key, "failed_no_effect")
            body = {"status": status, **({"result": "ok"} if status == "succeeded" else {})}
            self._reply(200, body, {})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    state.release.set()
    server.shutdown()
    server.server_close()


WORKER = Path(__file__).with_name("crash_worker.py")


@pytest.fixture(scope="session")
def worker() -> Any:
    """The ``crash_worker`` module: the real HTTP calls the worker process makes."""
    spec = importlib.util.spec_from_file_location("cp_crash_worker", WORKER)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def submit(worker: Any) -> Callable[..., Any]:
    """``crash_worker.submit``: the real HTTP call the worker process makes."""
    return worker.submit  # type: ignore[no-any-return]
