"""The Anthropic SDK (2.x, httpx2 only), its own tracing on and off."""

from __future__ import annotations

import anthropic
import pytest

import retryscope
from tests.clients.conftest import (
    ANTHROPIC_ERROR,
    ANTHROPIC_MESSAGE,
    API_KEY,
    PROMPT,
    assert_private,
    json_reply,
    seen,
)
from tests.instrumentation.conftest import Audit, LocalServer


@pytest.mark.parametrize("tracing", [True, False], ids=["sdk-tracing-on", "sdk-tracing-off"])
def test_sdk_retries_are_sends_and_its_call_span_is_a_call(
    audit: Audit, server: LocalServer, instrumented: object, tracing: bool
) -> None:
    """529, 429, 200: three hits and three sends; with its tracing on, the SDK's call span
    (``http.request.method`` at start, around the retry loop) is a call, never a send."""
    replies = iter([(529, ANTHROPIC_ERROR), (429, ANTHROPIC_ERROR), (200, ANTHROPIC_MESSAGE)])

    def reply(_r: object) -> object:
        status, body = next(replies)
        return json_reply(status, body, ("retry-after-ms", "2"))

    server.reply = reply  # type: ignore[assignment]
    client = anthropic.Anthropic(
        api_key=API_KEY,
        base_url=server.url,
        open_telemetry={"traces": tracing, "tracer_provider": audit.provider},
    )
    with (
        retryscope.logical_request(operation="chat", tracer_provider=audit.provider) as req,
        req.attempt("anthropic"),
    ):
        client.messages.create(
            model="claude-test", max_tokens=8, messages=[{"role": "user", "content": PROMPT}]
        )
    got = seen(audit)
    assert len(server.requests) == 3
    assert got.report["receiver_attempts"] == 3
    assert [(op, resend, status, layer) for _p, op, resend, status, layer, *_ in got.sends] == [
        (1, 0, 529, None),
        (1, 1, 429, "sdk"),
        (1, 2, 200, "sdk"),
    ]
    assert got.retried_layers == ["sdk"]
    assert got.nested == 0
    calls = audit.rows(
        "SELECT name, attributes['retryscope.call.library'], http_resend_count "
        "FROM spans WHERE span_role = 'call'"
    )
    assert calls == ([("anthropic.messages.create", '"anthropic"', 2)] if tracing else [])
    # every send is a child of the SDK's call span when there is one
    parents = audit.rows(
        "SELECT count(*) FROM spans s JOIN spans c ON s.parent_span_id = c.span_id "
        "WHERE s.span_role = 'attempt' AND s.layer = 'transport' AND c.span_role = 'call'"
    )
    assert parents == [(3 if tracing else 0,)]
    assert_private(audit, server)


def test_the_status_error_is_classified_by_its_status(
    audit: Audit, server: LocalServer, instrumented: object
) -> None:
    server.reply = lambda _r: json_reply(503, ANTHROPIC_ERROR, ("retry-after", "0"))
    client = anthropic.Anthropic(api_key=API_KEY, base_url=server.url, max_retries=1)
    with retryscope.logical_request(operation="chat", tracer_provider=audit.provider) as req:
        with pytest.raises(anthropic.APIStatusError), req.attempt("anthropic"):
            client.messages.create(
                model="claude-test", max_tokens=8, messages=[{"role": "user", "content": PROMPT}]
            )
    assert len(server.requests) == 2
    assert audit.rows(
        "SELECT outcome, outcome_kind, http_status_code FROM attempts WHERE layer = 'harness'"
    ) == [("retryable", "unavailable", 503)]
    assert seen(audit).report["terminals"] == {"stop_attempt_budget": 1}
