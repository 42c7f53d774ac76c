"""A fake model provider on 127.0.0.1 that counts its hits: it answers the OpenAI chat
completions and Anthropic messages APIs with 503, 503, then 200 (every third hit succeeds),
so an SDK with ``max_retries=2`` makes three sends per call.

Run it alone (``python fake_provider.py [PORT]``: it prints its base URL and, on Ctrl-C,
how many hits it took) or start it in a thread with :func:`serve`.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CHAT = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-4o-mini",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}
MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude-test",
    "content": [{"type": "text", "text": "hi"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 3, "output_tokens": 1},
}
OVERLOADED = {"error": {"type": "overloaded_error", "message": "overloaded"}}


class Provider(ThreadingHTTPServer):
    """The server; ``hits`` counts every request it answered."""

    def __init__(self, port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.hits = 0
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    server: Provider
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        with self.server.lock:
            self.server.hits += 1
            ok = self.server.hits % 3 == 0
        body = (MESSAGE if self.path.endswith("/messages") else CHAT) if ok else OVERLOADED
        payload = json.dumps(body).encode()
        self.send_response(200 if ok else 503)
        self.send_header("content-type", "application/json")
        self.send_header("retry-after-ms", "1")  # the SDKs wait this long before retrying
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, format: str, *args: object) -> None:
        return None


@contextmanager
def serve(port: int = 0) -> Iterator[Provider]:
    """A :class:`Provider` answering in a thread until the block ends."""
    provider = Provider(port)
    thread = threading.Thread(target=provider.serve_forever, daemon=True)
    thread.start()
    try:
        yield provider
    finally:
        provider.shutdown()
        provider.server_close()


if __name__ == "__main__":
    with serve(int(sys.argv[1]) if len(sys.argv) > 1 else 8765) as provider:
        print(provider.url, flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            print(f"{provider.hits} hits", flush=True)
