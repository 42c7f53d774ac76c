"""Client tests: the real client libraries against fake providers on 127.0.0.1 whose hit
counts are the ground truth, through the real pipeline (stamping processor, batch
processor, Parquet exporter, DuckDB report).

``instrumented`` turns on :class:`RetryscopeInstrumentor` (every integration whose library
is installed) for one test and off again.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from retryscope.analytics import build_report, findings, request_detail
from retryscope.instrumentation import RetryscopeInstrumentor
from tests.instrumentation.conftest import Audit, LocalServer, Reply, audit, server

__all__ = ["audit", "server"]

API_KEY = "sk-test-key-3f9a1c77"
PROMPT = "the secret prompt 51e2"

OPENAI_CHAT = json.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "hello"},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }
).encode()
OPENAI_EMBEDDING = json.dumps(
    {
        "object": "list",
        "data": [{"object": "embedding", "index": 0, "embedding": [0.1, 0.2]}],
        "model": "text-embedding-3-small",
        "usage": {"prompt_tokens": 3, "total_tokens": 3},
    }
).encode()
OPENAI_ERROR = json.dumps(
    {"error": {"message": "overloaded", "type": "server_error", "code": None}}
).encode()
ANTHROPIC_MESSAGE = json.dumps(
    {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [{"type": "text", "text": "hello"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }
).encode()
ANTHROPIC_ERROR = json.dumps(
    {"type": "error", "error": {"type": "overloaded_error", "message": "overloaded"}}
).encode()
JSON = (("Content-Type", "application/json"),)


def json_reply(status: int, body: bytes, *headers: tuple[str, str]) -> Reply:
    return Reply(status, (*JSON, *headers), body)


def fail_first(server: LocalServer, failures: int = 2) -> None:
    """``server`` answers 503 to its first ``failures`` hits, then 200."""
    server.reply = lambda _r: Reply(503) if len(server.requests) <= failures else Reply(200)


@pytest.fixture
def instrumented() -> Iterator[RetryscopeInstrumentor]:
    """Every retryscope integration whose library is installed, for this test only."""
    instrumentor = RetryscopeInstrumentor()
    instrumentor.instrument()
    yield instrumentor
    instrumentor.uninstrument()


@dataclass
class Seen:
    """What the audit data says about the requests of one test."""

    report: dict[str, Any]
    sends: list[tuple[Any, ...]]
    layers: dict[str, int]
    retried_layers: list[str]
    nested: int


def seen(audit: Audit, request_id: str | None = None) -> Seen:
    """The report, the sends (parent ordinal, operation, resend count, status, retry layer,
    route, fallback) and one request's attempts per layer and retried layers."""
    con = audit.connect()
    report = build_report(con)
    sends = con.execute(
        "SELECT parent_attempt_ordinal, operation_ordinal, coalesce(http_resend_count, 0), "
        "http_status_code, retry_layer, route_id, is_fallback FROM attempts "
        "WHERE layer = 'transport' ORDER BY start_time"
    ).fetchall()
    if request_id is None:
        ((request_id,),) = con.execute(
            "SELECT DISTINCT logical_request_id FROM spans WHERE logical_request_id NOT NULL"
        ).fetchall()
    summary, attempts = request_detail(con, str(request_id))
    (row,) = summary.to_pylist()
    return Seen(
        report,
        sends,
        dict(Counter(attempts.column("layer").to_pylist())),
        list(row["retried_layers"]),
        findings(con, rule="nested_retry_owners").num_rows,
    )


def assert_private(audit: Audit, server: LocalServer, *secrets: str) -> None:
    """No secret reaches the data set (every column of every span, decoded, and the raw
    file bytes), and nothing of retryscope the outgoing headers."""
    con = audit.connect()
    rows = str(con.sql("SELECT * FROM spans").to_arrow_table().to_pylist()).encode()
    raw = b"".join(p.read_bytes() for p in sorted(audit.directory.rglob("*.parquet")))
    assert b"sk-" not in rows or API_KEY.encode() not in rows
    for secret in (API_KEY, PROMPT, *secrets):
        assert secret.encode() not in rows, secret
        assert secret.encode() not in raw, secret
    for recorded in server.requests:
        headers = "\n".join(f"{k}: {v}" for k, v in recorded.headers.items()).lower()
        assert "retryscope" not in headers
        assert "baggage" not in recorded.headers
