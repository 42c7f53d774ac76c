"""Retries a gateway reports: a fake LiteLLM proxy, Portkey and Envoy on 127.0.0.1 answering
with their count of the tries behind one response. The send records the reported attempts
(layer ``gateway``); the report keeps them beside the observed sends, never added to them."""

from __future__ import annotations

import httpx
import pytest

import retryscope
from retryscope.http_rules import gateway_attempts
from tests.clients.conftest import seen
from tests.instrumentation.conftest import Audit, LocalServer, Reply

GATEWAYS = {
    "litellm": ((("x-litellm-attempted-retries", "2"), ("x-litellm-attempted-fallbacks", "1")), 4),
    "portkey": ((("x-portkey-retry-attempt-count", "2"),), 3),
    "envoy": ((("x-envoy-attempt-count", "3"),), 3),
    "none": ((), None),
}


@pytest.mark.parametrize("gateway", list(GATEWAYS))
def test_a_gateways_reported_attempts_are_kept_beside_the_sends(
    audit: Audit, server: LocalServer, instrumented: object, gateway: str
) -> None:
    headers, attempts = GATEWAYS[gateway]
    server.reply = lambda _r: Reply(200, headers, b"{}")
    with retryscope.logical_request(operation="chat", tracer_provider=audit.provider) as req:
        with req.attempt("gateway"), httpx.Client() as client:
            client.post(f"{server.url}/v1/chat/completions", content=b"{}")
    got = seen(audit)
    assert got.report["receiver_attempts"] == len(server.requests) == 1
    assert got.report["amplification_ratio"] == 1.0
    (row,) = audit.rows("SELECT gateway_attempts FROM attempts WHERE layer = 'transport'")
    assert row == (attempts,)
    assert got.report["gateway"] == {
        "reporting_sends": 0 if attempts is None else 1,
        "reported_attempts": attempts or 0,
        "reported_retries": 0 if attempts is None else attempts - 1,
    }


def test_the_reported_count_at_its_boundaries() -> None:
    def headers(**values: str):  # type: ignore[no-untyped-def]
        return lambda name: values.get(name.replace("-", "_"))

    assert gateway_attempts(headers()) is None
    assert gateway_attempts(headers(x_portkey_retry_attempt_count="0")) == 1
    assert gateway_attempts(headers(x_envoy_attempt_count="1")) == 1
    assert gateway_attempts(headers(x_litellm_attempted_retries="-1")) is None
    assert gateway_attempts(headers(x_litellm_attempted_retries="lots")) is None
    both = headers(x_envoy_attempt_count="2", x_litellm_attempted_retries="2")
    assert gateway_attempts(both) == 3  # the larger: a chain is not multiplied
