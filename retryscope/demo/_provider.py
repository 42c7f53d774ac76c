"""The demo's simulated model provider: a real HTTP server on 127.0.0.1 in a thread.

``POST /<route>/v1/chat`` with a JSON body ``{"scenario", "index"}`` answers with a real
status code and headers: ``retry-after-ms`` on 429, ``x-demo-latency-ms`` (the simulated
service time: the demo's clock is virtual, so the client advances it by this much instead
of the server sleeping) and ``x-demo-cost-micros`` (billed usage). What it answers is a pure
function of (seed, scenario, request index, route, how many times this request reached this
route), so the same seed gives the same traffic whatever the thread timing.
"""

from __future__ import annotations

import json
import random
import threading
from collections import Counter
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

OUTAGE_SHARE: Final = 0.6
"""Share of outage-storm requests (the middle of the run) that arrive during the outage."""


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    latency_ms: int
    cost_micros: int
    retry_after_ms: int | None = None


def _ok(rng: random.Random, median_ms: float, cost: int) -> Answer:
    return Answer(200, int(rng.lognormvariate(0, 0.3) * median_ms), int(cost * rng.uniform(0.4, 1)))


def in_outage(index: int, requests: int) -> bool:
    """Whether outage-storm request ``index`` of ``requests`` arrives during the outage."""
    margin = (1 - OUTAGE_SHARE) / 2
    return margin * requests <= index < (1 - margin) * requests


def answer(seed: int, scenario: str, index: int, requests: int, route: str, send: int) -> Answer:
    """What the provider answers to the ``send``-th call of request ``index`` on ``route``."""
    rng = random.Random(f"{seed}:{scenario}:{index}:{route}:{send}")
    external = route.startswith("external")
    cost = 12_000 if external else 2_000
    roll = rng.random()
    if scenario == "healthy":
        if not external and roll < 0.05:
            return Answer(429, 40, 0, rng.choice((250, 500, 1_000)))
        if not external and roll < 0.08:
            return Answer(503, 60, 0)
        return _ok(rng, 1_100 if external else 700, cost)
    if scenario == "outage-storm":
        if not external and in_outage(index, requests):
            return Answer(503, 30, 0)  # fails fast, the same way for everyone
        if external and roll < 0.2:
            return Answer(503, 80, 0)
        return _ok(rng, 1_100 if external else 700, cost)
    if scenario == "nested-sdk":
        failures = index % 6  # 0..5 failing sends before the provider answers
        if send <= failures:
            if roll < 0.5:
                return Answer(429, 40, 0, 300)
            return Answer(503, 50, 0)
        return _ok(rng, 700, cost)
    if scenario == "deadline-squeeze":
        if not external and roll < 0.4:
            return Answer(503, 1_000, 0)  # a slow failure eats most of the budget
        return _ok(rng, 1_100 if external else 900, cost)
    if scenario == "unsafe-fallback":
        if external:
            return _ok(rng, 1_100, cost)
        if index % 4 == 0:
            return Answer(400, 40, 0)  # non-retryable: the bad harness falls back anyway
        return Answer(503, 60, 0)
    raise ValueError(f"unknown scenario {scenario!r}")


class SimulatedProvider:
    """The server and its per-(request, route) call counters; a context manager."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.requests: dict[str, int] = {}
        """Requests per scenario (the outage window is a share of them)."""
        self.calls: Counter[tuple[str, int, str]] = Counter()
        self._lock = threading.Lock()
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                try:
                    body: dict[str, Any] = json.loads(self.rfile.read(length) or b"{}")
                    route = self.path.strip("/").split("/", 1)[0]
                    ans = provider.serve(str(body["scenario"]), int(body["index"]), route)
                except (ValueError, KeyError, TypeError) as exc:
                    self._send(Answer(400, 1, 0), {"error": str(exc)})
                    return
                self._send(ans, {"ok": ans.status == 200, "route": route})

            def _send(self, ans: Answer, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(ans.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.send_header("x-demo-latency-ms", str(ans.latency_ms))
                self.send_header("x-demo-cost-micros", str(ans.cost_micros))
                if ans.retry_after_ms is not None:
                    self.send_header("retry-after-ms", str(ans.retry_after_ms))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return  # quiet: the demo prints its own progress

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def serve(self, scenario: str, index: int, route: str) -> Answer:
        with self._lock:
            self.calls[scenario, index, route] += 1
            send = self.calls[scenario, index, route]
            requests = self.requests.get(scenario, 1)
        return answer(self.seed, scenario, index, requests, route, send)

    def __enter__(self) -> SimulatedProvider:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()
