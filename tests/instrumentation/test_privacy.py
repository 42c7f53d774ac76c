"""Privacy and robustness: digests only, bounded strings, the opt-in hook, contained errors."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
from opentelemetry.util.types import AttributeValue

import retryscope
from retryscope.instrumentation import AttemptStampingProcessor, bound_attributes
from retryscope.instrumentation._privacy import bound_str
from retryscope.instrumentation.integrations.httpx import RetryscopeTransport
from tests.instrumentation.conftest import Audit, LocalServer, make_audit


def _redact_urls(attrs: Mapping[str, AttributeValue]) -> Mapping[str, AttributeValue | None]:
    changes: dict[str, AttributeValue | None] = {"deployment.tier": "gold"}
    for key in ("http.url", "url.full"):
        if key in attrs:
            changes[key] = None
    return changes


def test_hook_adds_and_redacts_on_foreign_and_own_spans(
    tmp_path: Path, server: LocalServer
) -> None:
    audit = make_audit(tmp_path / "spans", AttemptStampingProcessor(attribute_hook=_redact_urls))
    client = httpx.Client(base_url=server.url)
    HTTPXClientInstrumentor().instrument_client(client, tracer_provider=audit.provider)
    try:
        with (
            retryscope.logical_request(operation="chat", tracer_provider=audit.provider) as req,
            req.attempt("primary"),
        ):
            client.get("/private?token=abc")
    finally:
        HTTPXClientInstrumentor().uninstrument_client(client)
    rows = audit.rows(
        "SELECT layer, attributes['http.url'], attributes['deployment.tier'] FROM attempts "
        "ORDER BY layer"
    )
    assert rows == [("harness", None, '"gold"'), ("transport", '"[redacted]"', '"gold"')]
    assert audit.processor.errors == 0
    audit.provider.shutdown()


def test_a_failing_hook_never_breaks_the_application(tmp_path: Path) -> None:
    def broken(_attrs: Mapping[str, AttributeValue]) -> Mapping[str, AttributeValue | None]:
        raise RuntimeError("hook bug")

    audit = make_audit(tmp_path / "spans", AttemptStampingProcessor(attribute_hook=broken))
    with retryscope.logical_request(operation="chat", tracer_provider=audit.provider) as req:
        for _ in range(3):
            with req.attempt("primary"):
                pass
    assert audit.processor.errors == 3  # each attempt (started under a scope) was counted
    assert audit.rows("SELECT count(*) FROM attempts") == [(3,)]
    audit.provider.shutdown()


def test_long_strings_are_bounded_and_marked(tmp_path: Path) -> None:
    audit = make_audit(tmp_path / "spans", AttemptStampingProcessor())
    with (
        retryscope.logical_request(
            operation="chat", tracer_provider=audit.provider, max_string_bytes=64
        ) as req,
        req.attempt("primary") as a,
    ):
        a.set_attributes({"provider.error_body": "é" * 1000, "short": "ok"})
    body, marked = audit.rows(
        "SELECT attributes['provider.error_body'], attributes['retryscope.truncated_keys'] "
        "FROM attempts"
    )[0]
    assert body == '"' + "é" * 32 + '"'
    assert marked == '["provider.error_body"]'
    audit.provider.shutdown()


def test_default_bound_is_4_kib() -> None:
    out = bound_attributes({"k": "x" * 5000})
    assert out["k"] == "x" * 4096
    assert out["retryscope.truncated_keys"] == ["k"]
    assert bound_attributes({"k": "x" * 4096}) == {"k": "x" * 4096}


@given(st.text(max_size=300), st.integers(1, 200))
def test_bound_str_never_exceeds_and_keeps_a_prefix(text: str, limit: int) -> None:
    out, cut = bound_str(text, limit)
    assert len(out.encode("utf-8", "surrogatepass")) <= limit
    assert text.startswith(out)
    assert cut == (out != text)


def test_no_secret_reaches_the_parquet_bytes(audit: Audit, server: LocalServer) -> None:
    client = httpx.Client(base_url=server.url, transport=RetryscopeTransport())
    with (
        retryscope.logical_request(
            operation="chat",
            idempotency_key="raw-idem-key-XYZ",
            request={"prompt": "my secret prompt"},
            tracer_provider=audit.provider,
        ) as req,
        req.attempt("primary"),
    ):
        client.post(f"{server.url}/v1?api_key=sk-secret-123", json={"prompt": "my secret prompt"})
    audit.connect()
    blob = b"".join(p.read_bytes() for p in audit.directory.rglob("*.parquet"))
    for secret in (b"raw-idem-key-XYZ", b"my secret prompt", b"sk-secret-123"):
        assert secret not in blob


def test_processor_rejects_a_bad_bound() -> None:
    with pytest.raises(ValueError, match="max_string_bytes"):
        AttemptStampingProcessor(max_string_bytes=0)
