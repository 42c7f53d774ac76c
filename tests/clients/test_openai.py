"""The OpenAI SDK (3.x, sending through httpx2), with and without the GenAI instrumentation."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

import retryscope
from retryscope.instrumentation import AttemptStampingProcessor, describe_client
from tests.clients.conftest import (
    API_KEY,
    OPENAI_CHAT,
    OPENAI_EMBEDDING,
    OPENAI_ERROR,
    PROMPT,
    assert_private,
    json_reply,
    seen,
)
from tests.instrumentation.conftest import Audit, LocalServer, make_audit


def _client(server: LocalServer, *, max_retries: int = 2) -> openai.OpenAI:
    return openai.OpenAI(api_key=API_KEY, base_url=f"{server.url}/v1", max_retries=max_retries)


def _harness(audit: Audit, client: openai.OpenAI, attempts: int) -> str:
    with retryscope.logical_request(
        operation="chat", idempotency_key="order-7", tracer_provider=audit.provider
    ) as req:
        for _ in range(attempts):
            try:  # the SDK's error leaves the attempt: retryscope classifies it by its status
                with req.attempt("openai", lower=describe_client(client)):
                    client.chat.completions.create(
                        model="gpt-4o-mini", messages=[{"role": "user", "content": PROMPT}]
                    )
            except openai.APIStatusError:
                continue
            break
    return req.id


@pytest.mark.parametrize("genai", [False, True], ids=["sdk", "sdk+genai-instrumentation"])
def test_sdk_retries_under_harness_retries(
    audit: Audit, server: LocalServer, instrumented: object, genai: bool
) -> None:
    """2 harness attempts × (1 + max_retries=2) SDK sends against a 503: 6 server hits, 6
    sends, the SDK's resends attributed to it, nested ownership flagged."""
    server.reply = lambda _r: json_reply(503, OPENAI_ERROR, ("retry-after-ms", "5"))
    if genai:
        OpenAIInstrumentor().instrument(tracer_provider=audit.provider)
    try:
        request_id = _harness(audit, _client(server), attempts=2)
    finally:
        if genai:
            OpenAIInstrumentor().uninstrument()
    got = seen(audit, request_id)
    assert len(server.requests) == 6
    assert got.report["receiver_attempts"] == 6
    assert got.layers == {"harness": 2, "transport": 6}
    assert [(p, op, resend) for p, op, resend, *_ in got.sends] == [
        (h, 1, n) for h in (1, 2) for n in range(3)
    ]
    assert {layer for *_, layer, _r, _f in got.sends if layer} == {"sdk"}
    assert got.retried_layers == ["harness", "sdk"]
    assert got.nested == 1
    assert got.report["amplification_ratio"] == 6.0
    assert got.report["terminals"] == {"stop_attempt_budget": 1}
    assert (
        audit.rows("SELECT outcome_kind, http_status_code FROM attempts WHERE layer = 'harness'")
        == [("unavailable", 503)] * 2
    )
    calls = audit.rows("SELECT count(*) FROM spans WHERE span_role = 'call'")
    assert calls == [(2 if genai else 0,)]  # one GenAI call span per harness attempt
    assert_private(audit, server)


def test_without_the_instrumentor_the_genai_call_span_is_one_send(
    audit: Audit, server: LocalServer
) -> None:
    """Only the GenAI instrumentation: its call span is all there is, counted as one send
    per call (the SDK's two hidden retries are not visible: the documented limit)."""
    server.reply = lambda _r: json_reply(503, OPENAI_ERROR, ("retry-after-ms", "1"))
    OpenAIInstrumentor().instrument(tracer_provider=audit.provider)
    try:
        _harness(audit, _client(server), attempts=1)
    finally:
        OpenAIInstrumentor().uninstrument()
    assert len(server.requests) == 3
    assert seen(audit).report["receiver_attempts"] == 1


def test_a_multi_call_attempt_without_retries_reads_amplification_one(
    audit: Audit, server: LocalServer, instrumented: object
) -> None:
    """Embed, chat, chat again with another prompt: three distinct operations, no resend,
    amplification 1.0 and no finding of nesting or storms."""
    server.reply = lambda r: json_reply(
        200, OPENAI_EMBEDDING if r.path.endswith("/embeddings") else OPENAI_CHAT
    )
    client = _client(server)
    with (
        retryscope.logical_request(operation="rag", tracer_provider=audit.provider) as req,
        req.attempt("openai"),
    ):
        client.embeddings.create(model="text-embedding-3-small", input=PROMPT)
        for prompt in (PROMPT, "a follow-up question"):
            client.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": prompt}]
            )
    got = seen(audit)
    assert len(server.requests) == 3
    assert [(op, resend) for _p, op, resend, *_ in got.sends] == [(1, 0), (2, 0), (3, 0)]
    report = got.report
    assert (report["receiver_attempts"], report["operations"]) == (3, 3)
    assert report["amplification_ratio"] == 1.0
    assert report["sends_per_request"] == 3.0
    assert report["amplification"]["hidden_attempts"] == 0
    assert got.retried_layers == []
    assert report["findings"] == 0, report["violations"]
    assert report["load"]["max_retry_fraction"] == 0.0


def test_async_client_sends_are_counted(
    audit: Audit, server: LocalServer, instrumented: object
) -> None:
    import asyncio

    replies = iter([(503, OPENAI_ERROR), (429, OPENAI_ERROR), (200, OPENAI_CHAT)])
    server.reply = lambda _r: json_reply(*next(replies), ("retry-after-ms", "1"))

    async def main() -> None:
        client = openai.AsyncOpenAI(api_key=API_KEY, base_url=f"{server.url}/v1")
        with (
            retryscope.logical_request(operation="chat", tracer_provider=audit.provider) as req,
            req.attempt("openai"),
        ):
            await client.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": PROMPT}]
            )

    asyncio.run(main())
    got = seen(audit)
    assert len(server.requests) == 3
    assert [(resend, status) for _p, _o, resend, status, *_ in got.sends] == [
        (0, 503),
        (1, 429),
        (2, 200),
    ]
    assert got.retried_layers == ["sdk"]
    assert got.report["terminals"] == {"complete": 1}


@pytest.mark.parametrize("keep", [False, True], ids=["default", "keep_content"])
def test_genai_content_capture_is_withheld_unless_kept(
    tmp_path: Path, server: LocalServer, monkeypatch: pytest.MonkeyPatch, keep: bool
) -> None:
    """The GenAI instrumentation with content capture on writes the prompt into
    ``gen_ai.input.messages``: the audit data holds the key, its value withheld, unless
    ``RETRYSCOPE_PARQUET_KEEP_CONTENT`` is on."""
    server.reply = lambda _r: json_reply(200, OPENAI_CHAT)
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")
    if keep:
        monkeypatch.setenv("RETRYSCOPE_PARQUET_KEEP_CONTENT", "true")
    audit = make_audit(tmp_path / "spans", AttemptStampingProcessor())
    OpenAIInstrumentor().instrument(tracer_provider=audit.provider)
    try:
        _harness(audit, _client(server), attempts=1)
    finally:
        OpenAIInstrumentor().uninstrument()
    ((messages,),) = audit.rows(
        "SELECT attributes['gen_ai.input.messages'] FROM spans "
        "WHERE attributes['gen_ai.input.messages'] IS NOT NULL"
    )
    if keep:
        assert PROMPT in messages
    else:
        assert messages == '"REDACTED"'
        assert_private(audit, server)
    assert len(server.requests) == seen(audit).report["receiver_attempts"] == 1
    audit.provider.shutdown()
