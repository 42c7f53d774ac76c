"""The LiteLLM Router with a fallback, and 200 concurrent httpx requests under asyncio."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import httpx
import pytest

import retryscope
from tests.clients.conftest import API_KEY, OPENAI_CHAT, OPENAI_ERROR, PROMPT, json_reply, seen
from tests.instrumentation.conftest import Audit, LocalServer, Reply, serve


@pytest.fixture
def second() -> Iterator[LocalServer]:
    """A second provider (deployment B) on another port."""
    for state in serve():
        state.reply = lambda _r: json_reply(200, OPENAI_CHAT)
        yield state


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_router_retries_and_fallback_carry_their_deployments(
    audit: Audit, server: LocalServer, second: LocalServer, instrumented: object, mode: str
) -> None:
    """Deployment A always 503, B answers; num_retries=1 and a fallback A → B: 2 + 1 hits,
    3 sends, each with its deployment as the route, the fallback hop a fallback, the
    router's retries one operation attributed to the adapter layer."""
    import litellm

    server.reply = lambda _r: json_reply(503, OPENAI_ERROR)
    router = litellm.Router(
        model_list=[
            {
                "model_name": "gpt-a",
                "litellm_params": {
                    "model": "openai/gpt-4o-mini",
                    "api_base": f"{server.url}/v1",
                    "api_key": API_KEY,
                },
                "model_info": {"id": "dep-A"},
            },
            {
                "model_name": "gpt-b",
                "litellm_params": {
                    "model": "openai/gpt-4o-mini",
                    "api_base": f"{second.url}/v1",
                    "api_key": API_KEY,
                },
                "model_info": {"id": "dep-B"},
            },
        ],
        num_retries=1,
        retry_after=0,
        fallbacks=[{"gpt-a": ["gpt-b"]}],
    )
    messages = [{"role": "user", "content": PROMPT}]
    with (
        retryscope.logical_request(operation="chat", tracer_provider=audit.provider) as req,
        req.attempt("litellm-router"),
    ):
        if mode == "sync":
            router.completion(model="gpt-a", messages=messages)
        else:
            asyncio.run(router.acompletion(model="gpt-a", messages=messages))
    got = seen(audit)
    assert (len(server.requests), len(second.requests)) == (2, 1)
    assert got.report["receiver_attempts"] == 3
    assert [
        (route, fallback, status, resend, op)
        for _p, op, resend, status, _l, route, fallback in got.sends
    ] == [
        ("dep-A", False, 503, 0, 1),
        ("dep-A", False, 503, 1, 1),
        ("dep-B", True, 200, 2, 1),
    ]
    assert {layer for *_, layer, _r, _f in got.sends if layer} == {"adapter"}
    assert got.retried_layers == ["adapter"]
    report = got.report
    assert report["fallback_rate"] == 1.0
    assert {r["route_id"] for r in report["routes"]} >= {"dep-A", "dep-B"}
    assert report["amplification_ratio"] == 3.0
    rows = audit.rows(
        "SELECT DISTINCT attributes['retryscope.deployment.group'] FROM attempts "
        "WHERE layer = 'transport' ORDER BY 1"
    )
    assert rows == [('"gpt-a"',), ('"gpt-b"',)]


def test_200_concurrent_asyncio_requests_do_not_mix(
    audit: Audit, server: LocalServer, instrumented: object
) -> None:
    """Each request's sends (its own path, 503 then 200 for odd ones) stay its own."""
    seen_paths: dict[str, int] = {}

    def reply(r: object) -> Reply:
        path = r.path  # type: ignore[attr-defined]
        n = seen_paths[path] = seen_paths.get(path, 0) + 1
        odd = int(path.rsplit("/", 1)[1]) % 2 == 1
        return Reply(503 if odd and n == 1 else 200, (), b"{}")

    server.reply = reply  # type: ignore[assignment]

    async def one(client: httpx.AsyncClient, i: int) -> tuple[str, int]:
        with retryscope.logical_request(
            operation="chat", tracer_provider=audit.provider, logical_request_id=f"r{i:03d}"
        ) as req:
            with req.attempt("primary"):
                body = json.dumps({"n": i})
                for _ in range(2):
                    response = await client.post(f"/v1/{i}", content=body)
                    if response.status_code == 200:
                        break
                    await asyncio.sleep(0)
            return req.id, i

    async def main() -> list[tuple[str, int]]:
        limits = httpx.Limits(max_connections=16)  # the test server accepts few at once
        # a generous timeout: on a loaded machine 200 requests queue on 16 connections
        async with httpx.AsyncClient(base_url=server.url, limits=limits, timeout=60) as client:
            return list(await asyncio.gather(*(one(client, i) for i in range(200))))

    done = asyncio.run(main())
    assert len(server.requests) == 300
    con = audit.connect()
    rows = con.execute(
        "SELECT logical_request_id, list(attributes['url.full'] ORDER BY attempt_ordinal), "
        "list(coalesce(http_resend_count, 0) ORDER BY attempt_ordinal), count(*) "
        "FROM attempts WHERE layer = 'transport' GROUP BY 1 ORDER BY 1"
    ).fetchall()
    assert len(rows) == 200
    for (request_id, urls, resends, n), (expected_id, i) in zip(rows, done, strict=True):
        assert request_id == expected_id
        assert set(urls) == {f'"{server.url}/v1/{i}"'}
        assert (n, resends) == ((2, [0, 1]) if i % 2 else (1, [0]))
    report = seen(audit, "r001").report
    assert report["receiver_attempts"] == 300
    assert report["operations"] == 200
