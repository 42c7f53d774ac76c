"""gen_ai attributes, the versioned price table and its digest, lower-layer configuration."""

from __future__ import annotations

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

import retryscope
from retryscope.instrumentation import LowerLayerConfig, Price, PriceTable, Usage, describe_client
from retryscope.instrumentation.integrations.httpx import RetryscopeTransport
from tests.instrumentation.conftest import Audit

TABLE = PriceTable(
    "2026-11-01",
    "USD",
    {
        "gpt-x@2026-10": Price(input_per_1k=2500, output_per_1k=10_000, cached_input_per_1k=1250),
        "small@1": Price(input_per_1k=150, output_per_1k=600),
    },
)


def test_gen_ai_usage_and_price_on_the_attempt(audit: Audit) -> None:
    with retryscope.logical_request(operation="chat", tracer_provider=audit.provider) as req:
        with req.attempt("primary", route_release="gpt-x@2026-10") as a:
            a.set_gen_ai(
                provider="openai",
                request_model="gpt-x",
                response_model="gpt-x-2026-10-01",
                operation="chat",
                response_id="resp_1",
            )
            a.set_usage(input_tokens=1200, output_tokens=300, cached_input_tokens=1000)
            cost = a.price(TABLE, reserved=50_000)
        with req.attempt("primary", route_release="gpt-x@2026-10") as b:
            b.set_outcome("unknown_provider_acceptance")
            b.set_error_type("TimeoutError")
            unknown = b.price(TABLE, reserved=50_000)
    # (200 * 2500 + 1000 * 1250 + 300 * 10000) / 1000 = 4750
    assert (cost.micros, cost.estimated) == (4750, False)
    assert (unknown.micros, unknown.estimated, unknown.estimate_reason) == (
        50_000,
        True,
        "usage_unknown",
    )
    rows = (
        audit.connect()
        .execute(
            "SELECT gen_ai_provider_name, gen_ai_request_model, gen_ai_response_model, "
            "gen_ai_operation_name, gen_ai_response_id, gen_ai_input_tokens, gen_ai_output_tokens, "
            "attributes['gen_ai.usage.cache_read.input_tokens'], cost_reserved_micros, "
            "cost_actual_micros, cost_estimated, price_table_digest, error_type, "
            "attributes['retryscope.cost.estimate_reason'] "
            "FROM attempts ORDER BY attempt_ordinal"
        )
        .fetchall()
    )
    assert rows[0] == (
        "openai",
        "gpt-x",
        "gpt-x-2026-10-01",
        "chat",
        "resp_1",
        1200,
        300,
        "1000",
        50_000,
        4750,
        False,
        TABLE.digest,
        None,
        None,
    )
    assert rows[1][8:] == (50_000, 50_000, True, TABLE.digest, "TimeoutError", '"usage_unknown"')


def test_unknown_release_keeps_the_reservation() -> None:
    cost = TABLE.cost("other@1", Usage(10, 10), reserved=77)
    assert (cost.micros, cost.estimated, cost.estimate_reason) == (77, True, "price_unknown")


def test_price_table_digest_is_stable_and_content_addressed() -> None:
    same = PriceTable("2026-11-01", "USD", dict(TABLE.prices))
    changed = PriceTable("2026-11-01", "USD", {**TABLE.prices, "small@1": Price(150, 601)})
    assert same.digest == TABLE.digest
    assert changed.digest != TABLE.digest
    assert len(TABLE.digest) == 64


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"version": "", "currency": "USD"}, "version"),
        ({"version": "v", "currency": "dollars"}, "ISO 4217"),
    ],
)
def test_price_table_rejects_bad_input(kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PriceTable(**kwargs)


def test_usage_rejects_cached_above_input() -> None:
    with pytest.raises(ValueError, match="exceed"):
        Usage(10, 0, 11)
    with pytest.raises(ValueError, match="input_tokens"):
        Usage(-1, 0)


@given(
    st.integers(0, 10**6),
    st.integers(0, 10**6),
    st.integers(0, 10**6),
    st.integers(0, 10**5),
    st.integers(0, 10**5),
)
def test_cost_never_under_reports(
    inp: int, out: int, cached_part: int, p_in: int, p_out: int
) -> None:
    cached = min(cached_part, inp)
    table = PriceTable("v", "EUR", {"r": Price(p_in, p_out)})
    cost = table.cost("r", Usage(inp, out, cached), reserved=0)
    exact = (inp * p_in + out * p_out) / 1000
    assert exact <= cost.micros < exact + 1


class OpenAIStyleClient:
    """Stands in for an SDK client: public max_retries and timeout, as OpenAI's has."""

    max_retries = 2
    timeout = httpx.Timeout(30.0, read=600.0)


def test_describe_client_reads_public_retry_settings() -> None:
    sdk = describe_client(OpenAIStyleClient())
    assert sdk == LowerLayerConfig("sdk", 2, 600_000, f"{__name__}.OpenAIStyleClient")
    transport = describe_client(
        httpx.Client(transport=RetryscopeTransport(httpx.HTTPTransport(retries=4)), timeout=5.0)
    )
    assert transport is not None
    assert (transport.layer.value, transport.max_retries, transport.timeout_ms) == (
        "transport",
        4,
        5000,
    )
    assert describe_client(object()) is None


def test_lower_layer_declared_on_the_attempt(audit: Audit) -> None:
    with (
        retryscope.logical_request(operation="chat", tracer_provider=audit.provider) as req,
        req.attempt("primary") as a,
    ):
        a.declare_lower_layer(LowerLayerConfig("sdk", 2, 600_000, "openai.OpenAI"))
    row = (
        audit.connect()
        .execute(
            "SELECT lower_max_retries, attributes['retryscope.lower.layer'], "
            "attributes['retryscope.lower.timeout_ms'] FROM attempts"
        )
        .fetchone()
    )
    assert row == (2, '"sdk"', "600000")
    with pytest.raises(ValueError, match="max_retries"):
        LowerLayerConfig("sdk", -1)
