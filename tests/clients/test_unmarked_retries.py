"""Retries nobody announces: a loop above the OpenAI SDK that opens no attempt per try.

Each SDK call sends ``x-stainless-retry-count: 0``; a repeat of a failed send is still a
resend, by layer ``caller`` (the SDK did not retry; something above it did). A repeat after
a success is a new operation. The fake provider's hit count is the truth.
"""

from __future__ import annotations

import contextlib
import json

import openai
import pytest
from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

import retryscope
from retryscope.analytics import findings
from tests.clients.conftest import (
    API_KEY,
    OPENAI_CHAT,
    OPENAI_ERROR,
    PROMPT,
    assert_private,
    json_reply,
    seen,
)
from tests.instrumentation.conftest import Audit, LocalServer, Reply

CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": PROMPT}]}


def _answers(server: LocalServer, *statuses: int) -> None:
    """``server`` answers ``statuses`` in turn (then 200), with a 1 ms ``retry-after-ms``."""

    def reply(_r: object) -> Reply:
        n = len(server.requests)
        status = statuses[n - 1] if n <= len(statuses) else 200
        body = OPENAI_CHAT if status == 200 else OPENAI_ERROR
        return json_reply(status, body, ("retry-after-ms", "1"))

    server.reply = reply


def _client(server: LocalServer, max_retries: int) -> openai.OpenAI:
    return openai.OpenAI(api_key=API_KEY, base_url=f"{server.url}/v1", max_retries=max_retries)


def test_langchain_with_retry_above_the_sdk_is_the_callers_retry(
    audit: Audit, server: LocalServer, instrumented: object
) -> None:
    """``ChatOpenAI(max_retries=0).with_retry(stop_after_attempt=3)`` against 500, 500,
    200: 3 hits, 3 sends of one operation, amplification 3.0, resent by the caller."""
    _answers(server, 500, 500)
    model = ChatOpenAI(
        model="gpt-4o-mini",
        api_key=SecretStr(API_KEY),
        base_url=f"{server.url}/v1",
        max_retries=0,
    )
    chain = model.with_retry(stop_after_attempt=3, wait_exponential_jitter=False)
    with retryscope.logical_request(operation="chat", tracer_provider=audit.provider):
        chain.invoke([HumanMessage(PROMPT)])
    assert [r.headers["x-stainless-retry-count"] for r in server.requests] == ["0"] * 3
    got = seen(audit)
    assert got.report["receiver_attempts"] == len(server.requests) == 3
    assert got.report["operations"] == 1
    assert got.report["amplification_ratio"] == 3.0
    assert [(op, resend, status, layer) for _p, op, resend, status, layer, *_ in got.sends] == [
        (1, 0, 500, None),
        (1, 1, 500, "caller"),
        (1, 2, 200, "caller"),
    ]
    assert got.retried_layers == ["caller"]
    assert got.nested == 0
    assert_private(audit, server)


def test_a_loop_above_a_retrying_sdk_nests_caller_and_sdk(
    audit: Audit, server: LocalServer, instrumented: object
) -> None:
    """A plain ``for`` loop (2 tries) above the SDK (``max_retries=1``) against 500, 500,
    200: the SDK's resend is its own, the loop's repeat the caller's; the nesting reads
    ``[caller, sdk]``, 2 × 2."""
    _answers(server, 500, 500)
    client = _client(server, max_retries=1)
    with retryscope.logical_request(operation="chat", tracer_provider=audit.provider):
        for _ in range(2):
            try:
                client.chat.completions.create(**CHAT)  # type: ignore[call-overload]
            except openai.InternalServerError:
                continue
            break
    assert [r.headers["x-stainless-retry-count"] for r in server.requests] == ["0", "1", "0"]
    got = seen(audit)
    assert got.report["receiver_attempts"] == len(server.requests) == 3
    assert got.report["amplification_ratio"] == 3.0
    assert [(op, resend, layer) for _p, op, resend, _s, layer, *_ in got.sends] == [
        (1, 0, None),
        (1, 1, "sdk"),
        (1, 2, "caller"),
    ]
    assert got.retried_layers == ["caller", "sdk"]
    assert got.nested == 1
    (row,) = findings(audit.connect(), rule="nested_retry_owners").to_pylist()
    evidence = json.loads(row["evidence"])
    assert (evidence["retried_layers"], evidence["multiplication"]) == (["caller", "sdk"], 4)


@pytest.mark.parametrize("statuses", [(), (400,)], ids=["after_200", "after_400"])
def test_a_repeat_after_an_answer_that_is_no_failure_or_after_a_client_error(
    audit: Audit, server: LocalServer, instrumented: object, statuses: tuple[int, ...]
) -> None:
    """The same chat again after a 200 is a deliberate second call (2 operations, 1.0);
    after a 400 (a failure) it is the caller's retry (1 operation, 2.0)."""
    _answers(server, *statuses)
    client = _client(server, max_retries=0)
    with retryscope.logical_request(operation="chat", tracer_provider=audit.provider):
        for _ in range(2):
            with contextlib.suppress(openai.BadRequestError):
                client.chat.completions.create(**CHAT)  # type: ignore[call-overload]
    got = seen(audit)
    assert got.report["receiver_attempts"] == len(server.requests) == 2
    if statuses:
        assert (got.report["operations"], got.report["amplification_ratio"]) == (1, 2.0)
        assert got.retried_layers == ["caller"]
    else:
        assert (got.report["operations"], got.report["amplification_ratio"]) == (2, 1.0)
        assert got.retried_layers == []
        assert got.report["findings"] == 0, got.report["violations"]
