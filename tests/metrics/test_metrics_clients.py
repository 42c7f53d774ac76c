"""The live figures equal the report, and the server's hit count, on a real client's traffic.

The OpenAI SDK (sending through httpx2, with :class:`RetryscopeInstrumentor`) against a
fake provider on 127.0.0.1: its own retries under a harness's, and an attempt making three
distinct calls. The server's count of requests is the truth the sends must equal; distinct
calls are operations, not retries.
"""

from __future__ import annotations

import openai

import retryscope
from retryscope.instrumentation import describe_client
from tests.clients.conftest import API_KEY, OPENAI_CHAT, OPENAI_EMBEDDING, OPENAI_ERROR, json_reply
from tests.instrumentation.conftest import Audit, LocalServer
from tests.metrics.support import Metered, differences, live_figures, report_figures


def test_sdk_retries_and_distinct_calls_live_equal_report_and_server(
    audit: Audit, server: LocalServer, instrumented: object
) -> None:
    metered = Metered.on(audit.provider)
    client = openai.OpenAI(api_key=API_KEY, base_url=f"{server.url}/v1", max_retries=2)

    # 2 harness attempts x (1 + 2 SDK retries) against a 503: one operation, 6 sends
    server.reply = lambda _r: json_reply(503, OPENAI_ERROR, ("retry-after-ms", "5"))
    with retryscope.logical_request(operation="chat", tracer_provider=audit.provider) as req:
        for _ in range(2):
            try:
                with req.attempt("openai", lower=describe_client(client)):
                    client.chat.completions.create(
                        model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
                    )
            except openai.APIStatusError:
                continue
    # embed, chat, chat with another prompt: three operations, no retry
    server.reply = lambda r: json_reply(
        200, OPENAI_EMBEDDING if r.path.endswith("/embeddings") else OPENAI_CHAT
    )
    with (
        retryscope.logical_request(operation="rag", tracer_provider=audit.provider) as req,
        req.attempt("openai"),
    ):
        client.embeddings.create(model="text-embedding-3-small", input="hi")
        for prompt in ("hi", "a follow-up question"):
            client.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": prompt}]
            )

    live = live_figures(metered.points())
    assert live["receiver_attempts"] == len(server.requests) == 9
    assert (live["operations"], live["resends"]) == (4, 5)
    assert live["amplification_ratio"] == 9 / 4
    assert list(differences(live, report_figures(audit.connect()))) == []
    assert metered.processor is not None
    assert metered.processor.errors == 0


def test_a_loop_above_the_sdk_live_equals_report_and_server(
    audit: Audit, server: LocalServer, instrumented: object
) -> None:
    """A plain loop (2 tries) above the SDK (``max_retries=1``) against 500, 500, 200: the
    loop's repeat is the caller's retry, nested over the SDK's (2 × 2); then the same chat
    after a 200, a distinct call. Live figures, report and server agree."""
    metered = Metered.on(audit.provider)
    client = openai.OpenAI(api_key=API_KEY, base_url=f"{server.url}/v1", max_retries=1)
    server.reply = lambda _r: json_reply(
        500 if len(server.requests) <= 2 else 200,
        OPENAI_ERROR if len(server.requests) <= 2 else OPENAI_CHAT,
        ("retry-after-ms", "1"),
    )
    with retryscope.logical_request(operation="chat", tracer_provider=audit.provider):
        for _ in range(3):
            try:
                client.chat.completions.create(
                    model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
                )
            except openai.InternalServerError:
                continue
    live = live_figures(metered.points())
    assert live["receiver_attempts"] == len(server.requests) == 4
    assert (live["operations"], live["resends"]) == (2, 2)
    assert (live["nested_retry_requests"], live["max_nested_multiplication"]) == (1, 4)
    assert list(differences(live, report_figures(audit.connect()))) == []
